/* SPDX-License-Identifier: MIT */
/*
 * fuzz_policy.c - libFuzzer target for the SLUICE_* rule language.
 *
 * Input: the first byte picks a variable from sl_policy_vars (or, for the
 * last choice, says the rest is an environment: "NAME=value" lines for
 * sl_policy_parse_env); the rest is the value. Properties checked:
 *   - an error is one NUL-terminated line of printable ASCII that starts
 *     with the variable's name, and leaves the policy unchanged;
 *   - every accepted rule prints in canonical form within SL_RULE_TEXT_MAX,
 *     parses back (as SLUICE_RULES) to an equal rule that prints the same:
 *     parse(print(parse(x))) == parse(x);
 *   - every accepted rule initialises a core limiter without SL_EINVAL or
 *     SL_ERANGE;
 *   - an accepted SLUICE_REDIS prints without its password and parses back
 *     to the same server (the password then reads "***").
 * A violated property aborts, which libFuzzer reports with the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "sluice_core.h"

#define MAX_INPUT 4096
#define MAX_ENV 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_policy: %s: %s\n", what, detail);
	abort();
}

static void check_error(const char *err, const char *name)
{
	size_t n = strlen(err);

	if (n == 0 || n >= SL_ERR_MAX)
		fail("error length", err);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)err[i] < 0x20 || (unsigned char)err[i] >= 0x7f)
			fail("error is not one line of printable ASCII", err);
	if (name != NULL && strncmp(err, name, strlen(name)) != 0)
		fail("error does not start with the variable", err);
}

static void check_core(const struct sl_rule *r, const char *text)
{
	static const uint32_t kinds[4] = {SL_KIND_TOKEN, SL_KIND_LEAKY, SL_KIND_FIXED,
					  SL_KIND_SLIDING};
	struct sl_limiter l;
	struct sl_params p;

	memset(&p, 0, sizeof p);
	p.kind = r->op == SL_OP_CONNS ? SL_KIND_CONC : kinds[r->algo & 3];
	p.amount = r->amount;
	p.period_ns = r->period_ns;
	p.burst = r->burst;
	if (r->warmup_ns != 0) {
		if (p.kind != SL_KIND_TOKEN)
			fail("warm-up on a rule that is not a token bucket", text);
		p.kind = SL_KIND_WARMUP;
		p.cold = r->cold;
		p.warmup_ns = r->warmup_ns;
	}
	enum sl_status st = sl_limiter_init(&l, &p, 1);
	if (st == SL_EINVAL || st == SL_ERANGE)
		fail("accepted rule does not initialise a limiter", text);
}

static void check_rule(const struct sl_rule *r)
{
	char text[SL_RULE_TEXT_MAX], again[SL_RULE_TEXT_MAX], err[SL_ERR_MAX];
	struct sl_policy p;

	if (sl_rule_format(r, text, sizeof text) >= sizeof text)
		fail("canonical text too long", text);
	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, "SLUICE_RULES", text, err, sizeof err) != 0)
		fail("canonical text does not parse", err);
	if (p.n_rules != 1 || !sl_rule_equal(r, &p.rules[0]))
		fail("parse(print(r)) != r", text);
	sl_rule_format(&p.rules[0], again, sizeof again);
	if (strcmp(text, again) != 0)
		fail("print(parse(print(r))) != print(r)", again);
	check_core(r, text);
}

/* A breaker: its canonical text parses back to an equal breaker that
 * prints the same, and the core accepts its parameters. */
static void check_break(const struct sl_break *b)
{
	char text[SL_RULE_TEXT_MAX], again[SL_RULE_TEXT_MAX], err[SL_ERR_MAX];
	struct sl_policy p;
	struct sl_breaker core;

	if (sl_break_format(b, text, sizeof text) >= sizeof text)
		fail("canonical breaker text too long", text);
	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, "SLUICE_RULES", text, err, sizeof err) != 0)
		fail("canonical breaker text does not parse", err);
	if (p.n_breaks != 1 || p.n_rules != 0 || !sl_break_equal(b, &p.breaks[0]))
		fail("parse(print(b)) != b", text);
	sl_break_format(&p.breaks[0], again, sizeof again);
	if (strcmp(text, again) != 0)
		fail("print(parse(print(b))) != print(b)", again);
	if (!sl_breaker_init(&core, b->window_ns, b->open_ns, b->errors, b->ratio_pct, b->min, 1))
		fail("accepted breaker does not initialise the core's", text);
}

static void check_redis(const struct sl_redis *r)
{
	/* A sentinel or cluster list of long host names is longer than an
	 * error buffer (the fuzzer found 547 bytes of it valid). */
	char text[SL_REDIS_TEXT_MAX + SL_PATH_MAX], again[sizeof text], err[SL_ERR_MAX];
	struct sl_policy p;

	if (r->kind == SL_REDIS_NONE)
		return;
	if (sl_redis_format(r, text, sizeof text) >= sizeof text)
		fail("SLUICE_REDIS text too long", "");
	struct sl_redis other = *r; /* the text must not depend on the password */
	if (other.pass[0] != '\0')
		memcpy(other.pass, "x", 2);
	sl_redis_format(&other, again, sizeof again);
	if (strcmp(text, again) != 0)
		fail("SLUICE_REDIS text depends on its password", text);
	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, "SLUICE_REDIS", text, err, sizeof err) != 0)
		fail("canonical SLUICE_REDIS does not parse", err);
	struct sl_redis a = *r, b = p.redis;
	memset(a.pass, 0, sizeof a.pass);
	memset(b.pass, 0, sizeof b.pass);
	if (memcmp(&a, &b, sizeof a) != 0 || (r->pass[0] != '\0') != (p.redis.pass[0] != '\0'))
		fail("parse(print(SLUICE_REDIS)) differs", text);
	sl_redis_format(&p.redis, again, sizeof again);
	if (strcmp(text, again) != 0)
		fail("print(parse(print(SLUICE_REDIS))) differs", again);
}

static void check_policy(const struct sl_policy *p)
{
	check_redis(&p->redis);
	if (p->n_rules > SL_MAX_RULES)
		fail("too many rules", "");
	for (uint32_t i = 0; i < p->n_rules; i++)
		check_rule(&p->rules[i]);
	for (uint32_t i = 0; i < p->n_breaks; i++)
		check_break(&p->breaks[i]);
}

/* The rest of the input as NAME=value lines. */
static void fuzz_env(char *text)
{
	const char *env[MAX_ENV + 1];
	size_t n = 0;
	char err[SL_ERR_MAX];
	struct sl_policy p, before;

	for (char *line = text; line != NULL && n < MAX_ENV;) {
		char *nl = strchr(line, '\n');
		if (nl != NULL)
			*nl = '\0';
		env[n++] = line;
		line = nl != NULL ? nl + 1 : NULL;
	}
	env[n] = NULL;
	sl_policy_init(&p);
	before = p;
	if (sl_policy_parse_env(&p, env, err, sizeof err) == 0) {
		check_policy(&p);
		return;
	}
	check_error(err, NULL);
	p.config_error = before.config_error;
	if (memcmp(&p, &before, sizeof p) != 0)
		fail("failed parse_env changed more than config_error", err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char value[MAX_INPUT + 1];
	char err[SL_ERR_MAX];
	struct sl_policy p, before;

	if (size < 1 || size > MAX_INPUT)
		return 0;
	memcpy(value, data + 1, size - 1);
	value[size - 1] = '\0';
	size_t choice = data[0] % (sl_policy_nvars + 1);
	if (choice == sl_policy_nvars) {
		fuzz_env(value);
		return 0;
	}
	const char *name = sl_policy_vars[choice].name;
	sl_policy_init(&p);
	before = p;
	if (sl_policy_parse_var(&p, name, value, err, sizeof err) == 0) {
		check_policy(&p);
		return 0;
	}
	check_error(err, name);
	if (memcmp(&p, &before, sizeof p) != 0)
		fail("failed parse changed the policy", err);
	return 0;
}
