/* SPDX-License-Identifier: MIT */
/*
 * rule.c - one rule: SPEC := LIMIT ( ',' OPTION )*, its options, defaults and
 * the checks that make a rule impossible to misread.
 *
 * A SPEC is split at commas (no option value contains one), each piece
 * trimmed of blanks; the first piece is the LIMIT and the others are
 * NAME=VALUE options, each given at most once, in any order. Options are
 * parsed first and checked against each other and the operation afterwards,
 * so that "max-delay=1s,action=reject" and "action=reject,max-delay=1s" get
 * the same message. Decisions where the issue left room:
 *   - burst applies to algo=token only; the leaky bucket's queue is bounded
 *     by max-delay and the windows admit their whole amount per window.
 *   - the errno option with action=dry-run is refused: nothing is ever
 *     refused, so the option could only mislead.
 *   - max-delay=0 is refused in favour of action=reject, which says the same.
 *   - per=fd is refused for connect and conns (one connection per fd, so
 *     every bucket would see a single call); type=dgram is refused for accept
 *     and conns (datagram sockets have no connections).
 *   - to= and family= that can never match together are refused.
 *   - nonblock= is refused unless action=delay: only a delay waits, so only
 *     a delay has a non-blocking alternative.
 *   - shared=NAME (1 to 31 of A-Z a-z 0-9 . _ -, not "." or "..", so that
 *     it can be part of a file name) is refused with a per= other than
 *     process: one limiter serves every process of the user that names it.
 *   - redis=KEY (a fleet-wide limit kept on a Redis server) needs a token
 *     bucket (the server runs GCRA) and per=process (one lease per process);
 *     conns are counted on one machine only. on-error= and lease= are valid
 *     only with redis=. KEY is 1 to 47 of [A-Za-z0-9_.:-], so that it can
 *     sit inside the key's {hash tag} and needs no quoting anywhere.
 *     redis= with shared= makes a host pool: the processes of the host
 *     naming NAME spend one bank that one of them leases for all.
 *   - warmup=DURATION (Guava's SmoothWarmingUp, core/warmup.c) needs a
 *     token bucket on a rate (not conns) and no redis= (the server's
 *     script is a plain GCRA); it is at most 1h and at least (1 + cold) / 2
 *     stable intervals, so that one unit lies between the threshold and
 *     the cold end. cold=N (2 to 100, default 3: Sentinel's coldFactor) is
 *     valid only with warmup=. burst= keeps its meaning in the stable
 *     regime (the schedule may run burst - 1 stable intervals ahead), so
 *     from cold fewer units pass at once (each costs up to cold intervals).
 *   - lease= is at least the burst, so that a transfer piece (at most one
 *     burst) always fits in one lease; default max(burst, 10 ms of the
 *     rate): 500/s -> 5, 1MiB/s -> 10486B.
 * Token bucket bursts (in the rule's units, calls or bytes):
 *   minimum  max(1, ceil(100 us of the rate)): a process that sleeps cannot
 *            be woken much more precisely than ~100 us, so a smaller burst
 *            could not be honoured and the rate would silently fall short.
 *   default  max(1, ceil(5 ms of the rate)): any 100 ms window then carries at
 *            most 1.05x its share and a 5 s transfer's mean is within 0.1% of
 *            the rate (10MiB/s -> burst=52429B).
 * Finally every rule is checked against the core by initialising a scratch
 * limiter, so that a rule the core cannot represent is refused here.
 */
#include <string.h>

#include "internal.h"
#include "sluice_core.h"

#define SL__MIN_BURST_NS (100 * SL__NS_PER_US)
#define SL__DEFAULT_BURST_NS (5 * SL__NS_PER_MS)
#define SL__DEFAULT_LEASE_NS (10 * SL__NS_PER_MS)
/* A now_ns for the scratch limiter: any instant works, 0 means "unused". */
#define SL__SCRATCH_NOW_NS 1

enum opt {
	O_BURST,
	O_ALGO,
	O_ACTION,
	O_MAX_DELAY,
	O_ERRNO,
	O_PER,
	O_TO,
	O_PORT,
	O_FAMILY,
	O_TYPE,
	O_NONBLOCK,
	O_SHARED,
	O_REDIS,
	O_ON_ERROR,
	O_LEASE,
	O_WARMUP,
	O_COLD,
	O_MIN,
	O_MAX,
	O_INITIAL,
	O_LOAD1,
	O_CPU,
	O_RT,
	O_COUNT
};

/* In SL_OPT_* bit order. */
static const char *const opt_names[O_COUNT] = {"burst",  "algo",     "action",   "max-delay",
					       "errno",  "per",      "to",       "port",
					       "family", "type",     "nonblock", "shared",
					       "redis",  "on-error", "lease",    "warmup",
					       "cold",   "min",      "max",      "initial",
					       "load1",  "cpu",      "rt"};

/* Where each option was written, for messages. */
struct spec {
	size_t name_pos[O_COUNT];
	size_t val_pos[O_COUNT];
	size_t val_end[O_COUNT];
	size_t limit_pos, limit_end;
	enum sl_unit burst_unit;
	enum sl_unit lease_unit;
	uint16_t to_port; /* port given inside to=, 0 if none */
};

uint64_t sl__min_burst(uint64_t amount, uint64_t period_ns)
{
	uint64_t b = sl__worth(amount, period_ns, SL__MIN_BURST_NS);
	return b > 0 ? b : 1;
}

uint64_t sl__default_burst(uint64_t amount, uint64_t period_ns)
{
	uint64_t b = sl__worth(amount, period_ns, SL__DEFAULT_BURST_NS);
	return b > 0 ? b : 1;
}

uint64_t sl__default_lease(const struct sl_rule *r)
{
	uint64_t l = sl__worth(r->amount, r->period_ns, SL__DEFAULT_LEASE_NS);
	return l > r->burst ? l : r->burst > 0 ? r->burst : 1;
}

static void rule_defaults(struct sl_rule *r, enum sl_op op)
{
	memset(r, 0, sizeof *r);
	r->op = (uint8_t)op;
	r->unit = SL_UNIT_CALLS;
	r->algo = SL_ALGO_TOKEN;
	r->action = SL_ACTION_DELAY;
	r->scope = SL_SCOPE_PROCESS;
	r->families = SL__DEFAULT_FAMILIES;
	r->types = sl__default_types(op);
	r->max_delay_ns = UINT64_MAX;
	r->port_lo = 0;
	r->port_hi = UINT16_MAX;
}

/* Start of the unit letters just before `next` (the amount's unit). */
static size_t unit_start(const char *s, size_t pos, size_t next)
{
	while (next > pos && ((s[next - 1] >= 'a' && s[next - 1] <= 'z') ||
			      (s[next - 1] >= 'A' && s[next - 1] <= 'Z')))
		next--;
	return next;
}

static int parse_count(struct sl_rule *r, const struct sl__ctx *c, size_t pos, size_t end)
{
	enum sl_unit unit;
	size_t next;

	if (end - pos == 8 && strncmp(c->value + pos, "adaptive", 8) == 0) {
		r->adaptive = 1;
		r->adapt_algo = SL_ADAPT_GRADIENT2;
		return 0;
	}
	if (c->value[pos] < '0' || c->value[pos] > '9')
		return sl__fail(c, pos,
				"expected a count of open connections or 'adaptive', not '%.*s' "
				"(e.g. conns:100 or conns:adaptive)",
				SL__TOK(c, pos, end));

	if (sl__amount_parse(c, pos, end, &r->amount, &unit, &next) < 0)
		return -1;
	if (unit == SL_UNIT_BYTES)
		return sl__fail(c, unit_start(c->value, pos, next),
				"conns takes a count of open connections, not bytes (e.g. conns:100)");
	if (next < end && c->value[next] == '/')
		return sl__fail(c, next,
				"conns takes a count of open connections, not a rate (e.g. conns:100)");
	if (next != end)
		return sl__fail(c, next,
				"unexpected '%.*s' after the count (options follow a comma)",
				SL__TOK(c, next, end));
	if (r->amount == 0)
		return sl__fail(c, pos, "zero count: no connection could ever be opened");
	return 0;
}

/* RATE := AMOUNT '/' [NUMBER] PERIOD */
static int parse_rate(struct sl_rule *r, const struct sl__ctx *c, size_t pos, size_t end)
{
	const char *s = c->value;
	enum sl_unit unit;
	size_t next;

	if (sl__amount_parse(c, pos, end, &r->amount, &unit, &next) < 0)
		return -1;
	r->unit = (uint8_t)unit;
	if (next == end)
		return sl__fail(c, next, "expected '/' and a period after '%.*s' (e.g. %.*s/s)",
				SL__TOK(c, pos, end), SL__TOK(c, pos, end));
	if (s[next] != '/')
		return sl__fail(
			c, next,
			"unexpected '%.*s' after the amount (expected '/' and a period, e.g. 100/s)",
			SL__TOK(c, next, end));
	if (unit == SL_UNIT_BYTES && (r->op == SL_OP_CONNECT || r->op == SL_OP_ACCEPT))
		return sl__fail(c, unit_start(s, pos, next),
				"%s is limited in calls, not bytes (drop the unit, e.g. 10/s)",
				sl_op_name((enum sl_op)r->op));
	size_t p = next + 1;
	struct sl__num count = {.mant = 1, .frac = 0, .pos = p, .end = p};
	if (p < end && (s[p] == '-' || s[p] == '.' || (s[p] >= '0' && s[p] <= '9')) &&
	    sl__num_parse(c, p, end, &count) < 0)
		return -1;
	uint64_t unit_ns;
	if (count.end == end && count.end > p)
		return sl__fail(c, count.end,
				"missing unit after '%.*s' (expected us, ms, s, min, h)",
				SL__TOK(c, p, end));
	if (sl__period_unit_parse(c, count.end, end, &unit_ns, &next) < 0)
		return -1;
	if (next != end && s[next] == ';')
		return sl__fail(
			c, next,
			"unexpected ';': a variable holds one rule (use SLUICE_RULES=\"OP:SPEC;OP:SPEC\" for several)");
	if (next != end)
		return sl__fail(
			c, next,
			"unexpected '%.*s' after the rate (options follow a comma, e.g. 100/s,burst=10)",
			SL__TOK(c, next, end));
	if (sl__num_scale(c, &count, unit_ns, end, "nanoseconds", &r->period_ns) < 0)
		return -1;
	if (r->amount == 0)
		return sl__fail(c, pos, "zero rate '%.*s': nothing could ever pass",
				SL__TOK(c, pos, end));
	if (r->period_ns == 0)
		return sl__fail(c, p, "zero period '%.*s'", SL__TOK(c, p, end));
	return 0;
}

/* name=value of one enum option. */
static int parse_choice(const struct sl__ctx *c, size_t pos, size_t end, const char *what,
			const char *const *names, size_t n, uint8_t *out)
{
	int k = sl__choice_parse(c, pos, end, what, names, n);

	if (k < 0)
		return -1;
	*out = (uint8_t)k;
	return 0;
}

static int parse_errno(struct sl_rule *r, const struct sl__ctx *c, size_t pos, size_t end)
{
	char hint[64];

	r->err = sl_errno_from_name(c->value + pos, end - pos);
	if (r->err != 0)
		return 0;
	const char *near = sl__suggest(sl__errno_names, sl__errno_count, c->value + pos, end - pos);
	if (near != NULL)
		return sl__fail(c, pos, "unknown errno name '%.*s'%s", SL__TOK(c, pos, end),
				sl__did_you_mean(hint, sizeof hint, near));
	return sl__fail(c, pos,
			"unknown errno name '%.*s' (expected a name such as ECONNREFUSED, "
			"ETIMEDOUT, EAGAIN, ECONNRESET)",
			SL__TOK(c, pos, end));
}

/* shared=NAME: a name that is safe inside a file name. */
static int parse_shared(struct sl_rule *r, const struct sl__ctx *c, size_t pos, size_t end)
{
	if (end - pos >= SL_SHARED_NAME_MAX)
		return sl__fail(c, pos, "shared name '%.*s' is longer than %d characters",
				SL__TOK(c, pos, end), SL_SHARED_NAME_MAX - 1);
	for (size_t i = pos; i < end; i++) {
		char ch = c->value[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
			return sl__fail(c, i,
					"invalid character '%c' in shared name (expected "
					"letters, digits, '.', '_' or '-')",
					ch);
	}
	if (c->value[pos] == '.' &&
	    (end - pos == 1 || (end - pos == 2 && c->value[pos + 1] == '.')))
		return sl__fail(c, pos, "shared name '%.*s' is not a valid name",
				SL__TOK(c, pos, end));
	memset(r->shared, 0, sizeof r->shared);
	memcpy(r->shared, c->value + pos, end - pos);
	return 0;
}

/* redis=KEY: 1 to SL_REDIS_KEY_MAX - 1 of [A-Za-z0-9_.:-]. */
static int parse_redis_key(struct sl_rule *r, const struct sl__ctx *c, size_t pos, size_t end)
{
	if (end - pos >= SL_REDIS_KEY_MAX)
		return sl__fail(c, pos, "redis key '%.*s' is %zu bytes long (at most %d)",
				SL__TOK(c, pos, end), end - pos, SL_REDIS_KEY_MAX - 1);
	for (size_t i = pos; i < end; i++) {
		char ch = c->value[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == ':' || ch == '-'))
			return sl__fail(c, i,
					"unexpected '%c' in the redis key (expected letters, digits, "
					"'_', '.', ':' or '-')",
					ch);
	}
	memcpy(r->redis_key, c->value + pos, end - pos);
	r->redis_key[end - pos] = '\0';
	return 0;
}

/* min=, max=, initial= of conns:adaptive: a whole count of connections. */
static int parse_adapt_count(const struct sl__ctx *c, size_t pos, size_t end, const char *what,
			     uint64_t *out)
{
	struct sl__num n;
	if (sl__num_parse(c, pos, end, &n) < 0)
		return -1;
	if (n.end != end || n.frac != 0 || n.mant == 0 || n.mant > SL_ADAPT_LIMIT_MAX)
		return sl__fail(c, pos,
				"%s '%.*s' must be a whole number of connections from 1 to %u",
				what, SL__TOK(c, pos, end), SL_ADAPT_LIMIT_MAX);
	*out = n.mant;
	return 0;
}

/* load1=NUMBER: the host's 1-minute load average, above 0, in 1/1000. */
static int parse_load1(struct sl_rule *r, const struct sl__ctx *c, size_t pos, size_t end)
{
	struct sl__num n;
	uint64_t milli;
	if (sl__num_parse(c, pos, end, &n) < 0)
		return -1;
	if (n.end != end || n.frac > 3)
		return sl__fail(c, n.end != end ? n.end : pos,
				"load1 '%.*s' must be a load average such as 4 or 2.5 (at most "
				"3 decimals)",
				SL__TOK(c, pos, end));
	milli = n.mant;
	for (uint32_t f = n.frac; f < 3; f++)
		milli *= 10;
	if (milli == 0 || milli > SL_SYS_LOAD1_MAX * 1000ull)
		return sl__fail(c, pos, "load1 '%.*s' must be above 0 and at most %u",
				SL__TOK(c, pos, end), SL_SYS_LOAD1_MAX);
	r->sys_load1 = (uint32_t)milli;
	return 0;
}

/* cpu=P% or cpu=FRACTION: the host's busy share, in 1/1000, 1..999. */
static int parse_cpu(struct sl_rule *r, const struct sl__ctx *c, size_t pos, size_t end)
{
	struct sl__num n;
	if (sl__num_parse(c, pos, end, &n) < 0)
		return -1;
	const bool pct = n.end + 1 == end && c->value[n.end] == '%';
	if (!pct && n.end != end)
		return sl__fail(c, n.end,
				"unexpected '%.*s' in cpu= (expected a percentage such as 80%% "
				"or a fraction such as 0.8)",
				SL__TOK(c, n.end, end));
	/* permille = mant * 10^(3 - frac), or 10^(1 - frac) for a percentage */
	int shift = (pct ? 1 : 3) - (int)n.frac;
	uint64_t v = n.mant;
	for (; shift > 0; shift--)
		v = v > UINT64_MAX / 10 ? UINT64_MAX : v * 10;
	bool exact = true;
	for (; shift < 0; shift++) {
		exact = exact && v % 10 == 0;
		v /= 10;
	}
	if (!pct && n.frac == 0 && n.mant > 1)
		return sl__fail(c, pos,
				"cpu=%.*s is more than all of the CPU: write a percentage (cpu=%.*s%%) "
				"or a fraction (cpu=0.8)",
				SL__TOK(c, pos, end), SL__TOK(c, pos, end));
	if (!exact || v == 0 || v >= 1000)
		return sl__fail(c, pos,
				"cpu '%.*s' must be above 0%% and below 100%% in steps of 0.1%% (the "
				"host's busy share that starts the protection)",
				SL__TOK(c, pos, end));
	r->sys_cpu = (uint16_t)v;
	return 0;
}

static int parse_value(struct sl_rule *r, struct spec *sp, enum opt o, const struct sl__ctx *c,
		       uint64_t *burst)
{
	size_t pos = sp->val_pos[o], end = sp->val_end[o], next;

	switch (o) {
	case O_BURST:
		if (sl__amount_parse(c, pos, end, burst, &sp->burst_unit, &next) < 0)
			return -1;
		if (next != end)
			return sl__fail(c, next, "unexpected '%.*s' after the burst",
					SL__TOK(c, next, end));
		return 0;
	case O_ALGO:
		if (r->adaptive)
			return parse_choice(c, pos, end, "algo", sl__adapt_algo_names, 3,
					    &r->adapt_algo);
		return parse_choice(c, pos, end, "algo", sl__algo_names, 4, &r->algo);
	case O_MIN:
		return parse_adapt_count(c, pos, end, "min", &r->adapt_min);
	case O_MAX:
		return parse_adapt_count(c, pos, end, "max", &r->adapt_max);
	case O_INITIAL:
		return parse_adapt_count(c, pos, end, "initial", &r->amount);
	case O_LOAD1:
		return parse_load1(r, c, pos, end);
	case O_CPU:
		return parse_cpu(r, c, pos, end);
	case O_RT:
		if (sl__duration_parse(c, pos, end, &r->sys_rt_ns) < 0)
			return -1;
		if (r->sys_rt_ns == 0)
			return sl__fail(c, pos,
					"rt=%.*s is always exceeded: give a latency above 0",
					SL__TOK(c, pos, end));
		return 0;
	case O_ACTION:
		return parse_choice(c, pos, end, "action", sl__action_names, 3, &r->action);
	case O_MAX_DELAY:
		if (sl__duration_parse(c, pos, end, &r->max_delay_ns) < 0)
			return -1;
		if (r->max_delay_ns == 0)
			return sl__fail(c, pos,
					"max-delay=%.*s never waits: use action=reject instead",
					SL__TOK(c, pos, end));
		return 0;
	case O_ERRNO:
		return parse_errno(r, c, pos, end);
	case O_PER:
		return parse_choice(c, pos, end, "per", sl__scope_names, 4, &r->scope);
	case O_TO:
		return sl__cidr_parse(c, pos, end, &r->to, &sp->to_port);
	case O_PORT:
		return sl__port_parse(c, pos, end, &r->port_lo, &r->port_hi);
	case O_FAMILY:
		return sl__names_parse(c, pos, end, sl__family_names, 3, "family", &r->families);
	case O_TYPE:
		return sl__names_parse(c, pos, end, sl__type_names, 2, "type", &r->types);
	case O_NONBLOCK:
		return parse_choice(c, pos, end, "nonblock", sl__nonblock_names, 2, &r->nonblock);
	case O_SHARED:
		return parse_shared(r, c, pos, end);
	case O_REDIS:
		return parse_redis_key(r, c, pos, end);
	case O_ON_ERROR:
		return parse_choice(c, pos, end, "on-error", sl__on_error_names, 3, &r->on_error);
	case O_LEASE:
		if (sl__amount_parse(c, pos, end, &r->lease, &sp->lease_unit, &next) < 0)
			return -1;
		if (next != end)
			return sl__fail(c, next, "unexpected '%.*s' after the lease",
					SL__TOK(c, next, end));
		return 0;
	case O_WARMUP:
		if (sl__duration_parse(c, pos, end, &r->warmup_ns) < 0)
			return -1;
		if (r->warmup_ns == 0)
			return sl__fail(c, pos, "warmup=%.*s is no warm-up: leave the option out",
					SL__TOK(c, pos, end));
		return 0;
	case O_COLD: {
		struct sl__num n;
		if (sl__num_parse(c, pos, end, &n) < 0)
			return -1;
		if (n.end != end || n.frac != 0 || n.mant < 2 || n.mant > 100)
			return sl__fail(c, pos,
					"cold '%.*s' must be a whole number from 2 to 100 (the "
					"coldest interval is cold x the stable one)",
					SL__TOK(c, pos, end));
		r->cold = (uint8_t)n.mant;
		return 0;
	}
	case O_COUNT:
		break;
	}
	return 0;
}

/* Split one "name=value" piece [pos, end) and record it in *sp. */
static int parse_option(struct sl_rule *r, struct spec *sp, const struct sl__ctx *c, size_t pos,
			size_t end, uint64_t *burst)
{
	char hint[64], expected[192];
	size_t eq = sl__find(c->value, pos, end, '=');
	size_t name_end = eq;

	if (pos == end)
		return sl__fail(c, pos, "empty option (expected name=value after ',')");
	sl__trim(c->value, &pos, &name_end);
	int k = sl__lookup(opt_names, O_COUNT, c->value + pos, name_end - pos);
	if (k < 0) {
		const char *near = sl__suggest(opt_names, O_COUNT, c->value + pos, name_end - pos);
		if (near != NULL)
			return sl__fail(c, pos, "unknown option '%.*s'%s",
					SL__TOK(c, pos, name_end),
					sl__did_you_mean(hint, sizeof hint, near));
		return sl__fail(c, pos, "unknown option '%.*s' (expected %s)",
				SL__TOK(c, pos, name_end),
				sl__join(expected, sizeof expected, opt_names, O_COUNT, ", "));
	}
	enum opt o = (enum opt)k;
	if (r->explicit_opts & (1u << o))
		return sl__fail(c, pos, "duplicate option '%s' (first given at column %zu)",
				opt_names[o], sp->name_pos[o] + 1);
	if (eq == end)
		return sl__fail(c, end, "expected '=' and a value after '%s'", opt_names[o]);
	size_t vpos = eq + 1, vend = end;
	sl__trim(c->value, &vpos, &vend);
	if (vpos == vend)
		return sl__fail(c, vpos, "missing value after '%s='", opt_names[o]);
	r->explicit_opts |= 1u << o;
	sp->name_pos[o] = pos;
	sp->val_pos[o] = vpos;
	sp->val_end[o] = vend;
	return parse_value(r, sp, o, c, burst);
}

static bool given(const struct sl_rule *r, enum opt o)
{
	return (r->explicit_opts & (1u << o)) != 0;
}

/* redis=KEY and the options that go with it. */
static int check_redis(const struct sl_rule *r, const struct spec *sp, const struct sl__ctx *c)
{
	for (enum opt o = O_ON_ERROR; o <= O_LEASE; o++)
		if (given(r, o) && !given(r, O_REDIS))
			return sl__fail(c, sp->name_pos[o],
					"option '%s' is valid only with redis=KEY", opt_names[o]);
	if (!given(r, O_REDIS))
		return 0;
	size_t at = sp->name_pos[O_REDIS];
	if (r->op == SL_OP_CONNS)
		return sl__fail(c, at,
				"option 'redis' is not valid for conns (open connections are "
				"counted on one machine)");
	if (r->algo != SL_ALGO_TOKEN)
		return sl__fail(c, at,
				"option 'redis' is valid only with algo=token (the Redis "
				"script is a GCRA token bucket)");
	if (r->scope != SL_SCOPE_PROCESS)
		return sl__fail(c, at,
				"option 'redis' is valid only with per=process (each process "
				"leases from the one fleet-wide bucket)");
	return 0;
}

/* warmup= and cold=: a token bucket on a rate, not leased from Redis. */
static int check_warmup(struct sl_rule *r, const struct spec *sp, const struct sl__ctx *c)
{
	if (given(r, O_COLD) && !given(r, O_WARMUP))
		return sl__fail(c, sp->name_pos[O_COLD],
				"option 'cold' is valid only with warmup=");
	if (!given(r, O_WARMUP))
		return 0;
	size_t at = sp->name_pos[O_WARMUP];
	if (r->op == SL_OP_CONNS)
		return sl__fail(c, at,
				"option 'warmup' is not valid for conns (a count has no rate "
				"to warm up)");
	if (r->algo != SL_ALGO_TOKEN)
		return sl__fail(c, at,
				"option 'warmup' is valid only with algo=token (the warm-up "
				"spends stored permits, as Guava's SmoothWarmingUp does)");
	if (given(r, O_REDIS))
		return sl__fail(c, at,
				"option 'warmup' cannot be combined with redis= (the Redis "
				"script is a plain GCRA token bucket)");
	if (!given(r, O_COLD))
		r->cold = 3;
	if (r->warmup_ns > 3600 * SL__NS_PER_S)
		return sl__fail(c, sp->val_pos[O_WARMUP], "warmup '%.*s' is longer than 1h",
				SL__TOK(c, sp->val_pos[O_WARMUP], sp->val_end[O_WARMUP]));
	/* M - T = 2w / (S + C) must hold one unit: w >= (1 + cold) S / 2. */
	const unsigned __int128 need = (unsigned __int128)r->period_ns * (1u + r->cold);
	if ((unsigned __int128)r->warmup_ns * r->amount * 2 < need) {
		char least[32];
		struct sl__out o;
		const unsigned __int128 q = (need + 2 * r->amount - 1) / (2 * r->amount);
		sl__out_init(&o, least, sizeof least);
		sl__out_duration(&o, q >> 64 ? UINT64_MAX : (uint64_t)q);
		return sl__fail(c, sp->val_pos[O_WARMUP],
				"warmup '%.*s' is too short for the rate: "
				"at least %s ((1 + cold) / 2 stable intervals) lets the rate climb",
				SL__TOK(c, sp->val_pos[O_WARMUP], sp->val_end[O_WARMUP]), least);
	}
	return 0;
}

/* Options that make no sense for the operation or for each other. */
static int check_combinations(const struct sl_rule *r, const struct spec *sp,
			      const struct sl__ctx *c)
{
	const char *op = sl_op_name((enum sl_op)r->op);

	for (enum opt o = O_MIN; o <= O_INITIAL; o++)
		if (!r->adaptive && given(r, o))
			return sl__fail(c, sp->name_pos[o],
					"option '%s' is valid only with conns:adaptive (a fixed count "
					"has no %s)",
					opt_names[o], o == O_INITIAL ? "start" : "bounds");
	for (enum opt o = O_BURST; o <= O_ALGO; o++)
		if (r->op == SL_OP_CONNS && given(r, o) && !(r->adaptive && o == O_ALGO))
			return sl__fail(
				c, sp->name_pos[o],
				"option '%s' is not valid for conns (conns limits how many connections are open at once)",
				opt_names[o]);
	if (given(r, O_BURST) && r->algo != SL_ALGO_TOKEN)
		return sl__fail(c, sp->name_pos[O_BURST],
				"option 'burst' is valid only with algo=token (%s)",
				r->algo == SL_ALGO_LEAKY
					? "the leaky bucket's queue is bounded by max-delay"
					: "a window admits its whole amount at once");
	if (given(r, O_MAX_DELAY) && r->action != SL_ACTION_DELAY)
		return sl__fail(c, sp->name_pos[O_MAX_DELAY],
				"option 'max-delay' is valid only with action=delay");
	if (given(r, O_NONBLOCK) && r->action != SL_ACTION_DELAY)
		return sl__fail(
			c, sp->name_pos[O_NONBLOCK],
			"option 'nonblock' is valid only with action=delay (nothing else waits)");
	if (given(r, O_ERRNO) && r->action == SL_ACTION_DRYRUN)
		return sl__fail(c, sp->name_pos[O_ERRNO],
				"option 'errno' is not valid with action=dry-run (nothing is refused)");
	if (r->scope == SL_SCOPE_FD && (r->op == SL_OP_CONNECT || r->op == SL_OP_CONNS))
		return sl__fail(c, sp->val_pos[O_PER],
				"per=fd is not valid for %s (each connection has its own fd)", op);
	if (given(r, O_SHARED) && r->scope != SL_SCOPE_PROCESS)
		return sl__fail(
			c, sp->name_pos[O_SHARED],
			"shared= is valid only with per=process (one limiter serves every process)");
	if ((r->types & SL_TYPE_DGRAM) && (r->op == SL_OP_ACCEPT || r->op == SL_OP_CONNS))
		return sl__fail(c, sp->val_pos[O_TYPE],
				"type=dgram is not valid for %s (datagram sockets have no connections)",
				op);
	if (sp->to_port != 0 && given(r, O_PORT))
		return sl__fail(c,
				sp->name_pos[O_PORT] > sp->name_pos[O_TO] ? sp->name_pos[O_PORT]
									  : sp->name_pos[O_TO],
				"duplicate option 'port' (to= gives port %u too)", sp->to_port);
	/* An IPv4 to= fits IPv4-mapped addresses on inet6 sockets too. */
	if (r->to.family != 0 &&
	    !(r->families & (r->to.family == 4 ? SL_FAM_INET | SL_FAM_INET6 : SL_FAM_INET6)))
		return sl__fail(
			c, sp->val_pos[O_TO],
			"to= is an IPv%u address but family= leaves out %s: the rule could never match",
			r->to.family, r->to.family == 4 ? "inet and inet6" : "inet6");
	if (given(r, O_PORT) && r->families == SL_FAM_UNIX)
		return sl__fail(c, sp->name_pos[O_PORT],
				"option 'port' can never match with family=unix");
	return check_redis(r, sp, c);
}

/* load1=, cpu=, rt=: system protection of a server's accepts (accept and
 * conns rules), one state for the processes of the program. */
static int check_system(const struct sl_rule *r, const struct spec *sp, const struct sl__ctx *c)
{
	enum opt first = O_COUNT;
	for (enum opt o = O_LOAD1; o <= O_RT; o++)
		if (given(r, o) && (first == O_COUNT || sp->name_pos[o] < sp->name_pos[first]))
			first = o;
	if (first == O_COUNT)
		return 0;
	const size_t at = sp->name_pos[first];
	if (r->op != SL_OP_ACCEPT && r->op != SL_OP_CONNS)
		return sl__fail(c, at,
				"option '%s' is valid only for accept and conns (system protection "
				"admits a server's connections and requests)",
				opt_names[first]);
	if (r->scope != SL_SCOPE_PROCESS)
		return sl__fail(c, sp->val_pos[O_PER],
				"option '%s' is valid only with per=process (one protection for "
				"the server's processes)",
				opt_names[first]);
	if (given(r, O_SHARED))
		return sl__fail(c, sp->name_pos[O_SHARED],
				"option '%s' cannot be combined with shared= yet (system protection "
				"is kept per program, not in the shared file)",
				opt_names[first]);
	if (given(r, O_REDIS))
		return sl__fail(c, sp->name_pos[O_REDIS],
				"option '%s' cannot be combined with redis= (system protection is "
				"per program)",
				opt_names[first]);
	return 0;
}

/* conns:adaptive: defaults and bounds that agree. */
static int check_adaptive(struct sl_rule *r, const struct spec *sp, const struct sl__ctx *c)
{
	if (!r->adaptive)
		return 0;
	if (r->scope != SL_SCOPE_PROCESS)
		return sl__fail(c, sp->val_pos[O_PER],
				"conns:adaptive is valid only with per=process (one limit for the "
				"server's processes; shared=NAME for every process of the host)");
	if (!given(r, O_MIN))
		r->adapt_min = SL_ADAPT_MIN_DEFAULT;
	if (!given(r, O_MAX))
		r->adapt_max = SL_ADAPT_MAX_DEFAULT > r->adapt_min ? SL_ADAPT_MAX_DEFAULT
								   : r->adapt_min;
	if (r->adapt_min > r->adapt_max)
		return sl__fail(c, sp->val_pos[given(r, O_MAX) ? O_MAX : O_MIN],
				"min=%llu is larger than max=%llu: the limit could never be in "
				"between",
				(unsigned long long)r->adapt_min, (unsigned long long)r->adapt_max);
	if (!given(r, O_INITIAL)) {
		r->amount = SL_ADAPT_INITIAL_DEFAULT;
		r->amount = r->amount < r->adapt_min   ? r->adapt_min
			    : r->amount > r->adapt_max ? r->adapt_max
						       : r->amount;
	} else if (r->amount < r->adapt_min || r->amount > r->adapt_max) {
		return sl__fail(c, sp->val_pos[O_INITIAL],
				"initial=%llu is outside min=%llu..max=%llu",
				(unsigned long long)r->amount, (unsigned long long)r->adapt_min,
				(unsigned long long)r->adapt_max);
	}
	return 0;
}

static int check_unit(const struct sl_rule *r, const struct sl__ctx *c, size_t pos,
		      enum sl_unit unit, const char *opt)
{
	if (unit == r->unit)
		return 0;
	if (r->unit == SL_UNIT_BYTES)
		return sl__fail(c, pos, "%s must be in bytes like the rate (e.g. %s=64KiB)", opt,
				opt);
	return sl__fail(c, pos, "%s must be a number of calls like the rate (no unit)", opt);
}

static int check_burst(struct sl_rule *r, const struct spec *sp, const struct sl__ctx *c,
		       uint64_t burst)
{
	char rate[64], least[32];
	struct sl__out o;
	uint64_t min = sl__min_burst(r->amount, r->period_ns);

	if (r->op == SL_OP_CONNS || r->algo != SL_ALGO_TOKEN)
		return 0;
	if (!given(r, O_BURST)) {
		r->burst = sl__default_burst(r->amount, r->period_ns);
		return 0;
	}
	size_t pos = sp->val_pos[O_BURST];
	if (check_unit(r, c, pos, sp->burst_unit, "burst") < 0)
		return -1;
	sl__out_init(&o, rate, sizeof rate);
	sl__out_rate(&o, r->amount, (enum sl_unit)r->unit, r->period_ns);
	sl__out_init(&o, least, sizeof least);
	sl__out_amount(&o, min, (enum sl_unit)r->unit);
	if (burst == 0)
		return sl__fail(c, pos,
				"burst=0 admits nothing: the smallest meaningful burst for %s is %s",
				rate, least);
	if (burst < min)
		return sl__fail(
			c, pos,
			"burst '%.*s' is too small for %s: the smallest meaningful burst is %s (100 us of the rate)",
			SL__TOK(c, pos, sp->val_end[O_BURST]), rate, least);
	r->burst = burst;
	return 0;
}

/* lease=: in the rule's units, at least the burst; default filled in. */
static int check_lease(struct sl_rule *r, const struct spec *sp, const struct sl__ctx *c)
{
	char least[32];
	struct sl__out o;

	if (r->redis_key[0] == '\0')
		return 0;
	if (!given(r, O_LEASE)) {
		r->lease = sl__default_lease(r);
		return 0;
	}
	size_t pos = sp->val_pos[O_LEASE];
	if (check_unit(r, c, pos, sp->lease_unit, "lease") < 0)
		return -1;
	if (r->lease < r->burst) {
		sl__out_init(&o, least, sizeof least);
		sl__out_amount(&o, r->burst, (enum sl_unit)r->unit);
		return sl__fail(c, pos,
				"lease '%.*s' is smaller than the burst (%s): one burst must "
				"fit in one lease",
				SL__TOK(c, pos, sp->val_end[O_LEASE]), least);
	}
	return 0;
}

static enum sl_status core_init(const struct sl_rule *r, uint64_t burst)
{
	static const uint32_t kinds[4] = {SL_KIND_TOKEN, SL_KIND_LEAKY, SL_KIND_FIXED,
					  SL_KIND_SLIDING};
	struct sl_limiter scratch;
	struct sl_params p;

	memset(&p, 0, sizeof p);
	p.kind = r->op == SL_OP_CONNS ? SL_KIND_CONC : kinds[r->algo];
	p.amount = r->amount;
	p.period_ns = r->period_ns;
	p.burst = burst;
	if (r->warmup_ns != 0) {
		p.kind = SL_KIND_WARMUP;
		p.cold = r->cold;
		p.warmup_ns = r->warmup_ns;
	}
	return sl_limiter_init(&scratch, &p, SL__SCRATCH_NOW_NS);
}

/* The core must be able to represent the rule: refuse it here otherwise. */
static int check_core(const struct sl_rule *r, const struct spec *sp, const struct sl__ctx *c)
{
	enum sl_status st = core_init(r, r->burst);

	if (st == SL_OK)
		return 0;
	if (given(r, O_BURST) && core_init(r, sl__min_burst(r->amount, r->period_ns)) == SL_OK)
		return sl__fail(c, sp->val_pos[O_BURST],
				"burst '%.*s' is too large for the limiter",
				SL__TOK(c, sp->val_pos[O_BURST], sp->val_end[O_BURST]));
	if (r->op == SL_OP_CONNS)
		return sl__fail(c, sp->limit_pos, "count '%.*s' is too large for the limiter",
				SL__TOK(c, sp->limit_pos, sp->limit_end));
	return sl__fail(c, sp->limit_pos, "rate '%.*s' is %s the limiter can represent",
			SL__TOK(c, sp->limit_pos, sp->limit_end),
			st == SL_ERANGE ? "out of the range" : "not a rate");
}

int sl__rule_parse_span(struct sl_rule *out, enum sl_op op, const struct sl__ctx *c, size_t pos,
			size_t end)
{
	struct sl_rule r;
	struct spec sp;
	uint64_t burst = 0;

	rule_defaults(&r, op);
	memset(&sp, 0, sizeof sp);
	sl__trim(c->value, &pos, &end);
	if (pos == end)
		return sl__fail(c, pos, "empty rule (expected %s)",
				op == SL_OP_CONNS ? "a count such as 100"
						  : "a rate such as 100/s or 1MiB/s");
	size_t comma = sl__find(c->value, pos, end, ',');
	sp.limit_pos = pos;
	sp.limit_end = comma;
	sl__trim(c->value, &sp.limit_pos, &sp.limit_end);
	if (sp.limit_pos == sp.limit_end)
		return sl__fail(c, sp.limit_pos, "expected %s before the first ','",
				op == SL_OP_CONNS ? "a count" : "a rate");
	if ((op == SL_OP_CONNS ? parse_count : parse_rate)(&r, c, sp.limit_pos, sp.limit_end) < 0)
		return -1;
	while (comma < end) {
		size_t opos = comma + 1;
		comma = sl__find(c->value, opos, end, ',');
		size_t oend = comma;
		sl__trim(c->value, &opos, &oend);
		if (parse_option(&r, &sp, c, opos, oend, &burst) < 0)
			return -1;
	}
	if (check_combinations(&r, &sp, c) < 0 || check_system(&r, &sp, c) < 0 ||
	    check_adaptive(&r, &sp, c) < 0 || check_warmup(&r, &sp, c) < 0 ||
	    check_burst(&r, &sp, c, burst) < 0 || check_lease(&r, &sp, c) < 0 ||
	    check_core(&r, &sp, c) < 0)
		return -1;
	if (sp.to_port != 0) {
		r.port_lo = sp.to_port;
		r.port_hi = sp.to_port;
	}
	*out = r;
	return 0;
}

/*
 * Parse SPEC for operation op into *r (the launcher's --send SPEC). `var`
 * names the variable in messages; NULL means the operation's own variable.
 * Returns 0, or -1 with one line in err and *r unchanged.
 */
int sl_rule_parse(struct sl_rule *r, enum sl_op op, const char *spec, const char *var, char *err,
		  size_t errlen)
{
	bool known = (unsigned)op < SL_OP_COUNT;
	struct sl__ctx c = {.var = var != NULL ? var
				   : known     ? sl__op_vars[op]
					       : "SLUICE_RULES",
			    .value = spec,
			    .len = strlen(spec),
			    .err = err,
			    .errlen = errlen};

	if (!known)
		return sl__fail_value(&c, "unknown operation %d", (int)op);
	return sl__rule_parse_span(r, op, &c, 0, c.len);
}

/* True if a and b mean the same; explicit_opts and reserved bytes ignored. */
bool sl_rule_equal(const struct sl_rule *a, const struct sl_rule *b)
{
	return a->op == b->op && a->unit == b->unit && a->algo == b->algo &&
	       a->action == b->action && a->scope == b->scope && a->families == b->families &&
	       a->types == b->types && a->nonblock == b->nonblock && a->amount == b->amount &&
	       a->period_ns == b->period_ns && a->burst == b->burst &&
	       a->max_delay_ns == b->max_delay_ns && a->err == b->err && a->port_lo == b->port_lo &&
	       a->port_hi == b->port_hi && a->to.family == b->to.family &&
	       a->to.prefix == b->to.prefix &&
	       memcmp(a->to.addr, b->to.addr, sizeof a->to.addr) == 0 &&
	       strncmp(a->shared, b->shared, sizeof a->shared) == 0 &&
	       strcmp(a->redis_key, b->redis_key) == 0 && a->lease == b->lease &&
	       a->on_error == b->on_error && a->warmup_ns == b->warmup_ns && a->cold == b->cold &&
	       a->adaptive == b->adaptive && a->adapt_algo == b->adapt_algo &&
	       a->adapt_min == b->adapt_min && a->adapt_max == b->adapt_max &&
	       a->sys_cpu == b->sys_cpu && a->sys_load1 == b->sys_load1 &&
	       a->sys_rt_ns == b->sys_rt_ns;
}
