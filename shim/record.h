/* SPDX-License-Identifier: MIT */
/*
 * record.h - this process's status record (record.c; layout in
 * shm_format.h): what the rest of the shim calls besides the sl__shm_rec_*
 * functions of internal.h.
 *
 * API
 * ---
 * sl__rec_publish: make the record visible to `sluice stat` / `sluice set`
 * (the file stat-PID in the private directory, segment.h). Called where a
 * socket is first classified as one a rule may apply to, and before a call
 * waits; a no-op (one load) once done. Thread-safe: a thread that
 * comes while another publishes waits until the record is mapped, so that
 * it never counts into the copy being replaced.
 */
#ifndef SLUICE_RECORD_H
#define SLUICE_RECORD_H

#include <stdatomic.h>

enum {
	SL_REC_PRIVATE = 0,    /* private memory; published on first need */
	SL_REC_PUBLISHING = 1, /* one thread is building the file */
	SL_REC_FILE = 2,       /* the record is the file */
	SL_REC_OFF = 3,        /* no file (none wanted, removed at exit, or failed) */
};
extern _Atomic int sl__rec_state;

void sl__rec_publish_slow(void);

static inline void sl__rec_publish(void)
{
	/* Acquire: pairs with the publisher's final release store, so that a
	 * thread seeing SL_REC_FILE sees the record as remapped (a plain load
	 * on x86); the slow path waits for a publisher still at work. */
	if (__builtin_expect(atomic_load_explicit(&sl__rec_state, memory_order_acquire) <=
				     SL_REC_PUBLISHING,
			     0))
		sl__rec_publish_slow();
}

/* Remove the records of this user's processes that no longer exist, at
 * most every SL_REC_RECLAIM_S seconds (per user); the start of every
 * process with rules asks. */
#define SL_REC_RECLAIM_S 2u
void sl__rec_reclaim(void);

/* An fd could not be classified in a sandbox (sandboxed.h) and passes
 * through: counted in the record (`sluice stat`), or here until there is
 * one; how many; cleared (tests). */
void sl__rec_unclassified(void);
uint64_t sl__rec_unclassified_count(void);
void sl__rec_unclassified_reset_unsync(void);

#endif /* SLUICE_RECORD_H */
