/* SPDX-License-Identifier: MIT */
/*
 * test_lease_share.c - shim/lease_share.c, the window of recent grants that
 * on-error=local falls back to: exact sums and window lengths at given
 * instants (buckets of 100 ms, so the window is 700 ms plus the current
 * bucket's part).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_assert.h"

#include "lease_share.h"

#define MS 1000000ull
#define T0 (5000 * MS) /* any start: the clock is CLOCK_MONOTONIC */

static void test_lease_share_empty(void **state)
{
	struct sl_share s;
	uint64_t w = 1;
	(void)state;
	sl__share_init(&s, 100 * MS);
	assert_dec_equal(sl__share_recent(&s, T0, &w), 0);
	assert_dec_equal(w, 0); /* nothing to go by */
}

static void test_lease_share_young(void **state)
{
	struct sl_share s;
	uint64_t w;
	(void)state;
	sl__share_init(&s, 100 * MS);
	sl__share_add(&s, T0, 5); /* the first grant: the window starts, 0 counted */
	assert_dec_equal(sl__share_recent(&s, T0 + 10 * MS, &w), 0);
	assert_dec_equal(w, 10 * MS); /* within the first bucket: the age */
	sl__share_add(&s, T0 + 50 * MS, 5);
	assert_dec_equal(sl__share_recent(&s, T0 + 60 * MS, &w), 5);
	assert_dec_equal(w, 60 * MS);
	sl__share_add(&s, T0 + 250 * MS, 5);
	/* Younger than the window: the first bucket [0, 100) is left out,
	 * the window is [100, 300). */
	assert_dec_equal(sl__share_recent(&s, T0 + 300 * MS, &w), 5);
	assert_dec_equal(w, 200 * MS);
}

static void test_lease_share_slides(void **state)
{
	struct sl_share s;
	uint64_t w;
	(void)state;
	sl__share_init(&s, 100 * MS);
	for (uint64_t t = 0; t < 1000; t += 10) /* 1 unit every 10 ms for 1 s */
		sl__share_add(&s, T0 + t * MS, 1);
	/* At +1000 ms: buckets [300, 1000) whole plus the empty current one. */
	assert_dec_equal(sl__share_recent(&s, T0 + 1000 * MS, &w), 70);
	assert_dec_equal(w, 700 * MS);
	/* At +1050 ms: [300, 1050), the current bucket half gone. */
	assert_dec_equal(sl__share_recent(&s, T0 + 1050 * MS, &w), 70);
	assert_dec_equal(w, 750 * MS);
	/* At +1100 ms: [400, 1100): the bucket [300, 400) has left. */
	assert_dec_equal(sl__share_recent(&s, T0 + 1100 * MS, &w), 60);
	assert_dec_equal(w, 700 * MS);
	/* After a silence longer than the window: nothing, over a full window. */
	assert_dec_equal(sl__share_recent(&s, T0 + 5000 * MS, &w), 0);
	assert_dec_equal(w, 700 * MS);
	sl__share_add(&s, T0 + 5020 * MS, 7);
	assert_dec_equal(sl__share_recent(&s, T0 + 5030 * MS, &w), 7);
	assert_dec_equal(w, 730 * MS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lease_share_empty),
		cmocka_unit_test(test_lease_share_young),
		cmocka_unit_test(test_lease_share_slides),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
