/* SPDX-License-Identifier: MIT */
/*
 * count.h - a rule's counters (struct sl_rstats, in a status record) and
 * what one call adds to them, the same in both modes: `sluice stat` shows
 * a preloaded and a supervised program's calls alike.
 *
 *   calls, admitted  every call a rule matched, at its end (admitted: it
 *                    went through, at once or after a wait);
 *   refused          calls the rule refused (dry-run: would have);
 *   delayed          calls the rule made wait (dry-run: would have), with
 *                    the call's whole wait in delay_ns and max_delay_ns;
 *   bytes            bytes moved by admitted calls;
 *   wait_le[k]       delayed calls whose wait was at most 10^k ms
 *                    (k = 0..4: 1 ms to 10 s), a histogram `sluice stat`
 *                    shows with delayed as its total;
 *   redis_fallback   a redis=KEY rule: 1 while its calls use the on-error
 *                    fallback (Redis does not answer), 0 while they use
 *                    leases; redis_fallbacks counts the switches to it.
 *
 * A preloaded thread's calls that its thread-local credit pays for count
 * the same (calls, admitted, bytes), in its own slot of the status record
 * (common/shm_format.h: struct sl_tcount), which readers add in.
 *
 * API: relaxed atomics (statistics: nothing is published through them),
 * any thread; inline, the preload's hot path counts with them.
 */
#ifndef SLUICE_ENGINE_COUNT_H
#define SLUICE_ENGINE_COUNT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_WAIT_BUCKETS 5

/* Counters of one rule in one process. Written with relaxed atomics by the
 * process (or its supervisor) only; read by `sluice stat`. */
struct sl_rstats {
	_Atomic uint64_t calls;    /* calls this rule matched */
	_Atomic uint64_t admitted; /* of which went through (at once or delayed) */
	_Atomic uint64_t delayed;  /* of which waited (dry-run: would have) */
	_Atomic uint64_t refused;  /* of which failed (dry-run: would have) */
	_Atomic uint64_t delay_ns; /* total time waited */
	_Atomic uint64_t max_delay_ns;
	_Atomic uint64_t bytes; /* bytes transferred by admitted calls */
	/* Written off the hot path only: at the end of a wait, and by the
	 * Redis lease thread. */
	_Atomic uint64_t wait_le[SL_WAIT_BUCKETS];
	_Atomic uint64_t redis_fallback;
	_Atomic uint64_t redis_fallbacks;
};

/* The histogram's upper bounds, ns: 1 ms, 10 ms, 100 ms, 1 s, 10 s. */
static inline uint64_t sl_wait_bound_ns(unsigned k)
{
	uint64_t b = 1000000u;
	while (k-- > 0)
		b *= 10u;
	return b;
}

static inline void sl_count_add(_Atomic uint64_t *v, uint64_t n)
{
	atomic_fetch_add_explicit(v, n, memory_order_relaxed);
}

/* A call's end: seen, admitted if ok, `bytes` moved. Unconditional adds:
 * no branch on the hot path (ok and bytes are almost always 1 and non-zero
 * there). */
static inline void sl_count_end(struct sl_rstats *s, bool ok, uint64_t bytes)
{
	sl_count_add(&s->calls, 1);
	sl_count_add(&s->admitted, (uint64_t)ok);
	sl_count_add(&s->bytes, bytes);
}

/* A copy of src's counters into dst (a snapshot, to print or add to). */
static inline void sl_count_copy(struct sl_rstats *dst, const struct sl_rstats *src)
{
	_Atomic uint64_t *d = &dst->calls;
	const _Atomic uint64_t *f = &src->calls;
	/* Relaxed: independent counters; the words of the struct in order. */
	for (size_t k = 0; k < sizeof(*src) / sizeof(*f); k++)
		atomic_store_explicit(&d[k],
				      atomic_load_explicit((_Atomic uint64_t *)(uintptr_t)&f[k],
							   memory_order_relaxed),
				      memory_order_relaxed);
}

static inline void sl_count_refused(struct sl_rstats *s)
{
	sl_count_add(&s->refused, 1);
}

/* The rule made the call wait waited_ns in all. */
static inline void sl_count_delayed(struct sl_rstats *s, uint64_t waited_ns)
{
	sl_count_add(&s->delayed, 1);
	sl_count_add(&s->delay_ns, waited_ns);
	for (unsigned k = 0; k < SL_WAIT_BUCKETS; k++)
		if (waited_ns <= sl_wait_bound_ns(k)) {
			sl_count_add(&s->wait_le[k], 1);
			break;
		}
	uint64_t cur = atomic_load_explicit(&s->max_delay_ns, memory_order_relaxed);
	while (cur < waited_ns &&
	       !atomic_compare_exchange_weak_explicit(&s->max_delay_ns, &cur, waited_ns,
						      memory_order_relaxed, memory_order_relaxed))
		;
}

#endif /* SLUICE_ENGINE_COUNT_H */
