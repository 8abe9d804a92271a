/* SPDX-License-Identifier: MIT */
/*
 * lease_pool.h - one host's pool of units leased from Redis for every
 * process of the user on the host (a rule with both shared=NAME and
 * redis=KEY): the renewer election (lease_pool.c). The pool's bank and
 * election word live in the rule's shared segment (struct sl_shm_shared,
 * shm_format.h; sl__shm_shared_seg in shm.h finds it).
 *
 * API and thread-safety: every call is lock-free and safe from any
 * process mapping the segment; lease.c calls them from its lease thread.
 */
#ifndef SLUICE_SHIM_LEASE_POOL_H
#define SLUICE_SHIM_LEASE_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "shm_format.h"

enum sl_pool_state {
	SL_POOL_UNKNOWN = 0,
	SL_POOL_UP = 1,   /* the renewer's last lease worked */
	SL_POOL_DOWN = 2, /* the renewer cannot reach Redis: rules on on-error */
};

/*
 * Is process `pid` the pool's renewer at now_ns? It is if it already was
 * (its heartbeat is refreshed), or if nobody is, or if the renewer's
 * heartbeat is older than stale_ns (a dead or stuck renewer: taken over,
 * counted in takeovers). *took is set when this call made pid the renewer.
 */
bool sl__pool_renew_role(struct sl_shm_shared *s, uint32_t pid, uint64_t now_ns, uint64_t stale_ns,
			 bool *took);
/* Give the role up (pid exits or changes its policy), so another process
 * takes over at once rather than after stale_ns. */
void sl__pool_resign(struct sl_shm_shared *s, uint32_t pid);
/* The pid of the renewer now (0 if none). */
uint32_t sl__pool_renewer(const struct sl_shm_shared *s);

#endif /* SLUICE_SHIM_LEASE_POOL_H */
