/* SPDX-License-Identifier: MIT */
/*
 * redis.c - SLUICE_REDIS, the server that redis=KEY rules keep their state
 * on: parsing and canonical printing with the password masked.
 *
 *   redis://[[USER]:PASS@]HOST[:PORT][/DB]   TCP; PORT 6379, DB 0 by default;
 *                                            HOST may be [IPv6]
 *   unix:///PATH                             a unix socket (DB 0)
 *   redis+cluster://[[USER]:PASS@]NODE(,NODE)*
 *                                            seeds of a Redis Cluster (any
 *                                            of its nodes; PORT 6379 by
 *                                            default; no /DB: a cluster
 *                                            serves database 0 only)
 *   redis+sentinel://[[USER]:PASS@]NODE(,NODE)* "/" MASTER [/DB]
 *                                            sentinels (PORT 26379 by
 *                                            default) watching MASTER
 *
 * At most SL_REDIS_NODES_MAX nodes; NODE is HOST[:PORT] like the host of
 * redis://. USER and PASS are taken literally (no percent-decoding); the
 * last '@' ends them, so a password may contain '@', ':' or '/'. A password
 * is never printed: sl_redis_format shows "***", and error messages quote a
 * copy of the value with every byte of the password (of everything before
 * the '@' when it has no ':') replaced by '*', so columns stay right.
 */
#include <string.h>

#include "internal.h"

#define SL__REDIS_DEFAULT_PORT 6379
#define SL__REDIS_SENTINEL_PORT 26379
#define SL__REDIS_DB_MAX 1000000u
/* The longest SLUICE_REDIS value, NUL included: at least the longest
 * canonical text (SL_REDIS_TEXT_MAX), which must parse back, and a unix://
 * path with its options. */
#define SL__REDIS_TEXT_MAX                                                                         \
	(SL_REDIS_TEXT_MAX > SL_PATH_MAX + 64 ? SL_REDIS_TEXT_MAX : SL_PATH_MAX + 64)

/* Decimal digits filling s[pos, end), at most max. */
static int parse_uint(const struct sl__ctx *c, size_t pos, size_t end, uint32_t max,
		      const char *what, uint32_t *out)
{
	uint64_t v = 0;

	if (pos == end)
		return sl__fail(c, pos, "missing %s", what);
	for (size_t i = pos; i < end; i++) {
		char ch = c->value[i];
		if (ch < '0' || ch > '9')
			return sl__fail(c, i, "unexpected '%c' in the %s (expected digits)", ch,
					what);
		v = v * 10 + (uint64_t)(ch - '0');
		if (v > max)
			return sl__fail(c, pos, "%s '%.*s' is out of range (at most %u)", what,
					SL__TOK(c, pos, end), max);
	}
	*out = (uint32_t)v;
	return 0;
}

/* [[USER]:PASS] in s[pos, end) (the part before the last '@'); c holds the
 * masked value, `orig` the real one, which only the password is copied from. */
static int parse_creds(const struct sl__ctx *c, const char *orig, size_t pos, size_t end,
		       struct sl_redis *r)
{
	size_t colon = sl__find(c->value, pos, end, ':');

	if (colon == end)
		return sl__fail(c, pos, "expected USER:PASSWORD@ or :PASSWORD@ before the host");
	if (colon - pos >= SL_REDIS_CRED_MAX || end - colon - 1 >= SL_REDIS_CRED_MAX)
		return sl__fail(c, pos, "user name or password longer than %d bytes",
				SL_REDIS_CRED_MAX - 1);
	if (end == colon + 1)
		return sl__fail(c, colon,
				"empty password after ':' (leave out USER:PASSWORD@ for no AUTH)");
	memcpy(r->user, c->value + pos, colon - pos);
	r->user[colon - pos] = '\0';
	memcpy(r->pass, orig + colon + 1, end - colon - 1);
	r->pass[end - colon - 1] = '\0';
	return 0;
}

/* One HOST[:PORT] starting at pos and ending before end or the first ','
 * or '/' after the host: into host[SL_REDIS_HOST_MAX] and *port (dflt if
 * not given). *next is where it stopped. */
static int parse_addr(const struct sl__ctx *c, size_t pos, size_t end, uint16_t dflt, char *host,
		      uint16_t *port, size_t *next)
{
	const char *s = c->value;
	size_t hend, after;
	uint32_t v;

	if (pos < end && s[pos] == '[') {
		hend = sl__find(s, pos, end, ']');
		if (hend == end)
			return sl__fail(c, pos, "missing ']' after the IPv6 address");
		pos++;
		after = hend + 1;
	} else {
		hend = pos;
		while (hend < end && s[hend] != ':' && s[hend] != '/' && s[hend] != ',')
			hend++;
		after = hend;
	}
	if (hend == pos)
		return sl__fail(c, pos, "missing host (e.g. redis://127.0.0.1:6379)");
	/* A name, an IPv4 address, or (in []) an IPv6 address: so that the
	 * canonical text parses back to the same host. */
	bool v6 = after != hend;
	for (size_t i = pos; i < hend; i++) {
		char ch = s[i];
		bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			  (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_' ||
			  (v6 && (ch == ':' || ch == '%'));
		if (!ok)
			return sl__fail(c, i,
					"unexpected '%c' in the %s (expected letters, digits, "
					"'.', '-', '_'%s)",
					ch, v6 ? "IPv6 address" : "host", v6 ? ", ':' or '%'" : "");
	}
	if (v6 && sl__find(s, pos, hend, ':') == hend)
		return sl__fail(c, pos,
				"'[%.*s]' is not an IPv6 address (no ':'; leave out the [])",
				SL__TOK(c, pos, hend));
	if (hend - pos >= SL_REDIS_HOST_MAX)
		return sl__fail(c, pos, "host is %zu bytes long (at most %d)", hend - pos,
				SL_REDIS_HOST_MAX - 1);
	memcpy(host, s + pos, hend - pos);
	host[hend - pos] = '\0';
	*port = dflt;
	size_t stop = after;
	while (stop < end && s[stop] != '/' && s[stop] != ',')
		stop++;
	if (after < end && s[after] == ':') {
		if (parse_uint(c, after + 1, stop, 65535, "port", &v) < 0)
			return -1;
		if (v == 0)
			return sl__fail(c, after + 1, "port 0 cannot be connected to");
		*port = (uint16_t)v;
	} else if (after != stop) {
		return sl__fail(c, after,
				"unexpected '%.*s' after the host (expected :PORT, ',' or '/')",
				SL__TOK(c, after, end));
	}
	*next = stop;
	return 0;
}

/* HOST[:PORT][/DB] in s[pos, end). */
static int parse_host(const struct sl__ctx *c, size_t pos, size_t end, struct sl_redis *r)
{
	size_t next;

	if (parse_addr(c, pos, end, SL__REDIS_DEFAULT_PORT, r->host, &r->port, &next) < 0)
		return -1;
	if (next < end && c->value[next] == ',')
		return sl__fail(c, next,
				"a list of nodes needs redis+cluster:// or "
				"redis+sentinel://.../MASTER (redis:// names one server)");
	if (next < end &&
	    parse_uint(c, next + 1, end, SL__REDIS_DB_MAX, "database number", &r->db) < 0)
		return -1;
	return 0;
}

/* NODE(,NODE)* from pos up to end or the first '/' after a node: into
 * r->nodes. *next is where the list stopped. */
static int parse_nodes(const struct sl__ctx *c, size_t pos, size_t end, uint16_t dflt,
		       struct sl_redis *r, size_t *next)
{
	for (;;) {
		if (r->n_nodes == SL_REDIS_NODES_MAX)
			return sl__fail(c, pos,
					"more than %d nodes (give a few: the others are "
					"found from them)",
					SL_REDIS_NODES_MAX);
		struct sl_redis_node *n = &r->nodes[r->n_nodes];
		if (parse_addr(c, pos, end, dflt, n->host, &n->port, &pos) < 0)
			return -1;
		for (uint32_t i = 0; i < r->n_nodes; i++)
			if (r->nodes[i].port == n->port && strcmp(r->nodes[i].host, n->host) == 0)
				return sl__fail(c, pos - 1, "node %s:%u is given twice", n->host,
						n->port);
		r->n_nodes++;
		if (pos == end || c->value[pos] != ',')
			break;
		pos++;
	}
	*next = pos;
	return 0;
}

/* redis+cluster:// after the credentials: seeds, nothing else. */
static int parse_cluster(const struct sl__ctx *c, size_t pos, struct sl_redis *r)
{
	size_t next;

	if (parse_nodes(c, pos, c->len, SL__REDIS_DEFAULT_PORT, r, &next) < 0)
		return -1;
	if (next < c->len)
		return sl__fail(c, next,
				"unexpected '%.*s' after the nodes (a cluster serves "
				"database 0 only: no /DB)",
				SL__TOK(c, next, c->len));
	r->kind = SL_REDIS_CLUSTER;
	return 0;
}

/* redis+sentinel:// after the credentials: sentinels, /MASTER, [/DB]. */
static int parse_sentinel(const struct sl__ctx *c, size_t pos, struct sl_redis *r)
{
	const char *s = c->value;
	size_t next;

	if (parse_nodes(c, pos, c->len, SL__REDIS_SENTINEL_PORT, r, &next) < 0)
		return -1;
	if (next == c->len)
		return sl__fail(c, next,
				"missing /MASTER after the sentinels (the name they "
				"monitor, e.g. redis+sentinel://10.0.0.1:26379/mymaster)");
	size_t name = next + 1, nend = sl__find(s, name, c->len, '/');
	if (nend == name)
		return sl__fail(c, name, "missing master name after '/'");
	if (nend - name >= SL_REDIS_MASTER_MAX)
		return sl__fail(c, name, "master name is %zu bytes long (at most %d)", nend - name,
				SL_REDIS_MASTER_MAX - 1);
	for (size_t i = name; i < nend; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.'))
			return sl__fail(c, i,
					"unexpected '%c' in the master name (expected letters, "
					"digits, '_', '-' or '.')",
					ch);
	}
	memcpy(r->master, s + name, nend - name);
	r->master[nend - name] = '\0';
	if (nend < c->len &&
	    parse_uint(c, nend + 1, c->len, SL__REDIS_DB_MAX, "database number", &r->db) < 0)
		return -1;
	r->kind = SL_REDIS_SENTINEL;
	return 0;
}

/* The last '@' of a value after its scheme (len if none): the end of the
 * credentials. */
static size_t creds_end(const char *s, size_t from, size_t len)
{
	size_t at = len;

	for (size_t i = from; i < len; i++)
		if (s[i] == '@')
			at = i;
	return at;
}

/* The scheme s starts with, and the length of its "X://" prefix; -1 for
 * none of them. */
static int scheme_of(const char *s, size_t *plen)
{
	static const char *const names[] = {"redis://", "unix://", "redis+cluster://",
					    "redis+sentinel://"};
	static const int kinds[] = {SL_REDIS_TCP, SL_REDIS_UNIX, SL_REDIS_CLUSTER,
				    SL_REDIS_SENTINEL};

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (strncmp(s, names[i], strlen(names[i])) == 0) {
			*plen = strlen(names[i]);
			return kinds[i];
		}
	}
	return -1;
}

int sl__redis_parse(const struct sl__ctx *orig, struct sl_redis *out)
{
	char masked[SL__REDIS_TEXT_MAX];
	struct sl__ctx m = *orig, *c = &m;
	struct sl_redis r;
	size_t pos = 0;

	memset(&r, 0, sizeof r);
	if (orig->len >= sizeof masked) {
		m.value = "(not shown)";
		m.len = strlen(m.value);
		return sl__fail_value(c, "value is %zu bytes long (at most %zu)", orig->len,
				      sizeof masked - 1);
	}
	memcpy(masked, orig->value, orig->len + 1);
	m.value = masked;
	int kind = scheme_of(masked, &pos);
	size_t at = kind > 0 && kind != SL_REDIS_UNIX ? creds_end(masked, pos, orig->len)
						      : orig->len;
	if (at < orig->len) {
		size_t colon = sl__find(masked, pos, at, ':');
		size_t from = colon < at ? colon + 1 : pos;
		memset(masked + from, '*', at - from);
	}
	if (kind == SL_REDIS_UNIX) {
		if (c->value[pos] != '/')
			return sl__fail(c, pos,
					"expected an absolute socket path (unix:///path/to/socket)");
		if (c->len - pos >= SL_PATH_MAX)
			return sl__fail(c, pos, "path is %zu bytes long (at most %d)", c->len - pos,
					SL_PATH_MAX - 1);
		memcpy(r.path, c->value + pos, c->len - pos + 1);
		r.kind = SL_REDIS_UNIX;
		*out = r;
		return 0;
	}
	if (kind < 0)
		return sl__fail(c, 0,
				"expected redis://[USER:PASSWORD@]HOST[:PORT][/DB], "
				"unix:///PATH, redis+cluster://NODE,NODE,... or "
				"redis+sentinel://NODE,NODE,.../MASTER");
	if (at < c->len) {
		if (parse_creds(c, orig->value, pos, at, &r) < 0)
			return -1;
		pos = at + 1;
	}
	if (kind == SL_REDIS_CLUSTER) {
		if (parse_cluster(c, pos, &r) < 0)
			return -1;
	} else if (kind == SL_REDIS_SENTINEL) {
		if (parse_sentinel(c, pos, &r) < 0)
			return -1;
	} else {
		if (parse_host(c, pos, c->len, &r) < 0)
			return -1;
		r.kind = SL_REDIS_TCP;
	}
	*out = r;
	return 0;
}

/* HOST:PORT with [] around an IPv6 address. */
static void out_addr(struct sl__out *o, const char *host, uint16_t port)
{
	size_t n = strnlen(host, SL_REDIS_HOST_MAX - 1);
	bool v6 = memchr(host, ':', n) != NULL;

	sl__out_str(o, v6 ? "[" : "");
	sl__out_mem(o, host, n);
	sl__out_str(o, v6 ? "]:" : ":");
	sl__out_u64(o, port);
}

/*
 * Canonical SLUICE_REDIS text of *r with the password printed as "***"
 * (and "" when SLUICE_REDIS is not set). Returns the length the whole text
 * needs, like snprintf; always NUL-terminated when len > 0. Thread-safe.
 */
size_t sl_redis_format(const struct sl_redis *r, char *buf, size_t len)
{
	static const char *const schemes[] = {"", "redis://", "unix://", "redis+cluster://",
					      "redis+sentinel://"};
	struct sl__out o;

	sl__out_init(&o, buf, len);
	if (r->kind == SL_REDIS_NONE || r->kind > SL_REDIS_SENTINEL)
		return o.len;
	sl__out_str(&o, schemes[r->kind]);
	if (r->kind == SL_REDIS_UNIX) {
		sl__out_mem(&o, r->path, strnlen(r->path, SL_PATH_MAX - 1));
		return o.len;
	}
	if (r->pass[0] != '\0') {
		sl__out_mem(&o, r->user, strnlen(r->user, SL_REDIS_CRED_MAX - 1));
		sl__out_str(&o, ":***@");
	}
	if (r->kind == SL_REDIS_TCP) {
		out_addr(&o, r->host, r->port);
	} else {
		for (uint32_t i = 0; i < r->n_nodes && i < SL_REDIS_NODES_MAX; i++) {
			sl__out_str(&o, i > 0 ? "," : "");
			out_addr(&o, r->nodes[i].host, r->nodes[i].port);
		}
	}
	if (r->kind == SL_REDIS_SENTINEL) {
		sl__out_str(&o, "/");
		sl__out_mem(&o, r->master, strnlen(r->master, SL_REDIS_MASTER_MAX - 1));
	}
	if (r->db != 0) {
		sl__out_str(&o, "/");
		sl__out_u64(&o, r->db);
	}
	return o.len;
}
