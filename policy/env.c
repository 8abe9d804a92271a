/* SPDX-License-Identifier: MIT */
/*
 * env.c - the SLUICE_* variables: the table of known names, one parser per
 * variable, and the walk over an environment array.
 *
 * The table (name, example, help) is public so that the launcher can print
 * it in --help; a parallel table holds each variable's parser. An unknown
 * SLUICE_ name is an error, with a suggestion when a known name is within two
 * edits (SLUICE_SNED -> SLUICE_SEND), because it is almost always a typo
 * that would otherwise run the program unthrottled.
 *
 * Every parser works on a copy of the policy and commits only on success, so
 * a failed call leaves *p unchanged. sl_policy_parse_env reads
 * SLUICE_CONFIG_ERROR before anything else, so that when another variable is
 * wrong the caller already knows whether to exit or to warn.
 */
#include <string.h>

#include "internal.h"

#define SL__NAME_SHOWN 64 /* longest variable name quoted in a message */

typedef int (*var_parser)(struct sl_policy *p, const struct sl__ctx *c);

static int add_rule(struct sl_policy *p, const struct sl__ctx *c, size_t pos,
		    const struct sl_rule *r)
{
	if (p->n_rules >= SL_MAX_RULES)
		return sl__fail(c, pos, "too many rules (at most %d in all SLUICE_* variables)",
				SL_MAX_RULES);
	p->rules[p->n_rules++] = *r;
	return 0;
}

static int parse_one_rule(struct sl_policy *p, const struct sl__ctx *c, enum sl_op op)
{
	struct sl_rule r;

	if (sl__rule_parse_span(&r, op, c, 0, c->len) < 0)
		return -1;
	return add_rule(p, c, 0, &r);
}

static int parse_connect(struct sl_policy *p, const struct sl__ctx *c)
{
	return parse_one_rule(p, c, SL_OP_CONNECT);
}

static int parse_accept(struct sl_policy *p, const struct sl__ctx *c)
{
	return parse_one_rule(p, c, SL_OP_ACCEPT);
}

static int parse_send(struct sl_policy *p, const struct sl__ctx *c)
{
	return parse_one_rule(p, c, SL_OP_SEND);
}

static int parse_recv(struct sl_policy *p, const struct sl__ctx *c)
{
	return parse_one_rule(p, c, SL_OP_RECV);
}

static int parse_conns(struct sl_policy *p, const struct sl__ctx *c)
{
	return parse_one_rule(p, c, SL_OP_CONNS);
}

static int add_break(struct sl_policy *p, const struct sl__ctx *c, size_t pos, size_t end)
{
	struct sl_break b;

	if (sl__break_parse_span(&b, c, pos, end) < 0)
		return -1;
	if (p->n_breaks >= SL_MAX_BREAKS)
		return sl__fail(c, pos, "too many breakers (at most %d in all SLUICE_* variables)",
				SL_MAX_BREAKS);
	p->breaks[p->n_breaks++] = b;
	return 0;
}

static int parse_break(struct sl_policy *p, const struct sl__ctx *c)
{
	return add_break(p, c, 0, c->len);
}

/* OP:SPEC ( ';' OP:SPEC )*; OP break takes a breaker's SPEC. */
static int parse_rules(struct sl_policy *p, const struct sl__ctx *c)
{
	const char *s = c->value;
	char hint[64];

	for (size_t pos = 0; pos <= c->len;) {
		size_t end = sl__find(s, pos, c->len, ';'), next = end + 1;
		sl__trim(s, &pos, &end);
		if (pos == end)
			return sl__fail(c, pos, "empty rule (expected OP:SPEC, e.g. send:1MiB/s)");
		size_t colon = sl__find(s, pos, end, ':'), op_end = colon;
		sl__trim(s, &pos, &op_end);
		if (op_end - pos == 5 && memcmp(s + pos, "break", 5) == 0) {
			if (colon == end)
				return sl__fail(c, colon,
						"expected ':' and a breaker after 'break' (e.g. "
						"break:errors=5)");
			if (add_break(p, c, colon + 1, end) < 0)
				return -1;
			pos = next;
			continue;
		}
		int op = sl__lookup(sl__op_names, SL_OP_COUNT, s + pos, op_end - pos);
		if (op < 0) {
			const char *near = sl__suggest(sl__op_names, SL_OP_COUNT, s + pos,
						       op_end - pos);
			return sl__fail(
				c, pos, "unknown operation '%.*s'%s", SL__TOK(c, pos, op_end),
				near != NULL
					? sl__did_you_mean(hint, sizeof hint, near)
					: " (expected connect, accept, send, recv, conns, break)");
		}
		if (colon == end)
			return sl__fail(c, colon, "expected ':' and a limit after '%s' (e.g. %s)",
					sl__op_names[op],
					op == SL_OP_CONNS ? "conns:100" : "send:1MiB/s");
		struct sl_rule r;
		if (sl__rule_parse_span(&r, (enum sl_op)op, c, colon + 1, end) < 0 ||
		    add_rule(p, c, pos, &r) < 0)
			return -1;
		pos = next;
	}
	return 0;
}

static int parse_log(struct sl_policy *p, const struct sl__ctx *c)
{
	static const char *const levels[] = {"error", "warn", "info", "debug"};
	int k = sl__choice_parse(c, 0, c->len, "log level", levels, 4);

	if (k < 0)
		return -1;
	p->log_level = (uint32_t)k;
	return 0;
}

static int parse_config_error(struct sl_policy *p, const struct sl__ctx *c)
{
	static const char *const modes[] = {"exit", "warn"};
	int k = sl__choice_parse(c, 0, c->len, "mode", modes, 2);

	if (k < 0)
		return -1;
	p->config_error = (uint32_t)k;
	return 0;
}

static int copy_path(const struct sl__ctx *c, char *dst)
{
	if (c->len == 0)
		return sl__fail(c, 0, "empty path (unset the variable instead)");
	if (c->len >= SL_PATH_MAX)
		return sl__fail(c, 0, "path is %zu bytes long (at most %d)", c->len,
				SL_PATH_MAX - 1);
	memcpy(dst, c->value, c->len + 1);
	return 0;
}

static int parse_log_file(struct sl_policy *p, const struct sl__ctx *c)
{
	return copy_path(c, p->log_file);
}

static int parse_stats(struct sl_policy *p, const struct sl__ctx *c)
{
	return copy_path(c, p->stats_file);
}

/* NAME ( '+' NAME )*: program names without a directory. */
static int copy_names(const struct sl__ctx *c, char *dst, const char *other, const char *other_var)
{
	if (other[0] != '\0')
		return sl__fail_value(
			c, "SLUICE_ONLY and SLUICE_SKIP cannot be used together (%s is set too)",
			other_var);
	if (c->len >= SL_NAMES_MAX)
		return sl__fail(c, 0, "list is %zu bytes long (at most %d)", c->len,
				SL_NAMES_MAX - 1);
	for (size_t pos = 0; pos <= c->len;) {
		size_t end = sl__find(c->value, pos, c->len, '+');
		if (end == pos)
			return sl__fail(c, pos,
					"expected a program name (names are separated by '+')");
		size_t slash = sl__find(c->value, pos, end, '/');
		if (slash < end)
			return sl__fail(
				c, pos,
				"'%.*s' has a '/': program names are matched without their directory",
				SL__TOK(c, pos, end));
		pos = end + 1;
	}
	memcpy(dst, c->value, c->len + 1);
	return 0;
}

static int parse_redis(struct sl_policy *p, const struct sl__ctx *c)
{
	return sl__redis_parse(c, &p->redis);
}

static int parse_only(struct sl_policy *p, const struct sl__ctx *c)
{
	return copy_names(c, p->only, p->skip, "SLUICE_SKIP");
}

static int parse_skip(struct sl_policy *p, const struct sl__ctx *c)
{
	return copy_names(c, p->skip, p->only, "SLUICE_ONLY");
}

const struct sl_var_info sl_policy_vars[] = {
	{"SLUICE_CONNECT", "100/s", "limit connect() calls: RATE[,OPTION...]"},
	{"SLUICE_ACCEPT", "50/s,action=reject", "limit accept() calls: RATE[,OPTION...]"},
	{"SLUICE_SEND", "1MiB/s", "limit bytes or messages sent: RATE[,OPTION...]"},
	{"SLUICE_RECV", "10MiB/s,per=fd", "limit bytes or messages received: RATE[,OPTION...]"},
	{"SLUICE_CONNS", "100", "limit connections open at once: COUNT|adaptive[,OPTION...]"},
	{"SLUICE_RULES", "send:1MiB/s;connect:10/s,to=10.0.0.0/8",
	 "any number of rules: OP:SPEC;OP:SPEC"},
	{"SLUICE_LOG", "info", "log level: error, warn, info or debug [error]"},
	{"SLUICE_LOG_FILE", "$XDG_RUNTIME_DIR/sluice.log", "write the log to this file [stderr]"},
	{"SLUICE_ONLY", "curl+wget", "apply the rules only to these programs"},
	{"SLUICE_SKIP", "sh+bash", "apply the rules to every program but these"},
	{"SLUICE_STATS", "$XDG_RUNTIME_DIR/sluice-%p.json",
	 "write JSON statistics to this file at exit (%p: the pid)"},
	{"SLUICE_CONFIG_ERROR", "warn",
	 "on a bad SLUICE_* value: exit (status 2) or warn and run unthrottled [exit]"},
	{"SLUICE_REDIS", "redis://127.0.0.1:6379/0",
	 "the Redis server of redis=KEY rules: redis://[USER:PASSWORD@]HOST[:PORT][/DB], unix:///PATH, redis+cluster://NODE,NODE,... or redis+sentinel://NODE,NODE,.../MASTER[/DB]"},
	{"SLUICE_BREAK", "errors=5,window=10s,open=5s",
	 "circuit breaking on connect: errors=N|P%[,OPTION...]"},
};
const size_t sl_policy_nvars = sizeof sl_policy_vars / sizeof sl_policy_vars[0];

/* Same order as sl_policy_vars. */
static const var_parser var_parsers[] = {
	parse_connect, parse_accept,       parse_send,     parse_recv,  parse_conns,
	parse_rules,   parse_log,          parse_log_file, parse_only,  parse_skip,
	parse_stats,   parse_config_error, parse_redis,    parse_break,
};
_Static_assert(sizeof var_parsers / sizeof var_parsers[0] ==
		       sizeof sl_policy_vars / sizeof sl_policy_vars[0],
	       "one parser per variable");

static int var_index(const char *name, size_t len)
{
	for (size_t i = 0; i < sl_policy_nvars; i++)
		if (strlen(sl_policy_vars[i].name) == len &&
		    memcmp(sl_policy_vars[i].name, name, len) == 0)
			return (int)i;
	return -1;
}

static int unknown_var(const struct sl__ctx *c, const char *name, size_t len)
{
	const char *names[sizeof sl_policy_vars / sizeof sl_policy_vars[0]];
	const char *suffixes[sizeof sl_policy_vars / sizeof sl_policy_vars[0]];
	char list[256], hint[64];
	size_t prefix = strlen("SLUICE_");

	for (size_t i = 0; i < sl_policy_nvars; i++) {
		names[i] = sl_policy_vars[i].name;
		suffixes[i] = names[i] + prefix;
	}
	/* Compare what follows SLUICE_, or every name would look close. */
	if (len > prefix && strncmp(name, "SLUICE_", prefix) == 0) {
		const char *near = sl__suggest(suffixes, sl_policy_nvars, name + prefix,
					       len - prefix);
		if (near != NULL)
			return sl__fail_value(c, "unknown variable%s",
					      sl__did_you_mean(hint, sizeof hint, near - prefix));
	}
	return sl__fail_value(c, "unknown variable (expected one of %s)",
			      sl__join(list, sizeof list, names, sl_policy_nvars, ", "));
}

/* Parse name[0, name_len) = value into *p; *p changes only on success. */
static int parse_var(struct sl_policy *p, const char *name, size_t name_len, const char *value,
		     char *err, size_t errlen)
{
	char shown[SL__NAME_SHOWN + 4];
	size_t n = name_len < SL__NAME_SHOWN ? name_len : SL__NAME_SHOWN;

	memcpy(shown, name, n);
	strcpy(shown + n, name_len > n ? "..." : "");
	struct sl__ctx c = {.var = shown,
			    .value = value,
			    .len = strlen(value),
			    .err = err,
			    .errlen = errlen};
	int k = var_index(name, name_len);
	if (k < 0)
		return unknown_var(&c, name, name_len);
	struct sl_policy tmp = *p;
	if (var_parsers[k](&tmp, &c) < 0)
		return -1;
	*p = tmp;
	return 0;
}

int sl_rules_parse_text(struct sl_policy *p, const char *label, const char *text, char *err,
			size_t errlen)
{
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	struct sl__ctx c = {.var = label,
			    .value = text,
			    .len = strlen(text),
			    .err = err,
			    .errlen = errlen};
	struct sl_policy tmp = *p;
	if (parse_rules(&tmp, &c) < 0)
		return -1;
	*p = tmp;
	return 0;
}

void sl_policy_init(struct sl_policy *p)
{
	memset(p, 0, sizeof *p);
	p->log_level = SL_LOG_ERROR;
	p->config_error = SL_CONFIG_ERROR_EXIT;
}

int sl_policy_parse_var(struct sl_policy *p, const char *name, const char *value, char *err,
			size_t errlen)
{
	if (err != NULL && errlen > 0)
		err[0] = '\0';
	return parse_var(p, name, strlen(name), value, err, errlen);
}

static bool is_config_error(const char *entry, size_t name_len)
{
	return name_len == strlen("SLUICE_CONFIG_ERROR") &&
	       memcmp(entry, "SLUICE_CONFIG_ERROR", name_len) == 0;
}

/* Run the parsers over envp's SLUICE_* entries; pass 0 takes only
 * SLUICE_CONFIG_ERROR, pass 1 everything else. */
static int parse_entries(struct sl_policy *p, const char *const *envp, int pass, char *err,
			 size_t errlen)
{
	for (size_t i = 0; envp[i] != NULL; i++) {
		const char *e = envp[i];
		if (strncmp(e, "SLUICE_", 7) != 0)
			continue;
		const char *eq = strchr(e, '=');
		size_t name_len = eq != NULL ? (size_t)(eq - e) : strlen(e);
		if (is_config_error(e, name_len) != (pass == 0))
			continue;
		if (parse_var(p, e, name_len, eq != NULL ? eq + 1 : "", err, errlen) < 0)
			return -1;
	}
	return 0;
}

/* A redis=KEY rule needs SLUICE_REDIS: checked once every variable is read. */
static int check_redis_set(const struct sl_policy *p, char *err, size_t errlen)
{
	char text[SL_RULE_TEXT_MAX];
	struct sl__ctx c = {.var = "SLUICE_REDIS",
			    .value = "",
			    .len = 0,
			    .err = err,
			    .errlen = errlen};

	if (p->redis.kind != SL_REDIS_NONE)
		return 0;
	for (uint32_t i = 0; i < p->n_rules; i++) {
		if (p->rules[i].redis_key[0] == '\0')
			continue;
		sl_rule_format(&p->rules[i], text, sizeof text);
		return sl__fail_value(&c,
				      "not set, but rule %u (%s) keeps its state on Redis "
				      "(e.g. SLUICE_REDIS=redis://127.0.0.1:6379)",
				      i + 1, text);
	}
	return 0;
}

/*
 * Parse every SLUICE_* entry of envp. Returns 0, or -1 with one line in err.
 * On error *p is unchanged, except that config_error already reflects a
 * valid SLUICE_CONFIG_ERROR, so the caller knows whether to exit or warn.
 */
int sl_policy_parse_env(struct sl_policy *p, const char *const *envp, char *err, size_t errlen)
{
	struct sl_policy tmp = *p;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (parse_entries(&tmp, envp, 0, err, errlen) < 0)
		return -1;
	p->config_error = tmp.config_error;
	if (parse_entries(&tmp, envp, 1, err, errlen) < 0 || check_redis_set(&tmp, err, errlen) < 0)
		return -1;
	*p = tmp;
	return 0;
}
