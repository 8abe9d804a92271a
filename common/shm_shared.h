/* SPDX-License-Identifier: MIT */
/*
 * shm_shared.h - opening or creating a shared=NAME limiter's segment
 * (shm_shared.c), for the preloaded library (shm.c) and the supervisor
 * (supervise/shared.c).
 */
#ifndef SLUICE_SHM_SHARED_H
#define SLUICE_SHM_SHARED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm_format.h"

/* The limiter of shared rule r, mapped read-write (munmap it, its size is
 * sizeof(struct sl_shm_shared)): opened, or created at now_ns (*created).
 * NULL with a one-line reason in err (the path, why, and the remedy).
 * Single-threaded callers only. */
struct sl_shm_shared *sl_shm_shared_open(const struct sl_rule *r, uint64_t now_ns, bool *created,
					 char *err, size_t errlen);

#endif /* SLUICE_SHM_SHARED_H */
