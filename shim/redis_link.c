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
	uint32_t kind; /* enum sl_redis_kind */
	union {
		struct sl_rconn *conn;
		struct sl_cluster *cluster;
		struct sl_sentinel *sentinel;
	} u;
};

struct sl_rlink *sl__rlink_open(const struct sl_redis *cfg, uint64_t timeout_ns, char *why,
				size_t whylen)
{
	struct sl_rlink *l = calloc(1, sizeof(*l));
	if (l == NULL) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	l->kind = cfg->kind;
	void *p;
	switch (cfg->kind) {
	case SL_REDIS_CLUSTER:
		p = l->u.cluster = sl__cluster_open(cfg, timeout_ns, why, whylen);
		break;
	case SL_REDIS_SENTINEL:
		p = l->u.sentinel = sl__sentinel_open(cfg, timeout_ns, why, whylen);
		break;
	default:
		p = l->u.conn = sl__redis_open(cfg, timeout_ns, why, whylen);
		break;
	}
	if (p == NULL) {
		free(l);
		return NULL;
	}
	return l;
}

int sl__rlink_take(struct sl_rlink *l, const char *key, double t_us, double tau_us, uint64_t want,
		   uint64_t *got, uint64_t *wait_ns, char *why, size_t whylen)
{
	int rc;
	switch (l->kind) {
	case SL_REDIS_CLUSTER:
		rc = sl__cluster_take(l->u.cluster, key, t_us, tau_us, want, got, wait_ns, why,
				      whylen);
		break;
	case SL_REDIS_SENTINEL:
		rc = sl__sentinel_take(l->u.sentinel, key, t_us, tau_us, want, got, wait_ns, why,
				       whylen);
		break;
	default:
		rc = sl__redis_take(l->u.conn, key, t_us, tau_us, want, got, wait_ns, why, whylen);
		break;
	}
	return rc < 0 ? -1 : 0;
}

static void rlink_end(struct sl_rlink *l, bool abandon)
{
	if (l == NULL)
		return;
	switch (l->kind) {
	case SL_REDIS_CLUSTER:
		sl__cluster_close(l->u.cluster, abandon);
		break;
	case SL_REDIS_SENTINEL:
		sl__sentinel_close(l->u.sentinel, abandon);
		break;
	default:
		if (abandon)
			sl__redis_abandon(l->u.conn);
		else
			sl__redis_close(l->u.conn);
		break;
	}
	if (!abandon) /* the child leaves the memory, as sl__redis_abandon does */
		free(l);
}

void sl__rlink_close(struct sl_rlink *l)
{
	rlink_end(l, false);
}

void sl__rlink_abandon(struct sl_rlink *l)
{
	rlink_end(l, true);
}
