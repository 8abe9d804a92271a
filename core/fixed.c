/* SPDX-License-Identifier: MIT */
/*
 * fixed.c - fixed window: at most N units per aligned window of W ns.
 *
 * The state is one "virtual counter" v = j * N + u: u units are taken in
 * window j (counted from the epoch). Windows are aligned on the epoch, so
 * window idx = elapsed / W starts at the counter value idx * N, and any
 * v < idx * N belongs to a window that is over: moving to a new window needs
 * no reset, the counter simply jumps forward. A request of n units takes the
 * next n counter values, skipping to the next window's start if they do not
 * fit in the current one; that is also how a reserve call books a future
 * window, so fixed windows support police, reserve and reserve-with-timeout.
 *
 * A stale (older) now_ns sees the counter in a later window than its own and
 * so refuses or waits longer: it never admits more than N per window.
 *
 * A refund names the window its units were taken in by its now_ns, and
 * moves the counter back only while the counter is still in that window:
 * once a later window is booked, the counter's position also carries that
 * booking, and moving it back would hand a later window's units out again.
 * A charge (units already used) pushes the counter forward past whatever is
 * booked, into later windows as needed: debt that later requests wait for.
 *
 * The counter must not overflow within the horizon: init requires
 * (2^64 / N) windows to last at least 2^56 ns (2.28 years; 58 years at
 * 10^10 units/s), and past the horizon every request is SL_NEVER.
 */
#include "internal.h"

/*
 * sl_fixed_init - at most `limit` units per window of `window_ns`, windows
 * aligned on `now_ns`. Returns SL_EINVAL for a zero limit or window,
 * SL_ERANGE if the counter would overflow within 2^56 ns. Not thread-safe.
 */
enum sl_status sl_fixed_init(struct sl_fixed *w, uint64_t limit, uint64_t window_ns,
			     uint64_t now_ns)
{
	if (limit == 0 || window_ns == 0)
		return SL_EINVAL;
	if (sl__sat_mul(UINT64_MAX / limit, window_ns) < SL__HORIZON_NS)
		return SL_ERANGE;
	*w = (struct sl_fixed){.limit = limit, .window_ns = window_ns, .epoch_ns = now_ns};
	/* Relaxed: init runs before the limiter is shared (see sl_token_init). */
	atomic_store_explicit(&w->used, 0, memory_order_relaxed);
	return SL_OK;
}

/*
 * sl_fixed_acquire - take n units in the current window (police) or the
 * first window, at most max_wait_ns away, that has room (reserve). Returns
 * SL_ADMIT with the wait until that window starts, SL_REFUSE with the time
 * until the same call would succeed, SL_NEVER if n > N (or past the
 * horizon). n == 0 is admitted and changes nothing. Thread- and
 * process-safe, lock-free.
 */
struct sl_decision sl_fixed_acquire(struct sl_fixed *w, uint64_t n, uint64_t now_ns,
				    uint64_t max_wait_ns)
{
	const uint64_t limit = w->limit, window = w->window_ns;
	if (n == 0)
		return sl__decide(SL_ADMIT, 0);
	if (n > limit)
		return sl__never();
	const uint64_t elapsed = sl__elapsed(now_ns, w->epoch_ns);
	const uint64_t idx = elapsed / window;
	const uint64_t first = sl__sat_mul(idx, limit);
	if (first == UINT64_MAX)
		return sl__never(); /* beyond the horizon */

	/* Relaxed: only the expected value of the CAS below. */
	uint64_t v = atomic_load_explicit(&w->used, memory_order_relaxed);
	for (;;) {
		const uint64_t cur = sl__max(v, first);
		/* Within the current window (first <= cur < first + N), the
		 * common case, its index is idx: no division. */
		uint64_t j = cur - first < limit ? idx : cur / limit;
		uint64_t u = cur - j * limit;
		if (n > limit - u) { /* does not fit: take the next window */
			j++;
			u = 0;
		}
		const uint64_t next = sl__sat_add(sl__sat_mul(j, limit), u + n);
		if (next == UINT64_MAX)
			return sl__never();
		uint64_t wait = 0;
		if (j != idx) {
			const uint64_t start_ns = sl__sat_mul(j, window);
			if (start_ns == UINT64_MAX)
				return sl__never(); /* window j starts beyond 2^64 ns */
			wait = start_ns - elapsed;
		}
		if (wait > max_wait_ns)
			return sl__decide(SL_REFUSE, wait - max_wait_ns);
		/* The counter publishes no other memory: the CAS alone orders
		 * racing acquires. SL__ADMIT_ORDER on success (tunable.c's
		 * argument; the same instruction on x86-64), relaxed on
		 * failure: just a new guess. */
		if (atomic_compare_exchange_weak_explicit(&w->used, &v, next, SL__ADMIT_ORDER,
							  memory_order_relaxed))
			return sl__decide(SL_ADMIT, wait);
	}
}

/*
 * sl_fixed_refund - give back n units taken in the window of now_ns: now_ns
 * must lie in the window the units were taken for (the acquire's now_ns
 * plus its wait_ns, or any later instant of that window); a now_ns in a
 * later window would take the units from that window's count. The counter
 * moves back by n, but never before that window's start, and only while it
 * is still in that window (at most its full count, idx * N + N): once a
 * later window is booked, nothing is given back. So a refund never gives
 * units to a window other than the one they were taken from, and no window
 * ever holds more than N. Always SL_OK. Thread- and process-safe,
 * lock-free.
 */
enum sl_status sl_fixed_refund(struct sl_fixed *w, uint64_t n, uint64_t now_ns)
{
	const uint64_t idx = sl__elapsed(now_ns, w->epoch_ns) / w->window_ns;
	const uint64_t first = sl__sat_mul(idx, w->limit);
	/* The counter value of window idx when full; saturated, the window
	 * is past the horizon, where acquire gives SL_NEVER anyway. */
	const uint64_t full = sl__sat_add(first, w->limit);
	/* Relaxed: only the expected value of the CAS below. */
	uint64_t v = atomic_load_explicit(&w->used, memory_order_relaxed);
	for (;;) {
		/* v <= first: window idx holds nothing (it is not begun, or an
		 * older window is over). v > full: a later window is booked. */
		if (v <= first || v > full || n == 0)
			return SL_OK;
		const uint64_t back = v - first < n ? first : v - n;
		/* Relaxed: as in sl_fixed_acquire. */
		if (atomic_compare_exchange_weak_explicit(&w->used, &v, back, memory_order_relaxed,
							  memory_order_relaxed))
			return SL_OK;
	}
}

/*
 * sl_fixed_charge - take n units at now_ns unconditionally, for units
 * already used (bytes already received): the counter moves n past both its
 * value and the current window's start, filling the current window and
 * then as many later windows as n needs, which later acquires wait for.
 * Saturates at 2^64 - 1 (beyond the horizon: every later acquire is then
 * SL_NEVER). n == 0 changes nothing. Always SL_OK. Thread- and
 * process-safe, lock-free.
 */
enum sl_status sl_fixed_charge(struct sl_fixed *w, uint64_t n, uint64_t now_ns)
{
	if (n == 0)
		return SL_OK;
	const uint64_t idx = sl__elapsed(now_ns, w->epoch_ns) / w->window_ns;
	const uint64_t first = sl__sat_mul(idx, w->limit);
	/* Relaxed: only the expected value of the CAS below. */
	uint64_t v = atomic_load_explicit(&w->used, memory_order_relaxed);
	for (;;) {
		const uint64_t next = sl__sat_add(sl__max(v, first), n);
		if (next == v)
			return SL_OK; /* saturated already */
		/* As in sl_fixed_acquire (SL__ADMIT_ORDER: tunable.c). */
		if (atomic_compare_exchange_weak_explicit(&w->used, &v, next, SL__ADMIT_ORDER,
							  memory_order_relaxed))
			return SL_OK;
	}
}

/*
 * sl_fixed_available - units a police acquire would admit at now_ns: what is
 * left of the current window (0 if later windows are already booked).
 * Thread- and process-safe, read-only snapshot.
 */
uint64_t sl_fixed_available(const struct sl_fixed *w, uint64_t now_ns)
{
	const uint64_t idx = sl__elapsed(now_ns, w->epoch_ns) / w->window_ns;
	const uint64_t first = sl__sat_mul(idx, w->limit);
	/* Relaxed: a snapshot of one word; no other memory depends on it. */
	const uint64_t v = atomic_load_explicit(&w->used, memory_order_relaxed);
	const uint64_t cur = sl__max(v, first);
	if (first == UINT64_MAX || cur / w->limit != idx)
		return 0;
	return w->limit - (cur - first);
}
