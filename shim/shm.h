/* SPDX-License-Identifier: MIT */
/*
 * shm.h - shared=NAME limiters (shm.c) and this process's status record
 * (record.c; record.h has its publish hook): segments of the user's private
 * directory (segment.h; the layout is shm_format.h).
 *
 * API: the _unsync calls are for init (and the fork child, single-threaded
 * then); sl__shm_hold and sl__shm_reclaim are called from any thread.
 */
#ifndef SLUICE_SHIM_SHM_H
#define SLUICE_SHIM_SHM_H

#include <stddef.h>

#include "internal.h"

/* Map this process's status record (private memory, a segment from its
 * first need: record.c); fill its header and rule texts; mark it
 * (in)active; the fork child's own copy; remove the file at exit and _exit. */
int sl__shm_rec_open_unsync(bool file);
void sl__shm_rec_fill_unsync(const struct sl_policy *p, bool active);
void sl__shm_rec_set_active_unsync(bool active);
void sl__shm_rec_fork_child(void);
void sl__shm_rec_remove(void);
/* The shared limiter of rule i, opened or created; NULL with err set. */
struct sl_limiter *sl__shm_shared_open_unsync(unsigned i, const struct sl_rule *r, uint64_t now_ns,
					      char *err, size_t errlen);
void sl__shm_shared_close_all_unsync(void);
/* Rule i's shared segment (shared=NAME), or NULL: a host pool's bank and
 * election word (lease_pool.h). */
struct sl_shm_shared *sl__shm_shared_seg(unsigned i);
/* Shared conns limiters: count this process's slots; give back the slots of
 * dead processes (true if any). No-ops for other limiters. */
void sl__shm_hold(const struct sl_limiter *l, int64_t delta);
bool sl__shm_reclaim(struct sl_limiter *l);

#endif /* SLUICE_SHIM_SHM_H */
