/* SPDX-License-Identifier: MIT */
/*
 * redis_link.c - the lease thread's way to the server of SLUICE_REDIS,
 * whatever its form: one connection (redis://, unix://), a Redis Cluster's
 * nodes (redis_cluster.c) or a master found through Sentinel
 * (redis_sentinel.c). lease.c opens a link, takes leases through it, and
 * closes it when a take fails; reopening is its back-off's business.
 *
 * Thread-safety: one thread (the lease thread) per link.
 */
#include <stdio.h>
#include <stdlib.h>

#include "redis_link.h"
#include "redis_proto.h"

struct sl_rlink {
	const struct sl_rtopo *topo;
	void *t; /* its state, topo->size bytes */
};

static void rlink_end(struct sl_rlink *l, bool abandon)
{
	if (l == NULL)
		return;
	if (l->t != NULL)
		l->topo->drop(l->t, abandon);
	if (!abandon) { /* the child leaves the memory, as sl__redis_abandon does */
		free(l->t);
		free(l);
	}
}

struct sl_rlink *sl__rlink_open(const struct sl_redis *cfg, uint64_t timeout_ns, char *why,
				size_t whylen)
{
	struct sl_rlink *l = sl__redis_zalloc(sizeof(*l), why, whylen);
	if (l == NULL)
		return NULL;
	l->topo = cfg->kind == SL_REDIS_CLUSTER    ? &sl__rtopo_cluster
		  : cfg->kind == SL_REDIS_SENTINEL ? &sl__rtopo_sentinel
						   : &sl__rtopo_one;
	l->t = sl__redis_zalloc(l->topo->size, why, whylen);
	if (l->t == NULL || l->topo->reach(l->t, cfg, timeout_ns, why, whylen) < 0) {
		rlink_end(l, false);
		return NULL;
	}
	return l;
}

int sl__rlink_take(struct sl_rlink *l, const char *key, double t_us, double tau_us, uint64_t want,
		   uint64_t *got, uint64_t *wait_ns, char *why, size_t whylen)
{
	return l->topo->take(l->t, key, t_us, tau_us, want, got, wait_ns, why, whylen) < 0 ? -1 : 0;
}

void sl__rlink_close(struct sl_rlink *l)
{
	rlink_end(l, false);
}

void sl__rlink_abandon(struct sl_rlink *l)
{
	rlink_end(l, true);
}
