/* SPDX-License-Identifier: MIT */
/*
 * test_core_conc.c - concurrency limit (core/concurrency.c): exact acquire
 * and release sequences, refusal without change, release without a matching
 * acquire (underflow, never a wrap), limits at the 64-bit edge.
 */
#include "test_core.h"

static void test_core_conc_sequence(void **state)
{
	(void)state;
	struct sl_conc c;
	assert_dec_equal(sl_conc_init(&c, 3), SL_OK);
	expect_decision(sl_conc_acquire(&c, 2), SL_ADMIT, 0);
	expect_decision(sl_conc_acquire(&c, 1), SL_ADMIT, 0);
	/* Full: refused with no hint (it depends on a release). */
	expect_decision(sl_conc_acquire(&c, 1), SL_REFUSE, 0);
	assert_dec_equal(sl_conc_held(&c), 3);
	assert_dec_equal(sl_conc_release(&c, 1), SL_OK);
	expect_decision(sl_conc_acquire(&c, 2), SL_REFUSE, 0);
	expect_decision(sl_conc_acquire(&c, 1), SL_ADMIT, 0);
	assert_dec_equal(sl_conc_release(&c, 3), SL_OK);
	assert_dec_equal(sl_conc_held(&c), 0);
	/* More than the limit can never be held. */
	expect_decision(sl_conc_acquire(&c, 4), SL_NEVER, UINT64_MAX);
	expect_decision(sl_conc_acquire(&c, 0), SL_ADMIT, 0);
	assert_dec_equal(sl_conc_held(&c), 0);
}

static void test_core_conc_underflow(void **state)
{
	(void)state;
	struct sl_conc c;
	assert_dec_equal(sl_conc_init(&c, 3), SL_OK);
	/* A release without a matching acquire changes nothing. */
	assert_dec_equal(sl_conc_release(&c, 1), SL_EUNDERFLOW);
	assert_dec_equal(sl_conc_held(&c), 0);
	expect_decision(sl_conc_acquire(&c, 2), SL_ADMIT, 0);
	assert_dec_equal(sl_conc_release(&c, 3), SL_EUNDERFLOW);
	assert_dec_equal(sl_conc_held(&c), 2);
	assert_dec_equal(sl_conc_release(&c, UINT64_MAX), SL_EUNDERFLOW);
	assert_dec_equal(sl_conc_held(&c), 2);
	assert_dec_equal(sl_conc_release(&c, 0), SL_OK);
	assert_dec_equal(sl_conc_release(&c, 2), SL_OK);
	assert_dec_equal(sl_conc_release(&c, 1), SL_EUNDERFLOW);
	assert_dec_equal(sl_conc_held(&c), 0);
}

static void test_core_conc_extremes(void **state)
{
	(void)state;
	struct sl_conc c;
	assert_dec_equal(sl_conc_init(&c, 0), SL_EINVAL);
	assert_dec_equal(sl_conc_init(&c, UINT64_MAX), SL_OK);
	expect_decision(sl_conc_acquire(&c, UINT64_MAX - 1), SL_ADMIT, 0);
	/* held + n would wrap: refused, not admitted as a small sum. */
	expect_decision(sl_conc_acquire(&c, 2), SL_REFUSE, 0);
	expect_decision(sl_conc_acquire(&c, 1), SL_ADMIT, 0);
	assert_dec_equal(sl_conc_held(&c), UINT64_MAX);
	expect_decision(sl_conc_acquire(&c, 1), SL_REFUSE, 0);
	assert_dec_equal(sl_conc_release(&c, UINT64_MAX), SL_OK);
	assert_dec_equal(sl_conc_held(&c), 0);
	/* Limit 1: a mutex-like semaphore. */
	assert_dec_equal(sl_conc_init(&c, 1), SL_OK);
	expect_decision(sl_conc_acquire(&c, 1), SL_ADMIT, 0);
	expect_decision(sl_conc_acquire(&c, 1), SL_REFUSE, 0);
	assert_dec_equal(sl_conc_release(&c, 1), SL_OK);
	expect_decision(sl_conc_acquire(&c, 1), SL_ADMIT, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_conc_sequence),
		cmocka_unit_test(test_core_conc_underflow),
		cmocka_unit_test(test_core_conc_extremes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
