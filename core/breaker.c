/* SPDX-License-Identifier: MIT */
/*
 * breaker.c - the circuit breaker's state machine (see sluice_core.h):
 * closed -> open when the failures in a sliding window cross a threshold;
 * open -> half-open after open_ns, with exactly one probe; the probe's
 * outcome closes the breaker or opens it again.
 *
 * Every transition is one CAS on the state word, so exactly one caller
 * makes it: one probe per half-open spell, one "opened" per trip. The
 * window's buckets are separate words, each changed by a CAS; a count read
 * across them may mix attempts a few ns apart, which only moves the instant
 * of a trip by as much. Nothing else is published through these words, so
 * every access is relaxed except the transitions, which are acq_rel so
 * that a report that sees a state also sees the window reset before it.
 */
#include "internal.h"

#define ST_SHIFT 62
#define T_MASK ((UINT64_C(1) << ST_SHIFT) - 1)
#define IDX_BITS 24u
#define CNT_BITS 20u
#define CNT_MAX ((UINT64_C(1) << CNT_BITS) - 1)
#define IDX_MASK ((UINT64_C(1) << IDX_BITS) - 1)

static uint64_t st_word(enum sl_brk_state s, uint64_t t)
{
	return ((uint64_t)s << ST_SHIFT) | (t & T_MASK);
}

static enum sl_brk_state st_of(uint64_t w)
{
	return (enum sl_brk_state)(w >> ST_SHIFT);
}

static uint64_t t_of(uint64_t w)
{
	return w & T_MASK;
}

/* Time since the epoch, kept below 2^62 (146 years). */
static uint64_t since(const struct sl_breaker *b, uint64_t now_ns)
{
	return sl__min(sl__elapsed(now_ns, b->epoch_ns), T_MASK - b->open_ns);
}

bool sl_breaker_init(struct sl_breaker *b, uint64_t window_ns, uint64_t open_ns, uint32_t errors,
		     uint32_t ratio_pct, uint32_t min, uint64_t now_ns)
{
	*b = (struct sl_breaker){0};
	if (window_ns < SL_BRK_BUCKETS || open_ns == 0 || open_ns > (UINT64_C(1) << 60))
		return false;
	if (ratio_pct == 0 ? errors == 0 || errors > CNT_MAX
			   : ratio_pct > 100 || min == 0 || errors != 0)
		return false;
	b->window_ns = window_ns;
	b->bucket_ns = window_ns / SL_BRK_BUCKETS;
	b->open_ns = open_ns;
	b->epoch_ns = now_ns;
	b->errors = errors;
	b->ratio_pct = ratio_pct;
	b->min = min;
	/* Relaxed: init runs before the breaker is shared. */
	atomic_store_explicit(&b->state, st_word(SL_BRK_CLOSED, 0), memory_order_relaxed);
	return true;
}

/* Failures and attempts in the window at bucket index idx. */
static void window_sum(const struct sl_breaker *b, uint64_t idx, uint64_t *fails, uint64_t *total)
{
	*fails = *total = 0;
	for (unsigned k = 0; k < SL_BRK_BUCKETS; k++) {
		/* Relaxed: see the top of the file. */
		const uint64_t w = atomic_load_explicit(&b->bucket[k], memory_order_relaxed);
		const uint64_t age = (idx - (w >> (2 * CNT_BITS))) & IDX_MASK;
		if (w == 0 || age >= SL_BRK_BUCKETS)
			continue;
		*fails += (w >> CNT_BITS) & CNT_MAX;
		*total += w & CNT_MAX;
	}
}

/* Count one attempt in the bucket of idx. */
static void window_add(struct sl_breaker *b, uint64_t idx, bool failure)
{
	_Atomic uint64_t *p = &b->bucket[idx % SL_BRK_BUCKETS];
	const uint64_t tag = (idx & IDX_MASK) << (2 * CNT_BITS);
	/* Relaxed: the expected value of the CAS. */
	uint64_t w = atomic_load_explicit(p, memory_order_relaxed);
	for (;;) {
		uint64_t f = 0, n = 0;
		if ((w & ~((UINT64_C(1) << (2 * CNT_BITS)) - 1)) == tag && w != 0) {
			f = (w >> CNT_BITS) & CNT_MAX;
			n = w & CNT_MAX;
		}
		f = sl__min(f + failure, CNT_MAX);
		n = sl__min(n + 1, CNT_MAX);
		/* Relaxed: a count; nothing is published through it. */
		if (atomic_compare_exchange_weak_explicit(p, &w, tag | (f << CNT_BITS) | n,
							  memory_order_relaxed,
							  memory_order_relaxed))
			return;
	}
}

static bool tripped(const struct sl_breaker *b, uint64_t fails, uint64_t total)
{
	if (b->ratio_pct == 0)
		return fails >= b->errors;
	return total >= b->min && fails * 100 >= (uint64_t)b->ratio_pct * total;
}

static bool transit(struct sl_breaker *b, uint64_t *seen, uint64_t next)
{
	/* Acq_rel: a transition publishes the window reset made before it
	 * (closing) to whoever sees the new state. */
	return atomic_compare_exchange_strong_explicit(&b->state, seen, next, memory_order_acq_rel,
						       memory_order_acquire);
}

/*
 * sl_breaker_enter - may an attempt go at now_ns? PASS (closed), PROBE
 * (this caller is the half-open spell's one probe: report its outcome with
 * probe = true), or FAIL. *change says if this call changed the state.
 */
enum sl_brk_verdict sl_breaker_enter(struct sl_breaker *b, uint64_t now_ns,
				     enum sl_brk_change *change)
{
	*change = SL_BRK_NO_CHANGE;
	const uint64_t t = since(b, now_ns);
	/* Acquire: pairs with transit's release. */
	uint64_t w = atomic_load_explicit(&b->state, memory_order_acquire);
	for (;;) {
		const enum sl_brk_state s = st_of(w);
		if (s == SL_BRK_CLOSED) {
			/* Relaxed: counters for reports. */
			atomic_fetch_add_explicit(&b->attempts, 1, memory_order_relaxed);
			return SL_BRK_PASS;
		}
		/* Open until t_of(w); half-open: a probe went at t_of(w), and
		 * one that has not reported within open_ns is replaced. */
		const uint64_t due = s == SL_BRK_OPEN ? t_of(w) : t_of(w) + b->open_ns;
		if (t < due) {
			atomic_fetch_add_explicit(&b->fast_fails, 1, memory_order_relaxed);
			return SL_BRK_FAIL;
		}
		if (transit(b, &w, st_word(SL_BRK_HALF_OPEN, t))) {
			*change = SL_BRK_PROBING;
			atomic_fetch_add_explicit(&b->attempts, 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&b->probes, 1, memory_order_relaxed);
			return SL_BRK_PROBE;
		}
	}
}

/*
 * sl_breaker_report - the outcome of an attempt enter let through. A
 * probe's outcome closes (success: the window starts empty) or reopens the
 * breaker, if its half-open spell is still the current one; any other
 * outcome is counted in the window, and a failure that makes the window
 * cross the threshold while closed opens the breaker for open_ns.
 */
void sl_breaker_report(struct sl_breaker *b, uint64_t now_ns, bool failure, bool probe,
		       enum sl_brk_change *change)
{
	*change = SL_BRK_NO_CHANGE;
	const uint64_t t = since(b, now_ns);
	if (failure)
		atomic_fetch_add_explicit(&b->failures, 1, memory_order_relaxed);
	uint64_t w = atomic_load_explicit(&b->state, memory_order_acquire);
	if (probe) {
		if (st_of(w) != SL_BRK_HALF_OPEN)
			return; /* replaced by a later probe, which decides */
		if (failure) {
			if (transit(b, &w, st_word(SL_BRK_OPEN, t + b->open_ns))) {
				*change = SL_BRK_REOPENED;
				atomic_fetch_add_explicit(&b->trips, 1, memory_order_relaxed);
			}
			return;
		}
		/* Empty the window first, so that a counter racing with the
		 * close does not find old failures; then close. */
		for (unsigned k = 0; k < SL_BRK_BUCKETS; k++)
			atomic_store_explicit(&b->bucket[k], 0, memory_order_relaxed);
		if (transit(b, &w, st_word(SL_BRK_CLOSED, 0)))
			*change = SL_BRK_CLOSED_AGAIN;
		return;
	}
	const uint64_t idx = t / b->bucket_ns;
	window_add(b, idx, failure);
	if (!failure || st_of(w) != SL_BRK_CLOSED)
		return;
	uint64_t fails, total;
	window_sum(b, idx, &fails, &total);
	if (tripped(b, fails, total) && transit(b, &w, st_word(SL_BRK_OPEN, t + b->open_ns))) {
		*change = SL_BRK_OPENED;
		atomic_fetch_add_explicit(&b->trips, 1, memory_order_relaxed);
	}
}

/* sl_breaker_view - state, window counts and time to the probe at now_ns. */
void sl_breaker_view(const struct sl_breaker *b, uint64_t now_ns, struct sl_brk_view *v)
{
	const uint64_t t = since(b, now_ns);
	/* Relaxed: a snapshot for reports. */
	const uint64_t w = atomic_load_explicit(&b->state, memory_order_relaxed);
	*v = (struct sl_brk_view){.state = st_of(w)};
	window_sum(b, t / b->bucket_ns, &v->failures, &v->attempts);
	if (st_of(w) == SL_BRK_OPEN && t_of(w) > t)
		v->probe_in_ns = t_of(w) - t;
}

const char *sl_breaker_state_name(enum sl_brk_state s)
{
	switch (s) {
	case SL_BRK_CLOSED:
		return "closed";
	case SL_BRK_OPEN:
		return "open";
	case SL_BRK_HALF_OPEN:
		return "half-open";
	}
	return "unknown";
}

/* sl_breaker_validate - true if b's parameters are ones init accepts and
 * derives, so that using a (possibly foreign) breaker cannot divide by
 * zero or misbehave. Read-only. */
bool sl_breaker_validate(const struct sl_breaker *b)
{
	struct sl_breaker ref;
	if (!sl_breaker_init(&ref, b->window_ns, b->open_ns, b->errors, b->ratio_pct, b->min, 0))
		return false;
	return ref.bucket_ns == b->bucket_ns &&
	       st_of(atomic_load_explicit(&b->state, memory_order_relaxed)) <= SL_BRK_HALF_OPEN;
}
