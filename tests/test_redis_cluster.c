/* SPDX-License-Identifier: MIT */
/*
 * test_redis_cluster.c - the pure parts of shim/redis_cluster.c: the slot
 * of a key (CRC16 and hash tags, against values Redis itself computes) and
 * the parsing of MOVED/ASK replies, including the forms that must be
 * refused. The network part runs in tests/integration/test_redis_cluster.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include "test_assert.h"

#include "redis_proto.h"

static uint16_t slot_of(const char *k)
{
	return sl__cluster_slot(k, strlen(k));
}

/* CLUSTER KEYSLOT of redis-server 7.0 for the same keys. */
/* The shim declares what it uses of hiredis 0.14 itself (it loads the
 * library with dlopen and builds without its headers): the same layout. */
static void test_redis_hiredis_layout(void **state)
{
	(void)state;
	assert_int_equal(sizeof(struct sl_rtask), sizeof(redisReadTask));
	assert_int_equal(offsetof(struct sl_rtask, obj), offsetof(redisReadTask, obj));
	assert_int_equal(offsetof(struct sl_rtask, privdata), offsetof(redisReadTask, privdata));
	assert_int_equal(sizeof(struct sl_rfuncs), sizeof(redisReplyObjectFunctions));
	assert_int_equal(offsetof(struct sl_rfuncs, create_array),
			 offsetof(redisReplyObjectFunctions, createArray));
	assert_int_equal(offsetof(struct sl_rreader, buf), offsetof(redisReader, buf));
	assert_int_equal(offsetof(struct sl_rreader, len), offsetof(redisReader, len));
	assert_int_equal(offsetof(struct sl_rreader, reply), offsetof(redisReader, reply));
	assert_int_equal(offsetof(struct sl_rreader, fn), offsetof(redisReader, fn));
	assert_int_equal(offsetof(struct sl_hreply, integer), offsetof(redisReply, integer));
	assert_int_equal(offsetof(struct sl_hreply, str), offsetof(redisReply, str));
	assert_int_equal(offsetof(struct sl_hreply, element), offsetof(redisReply, element));
}

static void test_redis_cluster_slot(void **state)
{
	(void)state;
	assert_dec_equal(slot_of("foo"), 12182);
	assert_dec_equal(slot_of("bar"), 5061);
	assert_dec_equal(slot_of("123456789"), 0x31C3 % 16384);
	/* Only the first {...} counts, and only if it is not empty. */
	assert_dec_equal(slot_of("sluice:{foo}"), 12182);
	assert_dec_equal(slot_of("{foo}x{bar}"), 12182);
	assert_dec_equal(slot_of("a{}foo"), slot_of("a{}foo"));
	assert_int_not_equal(slot_of("a{}foo"), slot_of("foo"));
	assert_dec_equal(slot_of("x{foo"), sl__cluster_slot("x{foo", 5));
	assert_dec_equal(slot_of(""), 0);
}

static void test_redis_cluster_redirect(void **state)
{
	char host[64];
	uint16_t slot = 0, port = 0;
	(void)state;
	assert_dec_equal(sl__cluster_redirect_parse("MOVED 3999 127.0.0.1:6381", &slot, host,
						    sizeof(host), &port),
			 1);
	assert_dec_equal(slot, 3999);
	assert_string_equal(host, "127.0.0.1");
	assert_dec_equal(port, 6381);
	assert_dec_equal(sl__cluster_redirect_parse("ASK 16383 ::1:7002", &slot, host, sizeof(host),
						    &port),
			 2);
	assert_dec_equal(slot, 16383);
	assert_string_equal(host, "::1");
	assert_dec_equal(port, 7002);
	/* Redis 7 without a known address: an empty host. */
	assert_dec_equal(sl__cluster_redirect_parse("MOVED 1 :7000", &slot, host, sizeof(host),
						    &port),
			 1);
	assert_string_equal(host, "");
	assert_dec_equal(port, 7000);
	static const char *const bad[] = {
		"MOVED",
		"MOVED 16384 h:1",
		"MOVED x h:1",
		"MOVED 1 h",
		"MOVED 1 h:0",
		"MOVED 1 h:65536",
		"MOVED 1 h:7000 extra",
		"ASK 1h:1",
		"CLUSTERDOWN Hash slot not served",
		"READONLY You can't write against a read only replica.",
		"moved 1 h:1",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		port = 1234;
		if (sl__cluster_redirect_parse(bad[i], &slot, host, sizeof(host), &port) != 0)
			fail_msg("'%s' parsed as a redirect", bad[i]);
		assert_dec_equal(port, 1234);
	}
	/* A host longer than the buffer is refused, not cut. */
	char small[4];
	assert_dec_equal(sl__cluster_redirect_parse("MOVED 1 abcd:1", &slot, small, sizeof(small),
						    &port),
			 0);
	assert_dec_equal(sl__cluster_redirect_parse("MOVED 1 abc:1", &slot, small, sizeof(small),
						    &port),
			 1);
	assert_string_equal(small, "abc");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_redis_hiredis_layout),
		cmocka_unit_test(test_redis_cluster_slot),
		cmocka_unit_test(test_redis_cluster_redirect),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
