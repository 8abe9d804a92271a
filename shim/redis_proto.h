/* SPDX-License-Identifier: MIT */
/*
 * redis_proto.h - what the shim's Redis files share beyond redis.h: the
 * leading fields of hiredis 0.14's redisReply (the library is loaded with
 * dlopen, so sluice builds without its headers), one-command helpers, and
 * the topology back ends (redis_cluster.c, redis_sentinel.c) that
 * redis_link.c dispatches to.
 *
 * Thread-safety: like a connection, everything here is used by one thread
 * at a time (the lease thread).
 */
#ifndef SLUICE_SHIM_REDIS_PROTO_H
#define SLUICE_SHIM_REDIS_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"
#include "redis.h"

/* hiredis 0.14 read.h's reply types. */
#define SL_HR_STRING 1
#define SL_HR_ARRAY 2
#define SL_HR_INTEGER 3
#define SL_HR_NIL 4
#define SL_HR_STATUS 5
#define SL_HR_ERROR 6

struct sl_hreply {
	int type;
	long long integer;
	size_t len;
	char *str;
	size_t elements;
	struct sl_hreply **element;
};

/* hiredis 0.14 read.h's redisReadTask, redisReplyObjectFunctions and
 * redisReader up to its functions (redis.c caps the arrays a reply may
 * announce). tests/test_redis_cluster.c checks these layouts against the
 * headers. */
struct sl_rtask {
	int type, elements, idx;
	void *obj, *parent, *privdata;
};
struct sl_rfuncs {
	void *(*create_string)(const struct sl_rtask *, char *, size_t);
	void *(*create_array)(const struct sl_rtask *, int);
	void *(*create_integer)(const struct sl_rtask *, long long);
	void *(*create_nil)(const struct sl_rtask *);
	void (*free_object)(void *);
};
struct sl_rreader {
	int err;
	char errstr[128];
	char *buf;
	size_t pos, len; /* unread: buf[pos..len) */
	size_t maxbuf;
	struct sl_rtask rstack[9];
	int ridx;
	void *reply;
	const struct sl_rfuncs *fn;
};
/* sl__redis_take_at's answers besides 0. */
#define SL_REDIS_EIO (-1)    /* the connection failed: close it */
#define SL_REDIS_EREPLY (-2) /* the server answered with an error: text in why */

/*
 * Connect to host:port (unix socket path when port is 0), with every
 * operation bounded by timeout_ns; AUTH and SELECT as auth says (NULL: no
 * AUTH, no SELECT, as for a sentinel). NULL on failure, reason in why.
 */
struct sl_rconn *sl__redis_open_at(const struct sl_redis *auth, const char *host, uint16_t port,
				   uint64_t timeout_ns, char *why, size_t whylen);
/* One command (argc <= 8); NULL (reason in why) if the connection failed.
 * Free the reply with sl__redis_free_reply. */
struct sl_hreply *sl__redis_cmd(struct sl_rconn *c, int argc, const char **argv, char *why,
				size_t whylen);
void sl__redis_free_reply(struct sl_hreply *r);
/* calloc(1, size), or NULL with "out of memory" in why. */
void *sl__redis_zalloc(size_t size, char *why, size_t whylen);
/*
 * Lease up to `want` units of limiter `key` (EVALSHA, loading the script
 * first if needed and again on NOSCRIPT), with ASKING sent right before
 * each EVALSHA when `asking` (a cluster's ASK redirect). On success returns
 * 0 with *got units granted and, if fewer than want, *wait_ns until one
 * more would be; SL_REDIS_EIO when the connection failed or timed out (it
 * must then be closed), SL_REDIS_EREPLY for an error reply (reason in why).
 */
int sl__redis_take_at(struct sl_rconn *c, bool asking, const char *key, double t_us, double tau_us,
		      uint64_t want, uint64_t *got, uint64_t *wait_ns, char *why, size_t whylen);

/* ---- Redis Cluster (redis_cluster.c) ---- */
struct sl_cluster;
/* The slot of a key (CRC16 of its {hash tag}, or of the key, mod 16384). */
uint16_t sl__cluster_slot(const char *key, size_t len);
/*
 * Parse a "MOVED SLOT HOST:PORT" or "ASK SLOT HOST:PORT" error reply.
 * Returns 1 for MOVED, 2 for ASK, 0 for any other text. An empty HOST
 * ("MOVED 3999 :7001": the server does not know its address) gives "".
 */
int sl__cluster_redirect_parse(const char *err, uint16_t *slot, char *host, size_t hostlen,
			       uint16_t *port);

/* ---- Topologies: what a link (redis_link.c) reaches its server through ---- */

/* One form of SLUICE_REDIS: one connection (redis.c), a Redis Cluster's
 * nodes (redis_cluster.c), or the master Sentinel names (redis_sentinel.c).
 * Its state is `size` bytes, zeroed by the link, passed to each call. */
struct sl_rtopo {
	size_t size;
	/* Connect: 0, or -1 with the reason in why. drop follows either. */
	int (*reach)(void *t, const struct sl_redis *cfg, uint64_t timeout_ns, char *why,
		     size_t whylen);
	/* As sl__redis_take_at: 0, SL_REDIS_EIO or SL_REDIS_EREPLY. */
	int (*take)(void *t, const char *key, double t_us, double tau_us, uint64_t want,
		    uint64_t *got, uint64_t *wait_ns, char *why, size_t whylen);
	/* Close its connections; abandon (a fork child): the sockets only,
	 * as sl__redis_abandon does. The link frees t. */
	void (*drop)(void *t, bool abandon);
};
extern const struct sl_rtopo sl__rtopo_one, sl__rtopo_cluster, sl__rtopo_sentinel;

#endif /* SLUICE_SHIM_REDIS_PROTO_H */
