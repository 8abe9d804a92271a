/* SPDX-License-Identifier: MIT */
/*
 * internal.h - fixed-point and saturating helpers shared by the core's
 * limiters (sl__ names are internal to core/).
 *
 * Time in the GCRA limiters is counted in "ticks" of 2^-tick_shift ns since
 * the limiter's epoch, and the cost of n units is ceil(n * mult / 2^shift)
 * ticks. Every helper here rounds in the direction that makes a limiter
 * stricter (costs up, elapsed time down) and saturates at UINT64_MAX instead
 * of wrapping, so that no overflow can ever admit more than the limit.
 *
 * Everything is static inline: these sit on the hot path of every acquire.
 */
#ifndef SLUICE_CORE_INTERNAL_H
#define SLUICE_CORE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "sluice_core.h"

__extension__ typedef unsigned __int128 sl__u128;

/* Largest tick_shift: 2^8 ticks per ns keeps 10^10 units/s at 25.6 ticks
 * per unit, and the GCRA horizon at 2^56 ns (2.28 years). */
#define SL__TICK_SHIFT_MAX 8u
/* A tick_shift is raised until one unit costs at least this many ticks. */
#define SL__MIN_TICKS_PER_UNIT 1024u
/* mult stays below 2^63, so n * mult < 2^127 never overflows 128 bits. */
#define SL__MULT_LIMIT (UINT64_C(1) << 63)
/* Every limiter stays exact for at least this long after its epoch. */
#define SL__HORIZON_NS (UINT64_C(1) << 56)

/* The order of the CAS by which a rate limiter (token, leaky, fixed,
 * sliding; warm-up's 16-byte CAS is a full barrier) admits: seq_cst,
 * so that a tunable limiter (tunable.c) can check its generation after it
 * without a fence. On x86-64 it is the same instruction as relaxed. */
#define SL__ADMIT_ORDER memory_order_seq_cst

static inline uint64_t sl__min(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static inline uint64_t sl__max(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* a + b, or UINT64_MAX if the sum overflows. */
static inline uint64_t sl__sat_add(uint64_t a, uint64_t b)
{
	uint64_t s = a + b;
	return s < a ? UINT64_MAX : s;
}

/* a * b, or UINT64_MAX if the product overflows. */
static inline uint64_t sl__sat_mul(uint64_t a, uint64_t b)
{
	sl__u128 p = (sl__u128)a * b;
	return (p >> 64) ? UINT64_MAX : (uint64_t)p;
}

/* ceil(a / b) for b > 0, without the overflow of (a + b - 1) / b. */
static inline uint64_t sl__div_ceil(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

/*
 * Cost in ticks of n units: ceil(n * mult / 2^shift), saturated.
 * mult < 2^63 and shift <= 63 (checked by init and validate), so the 128-bit
 * product cannot overflow and the shifts are defined.
 */
static inline uint64_t sl__cost(uint64_t n, uint64_t mult, uint32_t shift)
{
	/* Round up by adding 2^shift - 1 before shifting: the sum stays below
	 * 2^127 + 2^63, so it cannot overflow. `& 63` tells the compiler the
	 * shift is a single-word one (validate guarantees shift <= 63). */
	shift &= 63;
	sl__u128 q = ((sl__u128)n * mult + ((UINT64_C(1) << shift) - 1)) >> shift;
	return (q >> 64) ? UINT64_MAX : (uint64_t)q;
}

/* The largest n whose cost fits in `ticks`: floor(ticks * 2^shift / mult),
 * saturated. The inverse of sl__cost: sl__cost(result) <= ticks. */
static inline uint64_t sl__units_in(uint64_t ticks, uint64_t mult, uint32_t shift)
{
	sl__u128 u = ((sl__u128)ticks << shift) / mult;
	return (u >> 64) ? UINT64_MAX : (uint64_t)u;
}

/* ns -> ticks: ns * 2^tick_shift, saturated. */
static inline uint64_t sl__ns_to_ticks(uint64_t ns, uint32_t tick_shift)
{
	tick_shift &= 63;
	return ns > (UINT64_MAX >> tick_shift) ? UINT64_MAX : ns << tick_shift;
}

/* ticks -> ns, rounded up, so that a wait is never reported short. */
static inline uint64_t sl__ticks_to_ns(uint64_t ticks, uint32_t tick_shift)
{
	uint64_t mask = (UINT64_C(1) << tick_shift) - 1;
	return (ticks >> tick_shift) + ((ticks & mask) != 0);
}

/* Time since the epoch. A `now_ns` before the epoch (a clock read taken
 * before init, by another thread) counts as the epoch itself: the epoch is a
 * time that was really seen, so this never moves time past the present. */
static inline uint64_t sl__elapsed(uint64_t now_ns, uint64_t epoch_ns)
{
	return now_ns > epoch_ns ? now_ns - epoch_ns : 0;
}

/*
 * Fixed-point form of "period_ns per amount units".
 *
 * tick_shift is the smallest value in [0, 8] that makes one unit cost at
 * least SL__MIN_TICKS_PER_UNIT ticks, so slow rates keep a 584-year horizon
 * and fast ones keep precision. shift is the largest value that keeps mult
 * below 2^63 (and tick_shift + shift <= 63, so the 128-bit numerator cannot
 * overflow); mult is rounded up, so every cost is at least the exact one.
 *
 * Returns SL_EINVAL for a zero amount or period, SL_ERANGE if one unit
 * costs 2^63 ticks or more (a period of more than 292 years per unit).
 */
static inline enum sl_status sl__fixed_point(uint64_t amount, uint64_t period_ns, uint64_t *mult,
					     uint32_t *shift, uint32_t *tick_shift)
{
	if (amount == 0 || period_ns == 0)
		return SL_EINVAL;
	uint32_t ts = 0;
	while (ts < SL__TICK_SHIFT_MAX &&
	       ((sl__u128)period_ns << ts) < (sl__u128)amount * SL__MIN_TICKS_PER_UNIT)
		ts++;
	/* Find the largest s with ceil(period * 2^(ts+s) / amount) < 2^63; the
	 * value grows with s, so scan downwards from the largest allowed s. */
	for (uint32_t s = 63 - ts + 1; s-- > 0;) {
		sl__u128 num = (sl__u128)period_ns << (ts + s);
		sl__u128 m = num / amount + (num % amount != 0);
		if (m < SL__MULT_LIMIT) {
			*mult = (uint64_t)m;
			*shift = s;
			*tick_shift = ts;
			return SL_OK;
		}
	}
	return SL_ERANGE;
}

static inline struct sl_decision sl__decide(uint32_t verdict, uint64_t wait_ns)
{
	struct sl_decision d = {.wait_ns = wait_ns, .verdict = verdict, .reserved = 0};
	return d;
}

/* SL_NEVER carries wait_ns UINT64_MAX: no wait makes the request admissible. */
static inline struct sl_decision sl__never(void)
{
	return sl__decide(SL_NEVER, UINT64_MAX);
}

/* Concurrency count operations on a bare word (concurrency.c). */
struct sl_decision sl__conc_take(_Atomic uint64_t *held, uint64_t n, uint64_t limit);
enum sl_status sl__conc_give(_Atomic uint64_t *held, uint64_t n);

/* Sliding window state <-> units at now_ns (sliding.c), for retunes:
 * the units the state word holds in the previous and the current window,
 * and the state word of s that holds the given units (rounded up to quanta,
 * capped at the limit). */
void sl__sliding_units(const struct sl_sliding *s, uint64_t state, uint64_t now_ns,
		       uint64_t *prev_units, uint64_t *cur_units);
uint64_t sl__sliding_state(const struct sl_sliding *s, uint64_t now_ns, uint64_t prev_units,
			   uint64_t cur_units);

/* Warm-up limiters (warmup.c): validation against params; for retunes,
 * the state (schedule, stored permits) read atomically, and written into a
 * limiter not yet shared. */
bool sl__warmup_same(const struct sl_warm *w, const struct sl_params *p);
void sl__warmup_state(struct sl_warm *w, uint64_t *sched_ns, uint64_t *stored_q);
void sl__warmup_set_unsync(struct sl_warm *w, uint64_t sched_ns, uint64_t stored_q);

/* Tunable limiters (tunable.c): the generic calls forward to these. */
struct sl_decision sl__tunable_acquire(struct sl_limiter *head, uint64_t n, uint64_t now_ns,
				       uint64_t max_wait_ns);
enum sl_status sl__tunable_refund(struct sl_limiter *head, uint64_t n, uint64_t now_ns);
enum sl_status sl__tunable_charge(struct sl_limiter *head, uint64_t n, uint64_t now_ns);
enum sl_status sl__tunable_release(struct sl_limiter *head, uint64_t n);
uint64_t sl__tunable_available(const struct sl_limiter *head, uint64_t now_ns);

#endif /* SLUICE_CORE_INTERNAL_H */
