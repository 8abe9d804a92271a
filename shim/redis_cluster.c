/* SPDX-License-Identifier: MIT */
/*
 * redis_cluster.c - redis=KEY rules on a Redis Cluster
 * (SLUICE_REDIS=redis+cluster://NODE,NODE,...): the slot map, MOVED and
 * ASK redirects, and reconnection, on top of hiredis 0.14, which has no
 * cluster support of its own (hiredis-cluster is not packaged in Debian 12,
 * and the little a one-key client needs fits here).
 *
 * A limiter's key "sluice:{KEY}" lives in one slot (CRC16 of the hash tag
 * mod 16384). The map from slot to master comes from CLUSTER SLOTS, asked
 * of the first node that answers (the known masters first, then the
 * seeds), when the link opens and whenever the slot's master is unknown or
 * unreachable. Then:
 *   MOVED SLOT HOST:PORT   the slot has moved for good: the map is updated
 *                          and the call goes there;
 *   ASK SLOT HOST:PORT     the slot is being migrated and this key is
 *                          already on the target: ASKING, then the same
 *                          EVALSHA there, once; the map is not changed;
 *   connection failure     the node's connection is closed, the map asked
 *                          again (from another node) and the call retried.
 * At most SL_CLUSTER_HOPS tries per lease; past that, or with CLUSTERDOWN
 * or TRYAGAIN, the lease fails and the rule is on its on-error mode until
 * the lease thread's next attempt (which opens the link afresh).
 *
 * Every node has its own script cache: sl__redis_take_at loads the script
 * on NOSCRIPT, whichever node answers.
 *
 * Thread-safety: one thread (the lease thread) per struct sl_cluster.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "redis_proto.h"

#define SL_CLUSTER_SLOTS 16384
#define SL_CLUSTER_NODES_MAX 64 /* masters remembered; uint8 indices */
#define SL_CLUSTER_NONE 0xff
#define SL_CLUSTER_HOPS 6

struct cnode {
	char host[SL_REDIS_HOST_MAX];
	uint16_t port;
	struct sl_rconn *conn; /* NULL until needed */
};

struct sl_cluster {
	const struct sl_redis *cfg;
	uint64_t timeout_ns;
	unsigned n_nodes;
	struct cnode nodes[SL_CLUSTER_NODES_MAX];
	uint8_t slot_node[SL_CLUSTER_SLOTS]; /* index into nodes, or SL_CLUSTER_NONE */
};

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), as Redis Cluster's
 * key hashing uses, bit by bit: a few keys per lease, no table needed. */
static uint16_t crc16_xmodem(const char *s, size_t len)
{
	uint16_t crc = 0;
	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)((uint8_t)s[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
	}
	return crc;
}

uint16_t sl__cluster_slot(const char *key, size_t len)
{
	/* The first '{' and the first '}' after it, if what is between is not
	 * empty: only that part is hashed. */
	const char *open = memchr(key, '{', len);
	if (open != NULL) {
		size_t from = (size_t)(open - key) + 1;
		const char *close = memchr(key + from, '}', len - from);
		if (close != NULL && close > key + from)
			return crc16_xmodem(key + from, (size_t)(close - key) - from) %
			       SL_CLUSTER_SLOTS;
	}
	return crc16_xmodem(key, len) % SL_CLUSTER_SLOTS;
}

int sl__cluster_redirect_parse(const char *err, uint16_t *slot, char *host, size_t hostlen,
			       uint16_t *port)
{
	int kind;
	const char *p;
	if (strncmp(err, "MOVED ", 6) == 0) {
		kind = 1;
		p = err + 6;
	} else if (strncmp(err, "ASK ", 4) == 0) {
		kind = 2;
		p = err + 4;
	} else {
		return 0;
	}
	char *end;
	unsigned long s = strtoul(p, &end, 10);
	if (end == p || *end != ' ' || s >= SL_CLUSTER_SLOTS)
		return 0;
	const char *addr = end + 1;
	const char *colon = strrchr(addr, ':'); /* HOST may be an IPv6 address */
	if (colon == NULL || (size_t)(colon - addr) >= hostlen)
		return 0;
	unsigned long pt = strtoul(colon + 1, &end, 10);
	if (end == colon + 1 || *end != '\0' || pt == 0 || pt > 65535)
		return 0;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	*slot = (uint16_t)s;
	*port = (uint16_t)pt;
	return kind;
}

/* The index of host:port among the known nodes, added if new; SL_CLUSTER_NONE
 * if the table is full. */
static unsigned cluster_node(struct sl_cluster *cl, const char *host, uint16_t port)
{
	for (unsigned i = 0; i < cl->n_nodes; i++)
		if (cl->nodes[i].port == port && strcmp(cl->nodes[i].host, host) == 0)
			return i;
	if (cl->n_nodes == SL_CLUSTER_NODES_MAX || strlen(host) >= SL_REDIS_HOST_MAX)
		return SL_CLUSTER_NONE;
	struct cnode *n = &cl->nodes[cl->n_nodes];
	snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	n->conn = NULL;
	return cl->n_nodes++;
}

static void cluster_drop(struct sl_cluster *cl, unsigned i)
{
	sl__redis_close(cl->nodes[i].conn);
	cl->nodes[i].conn = NULL;
}

/* Node i's connection, opened if needed; NULL (reason in why). */
static struct sl_rconn *cluster_conn(struct sl_cluster *cl, unsigned i, char *why, size_t whylen)
{
	struct cnode *n = &cl->nodes[i];
	if (n->conn == NULL) {
		char e[160];
		n->conn = sl__redis_open_at(cl->cfg, n->host, n->port, cl->timeout_ns, e,
					    sizeof(e));
		if (n->conn == NULL)
			snprintf(why, whylen, "%s:%u: %s", n->host, n->port, e);
	}
	return n->conn;
}

/* Take the map from one CLUSTER SLOTS reply of node `from`. 0, or -1 if
 * the reply is not one. */
static int cluster_map(struct sl_cluster *cl, unsigned from, const struct sl_hreply *r)
{
	if (r->type != SL_HR_ARRAY || r->elements == 0)
		return -1;
	memset(cl->slot_node, SL_CLUSTER_NONE, sizeof(cl->slot_node));
	/* The reply may name `from` and add nodes: copy its address first. */
	char from_host[SL_REDIS_HOST_MAX];
	snprintf(from_host, sizeof(from_host), "%s", cl->nodes[from].host);
	for (size_t k = 0; k < r->elements; k++) {
		const struct sl_hreply *e = r->element[k];
		if (e->type != SL_HR_ARRAY || e->elements < 3 ||
		    e->element[0]->type != SL_HR_INTEGER || e->element[1]->type != SL_HR_INTEGER ||
		    e->element[2]->type != SL_HR_ARRAY || e->element[2]->elements < 2)
			continue;
		const struct sl_hreply *m = e->element[2];
		long long lo = e->element[0]->integer, hi = e->element[1]->integer;
		if (m->element[0]->type != SL_HR_STRING || m->element[1]->type != SL_HR_INTEGER ||
		    lo < 0 || hi >= SL_CLUSTER_SLOTS || lo > hi || m->element[1]->integer <= 0 ||
		    m->element[1]->integer > 65535)
			continue;
		/* An empty host (or "?") is the node that answered. */
		const char *host = m->element[0]->len == 0 || strcmp(m->element[0]->str, "?") == 0
					   ? from_host
					   : m->element[0]->str;
		unsigned i = cluster_node(cl, host, (uint16_t)m->element[1]->integer);
		if (i == SL_CLUSTER_NONE)
			continue;
		memset(cl->slot_node + lo, (int)i, (size_t)(hi - lo + 1));
	}
	return 0;
}

/* Ask the known nodes, then the seeds, for the slot map. 0 or -1. */
static int cluster_refresh(struct sl_cluster *cl, char *why, size_t whylen)
{
	for (uint32_t s = 0; s < cl->cfg->n_nodes && s < SL_REDIS_NODES_MAX; s++)
		cluster_node(cl, cl->cfg->nodes[s].host, cl->cfg->nodes[s].port);
	snprintf(why, whylen, "no cluster node answered");
	for (unsigned i = 0; i < cl->n_nodes; i++) {
		struct sl_rconn *c = cluster_conn(cl, i, why, whylen);
		if (c == NULL)
			continue;
		static const char *const argv[] = {"CLUSTER", "SLOTS"};
		struct sl_hreply *r = sl__redis_cmd(c, 2, (const char **)argv, why, whylen);
		if (r == NULL) {
			cluster_drop(cl, i);
			continue;
		}
		int ok = cluster_map(cl, i, r);
		if (ok < 0)
			snprintf(why, whylen, "%s:%u: CLUSTER SLOTS: %s", cl->nodes[i].host,
				 cl->nodes[i].port,
				 r->type == SL_HR_ERROR && r->str != NULL ? r->str
									  : "unexpected reply");
		sl__redis_free_reply(r);
		if (ok == 0) {
			sl_log(SL_LOG_DEBUG, "redis: slot map from %s:%u", cl->nodes[i].host,
			       cl->nodes[i].port);
			return 0;
		}
	}
	return -1;
}

static int cluster_open(void *t, const struct sl_redis *cfg, uint64_t timeout_ns, char *why,
			size_t whylen)
{
	struct sl_cluster *cl = t;
	cl->cfg = cfg;
	cl->timeout_ns = timeout_ns;
	memset(cl->slot_node, SL_CLUSTER_NONE, sizeof(cl->slot_node));
	return cluster_refresh(cl, why, whylen);
}

static int cluster_take(void *t, const char *key, double t_us, double tau_us, uint64_t want,
			uint64_t *got, uint64_t *wait_ns, char *why, size_t whylen)
{
	struct sl_cluster *cl = t;
	uint16_t slot = sl__cluster_slot(key, strlen(key));
	unsigned ask = SL_CLUSTER_NONE; /* the node an ASK sent us to */
	for (int hop = 0; hop < SL_CLUSTER_HOPS; hop++) {
		unsigned i = ask != SL_CLUSTER_NONE ? ask : cl->slot_node[slot];
		if (i == SL_CLUSTER_NONE) {
			if (cluster_refresh(cl, why, whylen) < 0)
				return SL_REDIS_EIO;
			i = cl->slot_node[slot];
			if (i == SL_CLUSTER_NONE) {
				snprintf(why, whylen, "no master serves slot %u of %s", slot, key);
				return SL_REDIS_EIO;
			}
		}
		struct sl_rconn *c = cluster_conn(cl, i, why, whylen);
		int rc = c == NULL ? SL_REDIS_EIO
				   : sl__redis_take_at(c, ask != SL_CLUSTER_NONE, key, t_us, tau_us,
						       want, got, wait_ns, why, whylen);
		ask = SL_CLUSTER_NONE;
		if (rc == 0)
			return 0;
		if (rc == SL_REDIS_EIO) {
			/* The node is gone (failover, restart): forget it for
			 * this slot and ask another node for the map. */
			sl_log(SL_LOG_DEBUG, "redis: %s", why);
			if (c != NULL)
				cluster_drop(cl, i);
			memset(cl->slot_node, SL_CLUSTER_NONE, sizeof(cl->slot_node));
			continue;
		}
		/* An error reply: "EVALSHA: MOVED 1234 host:port" and the like. */
		const char *text = strncmp(why, "EVALSHA: ", 9) == 0 ? why + 9 : why;
		char host[SL_REDIS_HOST_MAX];
		uint16_t s, port;
		int kind = sl__cluster_redirect_parse(text, &s, host, sizeof(host), &port);
		if (kind == 0)
			return SL_REDIS_EIO; /* CLUSTERDOWN, TRYAGAIN, ... */
		if (host[0] == '\0')         /* the node does not know its address: ours */
			snprintf(host, sizeof(host), "%s", cl->nodes[i].host);
		unsigned to = cluster_node(cl, host, port);
		if (to == SL_CLUSTER_NONE) {
			snprintf(why, whylen, "too many cluster nodes (at most %d)",
				 SL_CLUSTER_NODES_MAX);
			return SL_REDIS_EIO;
		}
		sl_log(SL_LOG_DEBUG, "redis: %s slot %u -> %s:%u", kind == 1 ? "MOVED" : "ASK", s,
		       host, port);
		if (kind == 1)
			cl->slot_node[s] = (uint8_t)to;
		else
			ask = to;
	}
	snprintf(why, whylen, "slot %u of %s: more than %d redirects", slot, key, SL_CLUSTER_HOPS);
	return SL_REDIS_EIO;
}

static void cluster_close(void *t, bool abandon)
{
	struct sl_cluster *cl = t;
	for (unsigned i = 0; i < cl->n_nodes; i++) {
		if (abandon)
			sl__redis_abandon(cl->nodes[i].conn);
		else
			sl__redis_close(cl->nodes[i].conn);
	}
}

const struct sl_rtopo sl__rtopo_cluster = {
	.size = sizeof(struct sl_cluster),
	.reach = cluster_open,
	.take = cluster_take,
	.drop = cluster_close,
};
