/* SPDX-License-Identifier: MIT */
/*
 * breaker.c - a circuit breaker's SPEC: errors=N | errors=P% (with min=K),
 * window=, open=, slow=, the errno option, per=process|peer, to=, port=, family=.
 *
 * Decisions where the issue left room:
 *   - errors= is required (a breaker that never opens would only mislead);
 *     N is 1 to 1048575 (the window counts up to 2^20 - 1 per bucket), P is
 *     a whole percentage 1 to 100; min= (default 5, Sentinel's
 *     minRequestAmount) only goes with P%.
 *   - window= 10ms to 1h (ten buckets of at least 1 ms), open= 1ms to 1h,
 *     slow= 1us to 1h; the errno option takes any known name.
 *   - per= is process or peer (the default: one breaker per destination
 *     address and port); thread and fd have no meaning for a destination.
 *     family=unix is refused with per=peer: a unix socket's peer has no
 *     address and port to key on.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"

enum bopt {
	B_ERRORS,
	B_MIN,
	B_WINDOW,
	B_OPEN,
	B_SLOW,
	B_ERRNO,
	B_PER,
	B_TO,
	B_PORT,
	B_FAMILY,
	B_COUNT
};

static const char *const bopt_names[B_COUNT] = {"errors", "min", "window", "open", "slow",
						"errno",  "per", "to",     "port", "family"};

#define B_DURATION_MAX (3600ull * SL__NS_PER_S)

static bool bgiven(const struct sl_break *b, enum bopt o)
{
	return (b->explicit_opts & (1u << o)) != 0;
}

/* A whole number in [lo, hi] filling [pos, end). */
static int parse_whole(const struct sl__ctx *c, size_t pos, size_t end, uint64_t lo, uint64_t hi,
		       const char *what, uint64_t *out)
{
	struct sl__num n;
	if (sl__num_parse(c, pos, end, &n) < 0)
		return -1;
	if (n.end != end || n.frac != 0 || n.mant < lo || n.mant > hi)
		return sl__fail(c, pos, "%s '%.*s' must be a whole number from %llu to %llu", what,
				SL__TOK(c, pos, end), (unsigned long long)lo,
				(unsigned long long)hi);
	*out = n.mant;
	return 0;
}

static int parse_errors(struct sl_break *b, const struct sl__ctx *c, size_t pos, size_t end)
{
	uint64_t v;
	if (end > pos && c->value[end - 1] == '%') {
		if (parse_whole(c, pos, end - 1, 1, 100, "errors percentage", &v) < 0)
			return -1;
		b->ratio_pct = (uint8_t)v;
		return 0;
	}
	if (parse_whole(c, pos, end, 1, 1048575, "errors", &v) < 0)
		return -1;
	b->errors = (uint32_t)v;
	return 0;
}

static int parse_span(const struct sl__ctx *c, size_t pos, size_t end, uint64_t lo,
		      const char *what, const char *least, uint64_t *ns)
{
	if (sl__duration_parse(c, pos, end, ns) < 0)
		return -1;
	if (*ns < lo || *ns > B_DURATION_MAX)
		return sl__fail(c, pos, "%s '%.*s' must be from %s to 1h", what,
				SL__TOK(c, pos, end), least);
	return 0;
}

static int parse_value(struct sl_break *b, enum bopt o, const struct sl__ctx *c, size_t pos,
		       size_t end, uint16_t *to_port)
{
	uint64_t v;
	switch (o) {
	case B_ERRORS:
		return parse_errors(b, c, pos, end);
	case B_MIN:
		if (parse_whole(c, pos, end, 1, 1048575, "min", &v) < 0)
			return -1;
		b->min = (uint32_t)v;
		return 0;
	case B_WINDOW:
		return parse_span(c, pos, end, 10 * SL__NS_PER_MS, "window", "10ms", &b->window_ns);
	case B_OPEN:
		return parse_span(c, pos, end, SL__NS_PER_MS, "open", "1ms", &b->open_ns);
	case B_SLOW:
		return parse_span(c, pos, end, SL__NS_PER_US, "slow", "1us", &b->slow_ns);
	case B_ERRNO:
		b->err = sl_errno_from_name(c->value + pos, end - pos);
		if (b->err == 0)
			return sl__fail(c, pos,
					"unknown errno name '%.*s' (expected a name such as "
					"ECONNREFUSED, EHOSTUNREACH, ETIMEDOUT)",
					SL__TOK(c, pos, end));
		return 0;
	case B_PER: {
		static const char *const scopes[] = {"process", "peer"};
		int k = sl__choice_parse(c, pos, end, "per (for break)", scopes, 2);
		if (k < 0)
			return -1;
		b->scope = k == 0 ? SL_SCOPE_PROCESS : SL_SCOPE_PEER;
		return 0;
	}
	case B_TO:
		return sl__cidr_parse(c, pos, end, &b->to, to_port);
	case B_PORT:
		return sl__port_parse(c, pos, end, &b->port_lo, &b->port_hi);
	case B_FAMILY:
		return sl__names_parse(c, pos, end, sl__family_names, 3, "family", &b->families);
	case B_COUNT:
		break;
	}
	return 0;
}

static int check(struct sl_break *b, const size_t *name_pos, const size_t *val_pos,
		 uint16_t to_port, const struct sl__ctx *c, size_t spec_pos)
{
	if (!bgiven(b, B_ERRORS))
		return sl__fail(c, spec_pos,
				"missing errors=N or errors=P%% (how many failed connects "
				"open the breaker, e.g. errors=5)");
	if (bgiven(b, B_MIN) && b->ratio_pct == 0)
		return sl__fail(c, name_pos[B_MIN],
				"option 'min' is valid only with errors=P%% (the "
				"fewest connects a ratio is judged on)");
	if (b->ratio_pct != 0 && !bgiven(b, B_MIN))
		b->min = SL_BREAK_MIN_DEFAULT;
	if (to_port != 0 && bgiven(b, B_PORT))
		return sl__fail(c,
				name_pos[B_PORT] > name_pos[B_TO] ? name_pos[B_PORT]
								  : name_pos[B_TO],
				"duplicate option 'port' (to= gives port %u too)", to_port);
	if (to_port != 0)
		b->port_lo = b->port_hi = to_port;
	/* An IPv4 to= fits IPv4-mapped addresses on inet6 sockets too. */
	if (b->to.family != 0 &&
	    !(b->families & (b->to.family == 4 ? SL_FAM_INET | SL_FAM_INET6 : SL_FAM_INET6)))
		return sl__fail(
			c, val_pos[B_TO],
			"to= is an IPv%u address but family= leaves out %s: the breaker could never match",
			b->to.family, b->to.family == 4 ? "inet and inet6" : "inet6");
	if ((b->families & SL_FAM_UNIX) && b->scope == SL_SCOPE_PEER)
		return sl__fail(c, bgiven(b, B_FAMILY) ? val_pos[B_FAMILY] : spec_pos,
				"family=unix needs per=process (a unix socket's peer has no address and "
				"port to keep a breaker for)");
	return 0;
}

int sl__break_parse_span(struct sl_break *out, const struct sl__ctx *c, size_t pos, size_t end)
{
	struct sl_break b;
	size_t name_pos[B_COUNT] = {0}, val_pos[B_COUNT] = {0};
	uint16_t to_port = 0;
	char hint[64], expected[128];

	memset(&b, 0, sizeof b);
	b.scope = SL_SCOPE_PEER;
	b.families = SL__DEFAULT_FAMILIES;
	b.window_ns = SL_BREAK_WINDOW_DEFAULT_NS;
	b.open_ns = SL_BREAK_OPEN_DEFAULT_NS;
	b.port_lo = 0;
	b.port_hi = UINT16_MAX;
	sl__trim(c->value, &pos, &end);
	const size_t spec_pos = pos;
	if (pos == end)
		return sl__fail(c, pos,
				"empty breaker (expected errors=N or errors=P%%, e.g. "
				"errors=5,window=10s,open=5s)");
	for (size_t p = pos; p <= end;) {
		size_t comma = sl__find(c->value, p, end, ','), op = p, oend = comma;
		sl__trim(c->value, &op, &oend);
		if (op == oend)
			return sl__fail(c, op, "empty option (expected name=value)");
		size_t eq = sl__find(c->value, op, oend, '='), nend = eq;
		sl__trim(c->value, &op, &nend);
		int k = sl__lookup(bopt_names, B_COUNT, c->value + op, nend - op);
		if (k < 0) {
			const char *near = sl__suggest(bopt_names, B_COUNT, c->value + op,
						       nend - op);
			if (near != NULL)
				return sl__fail(c, op, "unknown breaker option '%.*s'%s",
						SL__TOK(c, op, nend),
						sl__did_you_mean(hint, sizeof hint, near));
			return sl__fail(c, op, "unknown breaker option '%.*s' (expected %s)",
					SL__TOK(c, op, nend),
					sl__join(expected, sizeof expected, bopt_names, B_COUNT,
						 ", "));
		}
		enum bopt o = (enum bopt)k;
		if (bgiven(&b, o))
			return sl__fail(c, op, "duplicate option '%s' (first given at column %zu)",
					bopt_names[o], name_pos[o] + 1);
		if (eq == oend)
			return sl__fail(c, oend, "expected '=' and a value after '%s'",
					bopt_names[o]);
		size_t vpos = eq + 1, vend = oend;
		sl__trim(c->value, &vpos, &vend);
		if (vpos == vend)
			return sl__fail(c, vpos, "missing value after '%s='", bopt_names[o]);
		b.explicit_opts |= 1u << o;
		name_pos[o] = op;
		val_pos[o] = vpos;
		if (parse_value(&b, o, c, vpos, vend, &to_port) < 0)
			return -1;
		p = comma + 1;
	}
	if (check(&b, name_pos, val_pos, to_port, c, spec_pos) < 0)
		return -1;
	*out = b;
	return 0;
}

int sl_break_parse(struct sl_break *b, const char *spec, const char *var, char *err, size_t errlen)
{
	struct sl__ctx c = {.var = var != NULL ? var : "SLUICE_BREAK",
			    .value = spec,
			    .len = strlen(spec),
			    .err = err,
			    .errlen = errlen};
	return sl__break_parse_span(b, &c, 0, c.len);
}

static void out_opt(struct sl__out *o, const char *name)
{
	sl__out_str(o, ",");
	sl__out_str(o, name);
	sl__out_str(o, "=");
}

size_t sl_break_format(const struct sl_break *b, char *buf, size_t len)
{
	struct sl__out o;
	sl__out_init(&o, buf, len);
	sl__out_str(&o, "break:errors=");
	if (b->ratio_pct != 0) {
		sl__out_u64(&o, b->ratio_pct);
		sl__out_str(&o, "%");
		if (b->min != SL_BREAK_MIN_DEFAULT) {
			out_opt(&o, "min");
			sl__out_u64(&o, b->min);
		}
	} else {
		sl__out_u64(&o, b->errors);
	}
	if (b->window_ns != SL_BREAK_WINDOW_DEFAULT_NS) {
		out_opt(&o, "window");
		sl__out_duration(&o, b->window_ns);
	}
	if (b->open_ns != SL_BREAK_OPEN_DEFAULT_NS) {
		out_opt(&o, "open");
		sl__out_duration(&o, b->open_ns);
	}
	if (b->slow_ns != 0) {
		out_opt(&o, "slow");
		sl__out_duration(&o, b->slow_ns);
	}
	if (b->err != 0) {
		const char *name = sl_errno_name(b->err);
		out_opt(&o, "errno");
		if (name != NULL)
			sl__out_str(&o, name);
		else
			sl__out_u64(&o, (uint64_t)(uint32_t)b->err);
	}
	if (b->scope != SL_SCOPE_PEER) {
		out_opt(&o, "per");
		sl__out_str(&o, "process");
	}
	if (b->to.family != 0) {
		out_opt(&o, "to");
		sl__out_cidr(&o, &b->to);
	}
	if (b->port_lo != 0 || b->port_hi != UINT16_MAX) {
		out_opt(&o, "port");
		sl__out_u64(&o, b->port_lo);
		if (b->port_hi != b->port_lo) {
			sl__out_str(&o, "-");
			sl__out_u64(&o, b->port_hi);
		}
	}
	if (b->families != SL__DEFAULT_FAMILIES) {
		bool first = true;
		out_opt(&o, "family");
		for (unsigned i = 0; i < 3; i++) {
			if (!(b->families & (1u << i)))
				continue;
			if (!first)
				sl__out_str(&o, "+");
			sl__out_str(&o, sl__family_names[i]);
			first = false;
		}
	}
	return o.len;
}

bool sl_break_equal(const struct sl_break *a, const struct sl_break *b)
{
	return a->errors == b->errors && a->ratio_pct == b->ratio_pct && a->scope == b->scope &&
	       a->families == b->families && a->min == b->min && a->err == b->err &&
	       a->window_ns == b->window_ns && a->open_ns == b->open_ns &&
	       a->slow_ns == b->slow_ns && a->port_lo == b->port_lo && a->port_hi == b->port_hi &&
	       a->to.family == b->to.family && a->to.prefix == b->to.prefix &&
	       memcmp(a->to.addr, b->to.addr, sizeof a->to.addr) == 0;
}

int sl_break_errno(const struct sl_break *b)
{
	return b->err != 0 ? b->err : ECONNREFUSED;
}
