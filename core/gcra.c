/* SPDX-License-Identifier: MIT */
/*
 * gcra.c - token bucket and leaky bucket as GCRA on one atomic word.
 *
 * The state is one "theoretical arrival time" (tat), in ticks since the
 * limiter's epoch: the instant at which the bucket would be full again (token)
 * or empty again (leaky). A request of n units costs cost(n) ticks; it takes
 * the slot [max(tat, now), max(tat, now) + cost) and may act once
 *
 *   token: the end of its slot is at most tau = cost(burst) ahead of now,
 *   leaky: the start of its slot has come (the bucket has drained to it),
 *
 * which is one rule, "act when end - now <= tol", with tol = tau for a token
 * bucket and tol = cost(n) for a leaky one. A police call admits only if it
 * may act now; a reserve call takes the slot anyway and returns the wait.
 * The leaky bucket's capacity bounds how far ahead (end - now) a slot may be.
 *
 * Why this is exact: every admitted slot is at least n/rate long and slots
 * never overlap, so over any interval [s, t] the admitted units fill at most
 * (t - s) + tau ticks: at most rate * (t - s) + burst units. A stale (older)
 * now_ns only shrinks end - now's allowance, so it can only refuse more.
 *
 * Every decision is one CAS loop on tat: a short one for the common case
 * (gcra_acquire_short, which sl_gcra_acquire jumps to) and a general one
 * for the rest (gcra_acquire_slow).
 * Parameters are read-only after init. tat only changes through a CAS, and
 * no other memory is published through it, so every access is relaxed (see
 * the comments at each one), except the admitting CAS, seq_cst for
 * tunable.c (SL__ADMIT_ORDER).
 */
#include "internal.h"
#include "sluice_fast.h"

/*
 * The range of gcra_acquire_short (fast_shift): the largest h such that
 * every now_ns in [epoch, epoch + 2^h) gives now < 2^63 ticks and
 * now + tau <= 2^64 - 2 ticks, so that neither its threshold nor a slot
 * ending within tau of now can reach the horizon. h = 63 - tick_shift for
 * any burst that refills within 2^63 ticks (292 years at tick_shift 0,
 * 2^55 ns = 1.1 years at tick_shift 8); h = 0 (now == epoch only) at
 * worst, as init keeps tau below 2^64 - 1.
 */
static uint32_t gcra_fast_shift(uint64_t tau, uint32_t tick_shift)
{
	uint32_t h = 63 - tick_shift;
	while (h > 0 && (((UINT64_C(1) << h) - 1) << tick_shift) > UINT64_MAX - 1 - tau)
		h--;
	return h;
}

static enum sl_status gcra_init(struct sl_gcra *g, uint64_t amount, uint64_t period_ns,
				uint64_t burst, bool leaky, uint64_t now_ns)
{
	uint64_t mult;
	uint32_t shift, tick_shift;
	enum sl_status st = sl__fixed_point(amount, period_ns, &mult, &shift, &tick_shift);
	if (st != SL_OK)
		return st;
	/* A leaky bucket is GCRA with a burst of one unit: tau = cost(1). Its
	 * multi-unit requests use tol = cost(n) instead (see below). */
	uint64_t tau = sl__cost(1, mult, shift), limit = UINT64_MAX;
	if (!leaky) {
		if (burst == 0)
			return SL_EINVAL;
		tau = sl__cost(burst, mult, shift);
		/* A burst that takes 2^64 ticks to refill is beyond the horizon. */
		if (tau == UINT64_MAX)
			return SL_ERANGE;
	} else if (burst != 0) {
		limit = sl__cost(burst, mult, shift);
		if (limit == UINT64_MAX)
			return SL_ERANGE;
	}
	*g = (struct sl_gcra){
		.mult = mult,
		.tau_ticks = tau,
		.limit_ticks = limit,
		.epoch_ns = now_ns,
		.burst = burst,
		.shift = shift,
		.tick_shift = tick_shift,
		.leaky = leaky,
		.fast_shift = (uint8_t)gcra_fast_shift(tau, tick_shift),
		.capped = leaky && burst != 0,
		.cost1_ticks = sl__cost(1, mult, shift),
	};
	/* tat = 0 (the epoch): a token bucket starts full, a leaky one empty.
	 * Relaxed: init runs before the limiter is shared; whoever shares it
	 * publishes the whole struct (pthread_create, or a release store). */
	atomic_store_explicit(&g->tat, 0, memory_order_relaxed);
	return SL_OK;
}

/*
 * sl_token_init - token bucket of `amount` units per `period_ns`, at most
 * `burst` units at once; starts full at `now_ns` (its epoch).
 * Returns SL_EINVAL for a zero amount, period or burst, SL_ERANGE if the rate
 * is slower than one unit per 292 years or the burst takes longer than the
 * horizon to refill. Not thread-safe: call before sharing g.
 */
enum sl_status sl_token_init(struct sl_gcra *g, uint64_t amount, uint64_t period_ns, uint64_t burst,
			     uint64_t now_ns)
{
	return gcra_init(g, amount, period_ns, burst, false, now_ns);
}

/*
 * sl_leaky_init - leaky bucket of `amount` units per `period_ns`: requests
 * leave exactly cost(n) apart; `capacity` bounds the units queued ahead
 * (including the request itself), 0 = unbounded. Errors as sl_token_init.
 */
enum sl_status sl_leaky_init(struct sl_gcra *g, uint64_t amount, uint64_t period_ns,
			     uint64_t capacity, uint64_t now_ns)
{
	return gcra_init(g, amount, period_ns, capacity, true, now_ns);
}

/*
 * The limiter whose state word is *tat_p. The acquire paths below take
 * &g->tat rather than g: the CAS then addresses the argument register
 * directly and the parameters sit at small negative offsets from it, so
 * that no register is spent on the address of tat (which GCC keeps apart
 * from g otherwise).
 */
static inline struct sl_gcra *gcra_of(_Atomic uint64_t *tat_p)
{
	return (struct sl_gcra *)(void *)((char *)tat_p - offsetof(struct sl_gcra, tat));
}

/*
 * The general case of sl_gcra_acquire: n == 0 (cost 0; any n >= 1 costs at
 * least one tick), n beyond the burst or capacity, a now_ns before the epoch
 * or beyond the short path's range, slots near the 2^64-tick horizon, and a
 * leaky bucket's capacity, with saturating arithmetic throughout. `cost` is
 * sl__cost(n) (saturated), `elapsed` is now_ns - epoch_ns modulo 2^64 (not
 * clamped). Passing these rather than n and now_ns, and keeping this
 * function out of line, leaves fewer values alive in gcra_acquire_short.
 */
__attribute__((noinline)) static struct sl_decision
gcra_acquire_slow(_Atomic uint64_t *tat_p, uint64_t cost, uint64_t elapsed, uint64_t max_wait_ns)
{
	struct sl_gcra *g = gcra_of(tat_p);
	if (cost == 0)
		return sl__decide(SL_ADMIT, 0);
	const uint32_t ts = g->tick_shift;
	/* elapsed is now_ns - epoch_ns modulo 2^64: undo that to clamp. */
	const uint64_t now_ns = elapsed + g->epoch_ns;
	const uint64_t now = sl__ns_to_ticks(sl__elapsed(now_ns, g->epoch_ns), ts);
	const uint64_t limit = g->limit_ticks;
	/* How far the end of the slot may be ahead of now for acting now. */
	const uint64_t tol = g->leaky ? cost : g->tau_ticks;
	const uint64_t max_wait = sl__ns_to_ticks(max_wait_ns, ts);
	if (cost > limit || (cost > tol && cost - tol > max_wait))
		return sl__never();
	/* Relaxed: only the expected value of the CAS below. */
	uint64_t tat = atomic_load_explicit(&g->tat, memory_order_relaxed);
	for (;;) {
		const uint64_t start = sl__max(tat, now);
		uint64_t end;
		/* A slot reaching 2^64 - 1 ticks is never: no wait reaches it,
		 * and taking it would stop the limiter for good. */
		if (__builtin_add_overflow(start, cost, &end) || end == UINT64_MAX)
			return sl__never();
		const uint64_t ahead = end - now;
		const uint64_t wait = ahead > tol ? ahead - tol : 0;
		if (ahead > limit || wait > max_wait) {
			/* A retry at now + t succeeds once ahead - t fits both. */
			uint64_t t = ahead > limit ? ahead - limit : 0;
			t = sl__max(t, wait > max_wait ? wait - max_wait : 0);
			return sl__decide(SL_REFUSE, sl__ticks_to_ns(t, ts));
		}
		/* tat publishes no other memory, and the CAS alone orders racing
		 * acquires (one modification order of tat); seq_cst on success
		 * only for tunable.c (SL__ADMIT_ORDER). Relaxed on failure: the
		 * reloaded tat is just a new guess. */
		if (atomic_compare_exchange_weak_explicit(&g->tat, &tat, end, SL__ADMIT_ORDER,
							  memory_order_relaxed))
			return sl__decide(SL_ADMIT, sl__ticks_to_ns(wait, ts));
	}
}

/*
 * The short path of sl_gcra_acquire, for a cost that init or the caller has
 * checked: 1 <= cost < 2^63, cost <= tol and cost <= limit_ticks, where tol
 * is the tolerance (tau for a token bucket, cost for a leaky one; tau =
 * cost(1) for both when n == 1). A request may act now iff its slot ends
 * within tol of now, i.e. iff tat <= thresh = now + tol - cost; otherwise it
 * waits tat - thresh ticks. Init's fast_shift bounds now (below 2^63 ticks,
 * and now + tau below 2^64 - 1), and tat is checked to be below 2^63 where
 * it matters (a reserve far ahead or a charge can leave it anywhere), so
 * every step is exact without saturation; anything else goes to
 * gcra_acquire_slow.
 *
 * Out of line, and reached by a jump, so that it has the argument registers
 * to itself: the n == 1 case then saves no register (about 30 instructions
 * to admit, under 40 to reserve or refuse; see bench/bench_core.c).
 */
__attribute__((noinline)) static struct sl_decision
gcra_acquire_short(_Atomic uint64_t *tat_p, uint64_t cost, uint64_t now_ns, uint64_t max_wait_ns,
		   uint64_t tol)
{
	const struct sl_gcra *g = gcra_of(tat_p);
	/* Before the epoch (the subtraction borrows), or beyond the range
	 * init made exact (fast_shift <= 63 - tick_shift). */
	uint64_t elapsed;
	if (__builtin_sub_overflow(now_ns, g->epoch_ns, &elapsed) ||
	    (elapsed >> (g->fast_shift & 63)) != 0)
		return gcra_acquire_slow(tat_p, cost, elapsed, max_wait_ns);
	const uint64_t now = elapsed << (g->tick_shift & 63);
	/* thresh + 1: now + tol < 2^64 - 1 (tol <= tau, or tol = cost <
	 * 2^63), so it cannot wrap. */
	const uint64_t thresh1 = now + (tol - cost) + 1;
	/* Relaxed: the value is only an expected value for the CAS below, which
	 * fails and reloads if it is stale; nothing else is read through it. */
	uint64_t tat = atomic_load_explicit(tat_p, memory_order_relaxed);
	for (;;) {
		if (tat < thresh1) {
			/* Act now: end <= now + tol, so it cannot wrap. */
			const uint64_t end = sl__max(tat, now) + cost;
			/* As in gcra_acquire_slow: SL__ADMIT_ORDER on success,
			 * relaxed on failure. */
			if (atomic_compare_exchange_weak_explicit(tat_p, &tat, end, SL__ADMIT_ORDER,
								  memory_order_relaxed))
				return sl__decide(SL_ADMIT, 0);
			continue;
		}
		/* tat > thresh >= now, so the slot starts at tat, and below
		 * 2^63 (else the horizon is near) the sum cannot wrap. A leaky
		 * bucket's slot must end within its capacity of now. */
		const uint64_t end = tat + cost;
		if ((tat >> 63) || (g->capped && end - now > g->limit_ticks))
			return gcra_acquire_slow(tat_p, cost, now >> g->tick_shift, max_wait_ns);
		/* The wait, tat - thresh > 0 ticks, in ns rounded up: q + 1. */
		const uint64_t q = (tat - thresh1) >> g->tick_shift;
		/* Too long: a retry with the same max_wait succeeds once the
		 * wait has shrunk to it. */
		if (q >= max_wait_ns)
			return sl__decide(SL_REFUSE, q + 1 - max_wait_ns);
		/* As above. */
		if (atomic_compare_exchange_weak_explicit(tat_p, &tat, end, SL__ADMIT_ORDER,
							  memory_order_relaxed))
			return sl__decide(SL_ADMIT, q + 1);
	}
}

/* gcra_acquire_slow from n and now_ns, out of line: the saturating cost is
 * not needed on the short path. */
__attribute__((noinline, cold)) static struct sl_decision
gcra_acquire_slow_n(struct sl_gcra *g, uint64_t n, uint64_t now_ns, uint64_t max_wait_ns)
{
	return gcra_acquire_slow(&g->tat, sl__cost(n, g->mult, g->shift), now_ns - g->epoch_ns,
				 max_wait_ns);
}

/*
 * sl_gcra_acquire for n != 1: the cost by a 128-bit multiply
 * (sl__gcra_cost_short, sluice_fast.h, shared with the inline path), then
 * the short path if it covers that cost; n == 0 and costs beyond the burst
 * (token), the capacity (leaky) or 2^63 - 1 take the slow one.
 */
__attribute__((noinline)) static struct sl_decision
gcra_acquire_n(struct sl_gcra *g, uint64_t n, uint64_t now_ns, uint64_t max_wait_ns)
{
	uint64_t cost, tol;
	if (!sl__gcra_cost_short(g, n, &cost, &tol))
		return gcra_acquire_slow_n(g, n, now_ns, max_wait_ns);
	return gcra_acquire_short(&g->tat, cost, now_ns, max_wait_ns, tol);
}

/*
 * sl_gcra_acquire - take n units at now_ns, waiting at most max_wait_ns
 * (0 = police, UINT64_MAX = reserve). Returns SL_ADMIT with the wait before
 * acting, SL_REFUSE with the time until the same call would succeed (if
 * nothing else is taken meanwhile), or SL_NEVER (wait_ns UINT64_MAX) if no
 * wait up to max_wait_ns can ever admit n units: n > burst when policing,
 * n > capacity for a leaky bucket, or a slot beyond the 2^64-tick horizon.
 * n == 0 is admitted at once and changes nothing. Thread- and process-safe,
 * lock-free.
 *
 * The common cases take gcra_acquire_short: n == 1 with init's cost1_ticks,
 * other n after a 128-bit multiply (gcra_acquire_n). Everything else
 * (n == 0, n beyond the burst or the capacity, the horizon) is left to
 * gcra_acquire_slow, which gives the same answer for every input
 * (test_core_gcra checks both against an exact 128-bit model).
 */
struct sl_decision sl_gcra_acquire(struct sl_gcra *g, uint64_t n, uint64_t now_ns,
				   uint64_t max_wait_ns)
{
	if (n != 1)
		return gcra_acquire_n(g, n, now_ns, max_wait_ns);
	/* Init makes cost(1) fit the tolerance (burst >= 1) and the capacity
	 * (>= 1 unit, or unbounded), below 2^63. */
	return gcra_acquire_short(&g->tat, g->cost1_ticks, now_ns, max_wait_ns, g->tau_ticks);
}

/*
 * sl_gcra_refund - give back n units taken but not used: tat moves back by
 * cost(n), but never before now, so the bucket never holds more than its
 * burst (a leaky bucket's later slots keep their times). Always SL_OK.
 * Thread- and process-safe, lock-free.
 */
enum sl_status sl_gcra_refund(struct sl_gcra *g, uint64_t n, uint64_t now_ns)
{
	const uint64_t now = sl__ns_to_ticks(sl__elapsed(now_ns, g->epoch_ns), g->tick_shift);
	const uint64_t cost = sl__cost(n, g->mult, g->shift);
	/* Relaxed: the expected value of the CAS below (see sl_gcra_acquire). */
	uint64_t tat = atomic_load_explicit(&g->tat, memory_order_relaxed);
	for (;;) {
		if (tat <= now || cost == 0)
			return SL_OK; /* already full: nothing to give back */
		const uint64_t back = tat - now < cost ? now : tat - cost;
		/* Relaxed: as in sl_gcra_acquire, tat publishes nothing else. */
		if (atomic_compare_exchange_weak_explicit(&g->tat, &tat, back, memory_order_relaxed,
							  memory_order_relaxed))
			return SL_OK;
	}
}

/*
 * sl_gcra_available - the largest n that a police acquire would admit at
 * now_ns (a snapshot; capped at burst, UINT64_MAX for an idle unbounded
 * leaky bucket). Thread- and process-safe, read-only.
 */
uint64_t sl_gcra_available(const struct sl_gcra *g, uint64_t now_ns)
{
	const uint64_t now = sl__ns_to_ticks(sl__elapsed(now_ns, g->epoch_ns), g->tick_shift);
	/* Relaxed: a snapshot of one word; no other memory depends on it. */
	const uint64_t tat = atomic_load_explicit(&g->tat, memory_order_relaxed);
	if (g->leaky) {
		/* A leaky bucket admits only when drained, up to its capacity. */
		if (tat > now)
			return 0;
		return g->burst ? g->burst : UINT64_MAX;
	}
	/* Police admits n while max(tat, now) + cost(n) <= now + tau. */
	const uint64_t start = sl__max(tat, now);
	const uint64_t full = sl__sat_add(now, g->tau_ticks);
	if (start >= full)
		return 0;
	return sl__min(sl__units_in(full - start, g->mult, g->shift), g->burst);
}

/*
 * sl_gcra_charge - take n units at now_ns unconditionally, for units
 * already used (bytes already received): the next slot moves cost(n) past
 * max(tat, now), as an admitted acquire would, but with no burst, capacity
 * or horizon check, so the debt is what later acquires wait for (a token
 * bucket of 1000 units/s charged 3000 units waits 3 s, less its burst, for
 * the next unit). A leaky bucket's capacity makes later acquires refuse
 * until the debt is within it. Saturates at 2^64 - 1 ticks (every later
 * acquire is then SL_NEVER). n == 0 changes nothing. Always SL_OK. Thread-
 * and process-safe, lock-free.
 */
enum sl_status sl_gcra_charge(struct sl_gcra *g, uint64_t n, uint64_t now_ns)
{
	if (n == 0)
		return SL_OK;
	const uint64_t now = sl__ns_to_ticks(sl__elapsed(now_ns, g->epoch_ns), g->tick_shift);
	const uint64_t cost = sl__cost(n, g->mult, g->shift);
	/* Relaxed: the expected value of the CAS below (see sl_gcra_acquire). */
	uint64_t tat = atomic_load_explicit(&g->tat, memory_order_relaxed);
	for (;;) {
		const uint64_t next = sl__sat_add(sl__max(tat, now), cost);
		if (next == tat)
			return SL_OK; /* saturated already */
		/* tat publishes nothing else: the CAS alone orders this
		 * charge against racing acquires. SL__ADMIT_ORDER on success,
		 * for tunable.c (a charge is debt and must not escape a retune). */
		if (atomic_compare_exchange_weak_explicit(&g->tat, &tat, next, SL__ADMIT_ORDER,
							  memory_order_relaxed))
			return SL_OK;
	}
}
