/* SPDX-License-Identifier: MIT */
/*
 * concurrency.c - at most N units held at once (e.g. open connections).
 *
 * The state is one count of held units. Acquire adds n if the sum stays
 * within the limit; release subtracts n if at least n are held. Both are a
 * CAS loop rather than fetch_add/fetch_sub, so that a refused acquire or an
 * unmatched release changes nothing: the count can neither exceed the limit
 * nor wrap below zero, even transiently.
 *
 * Ordering: like a semaphore, a successful acquire is an acquire operation
 * and a release is a release operation, so whatever a holder did before
 * releasing (closing its socket, updating shared statistics) happens before
 * the work of the next holder that takes the freed unit.
 */
#include "internal.h"

/*
 * sl_conc_init - at most `limit` units held at once; none held. Returns
 * SL_EINVAL for a zero limit. Not thread-safe: call before sharing c.
 */
enum sl_status sl_conc_init(struct sl_conc *c, uint64_t limit)
{
	if (limit == 0)
		return SL_EINVAL;
	*c = (struct sl_conc){.limit = limit};
	/* Relaxed: init runs before the limiter is shared (see sl_token_init). */
	atomic_store_explicit(&c->held, 0, memory_order_relaxed);
	return SL_OK;
}

/*
 * sl_conc_acquire - take n units. Returns SL_ADMIT, SL_REFUSE with wait 0
 * (unknown: retry after a release) or SL_NEVER if n > limit. n == 0 is
 * admitted and changes nothing. Thread- and process-safe, lock-free.
 */
struct sl_decision sl_conc_acquire(struct sl_conc *c, uint64_t n)
{
	return sl__conc_take(&c->held, n, c->limit);
}

/*
 * sl__conc_take - the acquire of a concurrency count `held` under `limit`
 * (a tunable limiter keeps the count apart from the limit, which a retune
 * may change). Same results as sl_conc_acquire.
 */
struct sl_decision sl__conc_take(_Atomic uint64_t *held_word, uint64_t n, uint64_t limit)
{
	if (n == 0)
		return sl__decide(SL_ADMIT, 0);
	if (n > limit)
		return sl__never();
	/* Relaxed: only the expected value of the CAS below. */
	uint64_t held = atomic_load_explicit(held_word, memory_order_relaxed);
	for (;;) {
		if (held > limit - n)
			return sl__decide(SL_REFUSE, 0);
		/* Acquire on success: pairs with the release CAS in
		 * sl__conc_give that freed these units, so the previous
		 * holder's work happens before ours. Relaxed on failure: the
		 * reloaded count is just a new guess. */
		if (atomic_compare_exchange_weak_explicit(held_word, &held, held + n,
							  memory_order_acquire,
							  memory_order_relaxed))
			return sl__decide(SL_ADMIT, 0);
	}
}

/*
 * sl_conc_release - give back n held units. Returns SL_OK, or SL_EUNDERFLOW
 * and changes nothing if fewer than n are held. Thread- and process-safe,
 * lock-free.
 */
enum sl_status sl_conc_release(struct sl_conc *c, uint64_t n)
{
	return sl__conc_give(&c->held, n);
}

/* sl__conc_give - the release of a count `held`; as sl_conc_release. */
enum sl_status sl__conc_give(_Atomic uint64_t *held_word, uint64_t n)
{
	/* Relaxed: only the expected value of the CAS below. */
	uint64_t held = atomic_load_explicit(held_word, memory_order_relaxed);
	for (;;) {
		if (held < n)
			return SL_EUNDERFLOW;
		if (n == 0)
			return SL_OK;
		/* Release on success: publishes this holder's work to the next
		 * acquirer (pairs with the acquire CAS in sl__conc_take).
		 * Relaxed on failure: the reloaded count is just a new guess. */
		if (atomic_compare_exchange_weak_explicit(held_word, &held, held - n,
							  memory_order_release,
							  memory_order_relaxed))
			return SL_OK;
	}
}

/* sl_conc_held - units held now (a snapshot). Thread- and process-safe. */
uint64_t sl_conc_held(const struct sl_conc *c)
{
	/* Relaxed: a snapshot for reporting; nothing is read through it. */
	return atomic_load_explicit(&c->held, memory_order_relaxed);
}
