/* SPDX-License-Identifier: MIT */
/*
 * redis_sentinel.c - redis=KEY rules on a master watched by Redis Sentinel
 * (SLUICE_REDIS=redis+sentinel://NODE,NODE,.../MASTER[/DB]).
 *
 * Finding the master: ask the sentinels in turn, starting with the one that
 * answered last, SENTINEL get-master-addr-by-name MASTER; connect to the
 * address it gives (AUTH and SELECT as SLUICE_REDIS says) and check with
 * ROLE that it is a master: right after a failover a sentinel may still
 * name the old one, or the old master may be back as a replica. A sentinel
 * that is down, does not know MASTER or names a replica is passed over for
 * the next.
 *
 * Then leases go to that master until it fails: a connection error, or a
 * -READONLY reply (it was demoted to a replica while we were connected).
 * Either way the master is asked for again at once, and the lease retried
 * once on the new one; if that fails too, the lease fails and the rule is
 * on its on-error mode (lease.c) until the lease thread's next attempt.
 * A master can also go on answering after the sentinels have promoted
 * another (a planned SENTINEL FAILOVER, a partition): the sentinels demote
 * it only once they see it again, seconds later, and leases taken from it
 * meanwhile are lost when it resyncs, while the processes already on the
 * new master lease there too. So while a master works, the sentinel that
 * named it is asked again every SL_SENTINEL_RECHECK_NS (100 ms) over a
 * connection kept open, and a different answer moves the link at once:
 * the fleet's two masters overlap for at most that long per process, at
 * the price of ten sentinel round trips per second per leasing process.
 *
 * Sentinels are asked without AUTH (SLUICE_REDIS's password is the data
 * nodes'); the connection to the sentinel that answered stays open.
 *
 * Thread-safety: one thread (the lease thread) per struct sl_sentinel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "redis_proto.h"

#define SL_SENTINEL_RECHECK_NS 100000000ull /* re-ask the sentinel this often */

struct sl_sentinel {
	const struct sl_redis *cfg;
	uint64_t timeout_ns;
	uint32_t next;          /* the sentinel to ask first */
	struct sl_rconn *conn;  /* the master's */
	struct sl_rconn *sconn; /* sentinel `sidx`'s, kept for the rechecks */
	uint32_t sidx;
	uint64_t checked_ns; /* when a sentinel last named the master */
	char host[SL_REDIS_HOST_MAX];
	uint16_t port;
};

/* Sentinel k's answer for the master's address into s->host, s->port. */
static int sentinel_ask(struct sl_sentinel *s, uint32_t k, char *why, size_t whylen)
{
	const struct sl_redis_node *n = &s->cfg->nodes[k];
	char e[160];
	if (s->sconn != NULL && s->sidx != k) {
		sl__redis_close(s->sconn);
		s->sconn = NULL;
	}
	if (s->sconn == NULL) {
		s->sconn = sl__redis_open_at(NULL, n->host, n->port, s->timeout_ns, e, sizeof(e));
		if (s->sconn == NULL) {
			snprintf(why, whylen, "sentinel %s:%u: %s", n->host, n->port, e);
			return -1;
		}
		s->sidx = k;
	}
	struct sl_rconn *c = s->sconn;
	const char *argv[] = {"SENTINEL", "get-master-addr-by-name", s->cfg->master};
	struct sl_hreply *r = sl__redis_cmd(c, 3, argv, e, sizeof(e));
	int ok = -1;
	if (r == NULL) {
		snprintf(why, whylen, "sentinel %s:%u: %s", n->host, n->port, e);
	} else if (r->type == SL_HR_ARRAY && r->elements == 2 &&
		   r->element[0]->type == SL_HR_STRING && r->element[1]->type == SL_HR_STRING &&
		   r->element[0]->len < sizeof(s->host)) {
		char *end;
		unsigned long port = strtoul(r->element[1]->str, &end, 10);
		if (*end == '\0' && port > 0 && port <= 65535) {
			memcpy(s->host, r->element[0]->str, r->element[0]->len);
			s->host[r->element[0]->len] = '\0';
			s->port = (uint16_t)port;
			ok = 0;
		} else {
			snprintf(why, whylen, "sentinel %s:%u: bad port '%s'", n->host, n->port,
				 r->element[1]->str);
		}
	} else {
		snprintf(why, whylen, "sentinel %s:%u: %s", n->host, n->port,
			 r->type == SL_HR_ERROR && r->str != NULL ? r->str
			 : r->type == SL_HR_NIL                   ? "does not know this master"
								  : "unexpected reply");
	}
	if (r != NULL)
		sl__redis_free_reply(r);
	else { /* the connection failed: a new one next time */
		sl__redis_close(s->sconn);
		s->sconn = NULL;
	}
	return ok;
}

/* ROLE of the connection is master. 0, or -1 (reason in why). */
static int sentinel_is_master(struct sl_sentinel *s, char *why, size_t whylen)
{
	static const char *const argv[] = {"ROLE"};
	char e[160];
	struct sl_hreply *r = sl__redis_cmd(s->conn, 1, (const char **)argv, e, sizeof(e));
	if (r == NULL) {
		snprintf(why, whylen, "%s:%u: ROLE: %s", s->host, s->port, e);
		return -1;
	}
	int ok = r->type == SL_HR_ARRAY && r->elements > 0 && r->element[0]->type == SL_HR_STRING &&
		 strcmp(r->element[0]->str, "master") == 0;
	if (!ok)
		snprintf(why, whylen, "%s:%u is not a master (ROLE: %s)", s->host, s->port,
			 r->type == SL_HR_ARRAY && r->elements > 0 && r->element[0]->str != NULL
				 ? r->element[0]->str
				 : "unexpected reply");
	sl__redis_free_reply(r);
	return ok ? 0 : -1;
}

/* Find the master and connect to it. 0 or -1 (the last reason in why). */
static int sentinel_find(struct sl_sentinel *s, char *why, size_t whylen)
{
	uint32_t n = s->cfg->n_nodes;
	for (uint32_t j = 0; j < n; j++) {
		uint32_t k = (s->next + j) % n;
		if (sentinel_ask(s, k, why, whylen) < 0)
			continue;
		char e[160];
		s->conn = sl__redis_open_at(s->cfg, s->host, s->port, s->timeout_ns, e, sizeof(e));
		if (s->conn == NULL) {
			snprintf(why, whylen, "master %s:%u (from sentinel %u): %s", s->host,
				 s->port, k + 1, e);
			continue;
		}
		if (sentinel_is_master(s, why, whylen) < 0) {
			sl__redis_close(s->conn);
			s->conn = NULL;
			continue;
		}
		if (k != s->next)
			sl_log(SL_LOG_INFO, "redis: sentinel %u answers", k + 1);
		s->next = k;
		s->checked_ns = sl__clock_ns();
		sl_log(SL_LOG_INFO, "redis: master %s is %s:%u", s->cfg->master, s->host, s->port);
		return 0;
	}
	return -1;
}

static int sentinel_open(void *t, const struct sl_redis *cfg, uint64_t timeout_ns, char *why,
			 size_t whylen)
{
	struct sl_sentinel *s = t;
	s->cfg = cfg;
	s->timeout_ns = timeout_ns;
	return sentinel_find(s, why, whylen);
}

/* Every SL_SENTINEL_RECHECK_NS: does the sentinel still name our master?
 * If it names another, drop ours (the caller finds the new one). A
 * sentinel that does not answer changes nothing. */
static void sentinel_recheck(struct sl_sentinel *s)
{
	uint64_t now = sl__clock_ns();
	if (s->conn == NULL || now - s->checked_ns < SL_SENTINEL_RECHECK_NS)
		return;
	s->checked_ns = now;
	char host[SL_REDIS_HOST_MAX], why[192];
	uint16_t port = s->port;
	memcpy(host, s->host, sizeof(host));
	if (sentinel_ask(s, s->next, why, sizeof(why)) < 0) {
		sl_log(SL_LOG_DEBUG, "redis: %s", why);
		return;
	}
	if (port == s->port && strcmp(host, s->host) == 0)
		return;
	sl_log(SL_LOG_INFO, "redis: sentinel %u names %s:%u, not %s:%u, as master %s", s->next + 1,
	       s->host, s->port, host, port, s->cfg->master);
	sl__redis_close(s->conn);
	s->conn = NULL;
}

static int sentinel_take(void *t, const char *key, double t_us, double tau_us, uint64_t want,
			 uint64_t *got, uint64_t *wait_ns, char *why, size_t whylen)
{
	struct sl_sentinel *s = t;
	sentinel_recheck(s);
	for (int attempt = 0; attempt < 2; attempt++) {
		if (s->conn == NULL && sentinel_find(s, why, whylen) < 0)
			return SL_REDIS_EIO;
		int rc = sl__redis_take_at(s->conn, false, key, t_us, tau_us, want, got, wait_ns,
					   why, whylen);
		if (rc == 0)
			return 0;
		if (rc == SL_REDIS_EREPLY && strstr(why, "READONLY") == NULL)
			return SL_REDIS_EIO; /* an error no other master would fix */
		/* Gone, or demoted: ask the sentinels again. */
		sl_log(SL_LOG_INFO, "redis: master %s:%u: %s", s->host, s->port, why);
		sl__redis_close(s->conn);
		s->conn = NULL;
	}
	return SL_REDIS_EIO;
}

static void sentinel_close(void *t, bool abandon)
{
	struct sl_sentinel *s = t;
	if (abandon) {
		sl__redis_abandon(s->conn);
		sl__redis_abandon(s->sconn);
	} else {
		sl__redis_close(s->conn);
		sl__redis_close(s->sconn);
	}
}

const struct sl_rtopo sl__rtopo_sentinel = {
	.size = sizeof(struct sl_sentinel),
	.reach = sentinel_open,
	.take = sentinel_take,
	.drop = sentinel_close,
};
