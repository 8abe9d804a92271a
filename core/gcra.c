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
 * (sl_gcra_acquire) and a general one for the rest (gcra_acquire_slow).
 * Parameters are read-only after init. tat only changes through a CAS, and
 * no other memory is published through it, so every access is relaxed (see
 * the comments at each one).
 */
#include "internal.h"

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
enum sl_status sl_token_init(struct sl_gcra *g, uint64_t amount, uint64_t period_ns,
			     uint64_t burst, uint64_t now_ns)
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
 * The general case of sl_gcra_acquire: every refusal, n == 0 (cost 0; any
 * n >= 1 costs at least one tick), n beyond the burst or capacity, and
 * times or slots near the 2^64-tick horizon, with saturating arithmetic
 * throughout. `cost` is sl__cost(n) (saturated), `elapsed` is now_ns -
 * epoch_ns modulo 2^64 (not clamped). Passing these rather than n and
 * now_ns, and keeping this function out of line, leaves fewer values alive
 * in sl_gcra_acquire's short path.
 */
__attribute__((noinline)) static struct sl_decision
gcra_acquire_slow(struct sl_gcra *g, uint64_t cost, uint64_t elapsed, uint64_t max_wait_ns)
{
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
		/* Relaxed on success: tat publishes no other memory, and the CAS
		 * alone orders racing acquires (one modification order of tat).
		 * Relaxed on failure: the reloaded tat is just a new guess. */
		if (atomic_compare_exchange_weak_explicit(&g->tat, &tat, end, memory_order_relaxed,
							  memory_order_relaxed))
			return sl__decide(SL_ADMIT, sl__ticks_to_ns(wait, ts));
	}
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
 * This is the common case, kept short (about 40 instructions for n == 1):
 * the slot is taken now or after an acceptable wait, or refused because the
 * wait is too long. It decides with
 * "slack", how far the slot's start may be ahead of now without a wait
 * (tau - cost for a token bucket, 0 for a leaky one). Keeping times and
 * slots below 2^63 ticks makes every step exact without saturation: the
 * clock between the epoch and 2^55 ns after it (1.1 years, so that even
 * tick_shift 8 stays below 2^63), costs below 2^63, and slots that end
 * below 2^63 ticks. Everything else (n == 0, n beyond the burst or the
 * capacity, the horizon) is left to gcra_acquire_slow, which gives the same
 * answer for every input
 * (test_core_gcra checks both against an exact 128-bit model).
 */
struct sl_decision sl_gcra_acquire(struct sl_gcra *g, uint64_t n, uint64_t now_ns,
				   uint64_t max_wait_ns)
{
	/* Wraps if now_ns is before the epoch: caught by the test below. */
	const uint64_t elapsed = now_ns - g->epoch_ns;
	uint64_t cost, slack;
	if (n == 1) {
		/* Init makes cost(1) fit the tolerance (burst >= 1) and the
		 * capacity (>= 1 unit, or unbounded). */
		cost = g->cost1_ticks;
		/* A leaky bucket's tau is cost(1): slack 0, no wait allowed. */
		slack = g->tau_ticks - cost;
	} else {
		cost = sl__cost(n, g->mult, g->shift);
		const uint64_t tol = g->leaky ? cost : g->tau_ticks;
		if (n == 0 || cost > tol || cost > g->limit_ticks || cost >> 63)
			return gcra_acquire_slow(g, cost, elapsed, max_wait_ns);
		slack = tol - cost;
	}
	/* Before the epoch, or 2^55 ns (1.1 years) after it. */
	if (elapsed >> 55)
		return gcra_acquire_slow(g, cost, elapsed, max_wait_ns);
	/* tick_shift <= 8 (init; validate checks it). */
	const uint32_t ts = g->tick_shift;
	const uint64_t now = elapsed << ts;
	/* Relaxed: the value is only an expected value for the CAS below, which
	 * fails and reloads if it is stale; nothing else is read through it. */
	uint64_t tat = atomic_load_explicit(&g->tat, memory_order_relaxed);
	for (;;) {
		const uint64_t start = sl__max(tat, now);
		/* cost < 2^63, so with start < 2^63 the sum cannot wrap. */
		const uint64_t end = start + cost;
		if ((start | end) >> 63)
			return gcra_acquire_slow(g, cost, now >> g->tick_shift, max_wait_ns);
		const uint64_t early = start - now;
		uint64_t wait_ns = 0;
		if (early > slack) {
			/* Leaky capacity: the slot must end within limit of now
			 * (limit_ticks - cost is UINT64_MAX - cost for a token
			 * bucket, which early cannot exceed below 2^63). */
			if (early > g->limit_ticks - cost)
				return gcra_acquire_slow(g, cost, now >> g->tick_shift, max_wait_ns);
			wait_ns = ((early - slack - 1) >> g->tick_shift) + 1; /* ceil, > 0 */
			/* Too long: a retry with the same max_wait succeeds once
			 * the wait has shrunk to it. */
			if (wait_ns > max_wait_ns)
				return sl__decide(SL_REFUSE, wait_ns - max_wait_ns);
		}
		/* Relaxed on success: tat publishes no other memory, and the CAS
		 * alone orders racing acquires (one modification order of tat).
		 * Relaxed on failure: the reloaded tat is just a new guess. */
		if (atomic_compare_exchange_weak_explicit(&g->tat, &tat, end, memory_order_relaxed,
							  memory_order_relaxed))
			return sl__decide(SL_ADMIT, wait_ns);
	}
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
