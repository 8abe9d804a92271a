/* SPDX-License-Identifier: MIT */
/*
 * test_policy_env.c - the SLUICE_* variables as a whole and the policy API
 * around the rule parser: environment arrays, the variables table, rule
 * limits, errno defaults and names, bounded output buffers, error escaping
 * and the default burst's accuracy property.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "test_assert.h"

#include "policy.h"

static void test_policy_env_reads_sluice_entries_only(void **state)
{
	const char *const env[] = {"PATH=/bin",
				   "SLUICE_SEND=1MiB/s",
				   "SLUICEX=1",
				   "SLUICE_RULES=connect:10/s;conns:5",
				   "SLUICE_LOG=info",
				   "SLUICE_LOG_FILE=/tmp/sluice.log",
				   "SLUICE_STATS=/tmp/stats.json",
				   "SLUICE_ONLY=curl+wget",
				   "SLUICE_CONFIG_ERROR=warn",
				   NULL};
	struct sl_policy p;
	char err[SL_ERR_MAX] = "x", text[SL_RULE_TEXT_MAX];

	(void)state;
	sl_policy_init(&p);
	assert_dec_equal(sl_policy_parse_env(&p, env, err, sizeof err), 0);
	assert_string_equal(err, "");
	assert_dec_equal(p.n_rules, 3);
	sl_rule_format(&p.rules[0], text, sizeof text);
	assert_string_equal(text, "send:1MiB/s");
	sl_rule_format(&p.rules[2], text, sizeof text);
	assert_string_equal(text, "conns:5");
	assert_dec_equal(p.log_level, SL_LOG_INFO);
	assert_dec_equal(p.config_error, SL_CONFIG_ERROR_WARN);
	assert_string_equal(p.log_file, "/tmp/sluice.log");
	assert_string_equal(p.stats_file, "/tmp/stats.json");
	assert_string_equal(p.only, "curl+wget");
	assert_string_equal(p.skip, "");
}

/* An error leaves the rules alone, but SLUICE_CONFIG_ERROR (read first,
 * wherever it sits) already says whether to exit or warn. */
static void test_policy_env_error_keeps_config_error(void **state)
{
	const char *const env[] = {"SLUICE_SEND=1MiB/s", "SLUICE_RECV=1Mib/s",
				   "SLUICE_CONFIG_ERROR=warn", NULL};
	struct sl_policy p;
	char err[SL_ERR_MAX];

	(void)state;
	sl_policy_init(&p);
	assert_dec_equal(sl_policy_parse_env(&p, env, err, sizeof err), -1);
	assert_string_equal(err, "SLUICE_RECV=\"1Mib/s\": at column 2: unknown unit 'Mib' "
				 "(expected B, KB, KiB, MB, MiB, GB, GiB)");
	assert_dec_equal(p.n_rules, 0);
	assert_dec_equal(p.config_error, SL_CONFIG_ERROR_WARN);
}

static void test_policy_env_bad_config_error_stays_exit(void **state)
{
	const char *const env[] = {"SLUICE_SEND=1MiB/s", "SLUICE_CONFIG_ERROR=ignore", NULL};
	struct sl_policy p;
	char err[SL_ERR_MAX];

	(void)state;
	sl_policy_init(&p);
	assert_dec_equal(sl_policy_parse_env(&p, env, err, sizeof err), -1);
	assert_string_equal(err, "SLUICE_CONFIG_ERROR=\"ignore\": at column 1: unknown mode "
				 "'ignore' (expected exit, warn)");
	assert_dec_equal(p.config_error, SL_CONFIG_ERROR_EXIT);
	assert_dec_equal(p.n_rules, 0);
}

static void test_policy_env_unknown_variable(void **state)
{
	const char *const env[] = {"SLUICE_SNED=1MiB/s", NULL};
	const char *const no_value[] = {"SLUICE_BOGUS_THING", NULL};
	struct sl_policy p;
	char err[SL_ERR_MAX];

	(void)state;
	sl_policy_init(&p);
	assert_dec_equal(sl_policy_parse_env(&p, env, err, sizeof err), -1);
	assert_string_equal(err,
			    "SLUICE_SNED=\"1MiB/s\": unknown variable (did you mean SLUICE_SEND?)");
	assert_dec_equal(sl_policy_parse_env(&p, no_value, err, sizeof err), -1);
	assert_non_null(strstr(err, "SLUICE_BOGUS_THING=\"\": unknown variable (expected one of "
				    "SLUICE_CONNECT, "));
}

/* Rules accumulate over variables up to SL_MAX_RULES; one more is an error
 * at the column of the rule that does not fit. */
static void test_policy_rule_limit(void **state)
{
	char rules[SL_MAX_RULES * 16] = "", err[SL_ERR_MAX], expected[SL_ERR_MAX];
	struct sl_policy p;

	(void)state;
	for (int i = 0; i < SL_MAX_RULES - 1; i++)
		strcat(rules, i == 0 ? "send:1/s" : ";send:1/s");
	sl_policy_init(&p);
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_RULES", rules, err, sizeof err), 0);
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_CONNS", "3", err, sizeof err), 0);
	assert_dec_equal(p.n_rules, SL_MAX_RULES);
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_SEND", "1/s", err, sizeof err), -1);
	assert_string_equal(err, "SLUICE_SEND=\"1/s\": at column 1: too many rules (at most 32 "
				 "in all SLUICE_* variables)");

	strcat(rules, ";recv:1/s;recv:2/s"); /* 33 rules in one variable */
	sl_policy_init(&p);
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_RULES", rules, err, sizeof err), -1);
	snprintf(expected, sizeof expected, "at column %zu: too many rules",
		 strlen(rules) - strlen("recv:2/s") + 1);
	assert_non_null(strstr(err, expected));
	assert_dec_equal(p.n_rules, 0);
}

static void test_policy_only_skip_and_paths(void **state)
{
	char long_path[SL_PATH_MAX + 1], err[SL_ERR_MAX];
	struct sl_policy p;

	(void)state;
	sl_policy_init(&p);
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_SKIP", "sh+bash", err, sizeof err), 0);
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_ONLY", "curl", err, sizeof err), -1);
	assert_string_equal(err, "SLUICE_ONLY=\"curl\": SLUICE_ONLY and SLUICE_SKIP cannot be "
				 "used together (SLUICE_SKIP is set too)");
	memset(long_path, 'a', SL_PATH_MAX);
	long_path[SL_PATH_MAX] = '\0';
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_STATS", long_path, err, sizeof err), -1);
	assert_non_null(strstr(err, "at column 1: path is 256 bytes long (at most 255)"));
	long_path[SL_PATH_MAX - 1] = '\0';
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_STATS", long_path, err, sizeof err), 0);
	assert_string_equal(p.stats_file, long_path);
}

static void test_policy_rule_errno_defaults(void **state)
{
	struct sl_rule r;
	char err[SL_ERR_MAX];

	(void)state;
	assert_dec_equal(sl_rule_parse(&r, SL_OP_CONNECT, "1/s", NULL, err, sizeof err), 0);
	assert_dec_equal(sl_rule_errno(&r, SL_OP_CONNECT), ECONNREFUSED);
	assert_dec_equal(sl_rule_parse(&r, SL_OP_ACCEPT, "1/s", NULL, err, sizeof err), 0);
	assert_dec_equal(sl_rule_errno(&r, SL_OP_ACCEPT), ECONNABORTED);
	assert_dec_equal(sl_rule_parse(&r, SL_OP_SEND, "1/s", NULL, err, sizeof err), 0);
	assert_dec_equal(sl_rule_errno(&r, SL_OP_SEND), EAGAIN);
	assert_dec_equal(sl_rule_parse(&r, SL_OP_RECV, "1/s", NULL, err, sizeof err), 0);
	assert_dec_equal(sl_rule_errno(&r, SL_OP_RECV), EAGAIN);
	assert_dec_equal(sl_rule_parse(&r, SL_OP_CONNS, "4", NULL, err, sizeof err), 0);
	assert_dec_equal(sl_rule_errno(&r, SL_OP_CONNECT), ECONNREFUSED);
	assert_dec_equal(sl_rule_errno(&r, SL_OP_ACCEPT), ECONNABORTED);
	assert_dec_equal(sl_rule_parse(&r, SL_OP_CONNS, "4,errno=ETIMEDOUT", NULL, err, sizeof err),
			 0);
	assert_dec_equal(sl_rule_errno(&r, SL_OP_ACCEPT), ETIMEDOUT);
}

static void test_policy_errno_names(void **state)
{
	(void)state;
	assert_dec_equal(sl_errno_from_name("ECONNREFUSED", 12), ECONNREFUSED);
	assert_dec_equal(sl_errno_from_name("ECONNREFUSEDX", 12), ECONNREFUSED); /* length bound */
	assert_dec_equal(sl_errno_from_name("EWOULDBLOCK", 11), EAGAIN);
	assert_dec_equal(sl_errno_from_name("ENOENT", 6), 0);
	assert_dec_equal(sl_errno_from_name("", 0), 0);
	assert_string_equal(sl_errno_name(EAGAIN), "EAGAIN");
	assert_string_equal(sl_errno_name(ETIMEDOUT), "ETIMEDOUT");
	assert_null(sl_errno_name(ENOENT));
	assert_null(sl_errno_name(0));
}

static void test_policy_names(void **state)
{
	(void)state;
	assert_string_equal(sl_op_name(SL_OP_CONNECT), "connect");
	assert_string_equal(sl_op_name(SL_OP_CONNS), "conns");
	assert_string_equal(sl_op_name(SL_OP_COUNT), "?");
	assert_string_equal(sl_algo_name(SL_ALGO_SLIDING), "sliding");
	assert_string_equal(sl_action_name(SL_ACTION_DRYRUN), "dry-run");
	assert_string_equal(sl_scope_name(SL_SCOPE_PEER), "peer");
	assert_string_equal(sl_scope_name((enum sl_scope)9), "?");
}

/* Every variable has help, and its example parses. */
static void test_policy_vars_table(void **state)
{
	char err[SL_ERR_MAX];

	(void)state;
	assert_dec_equal(sl_policy_nvars, 14);
	for (size_t i = 0; i < sl_policy_nvars; i++) {
		struct sl_policy p;
		sl_policy_init(&p);
		assert_true(strncmp(sl_policy_vars[i].name, "SLUICE_", 7) == 0);
		assert_true(strlen(sl_policy_vars[i].help) > 10);
		if (sl_policy_parse_var(&p, sl_policy_vars[i].name, sl_policy_vars[i].example, err,
					sizeof err) != 0)
			fail_msg("example of %s: %s", sl_policy_vars[i].name, err);
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(sl_policy_vars[i].name, sl_policy_vars[j].name);
	}
}

/* sl_rule_format: snprintf semantics, never a partial piece. */
static void test_policy_format_truncates(void **state)
{
	struct sl_rule r;
	char err[SL_ERR_MAX], full[SL_RULE_TEXT_MAX], small[12];

	(void)state;
	assert_dec_equal(sl_rule_parse(&r, SL_OP_SEND, "10MiB/s,per=thread", NULL, err, sizeof err),
			 0);
	size_t n = sl_rule_format(&r, full, sizeof full);
	assert_string_equal(full, "send:10MiB/s,per=thread");
	assert_dec_equal(n, strlen(full));
	memset(small, 'z', sizeof small);
	assert_dec_equal(sl_rule_format(&r, small, sizeof small), n);
	assert_string_equal(small, "send:10MiB/"); /* "s" did not fit after it */
	assert_dec_equal(sl_rule_format(&r, small, 1), n);
	assert_string_equal(small, "");
	small[0] = 'z';
	assert_dec_equal(sl_rule_format(&r, small, 0), n);
	assert_dec_equal(small[0], 'z');
}

/* The error buffer: NUL-terminated prefix whatever its size, untouched when
 * empty, and plain ASCII on one line whatever the value holds. */
static void test_policy_error_buffer(void **state)
{
	struct sl_policy p;
	char err[SL_ERR_MAX], small[16];

	(void)state;
	sl_policy_init(&p);
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_SEND", "1Mib/s", small, sizeof small), -1);
	assert_string_equal(small, "SLUICE_SEND=\"1M");
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_SEND", "1Mib/s", NULL, 0), -1);
	small[0] = 'z';
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_SEND", "1Mib/s", small, 0), -1);
	assert_dec_equal(small[0], 'z');
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_SEND", "1\t\xc3\xa9/s", err, sizeof err),
			 -1);
	assert_string_equal(err, "SLUICE_SEND=\"1\\x09\\xc3\\xa9/s\": at column 2: unexpected "
				 "'\\x09\\xc3\\xa9/s' after the amount (expected '/' and a period, "
				 "e.g. 100/s)");
}

/* A long value is quoted as a window around the column. */
static void test_policy_error_long_value(void **state)
{
	char value[1024] = "", err[SL_ERR_MAX];
	struct sl_policy p;

	(void)state;
	for (int i = 0; i < 20; i++)
		strcat(value, "send:1MiB/s,per=fd;");
	strcat(value, "recv:1Mib/s");
	sl_policy_init(&p);
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_RULES", value, err, sizeof err), -1);
	assert_string_equal(err,
			    "SLUICE_RULES=\"...er=fd;send:1MiB/s,per=fd;send:1MiB/s,per=fd;"
			    "recv:1Mib/s\": at column 387: unknown unit 'Mib' (expected B, KB, "
			    "KiB, MB, MiB, GB, GiB)");
}

/* The canonical text of the longest SLUICE_REDIS parses back: 8 sentinels
 * of 255-byte names (no port given: each gets ":26379" in the canonical
 * form, 2,186 bytes where the value was 2,138). */
static void test_policy_redis_longest_canonical(void **state)
{
	static char value[SL_REDIS_TEXT_MAX], text[SL_REDIS_TEXT_MAX], err[SL_ERR_MAX];
	struct sl_policy p, q;

	(void)state;
	strcpy(value, "redis+sentinel://");
	for (int i = 0; i < SL_REDIS_NODES_MAX; i++) {
		size_t n = strlen(value);
		memset(value + n, 'a' + i, SL_REDIS_HOST_MAX - 1);
		value[n + SL_REDIS_HOST_MAX - 1] = '\0';
		strcat(value, i + 1 < SL_REDIS_NODES_MAX ? "," : "/master");
	}
	sl_policy_init(&p);
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_REDIS", value, err, sizeof err), 0);
	size_t len = sl_redis_format(&p.redis, text, sizeof text);
	assert_true(len > 1023 && len < sizeof text);
	sl_policy_init(&q);
	assert_dec_equal(sl_policy_parse_var(&q, "SLUICE_REDIS", text, err, sizeof err), 0);
	assert_dec_equal(q.redis.n_nodes, SL_REDIS_NODES_MAX);
}

static void test_policy_rule_parse_names_variable(void **state)
{
	struct sl_rule r, before;
	char err[SL_ERR_MAX];

	(void)state;
	memset(&r, 0x5a, sizeof r);
	before = r;
	assert_dec_equal(sl_rule_parse(&r, SL_OP_RECV, "0/s", NULL, err, sizeof err), -1);
	assert_string_equal(
		err, "SLUICE_RECV=\"0/s\": at column 1: zero rate '0/s': nothing could ever pass");
	assert_memory_equal(&r, &before, sizeof r);
	assert_dec_equal(sl_rule_parse(&r, SL_OP_SEND, "1/s,x=1", "--send", err, sizeof err), -1);
	assert_string_equal(
		err,
		"--send=\"1/s,x=1\": at column 5: unknown option 'x' (expected burst, "
		"algo, action, max-delay, errno, per, to, port, family, type, nonblock, "
		"shared, redis, on-error, lease, warmup, cold, min, max, initial, load1, cpu, rt)");
}

static void test_policy_equal_ignores_explicit_opts(void **state)
{
	struct sl_rule a, b;
	char err[SL_ERR_MAX];

	(void)state;
	assert_dec_equal(sl_rule_parse(&a, SL_OP_SEND, "100/s", NULL, err, sizeof err), 0);
	assert_dec_equal(sl_rule_parse(&b, SL_OP_SEND, "100/s,action=delay,per=process,burst=1",
				       NULL, err, sizeof err),
			 0);
	assert_int_not_equal(a.explicit_opts, b.explicit_opts);
	assert_true(sl_rule_equal(&a, &b));
	assert_dec_equal(sl_rule_parse(&b, SL_OP_SEND, "100/s,burst=2", NULL, err, sizeof err), 0);
	assert_false(sl_rule_equal(&a, &b));
}

/* The documented defaults, field by field. */
static void test_policy_rule_defaults(void **state)
{
	struct sl_rule r;
	char err[SL_ERR_MAX];

	(void)state;
	assert_dec_equal(sl_rule_parse(&r, SL_OP_SEND, "10MiB/s", NULL, err, sizeof err), 0);
	assert_dec_equal(r.unit, SL_UNIT_BYTES);
	assert_dec_equal(r.amount, 10485760);
	assert_dec_equal(r.period_ns, 1000000000);
	assert_dec_equal(r.burst, 52429); /* ceil(5 ms of 10 MiB/s) */
	assert_dec_equal(r.algo, SL_ALGO_TOKEN);
	assert_dec_equal(r.action, SL_ACTION_DELAY);
	assert_dec_equal(r.scope, SL_SCOPE_PROCESS);
	assert_true(r.max_delay_ns == UINT64_MAX);
	assert_dec_equal(r.err, 0);
	assert_dec_equal(r.families, SL_FAM_INET | SL_FAM_INET6);
	assert_dec_equal(r.types, SL_TYPE_STREAM | SL_TYPE_DGRAM);
	assert_dec_equal(r.port_lo, 0);
	assert_dec_equal(r.port_hi, 65535);
	assert_dec_equal(r.to.family, 0);
	assert_dec_equal(r.explicit_opts, 0);
	assert_dec_equal(sl_rule_parse(&r, SL_OP_RECV, "1/s,algo=leaky,max-delay=2s", NULL, err,
				       sizeof err),
			 0);
	assert_dec_equal(r.burst, 0);
	assert_dec_equal(r.max_delay_ns, 2000000000);
	assert_dec_equal(r.explicit_opts, SL_OPT_ALGO | SL_OPT_MAX_DELAY);
	assert_dec_equal(sl_rule_parse(&r, SL_OP_CONNECT, "5/s,to=[::1]:8080", NULL, err,
				       sizeof err),
			 0);
	assert_dec_equal(r.types, SL_TYPE_STREAM);
	assert_dec_equal(r.to.family, 6);
	assert_dec_equal(r.to.prefix, 128);
	assert_dec_equal(r.to.addr[15], 1);
	assert_dec_equal(r.port_lo, 8080);
	assert_dec_equal(r.port_hi, 8080);
	assert_dec_equal(sl_rule_parse(&r, SL_OP_CONNS, "7", NULL, err, sizeof err), 0);
	assert_dec_equal(r.amount, 7);
	assert_dec_equal(r.period_ns, 0);
	assert_dec_equal(r.burst, 0);
}

/*
 * The default burst keeps a transfer honest: over 5 s the mean is within 1%
 * of the rate and no 100 ms window carries more than 1.2x its share (the
 * most a token bucket lets through in a window T is burst + rate * T). Rates
 * where 100 ms is less than ten units are exempt: one whole call is the
 * least a burst can be.
 */
static void test_policy_default_burst_accuracy(void **state)
{
	static const char *const rates[] = {"10MiB/s", "1MiB/s", "1KB/s", "100KB/s", "1GiB/s",
					    "100/s",   "1000/s", "3/ms",  "600/min", "5GB/s"};
	char err[SL_ERR_MAX];

	(void)state;
	for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
		struct sl_rule r;
		assert_dec_equal(sl_rule_parse(&r, SL_OP_SEND, rates[i], NULL, err, sizeof err), 0);
		double per_s = (double)r.amount * 1e9 / (double)r.period_ns;
		double share = per_s * 0.1;
		if (share < 10)
			continue;
		double mean = ((double)r.burst + per_s * 5) / (per_s * 5);
		double window = ((double)r.burst + share) / share;
		if (mean > 1.01 || window > 1.2)
			fail_msg("%s: burst %llu gives mean %.4f, window %.4f", rates[i],
				 (unsigned long long)r.burst, mean, window);
		assert_true(r.burst >= 1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_policy_env_reads_sluice_entries_only),
		cmocka_unit_test(test_policy_env_error_keeps_config_error),
		cmocka_unit_test(test_policy_env_bad_config_error_stays_exit),
		cmocka_unit_test(test_policy_env_unknown_variable),
		cmocka_unit_test(test_policy_rule_limit),
		cmocka_unit_test(test_policy_only_skip_and_paths),
		cmocka_unit_test(test_policy_rule_errno_defaults),
		cmocka_unit_test(test_policy_errno_names),
		cmocka_unit_test(test_policy_names),
		cmocka_unit_test(test_policy_vars_table),
		cmocka_unit_test(test_policy_format_truncates),
		cmocka_unit_test(test_policy_error_buffer),
		cmocka_unit_test(test_policy_error_long_value),
		cmocka_unit_test(test_policy_redis_longest_canonical),
		cmocka_unit_test(test_policy_rule_parse_names_variable),
		cmocka_unit_test(test_policy_equal_ignores_explicit_opts),
		cmocka_unit_test(test_policy_rule_defaults),
		cmocka_unit_test(test_policy_default_burst_accuracy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
