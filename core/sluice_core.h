/* SPDX-License-Identifier: MIT */
/*
 * sluice_core.h - the lock-free rate-limiting core of sluice.
 *
 * Overview
 * --------
 * Five classic limiters behind one shape of API:
 *
 *   token bucket    GCRA on one atomic theoretical-arrival-time word: rate r
 *                   units per period, burst b units.
 *   leaky bucket    the same word with no burst: requests leave exactly one
 *                   cost apart; "capacity" bounds how far ahead a request may
 *                   be scheduled (how many may wait).
 *   fixed window    at most N units per aligned window W; window index and
 *                   count live in one "virtual counter" word (idx * N + used).
 *   sliding window  at most N units in any window W, by the weighted
 *                   two-window estimate packed into one word (error bound
 *                   below).
 *   concurrency     at most N units held at once; acquire and release.
 *   warm-up         a token bucket that starts cold (Guava's SmoothWarmingUp):
 *                   the rate climbs from rate/cold to rate over the warm-up
 *                   period, and falls back after idleness. Two state words
 *                   changed by one 16-byte CAS (core/warmup.c).
 *
 * Every limiter is a plain struct with no pointers, so it works the same in
 * private memory and in a MAP_SHARED mapping used by several processes. Time
 * is always passed in by the caller as CLOCK_MONOTONIC nanoseconds (`now_ns`):
 * there is no hidden clock, no allocation, no blocking and no sleeping. A wait
 * is returned to the caller as a duration.
 *
 * API and thread-safety
 * ---------------------
 *   sl_limiter_init()       not thread-safe: call once before the limiter is
 *                           published to other threads or processes.
 *   sl_limiter_acquire()    thread- and process-safe, lock-free.
 *   sl_limiter_refund()     thread- and process-safe, lock-free.
 *   sl_limiter_charge()     thread- and process-safe, lock-free.
 *   sl_limiter_release()    thread- and process-safe, lock-free (concurrency).
 *   sl_limiter_available()  thread- and process-safe, read-only snapshot.
 *   sl_limiter_validate()   read-only; checks a (possibly foreign) mapping.
 *   sl_tunable_init()       not thread-safe, like sl_limiter_init().
 *   sl_tunable_retune()     safe against every other call except another
 *                           retune of the same limiter: callers serialise
 *                           retunes (and space them, see tunable.c).
 *   sl_tunable_validate()   read-only; checks a (possibly foreign) mapping.
 *
 * One call shape serves policing and shaping:
 *
 *   d = sl_limiter_acquire(l, n, now_ns, max_wait_ns);
 *
 *   max_wait_ns == 0           police: admit n units now, or refuse (nothing is
 *                              taken) and say in d.wait_ns how long until they
 *                              would be admitted.
 *   max_wait_ns == UINT64_MAX  reserve (Guava's acquire): always take the next
 *                              slot and return how long the caller must wait
 *                              before acting (d.verdict == SL_ADMIT, d.wait_ns).
 *   otherwise                  reserve, but refuse instead of reserving beyond
 *                              max_wait_ns (Guava's tryAcquire(timeout)).
 *
 * Algorithms that cannot reserve future capacity (sliding window,
 * concurrency) always behave as police and return a retry hint.
 *
 * Implementation notes
 * --------------------
 * Rates are kept in fixed point: the cost of n units is
 * ceil(n * mult / 2^shift) "ticks", a tick being 2^-tick_shift ns. tick_shift
 * is 0 for rates up to about one unit per microsecond and grows up to 8 for
 * faster rates, so that even 10^10 units/s keeps sub-nanosecond precision.
 * Costs are rounded up, so rounding never admits more than the limit. Times
 * are stored relative to the limiter's epoch (its init time); a limiter stays
 * exact for 2^64 ticks after its epoch: 584 years at tick_shift 0, 2.2 years
 * at tick_shift 8 (rates above 10^6 units/s). All arithmetic saturates.
 *
 * A `now_ns` older than one already seen (a stale time read by another
 * thread) only makes decisions stricter: it never admits more than the limit.
 * A `now_ns` before the limiter's epoch counts as the epoch.
 *
 * Details that callers may notice:
 *   - SL_NEVER always carries wait_ns UINT64_MAX. Besides n > burst (police)
 *     it is returned when a slot would reach the end of the 64-bit tick
 *     range (e.g. reserving billions of years ahead), and, with a timeout,
 *     when even a full bucket could not admit n within max_wait_ns.
 *   - n == 0 is admitted at once and changes nothing.
 *   - A leaky bucket is GCRA with a burst of one unit (tau = cost(1)); a
 *     request of n units leaves at once when the bucket has drained, and the
 *     next one cost(n) later.
 *   - The token/leaky fast path (n == 1 uses the precomputed cost1_ticks)
 *     covers the first 2^fast_shift ns after the epoch: 2^(63 - tick_shift)
 *     ns (292 years at tick_shift 0, 1.1 years at 8), less only for a burst
 *     that takes more than 2^63 ticks to refill. Other times take a longer
 *     path with the same answers.
 *   - Fixed window reserve books future windows on the virtual counter; a
 *     request that does not fit in what is left of a window takes the next
 *     one, and the units left over are not handed out later (no holes are
 *     filled). The counter must not overflow within 2^56 ns of the epoch,
 *     so init refuses N / W above 256 units per ns, i.e. 2.56 * 10^11
 *     units/s (SL_ERANGE).
 *   - Sliding window: the 24-bit window index tolerates a stale now_ns up to
 *     2^16 windows old (judged by the newer window at its start). After an
 *     idle time within 2^16 windows below a multiple of 2^24 windows, old
 *     counts may be taken for newer ones for at most 2^16 windows: stricter,
 *     never looser. Refunds only reach the current window.
 *   - A refund's now_ns names the window (fixed, sliding) its units were
 *     taken in: pass the acquire's now_ns + wait_ns. Fixed and sliding
 *     windows give nothing back once their counter has moved on to a later
 *     window (booked or begun), so units never go back to another window.
 *   - Refund never takes a limiter beyond its burst / window; a concurrency
 *     release of more than is held returns SL_EUNDERFLOW and changes nothing.
 */
#ifndef SLUICE_CORE_H
#define SLUICE_CORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_CORE_VERSION_MAJOR 0
#define SL_CORE_VERSION_MINOR 1
#define SL_CORE_VERSION_PATCH 0

/* Every 64-bit atomic must be lock-free, or it may fall back to a lock that
 * is private to one process and so is useless in shared memory. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");

#define SL_CACHELINE 64

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with -fvisibility=hidden: what this header declares
 * is its whole exported API. */
#pragma GCC visibility push(default)

/* Result codes of init/release/refund. Core never sets errno. */
enum sl_status {
	SL_OK = 0,
	SL_EINVAL = 1,     /* a parameter is zero, negative or inconsistent */
	SL_ERANGE = 2,     /* a parameter overflows the fixed-point range */
	SL_EUNDERFLOW = 3, /* release/refund of more than is held */
};

/* Verdict of an acquire. */
enum sl_verdict {
	SL_ADMIT = 0,  /* taken; act after wait_ns (0 when policing) */
	SL_REFUSE = 1, /* nothing taken; wait_ns is when a retry may succeed
	                  (0 = unknown, e.g. concurrency: after a release) */
	SL_NEVER = 2,  /* n exceeds what this limiter can ever admit at once
	                  (n > burst when policing, n > N for windows, n > limit,
	                  or beyond the 2^64 horizon); wait_ns is UINT64_MAX */
};

struct sl_decision {
	uint64_t wait_ns;
	uint32_t verdict; /* enum sl_verdict */
	uint32_t reserved;
};

/* Limiter kinds (values are part of the shared-memory format). */
enum sl_kind {
	SL_KIND_NONE = 0,
	SL_KIND_TOKEN = 1,
	SL_KIND_LEAKY = 2,
	SL_KIND_FIXED = 3,
	SL_KIND_SLIDING = 4,
	SL_KIND_CONC = 5,
	SL_KIND_TUNABLE = 6, /* the head of a struct sl_tunable */
	SL_KIND_WARMUP = 7,  /* token bucket with Guava's SmoothWarmingUp */
};

/*
 * Parameters of any limiter. Units are whatever the caller counts (calls,
 * messages or bytes).
 *   token:   amount units per period_ns, burst units at once (>= 1).
 *   leaky:   amount units per period_ns; burst = capacity, how many units may
 *            be scheduled ahead (0 = unbounded, only max_wait_ns limits it).
 *   fixed:   at most amount units per aligned window of period_ns.
 *   sliding: at most amount units in any window of period_ns.
 *   conc:    at most amount units held at once (period_ns and burst unused).
 *   warmup:  a token bucket of amount units per period_ns, burst units at
 *            once, that starts cold and warms up over warmup_ns: from cold
 *            the interval between units starts at cold x the stable one
 *            (cold >= 2) and falls to it (core/warmup.c). cold and
 *            warmup_ns are 0 for every other kind.
 */
struct sl_params {
	uint32_t kind; /* enum sl_kind */
	uint32_t cold; /* warmup: cold factor; else 0 (was reserved in 0.1.0) */
	uint64_t amount;
	uint64_t period_ns;
	uint64_t burst;
	uint64_t warmup_ns; /* warmup: the warm-up period; else 0 */
};

/* GCRA state for token and leaky buckets. */
struct sl_gcra {
	/* Parameters: written by init, read-only afterwards. */
	uint64_t mult;        /* cost(n) = ceil(n * mult / 2^shift) ticks */
	uint64_t tau_ticks;   /* burst tolerance, cost(burst); leaky: cost(1) */
	uint64_t limit_ticks; /* leaky: max schedule-ahead, cost(capacity); else UINT64_MAX */
	uint64_t epoch_ns;    /* time origin of tat */
	uint64_t burst;       /* units admissible at once (police); leaky: capacity */
	uint32_t shift;
	uint32_t tick_shift;  /* tick = 2^-tick_shift ns */
	uint32_t leaky;       /* 1 for leaky bucket */
	uint8_t fast_shift;   /* fast path while now_ns - epoch_ns < 2^fast_shift */
	uint8_t capped;       /* 1 for a leaky bucket with a capacity (burst > 0) */
	uint8_t reserved[2];  /* fast_shift and capped were reserved in 0.1.0 */
	uint64_t cost1_ticks; /* cost(1), so that n == 1 needs no multiply */
	/* State on its own cache line: contended by every acquire. */
	_Alignas(SL_CACHELINE) _Atomic uint64_t tat; /* ticks since epoch */
	uint8_t pad[SL_CACHELINE - sizeof(uint64_t)];
};

/* Fixed window: `used` is a virtual counter idx * limit + units used in
 * window idx; a smaller value means the window it belonged to is over. */
struct sl_fixed {
	uint64_t limit;     /* N units per window */
	uint64_t window_ns; /* W */
	uint64_t epoch_ns;
	uint64_t reserved[5];
	_Alignas(SL_CACHELINE) _Atomic uint64_t used;
	uint8_t pad[SL_CACHELINE - sizeof(uint64_t)];
};

/* Sliding window, weighted two-window estimate:
 *   estimate = prev * (1 - f) + cur,  f = position in the current window.
 * Error bound: every aligned window holds at most N; any sliding window of
 * length W holds at most N when arrivals in the previous window were
 * uniform, and at most 2N - 1 units in the worst case (the previous
 * window's N all at its very end). Counts are kept in quanta of
 * `quantum` units (1 unless N > 2^20 - 1), rounded up, so rounding never
 * admits more; decisions are made in units, so any n <= N fits an empty
 * window. State word: [window idx mod 2^24 | prev quanta (20) | cur quanta (20)]. */
struct sl_sliding {
	uint64_t limit;     /* N units per window */
	uint64_t window_ns; /* W */
	uint64_t epoch_ns;
	uint64_t quantum; /* units per counted quantum */
	uint64_t limit_q; /* most quanta a window holds: ceil(N / quantum) */
	uint64_t reserved[3];
	_Alignas(SL_CACHELINE) _Atomic uint64_t state;
	uint8_t pad[SL_CACHELINE - sizeof(uint64_t)];
};

/* Concurrency limit. */
struct sl_conc {
	uint64_t limit;
	uint64_t reserved[7];
	_Alignas(SL_CACHELINE) _Atomic uint64_t held;
	uint8_t pad[SL_CACHELINE - sizeof(uint64_t)];
};

/*
 * Warm-up token bucket (Guava's SmoothWarmingUp), see core/warmup.c. The
 * state is two words changed together by one 16-byte CAS: the schedule
 * (the instant the next unit's slot starts, ns since the epoch) and the
 * stored permits (coldness), in 2^-16 units.
 */
struct sl_warm {
	uint64_t amount; /* units per period_ns: the stable rate */
	uint64_t period_ns;
	uint64_t burst;     /* units at once in the stable regime */
	uint64_t warmup_ns; /* w */
	uint64_t epoch_ns;
	uint64_t thresh_q; /* T = 0.5 w / S, in 2^-16 units */
	uint64_t max_q;    /* M = T + 2 w / (S + C), in 2^-16 units */
	uint32_t cold;     /* C / S */
	uint32_t reserved;
	/* State on its own cache line, 16-byte aligned for the CAS. */
	_Alignas(SL_CACHELINE) _Atomic uint64_t sched_ns; /* low half */
	_Atomic uint64_t stored_q;                        /* high half */
	uint8_t pad[SL_CACHELINE - 2 * sizeof(uint64_t)];
};

/* Head of a tunable limiter: which of its two slots is current. */
struct sl_tun {
	_Atomic uint64_t gen;       /* slot[gen & 1] is current; +1 per retune */
	_Atomic uint64_t retune_ns; /* now_ns of the last retune, 0 = never */
	uint64_t reserved[6];
	/* Concurrency: units held, whichever slot gives the limit. */
	_Alignas(SL_CACHELINE) _Atomic uint64_t held;
	uint8_t pad[SL_CACHELINE - sizeof(uint64_t)];
};

#define SL_LIMITER_MAGIC 0x534c4d31u /* "SLM1" */

/* Any limiter: a tagged union, 64-byte aligned, fixed layout. */
struct sl_limiter {
	uint32_t magic;          /* SL_LIMITER_MAGIC once initialised */
	uint32_t kind;           /* enum sl_kind */
	struct sl_params params; /* as given to init, for reporting */
	uint8_t pad[SL_CACHELINE - 8 - sizeof(struct sl_params)];
	union {
		struct sl_gcra gcra;
		struct sl_warm warm;
		struct sl_fixed fixed;
		struct sl_sliding sliding;
		struct sl_conc conc;
		struct sl_tun tun;
	} u;
};

/*
 * A limiter whose parameters can be changed while it is in use (live
 * reconfiguration). Use &t->head with every sl_limiter_* call except init
 * and validate: the calls act on the current slot. A retune builds the
 * other slot from the new parameters and the current slot's state, carried
 * over in units (the debt of a bucket, the counts of a window), and
 * switches to it with one store; an acquire that raced with the switch is
 * undone and retried on the new slot, so no admission ever follows the old
 * parameters once the switch is visible. See core/tunable.c.
 */
struct sl_tunable {
	struct sl_limiter head; /* kind SL_KIND_TUNABLE, params as initialised */
	struct sl_limiter slot[2];
};

/* Layout is part of the shared-memory format: pin it. */
_Static_assert(sizeof(struct sl_params) == 40, "sl_params layout");
_Static_assert(sizeof(struct sl_warm) == 128, "sl_warm layout");
_Static_assert(offsetof(struct sl_warm, sched_ns) == 64, "sl_warm state on its own line");
_Static_assert(offsetof(struct sl_warm, stored_q) == 72, "sl_warm state is one 16-byte word");
_Static_assert(sizeof(struct sl_gcra) == 128, "sl_gcra layout");
_Static_assert(sizeof(struct sl_fixed) == 128, "sl_fixed layout");
_Static_assert(sizeof(struct sl_sliding) == 128, "sl_sliding layout");
_Static_assert(sizeof(struct sl_conc) == 128, "sl_conc layout");
_Static_assert(offsetof(struct sl_gcra, tat) == 64, "sl_gcra.tat on its own line");
_Static_assert(offsetof(struct sl_gcra, cost1_ticks) == 56, "sl_gcra.cost1_ticks layout");
_Static_assert(offsetof(struct sl_limiter, u) == 64, "sl_limiter header is one line");
_Static_assert(sizeof(struct sl_limiter) == 192, "sl_limiter layout");
_Static_assert(sizeof(struct sl_tun) == 128, "sl_tun layout");
_Static_assert(offsetof(struct sl_tun, held) == 64, "sl_tun.held on its own line");
_Static_assert(sizeof(struct sl_tunable) == 576, "sl_tunable layout");
_Static_assert(offsetof(struct sl_tunable, slot) == 192, "sl_tunable layout");

/* Generic API (dispatches on kind). */
enum sl_status sl_limiter_init(struct sl_limiter *l, const struct sl_params *p, uint64_t now_ns);
struct sl_decision sl_limiter_acquire(struct sl_limiter *l, uint64_t n, uint64_t now_ns,
				      uint64_t max_wait_ns);
/* Give back n units taken by acquire but not used (e.g. a send that moved
 * fewer bytes than reserved). Never makes a limiter hold more than its burst
 * or window allows. Concurrency: same as release. */
enum sl_status sl_limiter_refund(struct sl_limiter *l, uint64_t n, uint64_t now_ns);
/* Take n units unconditionally, as debt, for units already used (e.g. bytes
 * already received): token/leaky push the next slot cost(n) past
 * max(slot, now); fixed windows push the counter, into later windows as
 * needed; a sliding window's count saturates at a full window (it cannot
 * carry debt beyond its window: see sl_sliding_charge). Saturates at the
 * 2^64 horizon. SL_OK, or SL_EINVAL for concurrency or an unknown kind. */
enum sl_status sl_limiter_charge(struct sl_limiter *l, uint64_t n, uint64_t now_ns);
/* Concurrency: release n held units; SL_EUNDERFLOW (and no change) if fewer
 * are held. Other kinds: SL_EINVAL. */
enum sl_status sl_limiter_release(struct sl_limiter *l, uint64_t n);
/* Units that police (max_wait 0) would admit right now; a snapshot. */
uint64_t sl_limiter_available(const struct sl_limiter *l, uint64_t now_ns);
/* True if the parameters in a (possibly foreign or corrupt) limiter are
 * self-consistent, so that using it cannot misbehave. */
bool sl_limiter_validate(const struct sl_limiter *l);

/* Tunable limiters (struct sl_tunable above). init: as sl_limiter_init,
 * for any kind but SL_KIND_TUNABLE. retune: switch to new parameters of the
 * same kind at now_ns, keeping the state (SL_EINVAL for another kind; the
 * init errors for bad parameters, the limiter then unchanged). current: the
 * slot now in force (its params are the ones to report). validate: as
 * sl_limiter_validate, for all 576 bytes. */
enum sl_status sl_tunable_init(struct sl_tunable *t, const struct sl_params *p, uint64_t now_ns);
enum sl_status sl_tunable_retune(struct sl_tunable *t, const struct sl_params *p, uint64_t now_ns);
const struct sl_limiter *sl_tunable_current(const struct sl_tunable *t);
bool sl_tunable_validate(const struct sl_tunable *t);

/* Per-algorithm API (the generic calls above forward to these). */
enum sl_status sl_token_init(struct sl_gcra *g, uint64_t amount, uint64_t period_ns, uint64_t burst,
			     uint64_t now_ns);
enum sl_status sl_leaky_init(struct sl_gcra *g, uint64_t amount, uint64_t period_ns,
			     uint64_t capacity, uint64_t now_ns);
struct sl_decision sl_gcra_acquire(struct sl_gcra *g, uint64_t n, uint64_t now_ns,
				   uint64_t max_wait_ns);
enum sl_status sl_gcra_refund(struct sl_gcra *g, uint64_t n, uint64_t now_ns);
uint64_t sl_gcra_available(const struct sl_gcra *g, uint64_t now_ns);
enum sl_status sl_gcra_charge(struct sl_gcra *g, uint64_t n, uint64_t now_ns);

/* Warm-up token bucket (core/warmup.c). stored: the stored permits (units,
 * rounded down) at now_ns; interval: the interval in ns that the next unit
 * costs at now_ns (cold x S when cold, S once warm), for `sluice stat`. */
enum sl_status sl_warmup_init(struct sl_warm *w, const struct sl_params *p, uint64_t now_ns);
struct sl_decision sl_warmup_acquire(struct sl_warm *w, uint64_t n, uint64_t now_ns,
				     uint64_t max_wait_ns);
enum sl_status sl_warmup_refund(struct sl_warm *w, uint64_t n, uint64_t now_ns);
enum sl_status sl_warmup_charge(struct sl_warm *w, uint64_t n, uint64_t now_ns);
uint64_t sl_warmup_available(const struct sl_warm *w, uint64_t now_ns);
uint64_t sl_warmup_stored(const struct sl_warm *w, uint64_t now_ns);
uint64_t sl_warmup_interval_ns(const struct sl_warm *w, uint64_t now_ns);

enum sl_status sl_fixed_init(struct sl_fixed *w, uint64_t limit, uint64_t window_ns,
			     uint64_t now_ns);
struct sl_decision sl_fixed_acquire(struct sl_fixed *w, uint64_t n, uint64_t now_ns,
				    uint64_t max_wait_ns);
enum sl_status sl_fixed_refund(struct sl_fixed *w, uint64_t n, uint64_t now_ns);
uint64_t sl_fixed_available(const struct sl_fixed *w, uint64_t now_ns);
enum sl_status sl_fixed_charge(struct sl_fixed *w, uint64_t n, uint64_t now_ns);

enum sl_status sl_sliding_init(struct sl_sliding *s, uint64_t limit, uint64_t window_ns,
			       uint64_t now_ns);
struct sl_decision sl_sliding_acquire(struct sl_sliding *s, uint64_t n, uint64_t now_ns);
enum sl_status sl_sliding_refund(struct sl_sliding *s, uint64_t n, uint64_t now_ns);
uint64_t sl_sliding_available(const struct sl_sliding *s, uint64_t now_ns);
enum sl_status sl_sliding_charge(struct sl_sliding *s, uint64_t n, uint64_t now_ns);

enum sl_status sl_conc_init(struct sl_conc *c, uint64_t limit);
struct sl_decision sl_conc_acquire(struct sl_conc *c, uint64_t n);
enum sl_status sl_conc_release(struct sl_conc *c, uint64_t n);
uint64_t sl_conc_held(const struct sl_conc *c);

/*
 * Circuit breaker: the state machine of core/breaker.c: closed,
 * open, half-open with exactly one probe; failures counted in a sliding
 * window of ten buckets.
 *
 * Breaker overview
 * --------
 * The caller asks before each attempt (sl_breaker_enter) and reports each
 * attempt's outcome (sl_breaker_report). Closed: every attempt passes and
 * its outcome is counted; when the failures in the window reach the
 * threshold (a count, or a percentage of at least `min` attempts), the
 * breaker opens. Open: attempts fail at once until `open_ns` has passed;
 * then the first attempt is the probe (half-open) and every other one still
 * fails. The probe's success closes the breaker (and empties the window);
 * its failure opens it again for open_ns. A probe that never reports (its
 * caller died, or gave up) is replaced by a new one after open_ns.
 *
 * Breaker API and thread-safety
 * ---------------------
 *   sl_breaker_init()      not thread-safe: before the breaker is shared.
 *   sl_breaker_enter()     thread- and process-safe, lock-free.
 *   sl_breaker_report()    thread- and process-safe, lock-free.
 *   sl_breaker_view()      read-only snapshot.
 * Time is passed in (now_ns, CLOCK_MONOTONIC); no allocation, no syscalls;
 * plain fixed-width fields, so a breaker may live in MAP_SHARED memory.
 *
 * Breaker implementation notes
 * --------------------
 * State word: state (2 bits) | ns since the epoch (62 bits): for open, the
 * instant the probe may go; for half-open, the instant the probe went.
 * Window: SL_BRK_BUCKETS words, bucket k counting attempts in
 * [k b, (k + 1) b), b = window / SL_BRK_BUCKETS: [bucket index mod 2^24 |
 * failures (20 bits) | attempts (20 bits)], each changed by one CAS. The
 * window read at now is the current bucket and the nine before it: between
 * 0.9 and 1 window of the past. Counts saturate at 2^20 - 1 per bucket.
 */
#define SL_BRK_BUCKETS 10u

enum sl_brk_state { SL_BRK_CLOSED = 0, SL_BRK_OPEN = 1, SL_BRK_HALF_OPEN = 2 };

/* What enter allows. */
enum sl_brk_verdict {
	SL_BRK_PASS = 0,  /* closed: go ahead, report the outcome */
	SL_BRK_PROBE = 1, /* half-open: this attempt is the one probe */
	SL_BRK_FAIL = 2,  /* open (or another probe is out): fail at once */
};

/* A state change made by the call, for logs (SL_BRK_NO_CHANGE: none). */
enum sl_brk_change {
	SL_BRK_NO_CHANGE = 0,
	SL_BRK_OPENED = 1,       /* closed -> open: the threshold was crossed */
	SL_BRK_PROBING = 2,      /* open -> half-open: this caller probes */
	SL_BRK_CLOSED_AGAIN = 3, /* half-open -> closed: the probe succeeded */
	SL_BRK_REOPENED = 4,     /* half-open -> open: the probe failed */
};

struct sl_breaker {
	/* Parameters (init, read-only afterwards). */
	uint64_t window_ns;
	uint64_t bucket_ns; /* window_ns / SL_BRK_BUCKETS, at least 1 */
	uint64_t open_ns;
	uint64_t epoch_ns;
	uint32_t errors;    /* count threshold; 0 in ratio mode */
	uint32_t ratio_pct; /* ratio threshold 1..100; 0 in count mode */
	uint32_t min;       /* ratio mode: attempts needed in the window */
	uint32_t reserved;
	/* State. */
	_Atomic uint64_t state;
	_Atomic uint64_t bucket[SL_BRK_BUCKETS];
	/* Counters since init (relaxed; for reports). */
	_Atomic uint64_t attempts, failures, fast_fails, probes, trips;
};

/* A snapshot for reports. */
struct sl_brk_view {
	uint32_t state; /* enum sl_brk_state */
	uint32_t reserved;
	uint64_t failures;    /* in the window */
	uint64_t attempts;    /* in the window */
	uint64_t probe_in_ns; /* open: time until the probe may go; else 0 */
};

/* errors: count threshold (ratio_pct 0), or ratio_pct 1..100 with min >= 1
 * attempts. window_ns >= SL_BRK_BUCKETS, open_ns >= 1. Returns false (and
 * leaves b unusable) for anything else. */
bool sl_breaker_init(struct sl_breaker *b, uint64_t window_ns, uint64_t open_ns, uint32_t errors,
		     uint32_t ratio_pct, uint32_t min, uint64_t now_ns);
enum sl_brk_verdict sl_breaker_enter(struct sl_breaker *b, uint64_t now_ns,
				     enum sl_brk_change *change);
/* Outcome of an attempt that enter let through; probe: enter said PROBE. */
void sl_breaker_report(struct sl_breaker *b, uint64_t now_ns, bool failure, bool probe,
		       enum sl_brk_change *change);
void sl_breaker_view(const struct sl_breaker *b, uint64_t now_ns, struct sl_brk_view *v);
const char *sl_breaker_state_name(enum sl_brk_state s);
/* True if a (possibly foreign) breaker's parameters are self-consistent. */
bool sl_breaker_validate(const struct sl_breaker *b);

/* Human-readable name of a status/kind, for messages ("ok", "token", ...). */
const char *sl_status_name(enum sl_status s);
const char *sl_kind_name(enum sl_kind k);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_CORE_H */
