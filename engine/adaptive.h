/* SPDX-License-Identifier: MIT */
/*
 * adaptive.h - a concurrency limit that finds a server's knee by itself
 * (conns:adaptive, adaptive.c): the limit follows the latency of the turns
 * the front ends measure, against a no-load latency that it re-measures
 * now and then by probing at a low limit.
 *
 * A front end counts the turns in flight in the rule's concurrency limiter
 * (a tunable one) and tells the state here what happened:
 *   sl_adapt_refused   a turn could not start: the limit binds;
 *   sl_adapt_started   a turn started, with this many in flight;
 *   sl_adapt_sample    a turn that started at start_ns ended after
 *                      latency_ns;
 *   sl_adapt_update    now and then (after each sample): when a window of
 *                      samples is complete, one caller (a try-lock, never
 *                      waited on) computes the next limit; if it changed,
 *                      that caller retunes the limiter to it
 *                      (sl_tunable_retune, serialised by the lock and spaced
 *                      by the window, at least SL_ADAPT_WINDOW_MIN_NS) and
 *                      calls sl_adapt_unlock.
 *
 * The struct is plain data without pointers, its words C11 atomics: it
 * lives in a process's memory, in a mapping a fork's children share, or in
 * a shared segment (every process of a host behind one limit). No call
 * allocates, blocks or makes a system call; `now` is passed in.
 *
 * The algorithms (enum sl_adapt_algo), once per window, with L the limit
 * (a fraction; Lf its integer part, the limit in force the window was
 * measured under), T the window's mean latency, N the no-load latency:
 *   gradient2  g = (1.1 N + 1 ms) / T clamped to [0.5, 1];
 *              L' = g Lf + sqrt(g Lf), taken at once when it is lower, a
 *              fifth of the way when higher. Netflix's Gradient2 (gradient
 *              bounds [0.5, 1], queue headroom sqrt, smoothing 0.2 on the
 *              way up) with N the re-measured no-load latency in place of
 *              its long-run average, which drifts up under a steady
 *              overload, and Envoy's buffer over it (10 % here, so that on
 *              a processor-shared server the equilibrium is about
 *              1.1 C + sqrt(1.1 C) turns on C cores: 2 on one core, 6 on
 *              four; tests/test_engine_adapt.c).
 *   vegas      Netflix's Vegas: queue q = L (1 - N / T); with l =
 *              max(1, floor(log10 L)): q <= l: L + 6 l; q < 3 l: L + l;
 *              q > 6 l: L - l; else L.
 *   aimd       T > 2 N + 1 ms: 0.9 L; else L + 1.
 * The limit moves only while it was used (turns in flight reached half of
 * it in the window): gradient2 and vegas hold it otherwise (Netflix's
 * "app limited": a latency that turns far below the limit did not cause is
 * no reason to fall), aimd only does not grow; so a rule that never binds
 * stays where it is. Each result is clamped to [min, max]; the limit in
 * force is its integer part.
 *
 *   system     (SL_ADAPT_SYSTEM, a rule's load1=, cpu=, rt=: Sentinel's
 *              SystemRule with its BBR check) while a threshold is
 *              exceeded (the host's load or CPU as the front end last
 *              read them, or the window's mean latency T), L = max(1,
 *              round(R N)) + 1, R the peak completion rate of the last
 *              5-10 s: a turn starts only while at most max(1, R N) run
 *              (the bandwidth-delay product); under every threshold L + 1
 *              each window for 10 s after the last window over, then 2 L,
 *              up to SL_ADAPT_LIMIT_MAX (none), where it starts. It
 *              probes (at 1) as the others do, while it binds.
 * The no-load latency: the smallest sample of any window lowers it at
 * once; every SL_ADAPT_PROBE_EVERY_NS (and first right after the first
 * window) while the limit binds, a probe holds the limit at min until
 * SL_ADAPT_PROBE_SAMPLES turns that started under it ended (they started
 * with at most min in flight), whose smallest latency is the new no-load
 * latency (so it may grow too); the limit then takes one step from where
 * it was with the new value.
 *
 * A window lasts at least SL_ADAPT_WINDOW_MIN_NS and twice the last
 * window's mean latency, and holds at least one turn that started after
 * the last change of the limit (only those count): each step sees the
 * effect of the one before.
 */
#ifndef SLUICE_ENGINE_ADAPTIVE_H
#define SLUICE_ENGINE_ADAPTIVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define SL_ADAPT_MAGIC 0x41444131u             /* "ADA1" */
#define SL_ADAPT_ONE 1024u                     /* fixed point of the limit: 1/1024ths */
#define SL_ADAPT_WINDOW_MIN_NS 100000000ull    /* a window: at least 100 ms ... */
#define SL_ADAPT_WINDOW_RTTS 2u                /* ... and 2 mean latencies */
#define SL_ADAPT_SLACK_NS 1000000ull           /* latency no one minds (1 ms) */
#define SL_ADAPT_PROBE_EVERY_NS 10000000000ull /* 10 s between probes */
#define SL_ADAPT_PROBE_SAMPLES 3u
#define SL_ADAPT_PROBE_MAX_NS 3000000000ull  /* a probe that cannot drain gives up */
#define SL_ADAPT_LOCK_STALE_NS 1000000000ull /* a holder gone this long is replaced */
/* System protection (load1=, cpu=, rt= on accept and conns) is a
 * controller of its own kind beside the rule's limit: */
#define SL_ADAPT_SYSTEM 16u /* sl_adapt.algo of a rule's protection */
#define SL_ADAPT_NS_PER_S 1000000000ull
#define SL_ADAPT_RATE_NS 1000000000ull       /* completion rate: over >= 1 s ... */
#define SL_ADAPT_RATE_EPOCH_NS 5000000000ull /* ... its peak over the last 5-10 s */
#define SL_ADAPT_HOST_EVERY_NS 1000000000ull /* front ends read the host this often */
#define SL_ADAPT_OVER_LOAD1 1u
#define SL_ADAPT_OVER_CPU 2u
#define SL_ADAPT_OVER_RT 4u

struct sl_adapt {
	/* Parameters: written by sl_adapt_init_unsync, read-only afterwards. */
	uint32_t magic; /* SL_ADAPT_MAGIC */
	uint32_t algo;  /* enum sl_adapt_algo, or SL_ADAPT_SYSTEM */
	uint64_t min, max;
	/* SL_ADAPT_SYSTEM: the rule's thresholds (sl_rule sys_*), 0: none. */
	uint64_t sys_load1, sys_cpu, sys_rt_ns;
	uint64_t reserved0[2];
	/* The window's samples: every turn's end adds to them. */
	_Alignas(64) _Atomic uint64_t win_sum_ns;
	_Atomic uint64_t win_count;
	_Atomic uint64_t win_min_ns; /* UINT64_MAX: none yet */
	_Atomic uint64_t win_peak;   /* most turns in flight at a start */
	_Atomic uint64_t bound_ns;   /* last refusal (the limit binds), 0: never */
	_Atomic uint64_t changed_ns; /* when the limit in force last changed */
	_Atomic uint64_t done;       /* SL_ADAPT_SYSTEM: every turn sampled */
	_Atomic uint64_t host;       /* SL_ADAPT_SYSTEM: sl_adapt_host's figures */
	/* The controller: written by the holder of `lock` only. */
	_Alignas(64) _Atomic uint64_t lock; /* 0, or the holder's now_ns | 1 */
	_Atomic uint64_t win_start_ns;
	_Atomic uint64_t limit_x;    /* the limit, in 1/SL_ADAPT_ONE */
	_Atomic uint64_t limit;      /* its integer part: the limit in force */
	_Atomic uint64_t noload_ns;  /* the no-load latency, 0: not measured yet */
	_Atomic uint64_t latency_ns; /* the last window's mean latency */
	_Atomic uint64_t probe_ns;   /* not probing: when the next probe may start;
	                                probing: when it started */
	_Atomic uint64_t probe;      /* 1: probing */
	_Atomic uint64_t probe_n;    /* probing: samples so far */
	_Atomic uint64_t probe_min_ns;
	_Atomic uint64_t saved_x;      /* the limit before the probe */
	_Atomic uint64_t probes;       /* probes completed */
	_Atomic uint64_t updates;      /* windows completed */
	_Atomic uint64_t before_ns;    /* the mean latency when the probe began */
	_Atomic uint64_t probe_end_ns; /* when the last probe ended, 0: none yet */
	uint64_t reserved2[1];
	/* SL_ADAPT_SYSTEM's controller (the holder of `lock` too): the
	 * completion rate, in turns per second x SL_ADAPT_ONE, measured over
	 * stretches of at least SL_ADAPT_RATE_NS from rate_at_ns (when `done`
	 * was rate_done); its peak in the current and the previous
	 * SL_ADAPT_RATE_EPOCH_NS; which thresholds the last window found
	 * exceeded (SL_ADAPT_OVER_*). */
	_Alignas(64) _Atomic uint64_t rate_at_ns;
	_Atomic uint64_t rate_done;
	_Atomic uint64_t rate_cur, rate_prev;
	_Atomic uint64_t rate_epoch_ns;
	_Atomic uint64_t over;
	_Atomic uint64_t over_ns; /* the last window over a threshold, 0: none */
	uint64_t reserved3[1];
};
_Static_assert(sizeof(struct sl_adapt) == 320, "adaptive.h: sl_adapt layout");

/* Start rule r's (conns:adaptive) state at its initial limit. Not
 * thread-safe: before the state is shared. */
void sl_adapt_init_unsync(struct sl_adapt *a, const struct sl_rule *r, uint64_t now_ns);
/* Start the system protection of rule r (load1=, cpu=, rt=): a concurrency
 * limit on its turns, unlimited (SL_ADAPT_LIMIT_MAX) until a threshold is
 * exceeded. Not thread-safe, like sl_adapt_init_unsync. */
void sl_adapt_init_system_unsync(struct sl_adapt *a, const struct sl_rule *r, uint64_t now_ns);
/* The host's figures for a system protection, as a front end read them
 * (every SL_ADAPT_HOST_EVERY_NS): the 1-minute load average in 1/1000 and
 * the busy share of the CPUs in 1/1000 since the last reading; UINT64_MAX:
 * unknown (never exceeds its threshold). */
void sl_adapt_host(struct sl_adapt *a, uint64_t load1_milli, uint64_t cpu_permille);
/* After sl_adapt_host: if the host's figures exceed a threshold and the
 * limit in force is above what the next window would set over it (the
 * protection was open), set that now, without waiting for a window (whose
 * turns may be slow to end when a flood came in): returns true with *limit
 * the new limit, the lock held (retune, then sl_adapt_unlock), as
 * sl_adapt_update does; false otherwise. */
bool sl_adapt_host_check(struct sl_adapt *a, uint64_t now_ns, uint64_t *limit);
/* The first line of /proc/stat (buf[0, len)): the CPUs' busy and total
 * time in ticks. False if it is not such a line. */
bool sl_adapt_cpu_parse(const char *buf, size_t len, uint64_t *busy, uint64_t *total);
/* The busy share in 1/1000 between two readings, UINT64_MAX if no time
 * passed between them. */
uint64_t sl_adapt_cpu_permille(uint64_t busy0, uint64_t total0, uint64_t busy1, uint64_t total1);
/* Whether *a looks like a state sl_adapt_init_unsync made (a shared
 * segment's, before it is trusted). */
bool sl_adapt_valid(const struct sl_adapt *a);

/* The limit in force now. */
static inline uint64_t sl_adapt_limit(const struct sl_adapt *a)
{
	/* Relaxed: a value for a decision; the limiter is retuned to it. */
	return atomic_load_explicit(&a->limit, memory_order_relaxed);
}

void sl_adapt_refused(struct sl_adapt *a, uint64_t now_ns);
void sl_adapt_started(struct sl_adapt *a, uint64_t in_flight);
/* A turn that started at start_ns ended after latency_ns. Only turns that
 * started after the limit in force last changed count: the others ran
 * under another limit. */
void sl_adapt_sample(struct sl_adapt *a, uint64_t start_ns, uint64_t latency_ns);

/* If a window is complete and no one else is updating: compute the next
 * limit (in_flight: the turns in flight now). Returns true with *limit the
 * new limit in force when it changed: the caller retunes its limiter to it,
 * then calls sl_adapt_unlock. Returns false when there is nothing to do
 * (the lock is then not held). */
bool sl_adapt_update(struct sl_adapt *a, uint64_t in_flight, uint64_t now_ns, uint64_t *limit);
void sl_adapt_unlock(struct sl_adapt *a);

/* What a front end does with a turn that finds no slot (a keep-alive
 * request, shim/turn.c and supervise/turn.c alike): it waits, retrying at
 * sl_adapt_retry_at, for at most the least sl_adapt_wait_ns of its rules
 * (max-delay with action=delay; half the no-load latency with reject,
 * SL_DECIDE_BACKOFF_MAX_NS before one is measured; 0 for a dry run); then,
 * if sl_adapt_refuses, its connection is reset, else (a dry-run rule) the
 * turn goes on, uncounted. A system protection's full gate at an accept
 * is answered the same way: refused (reset) if sl_adapt_refuses, else
 * admitted without its slot. */
uint64_t sl_adapt_wait_ns(const struct sl_rule *r, const struct sl_adapt *a);
bool sl_adapt_refuses(const struct sl_policy *p, uint32_t rules);
/* min(now + *backoff_ns, until); *backoff_ns doubles up to
 * SL_DECIDE_BACKOFF_MAX_NS (the engine's backoff, decide.h). */
uint64_t sl_adapt_retry_at(uint64_t now_ns, uint64_t until_ns, uint64_t *backoff_ns);

/* A client's turn (conns:adaptive on the connections a program opens)
 * unanswered this long is no request: its connection only sends (a log
 * stream, an upload whose answer is far off); the front ends give its
 * slots back, without a sample, and follow that connection no more:
 * max(SL_ADAPT_STALE_MIN_NS, SL_ADAPT_STALE_NOLOADS no-load latencies). */
#define SL_ADAPT_STALE_MIN_NS 1000000000ull
#define SL_ADAPT_STALE_NOLOADS 20u
uint64_t sl_adapt_stale_ns(const struct sl_adapt *a);

/* A snapshot for `sluice stat`. */
struct sl_adapt_view {
	uint64_t limit, noload_ns, latency_ns, probes, updates;
	bool probing;
	/* SL_ADAPT_SYSTEM: SL_ADAPT_OVER_* bits of the last window, the peak
	 * completion rate (turns/s) the limit is made of. */
	uint32_t over;
	uint64_t rate;
};
void sl_adapt_view(const struct sl_adapt *a, struct sl_adapt_view *v);

#endif /* SLUICE_ENGINE_ADAPTIVE_H */
