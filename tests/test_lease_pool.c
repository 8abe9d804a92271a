/* SPDX-License-Identifier: MIT */
/*
 * test_lease_pool.c - the renewer election of a host pool (shim/
 * lease_pool.c) at given instants: who renews, when a silent renewer is
 * replaced, what resigning does, and that a heartbeat read "from the
 * future" (another process's later clock read) does not look stale.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_assert.h"

#include "lease_pool.h"

#define MS 1000000ull
#define T0 (123456 * MS)
#define STALE (100 * MS)

static struct sl_shm_shared seg;

static bool role(uint32_t pid, uint64_t t, bool *took)
{
	return sl__pool_renew_role(&seg, pid, t, STALE, took);
}

static void test_lease_pool_election(void **state)
{
	bool took;
	(void)state;
	memset(&seg, 0, sizeof(seg));
	assert_dec_equal(sl__pool_renewer(&seg), 0);
	assert_true(role(100, T0, &took)); /* nobody: the first one renews */
	assert_true(took);
	assert_false(role(200, T0 + 10 * MS, &took)); /* fresh heartbeat */
	assert_false(took);
	assert_true(role(100, T0 + 50 * MS, &took)); /* still mine, heartbeat moves */
	assert_false(took);
	assert_false(role(200, T0 + 150 * MS, &took)); /* 100 ms since the beat: not stale */
	assert_true(role(200, T0 + 151 * MS, &took));  /* 101 ms: taken over */
	assert_true(took);
	assert_dec_equal(seg.takeovers, 1);
	assert_dec_equal(sl__pool_renewer(&seg), 200);
	assert_false(role(100, T0 + 152 * MS, &took)); /* the slow one lost the role */
	/* Resigning clears the word: the next one needs no wait and is not a
	 * takeover. Resigning a role one does not hold changes nothing. */
	sl__pool_resign(&seg, 100);
	assert_dec_equal(sl__pool_renewer(&seg), 200);
	sl__pool_resign(&seg, 200);
	assert_dec_equal(sl__pool_renewer(&seg), 0);
	assert_true(role(300, T0 + 153 * MS, &took));
	assert_true(took);
	assert_dec_equal(seg.takeovers, 1);
}

static void test_lease_pool_future_beat(void **state)
{
	bool took;
	(void)state;
	memset(&seg, 0, sizeof(seg));
	assert_true(role(100, T0 + 5 * MS, &took));
	/* Another process read the clock a little earlier than 100 wrote. */
	assert_false(role(200, T0 + 4 * MS, &took));
	assert_dec_equal(sl__pool_renewer(&seg), 100);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lease_pool_election),
		cmocka_unit_test(test_lease_pool_future_beat),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
