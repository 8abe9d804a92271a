/* SPDX-License-Identifier: MIT */
/*
 * format.c - canonical printing of rules, and the bounded writer behind it.
 *
 * The canonical form of a rule is "OP:LIMIT" followed by every option whose
 * value differs from its default, in the fixed order burst, warmup, cold,
 * min, max, initial and algo (conns:adaptive), load1, cpu, rt, algo, action,
 * max-delay, errno,
 * per, to, port, family, type, nonblock,
 * shared, redis, on-error, lease. Numbers are integers in the largest unit
 * that holds them exactly:
 *   bytes      GiB, GB, MiB, MB, KiB, KB, B (largest first): 1048576 -> 1MiB,
 *              1024000 -> 1000KiB, 52429 -> 52429B
 *   durations  h, min, s, ms, us: 5400 s -> 90min, 1.5 s -> 1500ms; a time
 *              that is not a whole number of microseconds is printed in us
 *              with decimals (500 ns -> 0.5us), since there is no ns unit.
 *   rates      AMOUNT/PERIOD with the period's number left out when it is 1:
 *              100/s, 3/7s, 5/100ms.
 * A port given inside to= is printed as a separate port= option, and a host
 * address without its full-length prefix (to=127.0.0.1, to=::1). Parsing the
 * canonical text gives a rule equal to the original (sl_rule_equal).
 *
 * struct sl__out has snprintf semantics: it counts the length the full text
 * needs and writes each piece whole or not at all (after the first piece that
 * does not fit, nothing more is written), always NUL-terminated.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

void sl__out_init(struct sl__out *o, char *buf, size_t cap)
{
	o->buf = buf;
	o->cap = cap;
	o->len = 0;
	o->full = cap == 0;
	if (cap > 0)
		buf[0] = '\0';
}

void sl__out_mem(struct sl__out *o, const char *s, size_t n)
{
	/* Write only if the piece fits whole and nothing was dropped before,
	 * so the text is always a prefix that ends at a piece boundary. */
	if (!o->full && o->len + n < o->cap) {
		memcpy(o->buf + o->len, s, n);
		o->buf[o->len + n] = '\0';
	} else {
		o->full = true;
	}
	o->len += n;
}

void sl__out_str(struct sl__out *o, const char *s)
{
	sl__out_mem(o, s, strlen(s));
}

void sl__out_u64(struct sl__out *o, uint64_t v)
{
	char tmp[24];
	int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
	sl__out_mem(o, tmp, (size_t)n);
}

struct unit {
	const char *name;
	uint64_t factor;
};

/* Largest first, so the first exact one is the canonical one. */
static const struct unit byte_units[] = {
	{"GiB", 1024ull * 1024 * 1024},
	{"GB", 1000000000ull},
	{"MiB", 1024ull * 1024},
	{"MB", 1000000ull},
	{"KiB", 1024ull},
	{"KB", 1000ull},
	{"B", 1},
};

static const struct unit time_units[] = {
	{"h", 3600 * SL__NS_PER_S}, {"min", 60 * SL__NS_PER_S}, {"s", SL__NS_PER_S},
	{"ms", SL__NS_PER_MS},      {"us", SL__NS_PER_US},
};

#define N_BYTE_UNITS (sizeof byte_units / sizeof byte_units[0])
#define N_TIME_UNITS (sizeof time_units / sizeof time_units[0])

/* The largest unit that divides v (v > 0), or NULL. */
static const struct unit *exact_unit(const struct unit *t, size_t n, uint64_t v)
{
	for (size_t i = 0; i < n; i++)
		if (v % t[i].factor == 0)
			return &t[i];
	return NULL;
}

void sl__out_amount(struct sl__out *o, uint64_t amount, enum sl_unit unit)
{
	if (unit != SL_UNIT_BYTES || amount == 0) {
		sl__out_u64(o, amount);
		if (unit == SL_UNIT_BYTES)
			sl__out_str(o, "B");
		return;
	}
	const struct unit *u = exact_unit(byte_units, N_BYTE_UNITS, amount);
	sl__out_u64(o, amount / u->factor);
	sl__out_str(o, u->name);
}

/* ns as "N.NNNus": whole microseconds, then the nanoseconds without trailing
 * zeros. */
static void out_fractional_us(struct sl__out *o, uint64_t ns)
{
	char frac[4];
	unsigned f = (unsigned)(ns % SL__NS_PER_US);
	int n = 3;

	snprintf(frac, sizeof frac, "%03u", f);
	while (n > 0 && frac[n - 1] == '0')
		n--;
	sl__out_u64(o, ns / SL__NS_PER_US);
	sl__out_str(o, ".");
	sl__out_mem(o, frac, (size_t)n);
	sl__out_str(o, "us");
}

/* A duration; `one_implied` leaves out a count of 1 ("s" rather than "1s"),
 * as the period of a rate does. */
static void out_time(struct sl__out *o, uint64_t ns, bool one_implied)
{
	const struct unit *u = ns == 0 ? NULL : exact_unit(time_units, N_TIME_UNITS, ns);

	if (u == NULL) {
		out_fractional_us(o, ns);
		return;
	}
	if (!one_implied || ns != u->factor)
		sl__out_u64(o, ns / u->factor);
	sl__out_str(o, u->name);
}

void sl__out_duration(struct sl__out *o, uint64_t ns)
{
	out_time(o, ns, false);
}

void sl__out_rate(struct sl__out *o, uint64_t amount, enum sl_unit unit, uint64_t period_ns)
{
	sl__out_amount(o, amount, unit);
	sl__out_str(o, "/");
	out_time(o, period_ns, true);
}

/* "a+b" of the names whose bit is set. */
static void out_bits(struct sl__out *o, const char *const *names, size_t n, unsigned bits)
{
	bool first = true;

	for (size_t i = 0; i < n; i++) {
		if (!(bits & (1u << i)))
			continue;
		if (!first)
			sl__out_str(o, "+");
		sl__out_str(o, names[i]);
		first = false;
	}
}

static void out_option(struct sl__out *o, const char *name)
{
	sl__out_str(o, ",");
	sl__out_str(o, name);
	sl__out_str(o, "=");
}

static void out_limit(struct sl__out *o, const struct sl_rule *r)
{
	if (r->op == SL_OP_CONNS && r->adaptive)
		sl__out_str(o, "adaptive");
	else if (r->op == SL_OP_CONNS)
		sl__out_u64(o, r->amount);
	else
		sl__out_rate(o, r->amount, (enum sl_unit)r->unit, r->period_ns);
}

/*
 * Canonical text "OP:SPEC" of *r into buf[0, len). Returns the length the
 * whole text needs, like snprintf; buf is always NUL-terminated when len > 0.
 * Thread-safe: a pure function of *r.
 */
size_t sl_rule_format(const struct sl_rule *r, char *buf, size_t len)
{
	struct sl__out o;
	bool token = r->op != SL_OP_CONNS && r->algo == SL_ALGO_TOKEN;

	sl__out_init(&o, buf, len);
	sl__out_str(&o, sl_op_name((enum sl_op)r->op));
	sl__out_str(&o, ":");
	out_limit(&o, r);
	if (token && r->burst != sl__default_burst(r->amount, r->period_ns)) {
		out_option(&o, "burst");
		sl__out_amount(&o, r->burst, (enum sl_unit)r->unit);
	}
	if (token && r->warmup_ns != 0) {
		out_option(&o, "warmup");
		sl__out_duration(&o, r->warmup_ns);
		if (r->cold != 3) {
			out_option(&o, "cold");
			sl__out_u64(&o, r->cold);
		}
	}
	if (r->adaptive) {
		uint64_t init = SL_ADAPT_INITIAL_DEFAULT;
		init = init < r->adapt_min   ? r->adapt_min
		       : init > r->adapt_max ? r->adapt_max
					     : init;
		if (r->adapt_min != SL_ADAPT_MIN_DEFAULT) {
			out_option(&o, "min");
			sl__out_u64(&o, r->adapt_min);
		}
		if (r->adapt_max !=
		    (SL_ADAPT_MAX_DEFAULT > r->adapt_min ? SL_ADAPT_MAX_DEFAULT : r->adapt_min)) {
			out_option(&o, "max");
			sl__out_u64(&o, r->adapt_max);
		}
		if (r->amount != init) {
			out_option(&o, "initial");
			sl__out_u64(&o, r->amount);
		}
		if (r->adapt_algo != SL_ADAPT_GRADIENT2) {
			out_option(&o, "algo");
			sl__out_str(&o, sl_adapt_algo_name((enum sl_adapt_algo)r->adapt_algo));
		}
	}
	if (r->sys_load1 != 0) {
		out_option(&o, "load1");
		sl__out_u64(&o, r->sys_load1 / 1000);
		if (r->sys_load1 % 1000 != 0) {
			char frac[5] = {'.', (char)('0' + r->sys_load1 / 100 % 10),
					(char)('0' + r->sys_load1 / 10 % 10),
					(char)('0' + r->sys_load1 % 10), '\0'};
			for (int k = 3; k > 0 && frac[k] == '0'; k--)
				frac[k] = '\0';
			sl__out_str(&o, frac);
		}
	}
	if (r->sys_cpu != 0) {
		out_option(&o, "cpu");
		sl__out_u64(&o, r->sys_cpu / 10);
		if (r->sys_cpu % 10 != 0) {
			const char frac[3] = {'.', (char)('0' + r->sys_cpu % 10), '\0'};
			sl__out_str(&o, frac);
		}
		sl__out_str(&o, "%");
	}
	if (r->sys_rt_ns != 0) {
		out_option(&o, "rt");
		sl__out_duration(&o, r->sys_rt_ns);
	}
	if (r->op != SL_OP_CONNS && r->algo != SL_ALGO_TOKEN) {
		out_option(&o, "algo");
		sl__out_str(&o, sl_algo_name((enum sl_algo)r->algo));
	}
	if (r->action != SL_ACTION_DELAY) {
		out_option(&o, "action");
		sl__out_str(&o, sl_action_name((enum sl_action)r->action));
	}
	if (r->max_delay_ns != UINT64_MAX) {
		out_option(&o, "max-delay");
		sl__out_duration(&o, r->max_delay_ns);
	}
	if (r->err != 0) {
		const char *name = sl_errno_name(r->err);
		out_option(&o, "errno");
		if (name != NULL)
			sl__out_str(&o, name);
		else
			sl__out_u64(&o, (uint64_t)(uint32_t)r->err);
	}
	if (r->scope != SL_SCOPE_PROCESS) {
		out_option(&o, "per");
		sl__out_str(&o, sl_scope_name((enum sl_scope)r->scope));
	}
	if (r->to.family != 0) {
		out_option(&o, "to");
		sl__out_cidr(&o, &r->to);
	}
	if (r->port_lo != 0 || r->port_hi != UINT16_MAX) {
		out_option(&o, "port");
		sl__out_u64(&o, r->port_lo);
		if (r->port_hi != r->port_lo) {
			sl__out_str(&o, "-");
			sl__out_u64(&o, r->port_hi);
		}
	}
	if (r->families != SL__DEFAULT_FAMILIES) {
		out_option(&o, "family");
		out_bits(&o, sl__family_names, 3, r->families);
	}
	if (r->types != sl__default_types((enum sl_op)r->op)) {
		out_option(&o, "type");
		out_bits(&o, sl__type_names, 2, r->types);
	}
	if (r->nonblock != SL_NONBLOCK_EAGAIN) {
		out_option(&o, "nonblock");
		sl__out_str(&o, r->nonblock < 2 ? sl__nonblock_names[r->nonblock] : "?");
	}
	if (r->shared[0] != '\0') {
		out_option(&o, "shared");
		sl__out_str(&o, r->shared);
	}
	if (r->redis_key[0] != '\0') {
		out_option(&o, "redis");
		sl__out_mem(&o, r->redis_key, strnlen(r->redis_key, SL_REDIS_KEY_MAX - 1));
		if (r->on_error != SL_ON_ERROR_LOCAL) {
			out_option(&o, "on-error");
			sl__out_str(&o, sl_on_error_name((enum sl_on_error)r->on_error));
		}
		if (r->lease != sl__default_lease(r)) {
			out_option(&o, "lease");
			sl__out_amount(&o, r->lease, (enum sl_unit)r->unit);
		}
	}
	return o.len;
}
