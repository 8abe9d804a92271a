/* SPDX-License-Identifier: MIT */
/*
 * test_common_stats.c - the SLUICE_STATS line both modes write
 * (common/stats_json.c): exact text, escaping, "%p", a short buffer.
 */
#include "test_core.h"
#include "test_policy.h"

#include "../common/stats_json.h"

static void test_stats_json_exact(void **state)
{
	(void)state;
	struct sl_policy p = policy_of("recv:4MiB/s;connect:5/s,action=reject");
	struct sl_rstats st[2];
	memset(st, 0, sizeof(st));
	atomic_store(&st[0].calls, 56);
	atomic_store(&st[0].admitted, 56);
	atomic_store(&st[0].delayed, 54);
	atomic_store(&st[0].delay_ns, 234319804);
	atomic_store(&st[0].max_delay_ns, 4910958);
	atomic_store(&st[0].bytes, 1048576);
	char buf[2048];
	size_t n = sl_stats_json(buf, sizeof(buf), 42, "net\"prog\n", &p, st, 1);
	buf[n] = '\0';
	assert_string_equal(
		buf,
		"{\"pid\":42,\"program\":\"net\\\"prog\\u000a\",\"rules\":["
		"{\"index\":1,\"rule\":\"recv:4MiB/s\",\"op\":\"recv\",\"action\":\"delay\","
		"\"scope\":\"process\",\"calls\":56,\"admitted\":56,\"delayed\":54,\"refused\":0,"
		"\"delay_ns_total\":234319804,\"delay_ns_max\":4910958,\"bytes\":1048576},"
		"{\"index\":2,\"rule\":\"connect:5/s,action=reject\",\"op\":\"connect\","
		"\"action\":\"reject\",\"scope\":\"process\",\"calls\":0,\"admitted\":0,"
		"\"delayed\":0,\"refused\":0,\"delay_ns_total\":0,\"delay_ns_max\":0,"
		"\"bytes\":0}]");
	assert_dec_equal(n, strlen(buf));
}

/* A buffer too small for the rules: cut, never past cap, the array closed. */
static void test_stats_json_short(void **state)
{
	(void)state;
	struct sl_policy p = policy_of("recv:4MiB/s;send:1MiB/s;connect:5/s");
	struct sl_rstats st[3];
	memset(st, 0, sizeof(st));
	char buf[96];
	memset(buf, 'x', sizeof(buf));
	size_t n = sl_stats_json(buf, sizeof(buf) - 3, 7, "p", &p, st, 3);
	assert_true(n <= sizeof(buf) - 3);
	assert_dec_equal(buf[n - 1], ']');
	assert_dec_equal(buf[sizeof(buf) - 1], 'x'); /* the caller's reserve */
}

static void test_stats_path(void **state)
{
	(void)state;
	char out[64];
	sl_stats_path("/run/s-%p.json", 1234, out, sizeof(out));
	assert_string_equal(out, "/run/s-1234.json");
	sl_stats_path("/run/%p/%p%x", 5, out, sizeof(out));
	assert_string_equal(out, "/run/5/5%x");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stats_json_exact),
		cmocka_unit_test(test_stats_json_short),
		cmocka_unit_test(test_stats_path),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
