/* SPDX-License-Identifier: MIT */
/*
 * clock.c - the shim's clock and sleep: CLOCK_MONOTONIC in ns, cheaply.
 *
 * Every call a rule matches reads the clock once, so its cost is a large
 * part of what a matched call costs: clock_gettime goes through the vDSO,
 * which on x86-64 is an ordered TSC read (lfence; rdtsc) and its scaling,
 * 22 ns on the machine of the README's figures, against 9.5 ns for a bare
 * rdtsc. So on x86-64, when the CPU says its TSC is invariant (constant
 * rate, never stopped) and this process may read it, the shim scales the
 * TSC itself, on a line fitted to clock_gettime:
 *
 *     ns = base_ns + (tsc - base_tsc) * mult / 2^32
 *
 * - The first line is fitted SL_FIT_FIRST_NS after the constructor's
 *   sample; until then the clock is clock_gettime's. No line is ever fitted
 *   on a shorter stretch.
 * - A line is good for twice the stretch it was fitted on, at most
 *   SL_FIT_SPAN_NS: then the first reader past it reads clock_gettime and
 *   fits the next line through the last base, so mult follows NTP's
 *   slewing and a line's error stays about that of two samples (a sample
 *   is the narrowest of three, and kept only if its two TSC reads are at
 *   most SL_PAIR_MAX_TICKS apart: tens of ns here). A reader that finds the TSC before the base (it went back, or
 *   an unordered read ran early) reads clock_gettime too.
 * - A refit that finds the line off by more than SL_FIT_PPM of its stretch
 *   plus SL_FIT_SLACK_NS turns the TSC off for good (the platform is not
 *   what it claims): every reading is clock_gettime's from then on.
 * Readers never wait: the line is behind a sequence number that only the
 * refitting thread makes odd; a reader that sees it odd, or changed while
 * it read the line, reads clock_gettime. A line's error is that of its two
 * samples, tens of ns here (tests/test_shim_clock_thread.c measures it), at
 * worst a few µs (samples up to SL_PAIR_MAX_TICKS wide); a change of the
 * clock's rate (NTP) adds that change times the span until the next refit,
 * and beyond the self-check's tolerance the TSC is turned off. Two readings
 * through successive lines can go back by that error: the core takes any
 * now, and one in the past only makes it refuse more.
 *
 * sl__clock_line_fit and sl__clock_line_ns are pure: tests/test_shim_clock_thread.c
 * drives them with made-up TSC rates, and reads the live clock from several
 * threads.
 */
#include <errno.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "real.h"
#include "seqlock.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#define SL_HAVE_TSC 1
#else
#define SL_HAVE_TSC 0
#endif

/* A vDSO reading of CLOCK_MONOTONIC in ns. */
static uint64_t clock_vdso(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int sleep_default(uint64_t deadline_ns)
{
	struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
			      .tv_nsec = (long)(deadline_ns % 1000000000u)};
	/* Returns 0 at the deadline, EINTR after a signal handler ran (EINVAL
	 * cannot happen with a normalised timespec), or the error of a sleep
	 * the system refuses (a seccomp filter: ENOSYS, EPERM, EACCES). */
	return clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

uint64_t (*sl__clock_ns)(void) = clock_vdso;
int (*sl__sleep_until)(uint64_t deadline_ns) = sleep_default;

/* ---- the line (pure) ------------------------------------------------------ */

static uint64_t absdiff(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

/* The line's reading at tsc; false if tsc is outside [base, base + span). */
bool sl__clock_line_ns(const struct sl_clock_line *l, uint64_t tsc, uint64_t *ns)
{
	uint64_t d = tsc - l->base_tsc;
	if (d >= l->span)
		return false;
	/* d < span <= SL_FIT_SPAN_NS of ticks, so d * mult < 2^32 * 2^27 ns. */
	*ns = l->base_ns + ((d * l->mult) >> 32);
	return true;
}

enum sl_fit sl__clock_line_fit(struct sl_clock_line *l, uint64_t tsc, uint64_t ns)
{
	if (ns <= l->base_ns)
		return SL_FIT_WAIT; /* a sample older than the base */
	if (tsc <= l->base_tsc) {
		/* The TSC went back while the clock went on: start again from
		 * here, keeping mult for the next fit to check. */
		l->base_tsc = tsc;
		l->base_ns = ns;
		l->span = 0;
		return SL_FIT_OK;
	}
	const uint64_t dt = tsc - l->base_tsc, dns = ns - l->base_ns;
	if (dns < SL_FIT_FIRST_NS)
		return SL_FIT_WAIT; /* too short a stretch for a line */
	if (l->mult != 0) {
		/* The line's error over the stretch since its base. */
		const unsigned __int128 pred = (unsigned __int128)dt * l->mult >> 32;
		const uint64_t err = pred > UINT64_MAX ? UINT64_MAX : absdiff((uint64_t)pred, dns);
		if (err > dns / 1000000u * SL_FIT_PPM + SL_FIT_SLACK_NS)
			return SL_FIT_OFF;
	}
	const unsigned __int128 m = ((unsigned __int128)dns << 32) / dt;
	/* ns per tick in [2^-32, 1024): a TSC between ~1 MHz and 2^32 GHz. */
	if (m == 0 || m >= (unsigned __int128)1024 << 32)
		return SL_FIT_OFF;
	l->mult = (uint64_t)m;
	l->base_tsc = tsc;
	l->base_ns = ns;
	/* Good for twice the stretch it stands on (so the stretches grow to
	 * the span), at most the span. */
	const uint64_t span_ns = dns < SL_FIT_SPAN_NS / 2 ? 2 * dns : SL_FIT_SPAN_NS;
	l->span = (uint64_t)(((unsigned __int128)span_ns << 32) / l->mult);
	return SL_FIT_OK;
}

/* ---- the live line ---------------------------------------------------------- */

#if SL_HAVE_TSC

/* The line as readers see it: seq is odd while a refit writes the fields. */
static struct {
	_Atomic uint32_t seq;
	_Atomic bool off;
	_Atomic uint64_t base_tsc, base_ns, mult, span;
} live_line;

/* A (tsc, ns) sample: ns from clock_gettime, tsc the middle of two reads
 * around it, the narrowest of three tries. Returns ns; *tsc is 0 if no try
 * had its reads within SL_PAIR_MAX_TICKS. */
static uint64_t tsc_sample(uint64_t *tsc)
{
	uint64_t best = SL_PAIR_MAX_TICKS + 1, ns = 0;
	*tsc = 0;
	for (int i = 0; i < 3; i++) {
		uint64_t t1 = __rdtsc(), n = clock_vdso(), t2 = __rdtsc();
		if (t2 >= t1 && t2 - t1 < best) {
			best = t2 - t1;
			*tsc = t1 + best / 2;
			ns = n;
		}
	}
	return *tsc != 0 ? ns : clock_vdso();
}

/* Store a line (inside the odd section). */
static void live_store(const struct sl_clock_line *l)
{
	/* Relaxed: the release store of seq that ends the section publishes
	 * them; readers check seq around their loads. */
	atomic_store_explicit(&live_line.base_tsc, l->base_tsc, memory_order_relaxed);
	atomic_store_explicit(&live_line.base_ns, l->base_ns, memory_order_relaxed);
	atomic_store_explicit(&live_line.mult, l->mult, memory_order_relaxed);
	atomic_store_explicit(&live_line.span, l->span, memory_order_relaxed);
}

/* Past the line (or none yet): clock_gettime's reading, and the next line
 * fitted from a fresh sample if the stretch since the base is long enough
 * and no other thread is at it. */
static __attribute__((noinline)) uint64_t clock_refit(void)
{
	const uint64_t now = clock_vdso();
	/* Relaxed: off only ever goes from false to true (a stale false costs
	 * one refit more), and base_ns only decides whether to try (the fit
	 * reads the fields again inside the section). */
	if (atomic_load_explicit(&live_line.off, memory_order_relaxed) ||
	    now - atomic_load_explicit(&live_line.base_ns, memory_order_relaxed) < SL_FIT_FIRST_NS)
		return now;
	uint32_t s;
	if (!sl__seq_write_try_begin(&live_line.seq, &s))
		return now; /* another thread is refitting */
	uint64_t tsc, ns = tsc_sample(&tsc);
	/* Relaxed: the writer's own fields, inside the odd section. */
	struct sl_clock_line l = {
		.base_tsc = atomic_load_explicit(&live_line.base_tsc, memory_order_relaxed),
		.base_ns = atomic_load_explicit(&live_line.base_ns, memory_order_relaxed),
		.mult = atomic_load_explicit(&live_line.mult, memory_order_relaxed),
		.span = 0,
	};
	switch (tsc == 0 ? SL_FIT_WAIT : sl__clock_line_fit(&l, tsc, ns)) {
	case SL_FIT_OK:
		live_store(&l);
		break;
	case SL_FIT_OFF:
		atomic_store_explicit(&live_line.off, true, memory_order_relaxed);
		atomic_store_explicit(&live_line.span, 0, memory_order_relaxed);
		sl_log(SL_LOG_DEBUG, "the TSC does not follow CLOCK_MONOTONIC: the clock is "
				     "clock_gettime from now on");
		break;
	case SL_FIT_WAIT:
		break;
	}
	sl__seq_write_end(&live_line.seq, s);
	return ns;
}

/* The TSC through the live line, or clock_gettime. */
static uint64_t clock_tsc(void)
{
	const uint32_t s = sl__seq_read_begin(&live_line.seq);
	const uint64_t tsc = __rdtsc();
	struct sl_clock_line l = {
		.base_tsc = atomic_load_explicit(&live_line.base_tsc, memory_order_relaxed),
		.base_ns = atomic_load_explicit(&live_line.base_ns, memory_order_relaxed),
		.mult = atomic_load_explicit(&live_line.mult, memory_order_relaxed),
		.span = atomic_load_explicit(&live_line.span, memory_order_relaxed),
	};
	uint64_t ns;
	if (sl__seq_read_retry(&live_line.seq, s))
		return clock_vdso(); /* a refit is under way */
	if (__builtin_expect(sl__clock_line_ns(&l, tsc, &ns), 1))
		return ns;
	return clock_refit();
}

/* True if the CPU says its TSC is invariant and this process may read it. */
static bool tsc_usable(void)
{
	unsigned a, b, c, d;
	if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000007u)
		return false;
	__cpuid(0x80000007u, a, b, c, d);
	if (!(d & (1u << 8))) /* invariant TSC */
		return false;
	int tsc_mode = 0;
	return SL_REAL(prctl)(PR_GET_TSC, &tsc_mode, 0, 0, 0) == 0 && tsc_mode == PR_TSC_ENABLE;
}

/* The first base (no line yet); single-threaded. False if no sample was
 * narrow enough. */
static bool live_start(void)
{
	uint64_t tsc, ns = tsc_sample(&tsc);
	if (tsc == 0)
		return false;
	struct sl_clock_line l = {.base_tsc = tsc, .base_ns = ns};
	live_store(&l);
	return true;
}

void sl__clock_init(void)
{
	/* The constructor, single-threaded. */
	if (tsc_usable() && live_start())
		sl__clock_ns = clock_tsc;
}

void sl__clock_fork_child(void)
{
	/* The only thread: a refit another thread had begun at fork may have
	 * left the line half written. Start again (seq even, no line). */
	uint32_t s = atomic_load_explicit(&live_line.seq, memory_order_relaxed);
	if (s & 1) {
		if (!live_start())
			atomic_store_explicit(&live_line.off, true, memory_order_relaxed);
		atomic_store_explicit(&live_line.seq, s + 1, memory_order_relaxed);
	}
}

int sl__clock_tsc_span(uint64_t ns, uint64_t *ticks)
{
	/* Relaxed: a deadline's scale; a line being refitted changes mult by
	 * the rate's drift, parts per million. */
	if (sl__clock_ns != clock_tsc || atomic_load_explicit(&live_line.off, memory_order_relaxed))
		return -1;
	const uint64_t mult = atomic_load_explicit(&live_line.mult, memory_order_relaxed);
	if (mult == 0)
		return 0;
	*ticks = (uint64_t)(((unsigned __int128)ns << 32) / mult);
	return 1;
}

#else /* no TSC: clock_gettime */

int sl__clock_tsc_span(uint64_t ns, uint64_t *ticks)
{
	(void)ns;
	(void)ticks;
	return -1;
}

void sl__clock_init(void)
{
}

void sl__clock_fork_child(void)
{
}

#endif
