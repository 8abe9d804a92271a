/* SPDX-License-Identifier: MIT */
/*
 * warmup.c - a token bucket that starts cold: Guava's SmoothWarmingUp (and
 * Sentinel's warm-up flow control, built on it) as a lock-free limiter.
 *
 * Parameters (S = period / amount, the stable interval, in ns per unit):
 *   C = cold x S                the interval of the coldest unit;
 *   T = 0.5 x w / S             the threshold (stored permits);
 *   M = T + 2 x w / (S + C)     the most stored permits, those of a cold
 *                               limiter;
 *   a stored permit at level s > T costs f(s) = S + (s - T)(C - S)/(M - T),
 *   falling linearly from C (at M) to S (at T); one at or below T, and a
 *   fresh one, cost S. Taking k stored permits from level s costs the
 *   integral of f over [s - k, s] (a trapezoid above T).
 *   Stored permits come back at M / w per ns while the schedule lies in
 *   the past (the limiter is not saturated), up to M.
 * So from cold under saturation the first w ns admit M - T = 2w/(S + C)
 * units (0.5 x rate x w for cold 3) at a rate that climbs from rate/cold
 * to rate; then the rate is the stable one; after w of idleness (from
 * fully warm, M / (M / w)) the limiter is cold again.
 *
 * Admission. The state is (sched, stored): sched is the instant at which
 * the next unit's slot starts. A request of n units at now takes the slot
 * [base, base + cost(n)), base = max(sched, now), and may act at
 *   base - (burst - n) x S     (n <= burst)
 *   base + (n - burst) x S     (n > burst; reserve only),
 * so each unit's cost is paid by the units after it, as in Guava, where
 * the first acquire from idle returns at once and the next waits for its
 * cost. With burst = 1 this is Guava's SmoothWarmingUp exactly; in the
 * stable regime (every cost S) it is sluice's token bucket with that burst
 * exactly (gcra.c: it acts at max(tat, now) + n S - burst S). Police admits
 * only when that instant has come; it refuses n > burst (SL_NEVER), as the
 * token bucket does.
 *
 * Lock-freedom. The two words change together, so they are one 16-byte
 * word changed by one CAS (cmpxchg16b on x86-64, a real instruction, so it
 * works across processes in MAP_SHARED memory; the build requires it). Why
 * not one 64-bit word: the state is two independent quantities (stored
 * permits fall while the schedule runs ahead of now, and neither can be
 * derived from the other), each needing about 40 bits in general (a
 * schedule good for years in ns; up to 2^45 stored bytes at 10 GiB/s with
 * a one-hour warm-up). A reader loads the halves with relaxed 64-bit
 * loads, possibly torn: that value is only the CAS's first guess (a torn
 * one fails and the CAS returns the true 16 bytes), and a refusal or
 * available() depends on the schedule alone, one word.
 *
 * Units: stored permits are kept in 2^-16 units (q); costs in whole ns,
 * rounded up; refills rounded up (more stored is colder, so stricter). The
 * warm premium of a cost is computed exactly in 128 bits when it fits and
 * otherwise in long double plus 1 ns.
 */
#include "internal.h"

#if !defined(__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16)
#error "the warm-up limiter needs a 16-byte CAS (x86-64: build with -mcx16)"
#endif

#define Q_SHIFT 16u
/* Longest warm-up: keeps w * M_q and w * amount * 2^17 within 128 bits. */
#define WARMUP_MAX_NS (UINT64_C(3600) * 1000000000u)
#define COLD_MAX 1000u

/* ceil(a / b) in 128 bits, saturated to 64. */
static uint64_t div_ceil_128(sl__u128 a, sl__u128 b)
{
	const sl__u128 q = a / b + (a % b != 0);
	return (q >> 64) ? UINT64_MAX : (uint64_t)q;
}

/* floor(a / b) in 128 bits, saturated to 64. */
static uint64_t div_floor_128(sl__u128 a, sl__u128 b)
{
	const sl__u128 q = a / b;
	return (q >> 64) ? UINT64_MAX : (uint64_t)q;
}

/* n stable intervals, rounded up / down: n x period / amount. */
static uint64_t stable_ceil(const struct sl_warm *w, uint64_t n)
{
	return div_ceil_128((sl__u128)n * w->period_ns, w->amount);
}

static uint64_t stable_floor(const struct sl_warm *w, uint64_t n)
{
	return div_floor_128((sl__u128)n * w->period_ns, w->amount);
}

/*
 * One CAS on the 16-byte state. On success true; on failure false with
 * *sched and *stored set to the state seen. __sync builtins are full
 * barriers (seq_cst), as SL__ADMIT_ORDER asks for tunable.c's argument.
 */
static bool warm_cas(struct sl_warm *w, uint64_t *sched, uint64_t *stored, uint64_t new_sched,
		     uint64_t new_stored)
{
	sl__u128 *word = (sl__u128 *)(void *)&w->sched_ns;
	const sl__u128 old = ((sl__u128)*stored << 64) | *sched;
	const sl__u128 next = ((sl__u128)new_stored << 64) | new_sched;
	const sl__u128 seen = __sync_val_compare_and_swap(word, old, next);
	if (seen == old)
		return true;
	*sched = (uint64_t)seen;
	*stored = (uint64_t)(seen >> 64);
	return false;
}

/* First guess of the state: two relaxed loads, possibly torn (the CAS
 * checks all 16 bytes, and nothing else is published through them). */
static void warm_load(const struct sl_warm *w, uint64_t *sched, uint64_t *stored)
{
	*sched = atomic_load_explicit(&w->sched_ns, memory_order_relaxed);
	*stored = atomic_load_explicit(&w->stored_q, memory_order_relaxed);
}

/* A consistent snapshot for reports: the schedule read before and after
 * the stored permits agrees (it only changes with the permits' CAS; an
 * ABA in between is possible but harmless for a report). */
static void warm_snapshot(const struct sl_warm *w, uint64_t *sched, uint64_t *stored)
{
	for (int tries = 0; tries < 8; tries++) {
		warm_load(w, sched, stored);
		/* Relaxed: see warm_load. */
		if (atomic_load_explicit(&w->sched_ns, memory_order_relaxed) == *sched)
			return;
	}
}

/* Stored permits after `idle_ns` with the schedule in the past: up by
 * M / w per ns, rounded up, at most M. */
static uint64_t warm_refill(const struct sl_warm *w, uint64_t stored_q, uint64_t idle_ns)
{
	if (idle_ns >= w->warmup_ns)
		return w->max_q;
	/* idle < w <= 2^42 and max_q < 2^62: the product fits. */
	const uint64_t add = div_ceil_128((sl__u128)idle_ns * w->max_q, w->warmup_ns);
	return sl__min(sl__sat_add(stored_q, add), w->max_q);
}

/*
 * The warm premium of taking ka_q stored permits from `above_q` above the
 * threshold: the trapezoid's part beyond S per unit,
 *   (C - S)/(M - T) x ka x (above - ka/2)
 *   = (cold - 1) P ka_q (2 above_q - ka_q) / (A (M_q - T_q) 2^17)  ns,
 * rounded up: in 128 bits when the products fit, else in long double plus
 * 1 ns (its rounding error is far below 1 ns at these magnitudes).
 */
static uint64_t warm_premium(const struct sl_warm *w, uint64_t above_q, uint64_t ka_q)
{
	if (ka_q == 0)
		return 0;
	const uint64_t span = 2 * above_q - ka_q; /* above_q < 2^62: no wrap */
	sl__u128 num, den;
	if (!__builtin_mul_overflow((sl__u128)(w->cold - 1) * w->period_ns, ka_q, &num) &&
	    !__builtin_mul_overflow(num, span, &num) &&
	    !__builtin_mul_overflow((sl__u128)w->amount * (w->max_q - w->thresh_q),
				    (sl__u128)1 << 17, &den))
		return div_ceil_128(num, den);
	const long double x = (long double)(w->cold - 1) * (long double)w->period_ns *
			      (long double)ka_q * (long double)span /
			      ((long double)w->amount * (long double)(w->max_q - w->thresh_q) *
			       131072.0L);
	if (x >= 18446744073709551615.0L)
		return UINT64_MAX;
	const uint64_t r = (uint64_t)x;
	return sl__sat_add(r, 1 + ((long double)r < x));
}

/* Cost in ns of n units with stored_q stored permits; *take_q: the stored
 * permits they use (min(n, stored)). */
static uint64_t warm_cost(const struct sl_warm *w, uint64_t stored_q, uint64_t n, uint64_t *take_q)
{
	const uint64_t n_q = n >= (UINT64_C(1) << (64 - Q_SHIFT)) ? UINT64_MAX : n << Q_SHIFT;
	const uint64_t k_q = sl__min(n_q, stored_q);
	const uint64_t above_q = stored_q > w->thresh_q ? stored_q - w->thresh_q : 0;
	*take_q = k_q;
	return sl__sat_add(stable_ceil(w, n), warm_premium(w, above_q, sl__min(k_q, above_q)));
}

/* The instant (ns since the epoch) at which n units whose slot starts at
 * base may act; see the top of the file. */
static uint64_t warm_act_at(const struct sl_warm *w, uint64_t base, uint64_t n)
{
	if (n <= w->burst) {
		const uint64_t tol = stable_floor(w, w->burst - n);
		return base > tol ? base - tol : 0;
	}
	return sl__sat_add(base, stable_ceil(w, n - w->burst));
}

/*
 * sl_warmup_init - a cold warm-up limiter (M stored permits) from p:
 * amount per period_ns, burst >= 1, cold in [2, 1000], warmup_ns in
 * (0, 1 h]. SL_EINVAL for a zero or inconsistent parameter, or a warm-up
 * too short to hold one unit between T and M (w < (1 + cold) S / 2);
 * SL_ERANGE beyond the fixed-point range. Not thread-safe: call before the
 * limiter is shared.
 */
enum sl_status sl_warmup_init(struct sl_warm *w, const struct sl_params *p, uint64_t now_ns)
{
	if (p->amount == 0 || p->period_ns == 0 || p->burst == 0 || p->warmup_ns == 0 ||
	    p->cold < 2)
		return SL_EINVAL;
	if (p->cold > COLD_MAX || p->warmup_ns > WARMUP_MAX_NS)
		return SL_ERANGE;
	/* w * amount * 2^17 < 2^42 * 2^64 * 2^17: fits 128 bits. */
	const sl__u128 wa = (sl__u128)p->warmup_ns * p->amount;
	const sl__u128 t_q = (wa << (Q_SHIFT - 1)) / p->period_ns;
	const sl__u128 m_extra = (wa << (Q_SHIFT + 1)) / ((sl__u128)p->period_ns * (1 + p->cold));
	if (m_extra < ((sl__u128)1 << Q_SHIFT))
		return SL_EINVAL;
	if (t_q + m_extra >= ((sl__u128)1 << 62))
		return SL_ERANGE;
	*w = (struct sl_warm){.amount = p->amount,
			      .period_ns = p->period_ns,
			      .burst = p->burst,
			      .warmup_ns = p->warmup_ns,
			      .epoch_ns = now_ns,
			      .thresh_q = (uint64_t)t_q,
			      .max_q = (uint64_t)(t_q + m_extra),
			      .cold = p->cold};
	/* Relaxed: init runs before the limiter is shared. */
	atomic_store_explicit(&w->sched_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&w->stored_q, w->max_q, memory_order_relaxed);
	return SL_OK;
}

/*
 * sl_warmup_acquire - take n units at now_ns, waiting at most max_wait_ns
 * (0 = police, UINT64_MAX = reserve); the same contract as sl_gcra_acquire:
 * SL_ADMIT with the wait before acting, SL_REFUSE with the time until the
 * same call would succeed, SL_NEVER for n > burst when policing or a slot
 * at the 2^64 ns horizon. n == 0 is admitted and changes nothing. Thread-
 * and process-safe, lock-free (one 16-byte CAS per admission).
 */
struct sl_decision sl_warmup_acquire(struct sl_warm *w, uint64_t n, uint64_t now_ns,
				     uint64_t max_wait_ns)
{
	if (n == 0)
		return sl__decide(SL_ADMIT, 0);
	if (max_wait_ns == 0 && n > w->burst)
		return sl__never();
	const uint64_t now = sl__elapsed(now_ns, w->epoch_ns);
	uint64_t sched, stored;
	warm_load(w, &sched, &stored);
	for (;;) {
		/* Idle since sched: the permits came back meanwhile. A stale
		 * now (before sched) refills nothing. */
		const uint64_t base = sl__max(sched, now);
		const uint64_t have = now > sched ? warm_refill(w, stored, now - sched) : stored;
		const uint64_t at = warm_act_at(w, base, n);
		const uint64_t wait = at > now ? at - now : 0;
		if (at == UINT64_MAX)
			return sl__never();
		/* Depends on sched alone, one word: a torn guess of stored
		 * cannot make it wrong. */
		if (wait > max_wait_ns)
			return sl__decide(SL_REFUSE, wait - max_wait_ns);
		uint64_t take_q;
		const uint64_t next = sl__sat_add(base, warm_cost(w, have, n, &take_q));
		if (next == UINT64_MAX)
			return sl__never();
		if (warm_cas(w, &sched, &stored, next, have - take_q))
			return sl__decide(SL_ADMIT, wait);
	}
}

/*
 * sl_warmup_charge - take n units unconditionally (units already used):
 * the slot moves as an admitted acquire's would, saturating at the
 * horizon. Always SL_OK. Thread- and process-safe, lock-free.
 */
enum sl_status sl_warmup_charge(struct sl_warm *w, uint64_t n, uint64_t now_ns)
{
	if (n == 0)
		return SL_OK;
	const uint64_t now = sl__elapsed(now_ns, w->epoch_ns);
	uint64_t sched, stored;
	warm_load(w, &sched, &stored);
	for (;;) {
		const uint64_t base = sl__max(sched, now);
		const uint64_t have = now > sched ? warm_refill(w, stored, now - sched) : stored;
		uint64_t take_q;
		const uint64_t next = sl__sat_add(base, warm_cost(w, have, n, &take_q));
		if (warm_cas(w, &sched, &stored, next, have - take_q))
			return SL_OK;
	}
}

/*
 * sl_warmup_refund - give back n units taken but not used: the schedule
 * moves back by n stable intervals (rounded down), never before now; the
 * stored permits they used are not put back. Never looser than the exact
 * undo: the schedule gives back at most n S of the cost, the units' warm
 * premium stays paid, and exactly that premium is what the permits not
 * put back save later units. Always SL_OK. Thread- and process-safe.
 */
enum sl_status sl_warmup_refund(struct sl_warm *w, uint64_t n, uint64_t now_ns)
{
	const uint64_t now = sl__elapsed(now_ns, w->epoch_ns);
	const uint64_t back = stable_floor(w, n);
	uint64_t sched, stored;
	warm_load(w, &sched, &stored);
	for (;;) {
		if (sched <= now || back == 0)
			return SL_OK; /* not ahead of now: nothing to give back */
		const uint64_t to = sched - now < back ? now : sched - back;
		if (warm_cas(w, &sched, &stored, to, stored))
			return SL_OK;
	}
}

/*
 * sl_warmup_available - the largest n <= burst that a police acquire would
 * admit at now_ns: those with sched - now <= (burst - n) S. A snapshot of
 * one word. Thread- and process-safe, read-only.
 */
uint64_t sl_warmup_available(const struct sl_warm *w, uint64_t now_ns)
{
	const uint64_t now = sl__elapsed(now_ns, w->epoch_ns);
	/* Relaxed: a snapshot of one word; nothing depends on it. */
	const uint64_t sched = atomic_load_explicit(&w->sched_ns, memory_order_relaxed);
	if (sched <= now)
		return w->burst;
	/* floor((burst - n) P / A) >= d  <=>  burst - n >= ceil(d A / P). */
	const uint64_t need = div_ceil_128((sl__u128)(sched - now) * w->amount, w->period_ns);
	return need < w->burst ? w->burst - need : 0;
}

/* Stored permits at now_ns (q units), from a snapshot. */
static uint64_t warm_stored_q(const struct sl_warm *w, uint64_t now_ns)
{
	const uint64_t now = sl__elapsed(now_ns, w->epoch_ns);
	uint64_t sched, stored;
	warm_snapshot(w, &sched, &stored);
	stored = sl__min(stored, w->max_q);
	return now > sched ? warm_refill(w, stored, now - sched) : stored;
}

/* sl_warmup_stored - stored permits at now_ns, whole units (rounded down):
 * M when cold, 0 when fully warm. Read-only. */
uint64_t sl_warmup_stored(const struct sl_warm *w, uint64_t now_ns)
{
	return warm_stored_q(w, now_ns) >> Q_SHIFT;
}

/* sl_warmup_interval_ns - what the next unit costs at now_ns: f(stored),
 * C when cold, S at or below T (rounded up to ns). Read-only. */
uint64_t sl_warmup_interval_ns(const struct sl_warm *w, uint64_t now_ns)
{
	const uint64_t s = warm_stored_q(w, now_ns);
	if (s <= w->thresh_q)
		return stable_ceil(w, 1);
	/* f(s) = S (1 + (cold - 1)(s - T)/(M - T)); for a report only. */
	const long double f = (long double)w->period_ns / (long double)w->amount *
			      (1.0L + (long double)(w->cold - 1) * (long double)(s - w->thresh_q) /
					      (long double)(w->max_q - w->thresh_q));
	const uint64_t r = (uint64_t)f;
	return r + ((long double)r < f);
}

/* True if w's derived fields are exactly what init derives from p, and its
 * stored permits at most M. */
bool sl__warmup_same(const struct sl_warm *w, const struct sl_params *p)
{
	struct sl_warm ref;
	if (sl_warmup_init(&ref, p, 0) != SL_OK)
		return false;
	/* Relaxed: a read-only plausibility check of one word. */
	return w->amount == ref.amount && w->period_ns == ref.period_ns && w->burst == ref.burst &&
	       w->warmup_ns == ref.warmup_ns && w->thresh_q == ref.thresh_q &&
	       w->max_q == ref.max_q && w->cold == ref.cold &&
	       atomic_load_explicit(&w->stored_q, memory_order_relaxed) <= w->max_q;
}

/* sl__warmup_state - the 16-byte state, read atomically: a CAS that
 * replaces 0 by 0 returns the current value and changes nothing. Needs
 * writable memory (tunable.c's retune, which writes the limiter anyway). */
void sl__warmup_state(struct sl_warm *w, uint64_t *sched_ns, uint64_t *stored_q)
{
	sl__u128 *word = (sl__u128 *)(void *)&w->sched_ns;
	const sl__u128 v = __sync_val_compare_and_swap(word, (sl__u128)0, (sl__u128)0);
	*sched_ns = (uint64_t)v;
	*stored_q = (uint64_t)(v >> 64);
}

/* sl__warmup_set_unsync - the state of a limiter not yet shared. */
void sl__warmup_set_unsync(struct sl_warm *w, uint64_t sched_ns, uint64_t stored_q)
{
	/* Relaxed: w is private until its publisher's release store. */
	atomic_store_explicit(&w->sched_ns, sched_ns, memory_order_relaxed);
	atomic_store_explicit(&w->stored_q, sl__min(stored_q, w->max_q), memory_order_relaxed);
}
