/* SPDX-License-Identifier: MIT */
/*
 * sluice_fast.h - the inline hot path of the core: "take n units now, or
 * say that the full API must decide", for callers that police a limiter on
 * every call (the shim's sends and receives).
 *
 *   sl_fast_take(l, n, now)    (and its forms for a known kind:
 *                              sl_fast_take_gcra, sl_fast_take_fixed,
 *                              sl_fast_take_tunable,
 *                              sl_fast_take_tunable_gcra,
 *                              sl_fast_take_tunable_fixed)
 *                              true: l admitted n units at once and took
 *                              them (as sl_limiter_acquire(l, n, now, 0)
 *                              admitting would). false: nothing was taken;
 *                              the limiter would refuse, or this is a case
 *                              the inline path leaves to the full API (ask
 *                              sl_limiter_acquire, which decides).
 *   sl_fast_peek(l, n, now)    true: a police of n units at now would admit
 *                              them (a snapshot; nothing is taken).
 *   sl_fast_at_rest(l, now)    true: l, a token or leaky bucket (plain or a
 *                              tunable head's slot), has nothing booked
 *                              past now: a police of any n its burst (a
 *                              leaky bucket's capacity) covers would admit
 *                              at once. One load and a compare, no cost to
 *                              compute; false also for other kinds and
 *                              outside the short range (ask sl_fast_peek).
 *                              sl_fast_at_rest_tunable_gcra: the same for
 *                              a tunable head of buckets.
 *   sl_fast_charge(l, n, now)  sl_limiter_charge(l, n, now): n units taken
 *                              as debt, whatever the limiter says (and
 *                              sl_fast_charge_gcra, sl_fast_charge_fixed,
 *                              sl_fast_charge_tunable).
 *
 * Token and leaky buckets, plain or as the current slot of a tunable head,
 * are decided inline: one load, one compare and one CAS (the short range
 * of gcra.c: n == 1, or n whose cost is within the burst; any time within
 * the limiter's fast range after its epoch). Everything else goes out of
 * line to the same functions sluice_core.h declares, so the answers are
 * those of the full API by construction; test_core_fast.c checks it.
 *
 * Tunable heads: the slot is read at gen (acquire), the CAS is seq_cst and
 * so is the second load of gen: the argument of tunable.c for buckets. An
 * admission that raced with a retune is given back on the old slot and
 * reported as false, so the caller's full-API call decides on the new one.
 *
 * Thread- and process-safe, lock-free, like the calls it stands for.
 */
#ifndef SLUICE_FAST_H
#define SLUICE_FAST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sluice_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The small forms are always inlined: out of line, each saved the
 * caller's registers for its rare slow branch. */
#define SL_FAST_INLINE static inline __attribute__((always_inline))

#pragma GCC visibility push(default)
/* The out-of-line parts (limiter.c). */
bool sl_fast_take_other(struct sl_limiter *l, uint64_t n, uint64_t now_ns);
/* Give n units back to l at now (sl_limiter_refund); returns false. */
bool sl_fast_undo(struct sl_limiter *l, uint64_t n, uint64_t now_ns);
bool sl_fast_peek_other(const struct sl_limiter *l, uint64_t n, uint64_t now_ns);
#pragma GCC visibility pop

/* Ticks since g's epoch at now_ns, if now_ns is within the range where the
 * short path is exact (gcra.c: fast_shift); else false. */
SL_FAST_INLINE bool sl__gcra_now_short(const struct sl_gcra *g, uint64_t now_ns, uint64_t *ticks)
{
	uint64_t elapsed;
	if (__builtin_sub_overflow(now_ns, g->epoch_ns, &elapsed) ||
	    (elapsed >> (g->fast_shift & 63)) != 0)
		return false;
	*ticks = elapsed << (g->tick_shift & 63);
	return true;
}

/* The cost in ticks of n >= 1 units and the tolerance a police of them may
 * use, if the short path covers n (cost below 2^63 and within the burst, a
 * leaky bucket's capacity); else false. For n >= 1, n * mult >= 1 and
 * ceil(n * mult / 2^shift) = ((n * mult - 1) >> shift) + 1; n == 0 wraps
 * to 2^128 - 1 and fails the range test. */
SL_FAST_INLINE bool sl__gcra_cost_short(const struct sl_gcra *g, uint64_t n, uint64_t *cost,
					uint64_t *tol)
{
	if (n == 1) { /* init keeps cost(1) within the burst and the capacity */
		*cost = g->cost1_ticks;
		*tol = g->tau_ticks;
		return true;
	}
	__extension__ const unsigned __int128 q = ((unsigned __int128)n * g->mult - 1) >>
						  (g->shift & 63);
	/* For a leaky bucket tol is the cost itself: only the capacity bounds
	 * it. */
	uint64_t most = g->leaky ? g->limit_ticks : g->tau_ticks;
	most = most < INT64_MAX ? most : INT64_MAX;
	if (q >= most)
		return false;
	*cost = (uint64_t)q + 1;
	*tol = g->leaky ? *cost : g->tau_ticks;
	return true;
}

/* sl_fast_take for a token or leaky bucket: false leaves the answer to
 * sl_gcra_acquire (a refusal, or a case outside the short path). */
SL_FAST_INLINE bool sl_fast_take_gcra(struct sl_gcra *g, uint64_t n, uint64_t now_ns)
{
	uint64_t now, cost, tol;
	if (!sl__gcra_now_short(g, now_ns, &now) || !sl__gcra_cost_short(g, n, &cost, &tol))
		return false;
	/* now + tol < 2^64 - 1 in the short range: no wrap (gcra.c). */
	const uint64_t thresh1 = now + (tol - cost) + 1;
	/* Relaxed: only the CAS's expected value. */
	uint64_t tat = atomic_load_explicit(&g->tat, memory_order_relaxed);
	while (tat < thresh1) {
		const uint64_t start = tat > now ? tat : now;
		/* seq_cst: SL__ADMIT_ORDER of gcra.c (tunable heads rely on it). */
		if (atomic_compare_exchange_weak_explicit(&g->tat, &tat, start + cost,
							  memory_order_seq_cst,
							  memory_order_relaxed))
			return true;
	}
	return false;
}

SL_FAST_INLINE bool sl__fast_bucket(const struct sl_limiter *l)
{
	_Static_assert(SL_KIND_LEAKY == SL_KIND_TOKEN + 1, "token and leaky kinds are adjacent");
	return l->kind - SL_KIND_TOKEN <= SL_KIND_LEAKY - SL_KIND_TOKEN;
}

/* The current slot of a tunable head at generation *gen. */
SL_FAST_INLINE struct sl_limiter *sl__fast_slot(struct sl_limiter *head, uint64_t *gen)
{
	/* Acquire: pairs with the retuner's release of gen (tunable.c). */
	*gen = atomic_load_explicit(&head->u.tun.gen, memory_order_acquire);
	/* head is the first member of struct sl_tunable. */
	return &((struct sl_tunable *)(void *)head)->slot[*gen & 1];
}

/* After slot s of a tunable head, read at generation gen, admitted n units:
 * true if no retune raced with it (seq_cst: the second load of tunable.c's
 * argument), else the units are given back on the old slot and false. */
SL_FAST_INLINE bool sl__fast_tunable_kept(struct sl_limiter *head, struct sl_limiter *s,
					  uint64_t gen, uint64_t n, uint64_t now_ns)
{
	if (__builtin_expect(atomic_load_explicit(&head->u.tun.gen, memory_order_seq_cst) == gen,
			     1))
		return true;
	/* A tail call: the caller's hot path keeps no register for it. */
	return sl_fast_undo(s, n, now_ns);
}

/* sl_fast_take for a tunable head whose slots are token or leaky buckets
 * (the kind a retune keeps). */
SL_FAST_INLINE bool sl_fast_take_tunable_gcra(struct sl_limiter *head, uint64_t n, uint64_t now_ns)
{
	uint64_t gen;
	struct sl_limiter *s = sl__fast_slot(head, &gen);
	return sl_fast_take_gcra(&s->u.gcra, n, now_ns) &&
	       sl__fast_tunable_kept(head, s, gen, n, now_ns);
}

/* The current window of w at now_ns: its first counter value (idx * N);
 * false past the horizon (then ask the full API). */
SL_FAST_INLINE bool sl__fixed_first(const struct sl_fixed *w, uint64_t now_ns, uint64_t *first)
{
	const uint64_t idx = (now_ns > w->epoch_ns ? now_ns - w->epoch_ns : 0) / w->window_ns;
	return !__builtin_mul_overflow(idx, w->limit, first);
}

/* sl_fast_take for a fixed window: admitted at once exactly when the
 * counter is in the current window (not booked into a later one) and n
 * fits what is left of it; the counter then moves by n (fixed.c). Anything
 * else (n == 0, n > N, the horizon) is left to sl_fixed_acquire. */
SL_FAST_INLINE bool sl_fast_take_fixed(struct sl_fixed *w, uint64_t n, uint64_t now_ns)
{
	const uint64_t limit = w->limit;
	uint64_t first;
	if (n == 0 || n > limit || !sl__fixed_first(w, now_ns, &first))
		return false;
	/* Relaxed: only the CAS's expected value. */
	uint64_t v = atomic_load_explicit(&w->used, memory_order_relaxed);
	for (;;) {
		const uint64_t cur = v > first ? v : first, used = cur - first;
		if (used >= limit || n > limit - used || cur + n < cur)
			return false;
		/* seq_cst: SL__ADMIT_ORDER of fixed.c (tunable heads rely on it). */
		if (atomic_compare_exchange_weak_explicit(&w->used, &v, cur + n,
							  memory_order_seq_cst,
							  memory_order_relaxed))
			return true;
	}
}

/* A police of a plain limiter (not a tunable head) of a kind the inline
 * path does not decide itself: its own acquire, called directly. */
static inline bool sl__fast_police(struct sl_limiter *l, uint64_t n, uint64_t now_ns)
{
	switch (l->kind) {
	case SL_KIND_TOKEN:
	case SL_KIND_LEAKY:
		return sl_fast_take_gcra(&l->u.gcra, n, now_ns) ||
		       sl_gcra_acquire(&l->u.gcra, n, now_ns, 0).verdict == SL_ADMIT;
	case SL_KIND_FIXED:
		return sl_fast_take_fixed(&l->u.fixed, n, now_ns) ||
		       sl_fixed_acquire(&l->u.fixed, n, now_ns, 0).verdict == SL_ADMIT;
	case SL_KIND_SLIDING:
		return sl_sliding_acquire(&l->u.sliding, n, now_ns).verdict == SL_ADMIT;
	default:
		return sl_fast_take_other(l, n, now_ns);
	}
}

/* sl_fast_take for a tunable head whose slots are fixed windows. */
SL_FAST_INLINE bool sl_fast_take_tunable_fixed(struct sl_limiter *head, uint64_t n, uint64_t now_ns)
{
	uint64_t gen;
	struct sl_limiter *s = sl__fast_slot(head, &gen);
	return sl_fast_take_fixed(&s->u.fixed, n, now_ns) &&
	       sl__fast_tunable_kept(head, s, gen, n, now_ns);
}

/* sl_fast_take for a tunable head of any kind: the current slot's own
 * police (a rate limiter's admitting CAS is seq_cst, so no fence is needed:
 * tunable.c), or for concurrency the full tunable path. */
static inline bool sl_fast_take_tunable(struct sl_limiter *head, uint64_t n, uint64_t now_ns)
{
	uint64_t gen;
	struct sl_limiter *s = sl__fast_slot(head, &gen);
	if (s->kind == SL_KIND_CONC)
		return sl_fast_take_other(head, n, now_ns);
	return sl__fast_police(s, n, now_ns) && sl__fast_tunable_kept(head, s, gen, n, now_ns);
}

static inline bool sl_fast_take(struct sl_limiter *l, uint64_t n, uint64_t now_ns)
{
	if (sl__fast_bucket(l))
		return sl_fast_take_gcra(&l->u.gcra, n, now_ns);
	if (l->kind == SL_KIND_TUNABLE)
		return sl_fast_take_tunable(l, n, now_ns);
	return sl__fast_police(l, n, now_ns);
}

/* sl_fast_peek for a token or leaky bucket; false also outside the short
 * path (then ask sl_fast_peek_other). */
SL_FAST_INLINE bool sl_fast_peek_gcra(const struct sl_gcra *g, uint64_t n, uint64_t now_ns)
{
	uint64_t now, cost, tol;
	if (!sl__gcra_now_short(g, now_ns, &now) || !sl__gcra_cost_short(g, n, &cost, &tol))
		return false;
	/* Relaxed: a snapshot. */
	return atomic_load_explicit(&g->tat, memory_order_relaxed) < now + (tol - cost) + 1;
}

/* True if l (a token or leaky bucket, or a tunable head of them) is at rest
 * at now_ns: its theoretical arrival time is not past now, so a bucket is
 * full (a police admits n whose cost is within tau: the burst) and a leaky
 * bucket's queue is empty (it admits n within its capacity). A snapshot. */
SL_FAST_INLINE bool sl__gcra_at_rest(const struct sl_gcra *g, uint64_t now_ns)
{
	uint64_t now;
	/* Relaxed: a snapshot, as sl_fast_peek's. */
	return sl__gcra_now_short(g, now_ns, &now) &&
	       atomic_load_explicit(&g->tat, memory_order_relaxed) <= now;
}

SL_FAST_INLINE bool sl_fast_at_rest(const struct sl_limiter *l, uint64_t now_ns)
{
	const struct sl_limiter *s = l;
	if (l->kind == SL_KIND_TUNABLE) {
		uint64_t gen;
		s = sl__fast_slot((struct sl_limiter *)(uintptr_t)l, &gen);
	}
	return sl__fast_bucket(s) && sl__gcra_at_rest(&s->u.gcra, now_ns);
}

/* sl_fast_at_rest for a tunable head whose slots are token or leaky
 * buckets (the kind a retune keeps): no kind to test. */
SL_FAST_INLINE bool sl_fast_at_rest_tunable_gcra(const struct sl_limiter *head, uint64_t now_ns)
{
	uint64_t gen;
	return sl__gcra_at_rest(&sl__fast_slot((struct sl_limiter *)(uintptr_t)head, &gen)->u.gcra,
				now_ns);
}

/* sl_fast_peek for a fixed window (false also where sl_fast_take_fixed
 * leaves the answer to the full API). */
SL_FAST_INLINE bool sl_fast_peek_fixed(const struct sl_fixed *w, uint64_t n, uint64_t now_ns)
{
	uint64_t first;
	if (n == 0 || n > w->limit || !sl__fixed_first(w, now_ns, &first))
		return false;
	/* Relaxed: a snapshot. */
	const uint64_t v = atomic_load_explicit(&w->used, memory_order_relaxed);
	const uint64_t used = v > first ? v - first : 0;
	return used < w->limit && n <= w->limit - used;
}

static inline bool sl_fast_peek(const struct sl_limiter *l, uint64_t n, uint64_t now_ns)
{
	const struct sl_limiter *s = l;
	if (l->kind == SL_KIND_TUNABLE) {
		uint64_t gen;
		s = sl__fast_slot((struct sl_limiter *)(uintptr_t)l, &gen);
	}
	if (sl__fast_bucket(s) && sl_fast_peek_gcra(&s->u.gcra, n, now_ns))
		return true;
	if (s->kind == SL_KIND_FIXED && sl_fast_peek_fixed(&s->u.fixed, n, now_ns))
		return true;
	return sl_fast_peek_other(l, n, now_ns);
}

/* sl_limiter_charge for a fixed window (fixed.c): the counter moves by n
 * from the current window, into later ones as needed, saturating. */
SL_FAST_INLINE bool sl_fast_charge_fixed(struct sl_fixed *w, uint64_t n, uint64_t now_ns)
{
	uint64_t first;
	if (n == 0)
		return true; /* nothing moves (an old counter stays as it is) */
	if (!sl__fixed_first(w, now_ns, &first))
		return false;
	/* Relaxed: only the CAS's expected value. */
	uint64_t v = atomic_load_explicit(&w->used, memory_order_relaxed);
	for (;;) {
		const uint64_t cur = v > first ? v : first;
		const uint64_t next = cur + n < cur ? UINT64_MAX : cur + n;
		if (next == v)
			return true; /* saturated already */
		/* seq_cst: SL__ADMIT_ORDER of fixed.c (tunable heads rely on it). */
		if (atomic_compare_exchange_weak_explicit(&w->used, &v, next, memory_order_seq_cst,
							  memory_order_relaxed))
			return true;
	}
}

/* sl_limiter_charge for a token or leaky bucket within the short path:
 * false (nothing charged) outside it. */
SL_FAST_INLINE bool sl_fast_charge_gcra(struct sl_gcra *g, uint64_t n, uint64_t now_ns)
{
	uint64_t now, cost, tol;
	if (!sl__gcra_now_short(g, now_ns, &now) || !sl__gcra_cost_short(g, n, &cost, &tol))
		return false;
	/* Relaxed: only the CAS's expected value. */
	uint64_t tat = atomic_load_explicit(&g->tat, memory_order_relaxed);
	for (;;) {
		const uint64_t start = tat > now ? tat : now;
		const uint64_t next = start + cost < start ? UINT64_MAX : start + cost;
		if (next == tat)
			return true; /* saturated already */
		/* seq_cst: as in sl_fast_take_gcra. */
		if (atomic_compare_exchange_weak_explicit(&g->tat, &tat, next, memory_order_seq_cst,
							  memory_order_relaxed))
			return true;
	}
}

/* sl_fast_charge for a tunable head: its current slot's bucket or fixed
 * window inline, anything else through the full API. A charge that raced
 * with a retune is made again on the new slot (as sl_limiter_charge does:
 * debt is never lost; twice is stricter). */
SL_FAST_INLINE void sl_fast_charge_tunable(struct sl_limiter *head, uint64_t n, uint64_t now_ns)
{
	uint64_t gen;
	struct sl_limiter *s = sl__fast_slot(head, &gen);
	const bool done = sl__fast_bucket(s)         ? sl_fast_charge_gcra(&s->u.gcra, n, now_ns)
			  : s->kind == SL_KIND_FIXED ? sl_fast_charge_fixed(&s->u.fixed, n, now_ns)
						     : false;
	if (!done ||
	    __builtin_expect(atomic_load_explicit(&head->u.tun.gen, memory_order_seq_cst) != gen,
			     0))
		(void)sl_limiter_charge(head, n, now_ns);
}

static inline void sl_fast_charge(struct sl_limiter *l, uint64_t n, uint64_t now_ns)
{
	if (sl__fast_bucket(l) && sl_fast_charge_gcra(&l->u.gcra, n, now_ns))
		return;
	if (l->kind == SL_KIND_FIXED && sl_fast_charge_fixed(&l->u.fixed, n, now_ns))
		return;
	if (l->kind == SL_KIND_TUNABLE) {
		sl_fast_charge_tunable(l, n, now_ns);
		return;
	}
	(void)sl_limiter_charge(l, n, now_ns);
}

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_FAST_H */
