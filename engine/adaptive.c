/* SPDX-License-Identifier: MIT */
/*
 * adaptive.c - the conns:adaptive controller: what limit the latency of the
 * last window of turns asks for (adaptive.h has the algorithms and the
 * protocol with the front ends).
 *
 * Concurrency: samples are added with atomic read-modify-writes by every
 * thread and process; the controller's words are written only by the
 * holder of `lock`, taken with a CAS and never waited for (a caller that
 * does not get it leaves the window to the holder). A holder that died
 * (a process killed between its CAS and its unlock) is replaced after
 * SL_ADAPT_LOCK_STALE_NS. A sample that lands while the holder swaps the
 * window out counts in the next window: windows are statistics, nothing is
 * owed to them.
 */
#include "adaptive.h"
#include "decide.h"

/* Relaxed everywhere but the lock: the words are statistics and the limit a
 * value the caller publishes through its limiter's retune (which orders
 * what matters); the lock's acquire/release orders one holder's writes
 * before the next holder's reads. */
#define RLX memory_order_relaxed

static uint64_t isqrt(uint64_t v)
{
	uint64_t r = 0, bit = (uint64_t)1 << 62;
	while (bit > v)
		bit >>= 2;
	while (bit != 0) {
		if (v >= r + bit) {
			v -= r + bit;
			r = (r >> 1) + bit;
		} else {
			r >>= 1;
		}
		bit >>= 2;
	}
	return r;
}

static uint64_t ilog10(uint64_t v)
{
	uint64_t l = 0;
	while (v >= 10) {
		v /= 10;
		l++;
	}
	return l;
}

static uint64_t clamp(uint64_t v, uint64_t lo, uint64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

void sl_adapt_init_unsync(struct sl_adapt *a, const struct sl_rule *r, uint64_t now_ns)
{
	*a = (struct sl_adapt){.magic = SL_ADAPT_MAGIC,
			       .algo = r->adapt_algo,
			       .min = r->adapt_min != 0 ? r->adapt_min : 1,
			       .max = r->adapt_max};
	if (a->max < a->min)
		a->max = a->min;
	const uint64_t init = clamp(r->amount, a->min, a->max);
	atomic_store_explicit(&a->win_min_ns, UINT64_MAX, RLX);
	atomic_store_explicit(&a->win_start_ns, now_ns, RLX);
	atomic_store_explicit(&a->limit_x, init * SL_ADAPT_ONE, RLX);
	atomic_store_explicit(&a->limit, init, RLX);
	atomic_store_explicit(&a->probe_min_ns, UINT64_MAX, RLX);
}

void sl_adapt_init_system_unsync(struct sl_adapt *a, const struct sl_rule *r, uint64_t now_ns)
{
	*a = (struct sl_adapt){.magic = SL_ADAPT_MAGIC,
			       .algo = SL_ADAPT_SYSTEM,
			       .min = 1,
			       .max = SL_ADAPT_LIMIT_MAX,
			       .sys_load1 = r->sys_load1,
			       .sys_cpu = r->sys_cpu,
			       .sys_rt_ns = r->sys_rt_ns};
	atomic_store_explicit(&a->win_min_ns, UINT64_MAX, RLX);
	atomic_store_explicit(&a->win_start_ns, now_ns, RLX);
	atomic_store_explicit(&a->limit_x, a->max * SL_ADAPT_ONE, RLX);
	atomic_store_explicit(&a->limit, a->max, RLX);
	atomic_store_explicit(&a->probe_min_ns, UINT64_MAX, RLX);
}

void sl_adapt_host(struct sl_adapt *a, uint64_t load1_milli, uint64_t cpu_permille)
{
	/* Each figure + 1 (0: unknown): load in bits 0-31, CPU in 32-47. */
	const uint64_t l = load1_milli < UINT32_MAX ? load1_milli + 1 : 0;
	const uint64_t c = cpu_permille <= 1000 ? cpu_permille + 1 : 0;
	atomic_store_explicit(&a->host, l | c << 32, RLX);
}

bool sl_adapt_cpu_parse(const char *buf, size_t len, uint64_t *busy, uint64_t *total)
{
	/* "cpu  user nice system idle iowait irq softirq steal guest
	 * guest_nice": idle and iowait are not busy; guest times are in
	 * user and nice already. */
	if (len < 4 || buf[0] != 'c' || buf[1] != 'p' || buf[2] != 'u' || buf[3] != ' ')
		return false;
	uint64_t v[8] = {0};
	unsigned n = 0;
	size_t i = 4;
	while (n < 8) {
		while (i < len && buf[i] == ' ')
			i++;
		if (i >= len || buf[i] < '0' || buf[i] > '9')
			break;
		uint64_t x = 0;
		for (; i < len && buf[i] >= '0' && buf[i] <= '9'; i++) {
			if (x > (UINT64_MAX - 9) / 10)
				return false;
			x = x * 10 + (uint64_t)(buf[i] - '0');
		}
		v[n++] = x;
	}
	if (n < 4)
		return false;
	uint64_t t = 0;
	for (unsigned k = 0; k < n; k++) {
		if (t > UINT64_MAX - v[k])
			return false;
		t += v[k];
	}
	*total = t;
	*busy = t - v[3] - v[4];
	return true;
}

uint64_t sl_adapt_cpu_permille(uint64_t busy0, uint64_t total0, uint64_t busy1, uint64_t total1)
{
	if (total1 <= total0 || busy1 < busy0)
		return UINT64_MAX;
	const uint64_t db = busy1 - busy0, dt = total1 - total0;
	return db >= dt ? 1000 : (uint64_t)((__uint128_t)db * 1000 / dt);
}

bool sl_adapt_valid(const struct sl_adapt *a)
{
	const uint64_t l = atomic_load_explicit(&a->limit, RLX);
	return a->magic == SL_ADAPT_MAGIC &&
	       (a->algo <= SL_ADAPT_AIMD || a->algo == SL_ADAPT_SYSTEM) && a->min >= 1 &&
	       a->min <= a->max && a->max <= SL_ADAPT_LIMIT_MAX && l >= a->min && l <= a->max;
}

void sl_adapt_refused(struct sl_adapt *a, uint64_t now_ns)
{
	atomic_store_explicit(&a->bound_ns, now_ns | 1, RLX);
}

void sl_adapt_started(struct sl_adapt *a, uint64_t in_flight)
{
	uint64_t p = atomic_load_explicit(&a->win_peak, RLX);
	while (p < in_flight &&
	       !atomic_compare_exchange_weak_explicit(&a->win_peak, &p, in_flight, RLX, RLX))
		;
}

void sl_adapt_sample(struct sl_adapt *a, uint64_t start_ns, uint64_t latency_ns)
{
	if (a->algo == SL_ADAPT_SYSTEM) /* the completion rate counts them all */
		atomic_fetch_add_explicit(&a->done, 1, RLX);
	if (start_ns < atomic_load_explicit(&a->changed_ns, RLX))
		return;
	atomic_fetch_add_explicit(&a->win_sum_ns, latency_ns, RLX);
	atomic_fetch_add_explicit(&a->win_count, 1, RLX);
	uint64_t m = atomic_load_explicit(&a->win_min_ns, RLX);
	while (latency_ns < m &&
	       !atomic_compare_exchange_weak_explicit(&a->win_min_ns, &m, latency_ns, RLX, RLX))
		;
}

/* One window's step of the algorithm from limit x (1/SL_ADAPT_ONE) for a
 * mean latency t against no-load latency n; used: the limit was used (may
 * grow); g_lo: gradient2's lower bound on its gradient, in 1/1024. */
static uint64_t step(const struct sl_adapt *a, uint64_t x, uint64_t t, uint64_t n, bool used,
		     bool hold, uint64_t g_lo)
{
	const uint64_t one = SL_ADAPT_ONE;
	uint64_t next = x;
	t = t != 0 ? t : 1;
	switch (a->algo) {
	case SL_ADAPT_VEGAS: {
		const uint64_t l = ilog10(x / one) > 1 ? ilog10(x / one) : 1;
		/* The queue, in 1/SL_ADAPT_ONE: x (1 - n / t). */
		const uint64_t q = t > n ? (uint64_t)((__uint128_t)x * (t - n) / t) : 0;
		if (q <= l * one)
			next = x + 6 * l * one;
		else if (q < 3 * l * one)
			next = x + l * one;
		else if (q > 6 * l * one)
			next = x > l * one ? x - l * one : 0;
		break;
	}
	case SL_ADAPT_AIMD:
		if (t > 2 * n + SL_ADAPT_SLACK_NS)
			next = x * 9 / 10;
		else
			next = x + one;
		break;
	default: {
		/* g = (1.1 n + slack) / t, in 1/1024, applied to the limit in
		 * force (the one the latency was measured under), not to the
		 * fraction above it. */
		uint64_t g = (uint64_t)(((__uint128_t)(n + n / 10 + SL_ADAPT_SLACK_NS) << 10) / t);
		g = clamp(g, g_lo, 1024);
		const uint64_t gx = (uint64_t)(((__uint128_t)(x / one * one) * g) >> 10);
		next = gx + isqrt(gx * one);
		/* Up by a fifth of the step from the limit in force
		 * (Gradient2's smoothing 0.2), never past the target, so that
		 * the limit crosses to the next integer in at most five
		 * windows (a fifth of what is left would only approach it:
		 * from 1 the target is 2 exactly); down at once. */
		if (next > x) {
			const uint64_t up = x + (next - x / one * one) / 5;
			next = up < next ? up : next;
		}
		break;
	}
	}
	/* Not used (fewer than half of it in flight): the program limits
	 * itself, not the limit; no growth, and with `hold` (gradient2, vegas:
	 * Netflix's "app limited") no fall either, since a latency it did not
	 * cause is no reason to (a machine's hiccup under a rule that never
	 * binds). */
	if (!used && (next > x || (hold && a->algo != SL_ADAPT_AIMD)))
		next = x;
	return clamp(next, a->min * one, a->max * one);
}

/* Take the lock if it is free, or held by someone gone for long. */
static bool lock_take(struct sl_adapt *a, uint64_t now_ns)
{
	uint64_t held = atomic_load_explicit(&a->lock, RLX);
	if (held != 0 && now_ns - (held & ~(uint64_t)1) < SL_ADAPT_LOCK_STALE_NS)
		return false;
	/* Acquire: the previous holder's writes (released by its unlock)
	 * are seen. */
	return atomic_compare_exchange_strong_explicit(&a->lock, &held, now_ns | 1,
						       memory_order_acquire, RLX);
}

void sl_adapt_unlock(struct sl_adapt *a)
{
	atomic_store_explicit(&a->lock, 0, memory_order_release);
}

/* Publish limit x (1/SL_ADAPT_ONE) and the limit in force `lim`; true if
 * the latter changed (the lock is then kept for the caller's retune). */
static bool publish(struct sl_adapt *a, uint64_t x, uint64_t lim, uint64_t now_ns, uint64_t *out)
{
	atomic_store_explicit(&a->limit_x, x, RLX);
	const uint64_t old = atomic_load_explicit(&a->limit, RLX);
	lim = clamp(lim, a->min, a->max);
	if (lim == old) {
		sl_adapt_unlock(a);
		return false;
	}
	atomic_store_explicit(&a->limit, lim, RLX);
	atomic_store_explicit(&a->changed_ns, now_ns, RLX);
	*out = lim;
	return true;
}

/* A probe's window: n more samples of turns that started under the probe's
 * limit, the least mn; ends the probe with enough of them, or gives up
 * after a while. */
static bool probe_window(struct sl_adapt *a, uint64_t n, uint64_t mn, uint64_t now_ns,
			 uint64_t *out)
{
	const uint64_t start = atomic_load_explicit(&a->probe_ns, RLX);
	uint64_t noload = atomic_load_explicit(&a->noload_ns, RLX);
	const uint64_t got = atomic_load_explicit(&a->probe_n, RLX) + n;
	atomic_store_explicit(&a->probe_n, got, RLX);
	if (mn < atomic_load_explicit(&a->probe_min_ns, RLX))
		atomic_store_explicit(&a->probe_min_ns, mn, RLX);
	const uint64_t limit_ns = 20 * noload > SL_ADAPT_PROBE_MAX_NS ? 20 * noload
								      : SL_ADAPT_PROBE_MAX_NS;
	const bool done = got >= SL_ADAPT_PROBE_SAMPLES;
	if (!done && now_ns - start < limit_ns) {
		sl_adapt_unlock(a);
		return false;
	}
	const uint64_t saved = atomic_load_explicit(&a->saved_x, RLX);
	uint64_t x = saved;
	if (done) {
		noload = atomic_load_explicit(&a->probe_min_ns, RLX);
		atomic_store_explicit(&a->noload_ns, noload, RLX);
		atomic_fetch_add_explicit(&a->probes, 1, RLX);
		/* One step from before the probe with the new no-load
		 * latency: the gradient may go down to 0.1 at once. */
		const uint64_t before = atomic_load_explicit(&a->before_ns, RLX);
		if (before != 0 && a->algo != SL_ADAPT_SYSTEM)
			x = step(a, saved, before, noload, false, false, 102);
	}
	atomic_store_explicit(&a->probe, 0, RLX);
	atomic_store_explicit(&a->probe_min_ns, UINT64_MAX, RLX);
	atomic_store_explicit(&a->probe_ns, now_ns + SL_ADAPT_PROBE_EVERY_NS, RLX);
	atomic_store_explicit(&a->probe_end_ns, now_ns, RLX);
	return publish(a, x, x / SL_ADAPT_ONE, now_ns, out);
}

/* SL_ADAPT_SYSTEM: the completion rate, rolled forward at a window's end:
 * its peak over the last 5-10 s (turns/s x SL_ADAPT_ONE), or the stretch
 * measured so far when there is no peak yet. */
static uint64_t rate_roll(struct sl_adapt *a, uint64_t now_ns)
{
	const uint64_t done = atomic_load_explicit(&a->done, RLX);
	const uint64_t at = atomic_load_explicit(&a->rate_at_ns, RLX);
	if (at == 0) {
		atomic_store_explicit(&a->rate_at_ns, now_ns, RLX);
		atomic_store_explicit(&a->rate_done, done, RLX);
		atomic_store_explicit(&a->rate_epoch_ns, now_ns, RLX);
		return 0;
	}
	const uint64_t dt = now_ns - at;
	const uint64_t r = dt == 0 ? 0
				   : (uint64_t)((__uint128_t)(done -
							      atomic_load_explicit(&a->rate_done,
										   RLX)) *
						SL_ADAPT_NS_PER_S * SL_ADAPT_ONE / dt);
	uint64_t cur = atomic_load_explicit(&a->rate_cur, RLX);
	uint64_t prev = atomic_load_explicit(&a->rate_prev, RLX);
	if (dt >= SL_ADAPT_RATE_NS) {
		atomic_store_explicit(&a->rate_at_ns, now_ns, RLX);
		atomic_store_explicit(&a->rate_done, done, RLX);
		if (now_ns - atomic_load_explicit(&a->rate_epoch_ns, RLX) >=
		    SL_ADAPT_RATE_EPOCH_NS) {
			prev = cur;
			cur = 0;
			atomic_store_explicit(&a->rate_prev, prev, RLX);
			atomic_store_explicit(&a->rate_epoch_ns, now_ns, RLX);
		}
		cur = r > cur ? r : cur;
		atomic_store_explicit(&a->rate_cur, cur, RLX);
	}
	const uint64_t peak = cur > prev ? cur : prev;
	return peak != 0 ? peak : r;
}

/* SL_ADAPT_SYSTEM: which thresholds are exceeded, t the window's mean
 * latency. */
static uint32_t system_over(const struct sl_adapt *a, uint64_t t)
{
	const uint64_t host = atomic_load_explicit(&a->host, RLX);
	const uint64_t load = host & 0xffffffffu, cpu = host >> 32 & 0xffffu;
	uint32_t over = 0;
	if (a->sys_load1 != 0 && load != 0 && load - 1 > a->sys_load1)
		over |= SL_ADAPT_OVER_LOAD1;
	if (a->sys_cpu != 0 && cpu != 0 && cpu - 1 > a->sys_cpu)
		over |= SL_ADAPT_OVER_CPU;
	if (a->sys_rt_ns != 0 && t > a->sys_rt_ns)
		over |= SL_ADAPT_OVER_RT;
	return over;
}

/* SL_ADAPT_SYSTEM's limit over a threshold (x, 1/SL_ADAPT_ONE): one more
 * than max(1, rate x n) rounded. */
static uint64_t system_bdp_limit(const struct sl_adapt *a, uint64_t rate, uint64_t n)
{
	const uint64_t bdp = (uint64_t)(((__uint128_t)rate * n / SL_ADAPT_NS_PER_S +
					 SL_ADAPT_ONE / 2) /
					SL_ADAPT_ONE);
	return clamp((bdp > 1 ? bdp : 1) + 1, a->min, a->max) * SL_ADAPT_ONE;
}

/* SL_ADAPT_SYSTEM's limit (x, 1/SL_ADAPT_ONE) after limit x: over a
 * threshold, one more than max(1, rate x n) rounded (Sentinel's check
 * admits while the turns in flight are at most that; rounded, not cut:
 * turns refused at the limit leave it idle now and then, so the rate
 * measured under it is a little less than it allows, and a cut product
 * would never let it grow to the server's). Under every threshold: one
 * more each window for SL_ADAPT_PROBE_EVERY_NS after the last window over
 * (as TCP's congestion avoidance: all at once would let in a burst that
 * puts it over again), then twice as many, up to none. */
static uint64_t system_limit(struct sl_adapt *a, uint64_t x, uint32_t over, uint64_t rate,
			     uint64_t n, uint64_t now_ns)
{
	const uint64_t top = a->max * SL_ADAPT_ONE;
	if (over == 0) {
		const uint64_t last = atomic_load_explicit(&a->over_ns, RLX);
		if (last != 0 && now_ns - last < SL_ADAPT_PROBE_EVERY_NS)
			return x + SL_ADAPT_ONE < top ? x + SL_ADAPT_ONE : top;
		return x < top / 2 ? 2 * x : top;
	}
	atomic_store_explicit(&a->over_ns, now_ns, RLX);
	return system_bdp_limit(a, rate, n);
}

bool sl_adapt_host_check(struct sl_adapt *a, uint64_t now_ns, uint64_t *out)
{
	if (a->algo != SL_ADAPT_SYSTEM || atomic_load_explicit(&a->probe, RLX) != 0)
		return false;
	const uint32_t over = system_over(a, 0); /* the host's thresholds only */
	if (over == 0)
		return false;
	const uint64_t cur = atomic_load_explicit(&a->rate_cur, RLX);
	const uint64_t prev = atomic_load_explicit(&a->rate_prev, RLX);
	/* What the next window would set, from the figures so far (none
	 * yet: at most one in flight, Sentinel's check with no rate). */
	const uint64_t next = system_bdp_limit(a, cur > prev ? cur : prev,
					       atomic_load_explicit(&a->noload_ns, RLX));
	if (next >= atomic_load_explicit(&a->limit_x, RLX) || !lock_take(a, now_ns))
		return false;
	atomic_store_explicit(&a->over, atomic_load_explicit(&a->over, RLX) | over, RLX);
	atomic_store_explicit(&a->over_ns, now_ns, RLX);
	return publish(a, next, next / SL_ADAPT_ONE, now_ns, out);
}

bool sl_adapt_update(struct sl_adapt *a, uint64_t in_flight, uint64_t now_ns, uint64_t *out)
{
	uint64_t win = SL_ADAPT_WINDOW_RTTS * atomic_load_explicit(&a->latency_ns, RLX);
	win = win > SL_ADAPT_WINDOW_MIN_NS ? win : SL_ADAPT_WINDOW_MIN_NS;
	if (atomic_load_explicit(&a->win_count, RLX) == 0 ||
	    now_ns - atomic_load_explicit(&a->win_start_ns, RLX) < win || !lock_take(a, now_ns))
		return false;
	/* Another holder may have closed the window since the look above. */
	if (now_ns - atomic_load_explicit(&a->win_start_ns, RLX) < win) {
		sl_adapt_unlock(a);
		return false;
	}
	const uint64_t sum = atomic_exchange_explicit(&a->win_sum_ns, 0, RLX);
	const uint64_t n = atomic_exchange_explicit(&a->win_count, 0, RLX);
	const uint64_t mn = atomic_exchange_explicit(&a->win_min_ns, UINT64_MAX, RLX);
	const uint64_t peak = atomic_exchange_explicit(&a->win_peak, in_flight, RLX);
	atomic_store_explicit(&a->win_start_ns, now_ns, RLX);
	if (n == 0 || mn == UINT64_MAX) {
		sl_adapt_unlock(a);
		return false;
	}
	const uint64_t t = sum / n;
	atomic_store_explicit(&a->latency_ns, t, RLX);
	atomic_fetch_add_explicit(&a->updates, 1, RLX);
	const bool sys = a->algo == SL_ADAPT_SYSTEM;
	const uint64_t rate = sys ? rate_roll(a, now_ns) : 0;
	const uint32_t over = sys ? system_over(a, t) : 0;
	atomic_store_explicit(&a->over, over, RLX);
	if (atomic_load_explicit(&a->probe, RLX) != 0)
		return probe_window(a, n, mn, now_ns, out);
	uint64_t base = atomic_load_explicit(&a->noload_ns, RLX);
	if (base == 0 || mn < base) {
		base = mn;
		atomic_store_explicit(&a->noload_ns, base, RLX);
	}
	const uint64_t x = atomic_load_explicit(&a->limit_x, RLX);
	const uint64_t bound = atomic_load_explicit(&a->bound_ns, RLX);
	const uint64_t last_end = atomic_load_explicit(&a->probe_end_ns, RLX);
	if (bound != 0 && bound > last_end && now_ns >= atomic_load_explicit(&a->probe_ns, RLX) &&
	    x / SL_ADAPT_ONE > a->min && (!sys || over != 0)) {
		/* Probe: hold the limit at min; the turns that start under
		 * it tell the no-load latency. */
		atomic_store_explicit(&a->saved_x, x, RLX);
		atomic_store_explicit(&a->before_ns, t, RLX);
		atomic_store_explicit(&a->probe_min_ns, UINT64_MAX, RLX);
		atomic_store_explicit(&a->probe_n, 0, RLX);
		atomic_store_explicit(&a->probe_ns, now_ns, RLX);
		atomic_store_explicit(&a->probe, 1, RLX);
		return publish(a, x, a->min, now_ns, out);
	}
	const uint64_t next = sys ? system_limit(a, x, over, rate, base, now_ns)
				  : step(a, x, t, base, 2 * peak >= x / SL_ADAPT_ONE, true, 512);
	return publish(a, next, next / SL_ADAPT_ONE, now_ns, out);
}

void sl_adapt_view(const struct sl_adapt *a, struct sl_adapt_view *v)
{
	v->limit = atomic_load_explicit(&a->limit, RLX);
	v->noload_ns = atomic_load_explicit(&a->noload_ns, RLX);
	v->latency_ns = atomic_load_explicit(&a->latency_ns, RLX);
	v->probes = atomic_load_explicit(&a->probes, RLX);
	v->updates = atomic_load_explicit(&a->updates, RLX);
	v->probing = atomic_load_explicit(&a->probe, RLX) != 0;
	v->over = (uint32_t)atomic_load_explicit(&a->over, RLX);
	const uint64_t cur = atomic_load_explicit(&a->rate_cur, RLX);
	const uint64_t prev = atomic_load_explicit(&a->rate_prev, RLX);
	v->rate = (cur > prev ? cur : prev) / SL_ADAPT_ONE;
}

uint64_t sl_adapt_wait_ns(const struct sl_rule *r, const struct sl_adapt *a)
{
	if (r->action == SL_ACTION_DRYRUN)
		return 0;
	/* System protection refuses as reject does, whatever the rule's
	 * action (Sentinel's: over a threshold, waiting only queues more). */
	if (r->action != SL_ACTION_REJECT && (a == NULL || a->algo != SL_ADAPT_SYSTEM))
		return r->max_delay_ns;
	const uint64_t n = a != NULL ? atomic_load_explicit(&a->noload_ns, RLX) : 0;
	return n != 0 ? n / 2 : SL_DECIDE_BACKOFF_MAX_NS;
}

uint64_t sl_adapt_stale_ns(const struct sl_adapt *a)
{
	const uint64_t n = a != NULL ? atomic_load_explicit(&a->noload_ns, RLX) : 0;
	return n > SL_ADAPT_STALE_MIN_NS / SL_ADAPT_STALE_NOLOADS ? n * SL_ADAPT_STALE_NOLOADS
								  : SL_ADAPT_STALE_MIN_NS;
}

bool sl_adapt_refuses(const struct sl_policy *p, uint32_t rules)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1)
		if (p->rules[__builtin_ctz(rest)].action == SL_ACTION_DRYRUN)
			return false;
	return true;
}

uint64_t sl_adapt_retry_at(uint64_t now_ns, uint64_t until_ns, uint64_t *backoff_ns)
{
	const uint64_t at = sl_decide_add(now_ns, *backoff_ns);
	*backoff_ns = *backoff_ns < SL_DECIDE_BACKOFF_MAX_NS / 2 ? *backoff_ns * 2
								 : SL_DECIDE_BACKOFF_MAX_NS;
	return at < until_ns ? at : until_ns;
}
