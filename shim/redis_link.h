/* SPDX-License-Identifier: MIT */
/*
 * redis_link.h - the way to SLUICE_REDIS's server whatever its form
 * (redis_link.c, over redis_cluster.c and redis_sentinel.c, over redis.c).
 *
 * API: as a connection of redis.h: one thread at a time (the lease thread).
 */
#ifndef SLUICE_SHIM_REDIS_LINK_H
#define SLUICE_SHIM_REDIS_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

/*
 * A link: the way to SLUICE_REDIS's server whatever its form
 * (one server, a Redis Cluster, a master behind Sentinel), with the same
 * contract as a connection: open (NULL, reason in why), take (0, or -1 when
 * the link must be closed), close, and abandon in a fork child. cfg must
 * outlive the link.
 */
struct sl_rlink;
struct sl_rlink *sl__rlink_open(const struct sl_redis *cfg, uint64_t timeout_ns, char *why,
				size_t whylen);
int sl__rlink_take(struct sl_rlink *l, const char *key, double t_us, double tau_us, uint64_t want,
		   uint64_t *got, uint64_t *wait_ns, char *why, size_t whylen);
void sl__rlink_close(struct sl_rlink *l);
void sl__rlink_abandon(struct sl_rlink *l);

#endif /* SLUICE_SHIM_REDIS_LINK_H */
