/* SPDX-License-Identifier: MIT */
/*
 * seqlock.h - a sequence lock whose readers never wait (the shape of ck's
 * ck_sequence.h), for data that one writer at a time rewrites rarely and
 * many threads read (clock.c's TSC line).
 *
 * API:
 *   s = sl__seq_read_begin(&seq);   read the fields (relaxed atomics);
 *   if (sl__seq_read_retry(&seq, s)) the fields may be torn: do not use them.
 *   if (sl__seq_write_try_begin(&seq, &s)) { write the fields; sl__seq_write_end(&seq, s); }
 * A reader that finds a write in progress or a change does not spin: it is
 * told to retry and decides itself what to do instead (clock.c reads
 * clock_gettime). Writers exclude each other through the begin CAS; a
 * writer that loses returns false at once.
 *
 * Implementation notes: the sequence is odd while a write is in progress.
 * The fields must themselves be atomics (relaxed), so that a torn read is
 * no data race; the orderings below make "seq unchanged and even" imply
 * "the fields are one writer's whole".
 */
#ifndef SLUICE_SHIM_SEQLOCK_H
#define SLUICE_SHIM_SEQLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* ThreadSanitizer does not model fences, and GCC says so (-Wtsan) once
 * these are inlined: under TSan the fences stay (harmless) and the warning
 * goes. The thread tests run the clock under TSan all the same. */
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wtsan"
#endif

/* The sequence a read starts from. Acquire: the fields a writer stored
 * before its ending release store (sl__seq_write_end) are visible. */
static inline uint32_t sl__seq_read_begin(const _Atomic uint32_t *seq)
{
	return atomic_load_explicit(seq, memory_order_acquire);
}

/* True if what was read since sl__seq_read_begin returned s may be torn: a
 * write was in progress (s odd) or one happened since. The acquire fence
 * keeps the field loads before the second load of seq. */
static inline bool sl__seq_read_retry(const _Atomic uint32_t *seq, uint32_t s)
{
	atomic_thread_fence(memory_order_acquire);
	return (s & 1) || atomic_load_explicit(seq, memory_order_relaxed) != s;
}

/* Try to start a write: true, with *s the sequence to end it with, if no
 * other writer is at it. Acquire on success: the fields as the previous
 * writer left them. The release fence after making seq odd pairs with the
 * readers' acquire fence: a reader that sees a field stored by this write
 * also sees seq odd, or changed. */
static inline bool sl__seq_write_try_begin(_Atomic uint32_t *seq, uint32_t *s)
{
	uint32_t cur = atomic_load_explicit(seq, memory_order_relaxed);
	if ((cur & 1) ||
	    !atomic_compare_exchange_strong_explicit(seq, &cur, cur + 1, memory_order_acquire,
						     memory_order_relaxed))
		return false;
	atomic_thread_fence(memory_order_release);
	*s = cur;
	return true;
}

/* End the write started at s. Release: publishes the fields written since
 * (pairs with sl__seq_read_begin's acquire). */
static inline void sl__seq_write_end(_Atomic uint32_t *seq, uint32_t s)
{
	atomic_store_explicit(seq, s + 2, memory_order_release);
}

#endif /* SLUICE_SHIM_SEQLOCK_H */
