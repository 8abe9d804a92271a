/* SPDX-License-Identifier: MIT */
/*
 * redis.h - the shim's Redis client: hiredis, loaded with dlopen only when a
 * rule says redis=KEY, and the GCRA script that leases tokens.
 *
 * API and thread-safety: sl__redis_load is called at init (not
 * thread-safe). A connection is used by one thread at a time (the lease
 * thread); its socket is marked internal in the fd table, and the thread
 * runs with sl__busy set, so none of its calls is ever throttled.
 */
#ifndef SLUICE_SHIM_REDIS_H
#define SLUICE_SHIM_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

struct sl_rconn; /* a hiredis redisContext */

extern const char sl__redis_gcra_lua[];

/* dlopen libhiredis.so.0.14 and resolve what we use (once). 0 or -1, with
 * the reason logged. */
int sl__redis_load(void);
/* Connect (AUTH, SELECT as cfg says) with every operation bounded by
 * timeout_ns. NULL on failure, with the reason (no password) in why. */
struct sl_rconn *sl__redis_open(const struct sl_redis *cfg, uint64_t timeout_ns, char *why,
				size_t whylen);
void sl__redis_close(struct sl_rconn *c);
/* The child after fork: close our copy of the socket, leave the memory
 * (the parent's thread may have been using it when fork happened). */
void sl__redis_abandon(struct sl_rconn *c);
/* In a fork child, before anything else of this file: the lock the
 * connections' I/O holds is made anew (a parent's thread may have held it
 * at the fork, and that thread does not exist here). */
void sl__redis_after_fork(void);
/* Script loads so far (SCRIPT LOAD replies), for logs and tests. */
uint64_t sl__redis_script_loads(void);

#endif /* SLUICE_SHIM_REDIS_H */
