/*
 * redis.c - SLUICE_REDIS, the server that redis=KEY rules keep their state
 * on: parsing and canonical printing with the password masked.
 *
 *   redis://[[USER]:PASS@]HOST[:PORT][/DB]   TCP; PORT 6379, DB 0 by default;
 *                                            HOST may be [IPv6]
 *   unix:///PATH                             a unix socket (DB 0)
 *
 * USER and PASS are taken literally (no percent-decoding); the last '@'
 * ends them, so a password may contain '@', ':' or '/'. A password is
 * never printed: sl_redis_format shows "***", and error messages quote a
 * copy of the value with every byte of the password (of everything before
 * the '@' when it has no ':') replaced by '*', so columns stay right.
 */
#include <string.h>

#include "internal.h"

#define SL__REDIS_DEFAULT_PORT 6379
#define SL__REDIS_DB_MAX 1000000u
#define SL__REDIS_TEXT_MAX 1024 /* longest SLUICE_REDIS value */

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
			return sl__fail(c, i, "unexpected '%c' in the %s (expected digits)", ch, what);
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
		return sl__fail(c, colon, "empty password after ':' (leave out USER:PASSWORD@ for no AUTH)");
	memcpy(r->user, c->value + pos, colon - pos);
	r->user[colon - pos] = '\0';
	memcpy(r->pass, orig + colon + 1, end - colon - 1);
	r->pass[end - colon - 1] = '\0';
	return 0;
}

/* HOST[:PORT][/DB] in s[pos, end). */
static int parse_host(const struct sl__ctx *c, size_t pos, size_t end, struct sl_redis *r)
{
	const char *s = c->value;
	size_t hend, next;
	uint32_t v;

	if (pos < end && s[pos] == '[') {
		hend = sl__find(s, pos, end, ']');
		if (hend == end)
			return sl__fail(c, pos, "missing ']' after the IPv6 address");
		pos++;
		next = hend + 1;
	} else {
		hend = pos;
		while (hend < end && s[hend] != ':' && s[hend] != '/')
			hend++;
		next = hend;
	}
	if (hend == pos)
		return sl__fail(c, pos, "missing host (e.g. redis://127.0.0.1:6379)");
	if (hend - pos >= SL_REDIS_HOST_MAX)
		return sl__fail(c, pos, "host is %zu bytes long (at most %d)", hend - pos,
				SL_REDIS_HOST_MAX - 1);
	memcpy(r->host, s + pos, hend - pos);
	r->host[hend - pos] = '\0';
	r->port = SL__REDIS_DEFAULT_PORT;
	size_t slash = sl__find(s, next, end, '/');
	if (next < end && s[next] == ':') {
		if (parse_uint(c, next + 1, slash, 65535, "port", &v) < 0)
			return -1;
		if (v == 0)
			return sl__fail(c, next + 1, "port 0 cannot be connected to");
		r->port = (uint16_t)v;
	} else if (next != slash) {
		return sl__fail(c, next, "unexpected '%.*s' after the host (expected :PORT or /DB)",
				SL__TOK(c, next, end));
	}
	if (slash < end && parse_uint(c, slash + 1, end, SL__REDIS_DB_MAX, "database number",
				      &r->db) < 0)
		return -1;
	return 0;
}

/* The last '@' of a redis:// value (c->len if none): the end of the
 * credentials. */
static size_t creds_end(const char *s, size_t len)
{
	size_t at = len;

	for (size_t i = sizeof("redis://") - 1; i < len; i++)
		if (s[i] == '@')
			at = i;
	return at;
}

int sl__redis_parse(const struct sl__ctx *orig, struct sl_redis *out)
{
	static const char tcp[] = "redis://", unx[] = "unix://";
	char masked[SL__REDIS_TEXT_MAX];
	struct sl__ctx m = *orig, *c = &m;
	struct sl_redis r;

	memset(&r, 0, sizeof r);
	if (orig->len >= sizeof masked) {
		m.value = "(not shown)";
		m.len = strlen(m.value);
		return sl__fail_value(c, "value is %zu bytes long (at most %zu)", orig->len,
				      sizeof masked - 1);
	}
	memcpy(masked, orig->value, orig->len + 1);
	m.value = masked;
	if (strncmp(masked, tcp, sizeof tcp - 1) == 0) {
		size_t at = creds_end(masked, orig->len);
		size_t colon = sl__find(masked, sizeof tcp - 1, at, ':');
		size_t from = colon < at ? colon + 1 : sizeof tcp - 1;
		if (at < orig->len)
			memset(masked + from, '*', at - from);
	}
	if (strncmp(c->value, unx, sizeof unx - 1) == 0) {
		size_t pos = sizeof unx - 1;
		if (c->value[pos] != '/')
			return sl__fail(c, pos, "expected an absolute socket path (unix:///path/to/socket)");
		if (c->len - pos >= SL_PATH_MAX)
			return sl__fail(c, pos, "path is %zu bytes long (at most %d)", c->len - pos,
					SL_PATH_MAX - 1);
		memcpy(r.path, c->value + pos, c->len - pos + 1);
		r.kind = SL_REDIS_UNIX;
		*out = r;
		return 0;
	}
	if (strncmp(c->value, tcp, sizeof tcp - 1) != 0)
		return sl__fail(c, 0, "expected redis://[USER:PASSWORD@]HOST[:PORT][/DB] or unix:///PATH");
	size_t pos = sizeof tcp - 1, at = creds_end(c->value, c->len);
	if (at < c->len) {
		if (parse_creds(c, orig->value, pos, at, &r) < 0)
			return -1;
		pos = at + 1;
	}
	if (parse_host(c, pos, c->len, &r) < 0)
		return -1;
	r.kind = SL_REDIS_TCP;
	*out = r;
	return 0;
}

/*
 * Canonical SLUICE_REDIS text of *r with the password printed as "***"
 * (and "" when SLUICE_REDIS is not set). Returns the length the whole text
 * needs, like snprintf; always NUL-terminated when len > 0. Thread-safe.
 */
size_t sl_redis_format(const struct sl_redis *r, char *buf, size_t len)
{
	struct sl__out o;

	sl__out_init(&o, buf, len);
	if (r->kind == SL_REDIS_UNIX) {
		sl__out_str(&o, "unix://");
		sl__out_mem(&o, r->path, strnlen(r->path, SL_PATH_MAX - 1));
		return o.len;
	}
	if (r->kind != SL_REDIS_TCP)
		return o.len;
	sl__out_str(&o, "redis://");
	if (r->pass[0] != '\0') {
		sl__out_mem(&o, r->user, strnlen(r->user, SL_REDIS_CRED_MAX - 1));
		sl__out_str(&o, ":***@");
	}
	bool v6 = memchr(r->host, ':', strnlen(r->host, SL_REDIS_HOST_MAX - 1)) != NULL;
	sl__out_str(&o, v6 ? "[" : "");
	sl__out_mem(&o, r->host, strnlen(r->host, SL_REDIS_HOST_MAX - 1));
	sl__out_str(&o, v6 ? "]:" : ":");
	sl__out_u64(&o, r->port);
	if (r->db != 0) {
		sl__out_str(&o, "/");
		sl__out_u64(&o, r->db);
	}
	return o.len;
}
