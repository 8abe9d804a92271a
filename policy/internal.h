/* SPDX-License-Identifier: MIT */
/*
 * internal.h - helpers shared by the files of policy/ (not part of the API).
 *
 * The parser works on spans of one variable's value: a span is a byte offset
 * and an end offset into that value, so every error can name its column and
 * nothing is ever copied or allocated. struct sl__ctx carries the variable's
 * name, its value and the caller's error buffer; sl__fail() writes the one
 * line error message and returns -1, so a parse step can `return sl__fail(..)`.
 * struct sl__out is a bounded writer with snprintf semantics (it counts what
 * the full text would need), used for canonical printing and for messages.
 */
#ifndef SLUICE_POLICY_INTERNAL_H
#define SLUICE_POLICY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define SL__NS_PER_US 1000ull
#define SL__NS_PER_MS 1000000ull
#define SL__NS_PER_S 1000000000ull

/* Longest piece of offending text quoted in a message. */
#define SL__TOKEN_MAX 40
/* printf arguments for a piece of the value: "'%.*s'" */
#define SL__TOK(c, pos, end) sl__tok_len((pos), (end)), ((c)->value + (pos))

/* ---- bounded writer (format.c) ---- */
struct sl__out {
	char *buf;
	size_t cap;
	size_t len; /* length the full text needs; may exceed cap - 1 */
	bool full;  /* a piece did not fit: write nothing more */
};
void sl__out_init(struct sl__out *o, char *buf, size_t cap);
void sl__out_mem(struct sl__out *o, const char *s, size_t n);
void sl__out_str(struct sl__out *o, const char *s);
void sl__out_u64(struct sl__out *o, uint64_t v);
/* Canonical amount ("52429B", "10MiB", "100") and duration ("250ms", "0.5us"). */
void sl__out_amount(struct sl__out *o, uint64_t amount, enum sl_unit unit);
void sl__out_duration(struct sl__out *o, uint64_t ns);
void sl__out_rate(struct sl__out *o, uint64_t amount, enum sl_unit unit, uint64_t period_ns);

/* ---- error context (error.c) ---- */
struct sl__ctx {
	const char *var;   /* "SLUICE_SEND" */
	const char *value; /* the whole value; columns count from here */
	size_t len;        /* strlen(value) */
	char *err;
	size_t errlen;
};
int sl__fail(const struct sl__ctx *c, size_t pos, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Like sl__fail, for messages that concern the whole value (no column). */
int sl__fail_value(const struct sl__ctx *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int sl__tok_len(size_t pos, size_t end);

/* ---- text helpers (text.c) ---- */
bool sl__is_blank(char ch);
/* Move *pos forward and *end back over blanks. */
void sl__trim(const char *s, size_t *pos, size_t *end);
/* Offset of the first `ch` in s[pos, end), or end. */
size_t sl__find(const char *s, size_t pos, size_t end, char ch);
/* Index of s[0, len) in names[0, n), or -1. Case-sensitive. */
int sl__lookup(const char *const *names, size_t n, const char *s, size_t len);
/* The name closest to s[0, len) (case-insensitive edit distance at most 2,
 * and less than half the name), or NULL. */
const char *sl__suggest(const char *const *names, size_t n, const char *s, size_t len);
/* " (did you mean X?)" or "" into buf. */
const char *sl__did_you_mean(char *buf, size_t size, const char *suggestion);
/* One of names[] filling s[pos, end): its index, or -1 with the error
 * "unknown WHAT 'x' (expected a, b, c)". */
int sl__choice_parse(const struct sl__ctx *c, size_t pos, size_t end, const char *what,
		     const char *const *names, size_t n);
/* "a, b, c" into buf. */
const char *sl__join(char *buf, size_t size, const char *const *names, size_t n, const char *sep);

/* ---- numbers, units, durations (lex.c) ---- */
struct sl__num {
	uint64_t mant; /* digits without the point, trailing fraction zeros removed */
	uint32_t frac; /* value = mant / 10^frac */
	size_t pos;    /* first digit */
	size_t end;    /* just past the last digit */
};
int sl__num_parse(const struct sl__ctx *c, size_t pos, size_t end, struct sl__num *n);
/* *out = n * scale exactly; [pos, end) is the text quoted in messages and
 * `what` names the unit of the result ("bytes", "calls", "nanoseconds"). */
int sl__num_scale(const struct sl__ctx *c, const struct sl__num *n, uint64_t scale, size_t end,
		  const char *what, uint64_t *out);
/* AMOUNT: NUMBER [UNIT] in s[pos, end); *next is just past it. */
int sl__amount_parse(const struct sl__ctx *c, size_t pos, size_t end, uint64_t *amount,
		     enum sl_unit *unit, size_t *next);
/* PERIOD letters at s[pos, end): "us", "ms", "s", "min", "h"; *next past them. */
int sl__period_unit_parse(const struct sl__ctx *c, size_t pos, size_t end, uint64_t *unit_ns,
			  size_t *next);
/* DURATION: NUMBER PERIOD filling all of s[pos, end); may be zero. */
int sl__duration_parse(const struct sl__ctx *c, size_t pos, size_t end, uint64_t *ns);
/* ceil(amount * t_ns / period_ns), saturating at UINT64_MAX. */
uint64_t sl__worth(uint64_t amount, uint64_t period_ns, uint64_t t_ns);

/* ---- names (names.c) ---- */
extern const char *const sl__op_names[SL_OP_COUNT];
extern const char *const sl__op_vars[SL_OP_COUNT]; /* "SLUICE_CONNECT", ... */
extern const char *const sl__algo_names[4];
extern const char *const sl__adapt_algo_names[3];
extern const char *const sl__action_names[3];
extern const char *const sl__scope_names[4];
extern const char *const sl__nonblock_names[2];
extern const char *const sl__family_names[3]; /* bit i = name i */
extern const char *const sl__type_names[2];
extern const char *const sl__on_error_names[3];
/* Default type= bits of an operation. */
uint8_t sl__default_types(enum sl_op op);
extern const char *const sl__errno_names[];
extern const size_t sl__errno_count;
#define SL__DEFAULT_FAMILIES (SL_FAM_INET | SL_FAM_INET6)

/* ---- filters (filter.c) ---- */
/* to=CIDR[:PORT]; *port is 0 when no port is given. */
int sl__cidr_parse(const struct sl__ctx *c, size_t pos, size_t end, struct sl_cidr *to,
		   uint16_t *port);
/* port=N or port=N-M. */
int sl__port_parse(const struct sl__ctx *c, size_t pos, size_t end, uint16_t *lo, uint16_t *hi);
/* family=F+F or type=T+T: bits of names[]. */
int sl__names_parse(const struct sl__ctx *c, size_t pos, size_t end, const char *const *names,
		    size_t n, const char *what, uint8_t *bits);
void sl__out_cidr(struct sl__out *o, const struct sl_cidr *to);

/* ---- rules (rule.c) ---- */
/* One break SPEC in [pos, end) of c (breaker.c). */
int sl__break_parse_span(struct sl_break *b, const struct sl__ctx *c, size_t pos, size_t end);
/* Parse SPEC s[pos, end) of `op` into *r. */
int sl__rule_parse_span(struct sl_rule *r, enum sl_op op, const struct sl__ctx *c, size_t pos,
			size_t end);
/* Token bucket bursts: smallest accepted and default, in the rule's units. */
uint64_t sl__min_burst(uint64_t amount, uint64_t period_ns);
uint64_t sl__default_burst(uint64_t amount, uint64_t period_ns);
/* Units a redis=KEY rule leases at once unless lease= says otherwise. */
uint64_t sl__default_lease(const struct sl_rule *r);

/* ---- SLUICE_REDIS (redis.c) ---- */
int sl__redis_parse(const struct sl__ctx *c, struct sl_redis *out);

#endif /* SLUICE_POLICY_INTERNAL_H */
