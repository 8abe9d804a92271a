/* SPDX-License-Identifier: MIT */
/*
 * sliding.c - sliding window by the weighted two-window estimate.
 *
 * The state word packs [window idx mod 2^24 | prev (20 bits) | cur (20 bits)]:
 * the quanta taken in the current aligned window and in the one before it.
 * A quantum is q units (q = 1 unless N > 2^20 - 1; then q = ceil(N /
 * (2^20 - 1))), and a stored count of c quanta stands for at most c * q
 * units: every request adds ceil(n / q) quanta, every refund takes away
 * floor(n / q). The decision itself is made in units, so that any n <= N
 * fits an empty window and sl_sliding_available() is exact: a request of n
 * units at position e of the current window is admitted if
 *
 *   ceil(prev * q * (W - e) / W) + cur * q + n <= N,
 *
 * i.e. the previous window's count is assumed to have been spread evenly and
 * only its part still inside the sliding window [now - W, now] counts. The
 * weighted term is rounded up and counts only ever overstate the units, so
 * rounding never admits more. The price, with q > 1 only: a request smaller
 * than a quantum counts as a whole one, and an acquire followed by a refund
 * of the same n may keep up to q - 1 units counted (q - 1 < N / 2^20). A
 * window never holds more than ceil(N / q) <= 2^20 - 1 quanta (limit_q).
 * Sliding windows cannot book future capacity: acquire always polices.
 *
 * The index is kept mod 2^24, so the state is interpreted relative to now:
 *   same index        -> as stored;
 *   one window older  -> cur becomes prev, cur = 0;
 *   up to 2^16 newer  -> now_ns is stale (another thread already moved on):
 *                        judge it by the state's window at its start (the
 *                        strictest point, full weight on prev), never by an
 *                        emptier past;
 *   anything else     -> both windows are over: empty.
 * Known limit of the 24-bit index: after an idle time within 2^16 windows
 * below a multiple of 2^24 windows, old counts are mistaken for "newer" ones
 * until the clock catches up (at most 2^16 windows): stricter, never looser.
 */
#include "internal.h"

#define SL__SLIDE_BITS 20u
#define SL__SLIDE_MAX ((UINT64_C(1) << SL__SLIDE_BITS) - 1)
#define SL__SLIDE_IDX_MASK ((UINT64_C(1) << 24) - 1)
/* How many windows a stale now_ns may lag behind the state. */
#define SL__SLIDE_STALE ((UINT64_C(1) << 16))

static uint64_t slide_pack(uint64_t idx, uint64_t prev, uint64_t cur)
{
	return ((idx & SL__SLIDE_IDX_MASK) << (2 * SL__SLIDE_BITS)) | (prev << SL__SLIDE_BITS) |
	       cur;
}

/* The state's view at window idx, position e: prev and cur as of then. */
struct slide_view {
	uint64_t idx, e, prev, cur;
};

static struct slide_view slide_view(uint64_t state, uint64_t idx, uint64_t e)
{
	struct slide_view v = {idx, e, 0, 0};
	const uint64_t sidx = state >> (2 * SL__SLIDE_BITS);
	const uint64_t prev = (state >> SL__SLIDE_BITS) & SL__SLIDE_MAX;
	const uint64_t cur = state & SL__SLIDE_MAX;
	const uint64_t d = (idx - sidx) & SL__SLIDE_IDX_MASK;
	if (d == 0) {
		v.prev = prev;
		v.cur = cur;
	} else if (d == 1) {
		v.prev = cur;
	} else if (d > SL__SLIDE_IDX_MASK - SL__SLIDE_STALE) {
		/* Stale now: stay in the state's window, at its start. */
		v.idx = idx + (SL__SLIDE_IDX_MASK + 1 - d);
		v.e = 0;
		v.prev = prev;
		v.cur = cur;
	}
	return v;
}

/* ceil(prev * (W - e) / W): the previous window's share still inside. */
static uint64_t slide_weighted(uint64_t prev, uint64_t window, uint64_t e)
{
	sl__u128 p = (sl__u128)prev * (window - e);
	/* A product that fits 64 bits (an empty previous window, or a small
	 * one) needs no 128-bit division: the same quotient, cheaper. */
	if ((p >> 64) == 0) {
		const uint64_t q = (uint64_t)p;
		return q / window + (q % window != 0);
	}
	return (uint64_t)(p / window + (p % window != 0));
}

/* First position e' >= 0 of a window, whose previous window holds `prev`,
 * where ceil(prev * (W - e') / W) <= room: e' = W - floor(room * W / prev). */
static uint64_t slide_fits_at(uint64_t prev, uint64_t room, uint64_t window)
{
	if (prev <= room)
		return 0;
	return window - (uint64_t)(((sl__u128)room * window) / prev);
}

/* Units a count of c quanta stands for: c * q, saturated (c * q may pass
 * N by up to q - 1, and 2^64 - 1 when N is near 2^64). */
static uint64_t slide_units(const struct sl_sliding *s, uint64_t c)
{
	return sl__sat_mul(c, s->quantum);
}

/* Units the estimate holds at the view's position: the weighted previous
 * window plus the current one, saturated. */
static uint64_t slide_used(const struct sl_sliding *s, const struct slide_view *v)
{
	return sl__sat_add(slide_weighted(slide_units(s, v->prev), s->window_ns, v->e),
			   slide_units(s, v->cur));
}

/* Time from the view's position until n units (n <= N) fit. */
static uint64_t slide_wait(const struct sl_sliding *s, const struct slide_view *v, uint64_t n)
{
	const uint64_t limit = s->limit, window = s->window_ns, cur = slide_units(s, v->cur);
	if (cur <= limit && n <= limit - cur)
		return slide_fits_at(slide_units(s, v->prev), limit - cur - n, window) - v->e;
	/* Not in this window: in the next one, cur becomes prev. */
	return (window - v->e) + slide_fits_at(cur, limit - n, window);
}

/*
 * sl_sliding_init - at most `limit` units in any window of `window_ns`
 * (within the error bound in sluice_core.h). Returns SL_EINVAL for a zero
 * limit or window. Not thread-safe: call before sharing s.
 */
enum sl_status sl_sliding_init(struct sl_sliding *s, uint64_t limit, uint64_t window_ns,
			       uint64_t now_ns)
{
	if (limit == 0 || window_ns == 0)
		return SL_EINVAL;
	const uint64_t quantum = limit <= SL__SLIDE_MAX ? 1 : sl__div_ceil(limit, SL__SLIDE_MAX);
	*s = (struct sl_sliding){
		.limit = limit,
		.window_ns = window_ns,
		.epoch_ns = now_ns,
		.quantum = quantum,
		/* ceil(N / q) <= 2^20 - 1, as N / q <= 2^20 - 1. */
		.limit_q = sl__div_ceil(limit, quantum),
	};
	/* Relaxed: init runs before the limiter is shared (see sl_token_init). */
	atomic_store_explicit(&s->state, 0, memory_order_relaxed);
	return SL_OK;
}

/*
 * sl_sliding_acquire - police n units at now_ns. Returns SL_ADMIT (wait 0),
 * SL_REFUSE with the time until the estimate would admit them (if nothing
 * else is taken), or SL_NEVER if n > N. n == 0 is admitted and changes
 * nothing. Thread- and process-safe, lock-free.
 */
struct sl_decision sl_sliding_acquire(struct sl_sliding *s, uint64_t n, uint64_t now_ns)
{
	const uint64_t window = s->window_ns, limit = s->limit;
	if (n == 0)
		return sl__decide(SL_ADMIT, 0);
	if (n > limit)
		return sl__never();
	/* cur * q + n <= N on admission keeps cur + nq <= ceil(N / q), within
	 * the 20-bit field. */
	const uint64_t nq = s->quantum == 1 ? n : sl__div_ceil(n, s->quantum);
	const uint64_t elapsed = sl__elapsed(now_ns, s->epoch_ns);
	const uint64_t idx = elapsed / window;
	const uint64_t e = elapsed - idx * window;

	/* Relaxed: only the expected value of the CAS below. */
	uint64_t state = atomic_load_explicit(&s->state, memory_order_relaxed);
	for (;;) {
		const struct slide_view v = slide_view(state, idx, e);
		const uint64_t used = slide_used(s, &v);
		if (used > limit || n > limit - used)
			return sl__decide(SL_REFUSE, slide_wait(s, &v, n));
		const uint64_t next = slide_pack(v.idx, v.prev, v.cur + nq);
		/* The word publishes no other memory: the CAS alone orders
		 * racing acquires. SL__ADMIT_ORDER on success (tunable.c's
		 * argument; the same instruction on x86-64), relaxed on
		 * failure: just a new guess. */
		if (atomic_compare_exchange_weak_explicit(&s->state, &state, next, SL__ADMIT_ORDER,
							  memory_order_relaxed))
			return sl__decide(SL_ADMIT, 0);
	}
}

/*
 * sl_sliding_refund - give back n units taken in the window of now_ns
 * (floor(n / quantum) quanta, at most what the window holds); units of a
 * window that is over are not given back. now_ns must lie in the window the
 * units were taken in (the acquire's now_ns): a later one would take them
 * from another window's count. Rounding down means a partial refund never
 * gives back units that were used. Always SL_OK. Thread- and process-safe,
 * lock-free.
 */
enum sl_status sl_sliding_refund(struct sl_sliding *s, uint64_t n, uint64_t now_ns)
{
	const uint64_t nq = n / s->quantum;
	const uint64_t idx = sl__elapsed(now_ns, s->epoch_ns) / s->window_ns;
	/* Relaxed: only the expected value of the CAS below. */
	uint64_t state = atomic_load_explicit(&s->state, memory_order_relaxed);
	for (;;) {
		const uint64_t cur = state & SL__SLIDE_MAX;
		if (nq == 0 || cur == 0 ||
		    (state >> (2 * SL__SLIDE_BITS)) != (idx & SL__SLIDE_IDX_MASK))
			return SL_OK;
		const uint64_t next = state - sl__min(cur, nq);
		/* Relaxed: as in sl_sliding_acquire. */
		if (atomic_compare_exchange_weak_explicit(&s->state, &state, next,
							  memory_order_relaxed,
							  memory_order_relaxed))
			return SL_OK;
	}
}

/*
 * sl_sliding_charge - take n units at now_ns unconditionally, for units
 * already used (bytes already received): the current window's count grows
 * by ceil(n / quantum) quanta, saturating at a full window (limit_q, N
 * units and up to q - 1 more). A sliding window cannot carry debt beyond
 * its window: what holds is that acquire admits nothing while charged
 * units fill the estimate, so in any aligned window the units admitted by
 * acquire plus the units charged before them are at most N, and a full
 * charged window weighs on the next one like any full window; units
 * charged beyond a full window are forgotten, so charges alone are not
 * bounded. n == 0 changes nothing. Always SL_OK. Thread- and process-safe,
 * lock-free.
 */
enum sl_status sl_sliding_charge(struct sl_sliding *s, uint64_t n, uint64_t now_ns)
{
	if (n == 0)
		return SL_OK;
	const uint64_t nq = sl__div_ceil(n, s->quantum);
	const uint64_t elapsed = sl__elapsed(now_ns, s->epoch_ns);
	const uint64_t idx = elapsed / s->window_ns;
	const uint64_t e = elapsed - idx * s->window_ns;
	/* Relaxed: only the expected value of the CAS below. */
	uint64_t state = atomic_load_explicit(&s->state, memory_order_relaxed);
	for (;;) {
		const struct slide_view v = slide_view(state, idx, e);
		const uint64_t cur = sl__min(sl__sat_add(v.cur, nq), s->limit_q);
		const uint64_t next = slide_pack(v.idx, v.prev, cur);
		if (next == state)
			return SL_OK; /* already full */
		/* As in sl_sliding_acquire (SL__ADMIT_ORDER: tunable.c). */
		if (atomic_compare_exchange_weak_explicit(&s->state, &state, next, SL__ADMIT_ORDER,
							  memory_order_relaxed))
			return SL_OK;
	}
}

/*
 * sl_sliding_available - the largest n that a police acquire would admit at
 * now_ns (exact: acquire admits n iff n <= this, with no other change in
 * between). Thread- and process-safe, read-only snapshot.
 */
uint64_t sl_sliding_available(const struct sl_sliding *s, uint64_t now_ns)
{
	const uint64_t elapsed = sl__elapsed(now_ns, s->epoch_ns);
	const uint64_t idx = elapsed / s->window_ns;
	/* Relaxed: a snapshot of one word; no other memory depends on it. */
	const uint64_t state = atomic_load_explicit(&s->state, memory_order_relaxed);
	const struct slide_view v = slide_view(state, idx, elapsed - idx * s->window_ns);
	/* The same test as sl_sliding_acquire: n is admitted iff n <= this. */
	const uint64_t used = slide_used(s, &v);
	return used < s->limit ? s->limit - used : 0;
}

/*
 * sl__sliding_units - the units that state word `state` of s holds, seen at
 * now_ns: in the previous window and in the current one (quanta times the
 * quantum). Read-only.
 */
void sl__sliding_units(const struct sl_sliding *s, uint64_t state, uint64_t now_ns,
		       uint64_t *prev_units, uint64_t *cur_units)
{
	const uint64_t elapsed = sl__elapsed(now_ns, s->epoch_ns);
	const uint64_t idx = elapsed / s->window_ns;
	const struct slide_view v = slide_view(state, idx, elapsed - idx * s->window_ns);
	*prev_units = sl__sat_mul(v.prev, s->quantum);
	*cur_units = sl__sat_mul(v.cur, s->quantum);
}

/*
 * sl__sliding_state - the state word of s at now_ns that holds prev_units
 * in the previous window and cur_units in the current one, each rounded up
 * to quanta and capped at the limit (so at most N counts, never fewer than
 * given unless N is smaller). A pure function.
 */
uint64_t sl__sliding_state(const struct sl_sliding *s, uint64_t now_ns, uint64_t prev_units,
			   uint64_t cur_units)
{
	const uint64_t idx = sl__elapsed(now_ns, s->epoch_ns) / s->window_ns;
	const uint64_t prev = sl__min(sl__div_ceil(prev_units, s->quantum), s->limit_q);
	const uint64_t cur = sl__min(sl__div_ceil(cur_units, s->quantum), s->limit_q);
	return slide_pack(idx, prev, cur);
}
