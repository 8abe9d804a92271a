/* SPDX-License-Identifier: MIT */
/*
 * test_core_tunable.c - live reconfiguration of every limiter kind, with an
 * injected clock and exact sequences (test_core_tunable_thread.c races
 * retunes against acquires).
 */
#include "test_core.h"

#define T0 (5 * SEC)

/* Token 10/s burst 10, emptied; retuned to 20/s burst 10: the 10 units of
 * debt are kept (now worth 0.5 s) and the next unit comes 50 ms later. */
static void test_tunable_token_keeps_debt(void **state)
{
	(void)state;
	struct sl_tunable t;
	struct sl_params p = params(SL_KIND_TOKEN, 10, SEC, 10);
	assert_dec_equal(sl_tunable_init(&t, &p, T0), SL_OK);
	expect_decision(sl_limiter_acquire(&t.head, 10, T0, POLICE), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0, POLICE), SL_REFUSE, 100 * MS);
	p = params(SL_KIND_TOKEN, 20, SEC, 10);
	assert_dec_equal(sl_tunable_retune(&t, &p, T0), SL_OK);
	assert_dec_equal(sl_tunable_current(&t)->params.amount, 20);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0, POLICE), SL_REFUSE, 50 * MS);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0 + 50 * MS, POLICE), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0 + 50 * MS, POLICE), SL_REFUSE, 50 * MS);
	/* Lower it to 1/s burst 1: the debt is still 10 units (0.5 s of
	 * 20/s), now 10 s. */
	p = params(SL_KIND_TOKEN, 1, SEC, 1);
	assert_dec_equal(sl_tunable_retune(&t, &p, T0 + 50 * MS), SL_OK);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0 + 50 * MS, POLICE), SL_REFUSE, 10 * SEC);
	/* Charge reaches the new slot: one more unit of debt is 1 s more. */
	assert_dec_equal(sl_limiter_charge(&t.head, 1, T0 + 50 * MS), SL_OK);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0 + 50 * MS, POLICE), SL_REFUSE, 11 * SEC);
	assert_dec_equal(sl_limiter_refund(&t.head, 1, T0 + 50 * MS), SL_OK);
	/* Reserve works on the new slot, and refund reaches it. */
	expect_decision(sl_limiter_acquire(&t.head, 1, T0 + 50 * MS, RESERVE), SL_ADMIT, 10 * SEC);
	assert_dec_equal(sl_limiter_refund(&t.head, 1, T0 + 50 * MS), SL_OK);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0 + 50 * MS, POLICE), SL_REFUSE, 10 * SEC);
	assert_true(sl_tunable_validate(&t));
}

/* A full bucket stays full (no debt), whatever the new rate. */
static void test_tunable_token_full_stays_full(void **state)
{
	(void)state;
	struct sl_tunable t;
	struct sl_params p = params(SL_KIND_TOKEN, 4, MS, 2);
	assert_dec_equal(sl_tunable_init(&t, &p, T0), SL_OK);
	p = params(SL_KIND_TOKEN, 1, MS, 3);
	assert_dec_equal(sl_tunable_retune(&t, &p, T0 + SEC), SL_OK);
	expect_decision(sl_limiter_acquire(&t.head, 3, T0 + SEC, POLICE), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0 + SEC, POLICE), SL_REFUSE, MS);
	assert_dec_equal(sl_limiter_available(&t.head, T0 + SEC + 2 * MS), 2);
}

/* Leaky: a queue 3 units ahead stays 3 units ahead at the new rate. */
static void test_tunable_leaky_keeps_queue(void **state)
{
	(void)state;
	struct sl_tunable t;
	struct sl_params p = params(SL_KIND_LEAKY, 1, MS, 0);
	assert_dec_equal(sl_tunable_init(&t, &p, T0), SL_OK);
	for (int i = 0; i < 3; i++)
		expect_decision(sl_limiter_acquire(&t.head, 1, T0, RESERVE), SL_ADMIT,
				(uint64_t)i * MS);
	p = params(SL_KIND_LEAKY, 1, 2 * MS, 0);
	assert_dec_equal(sl_tunable_retune(&t, &p, T0), SL_OK);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0, RESERVE), SL_ADMIT, 6 * MS);
}

/* Fixed window: the units counted in the current window are kept. */
static void test_tunable_fixed_keeps_count(void **state)
{
	(void)state;
	struct sl_tunable t;
	struct sl_params p = params(SL_KIND_FIXED, 10, SEC, 0);
	assert_dec_equal(sl_tunable_init(&t, &p, T0), SL_OK);
	expect_decision(sl_limiter_acquire(&t.head, 6, T0 + 100 * MS, POLICE), SL_ADMIT, 0);
	p = params(SL_KIND_FIXED, 8, SEC, 0);
	assert_dec_equal(sl_tunable_retune(&t, &p, T0 + 200 * MS), SL_OK);
	assert_dec_equal(sl_limiter_available(&t.head, T0 + 200 * MS), 2);
	expect_decision(sl_limiter_acquire(&t.head, 3, T0 + 200 * MS, POLICE), SL_REFUSE, 800 * MS);
	/* Windows stay aligned on the original epoch. */
	expect_decision(sl_limiter_acquire(&t.head, 8, T0 + SEC, POLICE), SL_ADMIT, 0);
	/* Lowered below what is counted: nothing until the next window. */
	p = params(SL_KIND_FIXED, 4, SEC, 0);
	assert_dec_equal(sl_tunable_retune(&t, &p, T0 + SEC + MS), SL_OK);
	assert_dec_equal(sl_limiter_available(&t.head, T0 + SEC + MS), 0);
	assert_dec_equal(sl_limiter_available(&t.head, T0 + 2 * SEC), 4);
}

/* Sliding window: both windows' counts are kept. */
static void test_tunable_sliding_keeps_counts(void **state)
{
	(void)state;
	struct sl_tunable t;
	struct sl_params p = params(SL_KIND_SLIDING, 10, SEC, 0);
	assert_dec_equal(sl_tunable_init(&t, &p, T0), SL_OK);
	expect_decision(sl_limiter_acquire(&t.head, 6, T0, POLICE), SL_ADMIT, 0);
	p = params(SL_KIND_SLIDING, 8, SEC, 0);
	assert_dec_equal(sl_tunable_retune(&t, &p, T0 + 500 * MS), SL_OK);
	assert_dec_equal(sl_limiter_available(&t.head, T0 + 500 * MS), 2);
	/* Half way into the next window, half of the 6 still count. */
	assert_dec_equal(sl_limiter_available(&t.head, T0 + 1500 * MS), 5);
}

/* Concurrency: the count is kept, only the limit moves. */
static void test_tunable_conc_limit(void **state)
{
	(void)state;
	struct sl_tunable t;
	struct sl_params p = params(SL_KIND_CONC, 3, 0, 0);
	assert_dec_equal(sl_tunable_init(&t, &p, T0), SL_OK);
	for (int i = 0; i < 3; i++)
		expect_decision(sl_limiter_acquire(&t.head, 1, T0, POLICE), SL_ADMIT, 0);
	p = params(SL_KIND_CONC, 2, 0, 0);
	assert_dec_equal(sl_tunable_retune(&t, &p, T0), SL_OK);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0, POLICE), SL_REFUSE, 0);
	assert_dec_equal(sl_limiter_release(&t.head, 1), SL_OK);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0, POLICE), SL_REFUSE, 0);
	assert_dec_equal(sl_limiter_release(&t.head, 2), SL_OK);
	assert_dec_equal(sl_limiter_release(&t.head, 1), SL_EUNDERFLOW);
	assert_dec_equal(sl_limiter_available(&t.head, T0), 2);
	p = params(SL_KIND_CONC, 5, 0, 0);
	assert_dec_equal(sl_tunable_retune(&t, &p, T0), SL_OK);
	expect_decision(sl_limiter_acquire(&t.head, 5, T0, POLICE), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0, POLICE), SL_REFUSE, 0);
	assert_true(sl_tunable_validate(&t));
}

/* Errors leave the limiter as it was. */
static void test_tunable_errors(void **state)
{
	(void)state;
	struct sl_tunable t;
	struct sl_params p = params(SL_KIND_TOKEN, 10, SEC, 10);
	assert_dec_equal(sl_tunable_init(&t, &p, T0), SL_OK);
	struct sl_params other = params(SL_KIND_FIXED, 10, SEC, 0);
	assert_dec_equal(sl_tunable_retune(&t, &other, T0), SL_EINVAL);
	struct sl_params bad = params(SL_KIND_TOKEN, 0, SEC, 10);
	assert_dec_equal(sl_tunable_retune(&t, &bad, T0), SL_EINVAL);
	assert_dec_equal(sl_tunable_current(&t)->params.amount, 10);
	struct sl_params nest = params(SL_KIND_TUNABLE, 1, SEC, 1);
	assert_dec_equal(sl_tunable_init(&t, &nest, T0), SL_EINVAL);
}

static void test_tunable_validate(void **state)
{
	(void)state;
	struct sl_tunable t, bad;
	struct sl_params p = params(SL_KIND_TOKEN, 10, SEC, 10);
	assert_dec_equal(sl_tunable_init(&t, &p, T0), SL_OK);
	assert_true(sl_tunable_validate(&t));
	/* The head alone is not a limiter sl_limiter_validate accepts. */
	assert_false(sl_limiter_validate(&t.head));
	bad = t;
	bad.head.magic ^= 1;
	assert_false(sl_tunable_validate(&bad));
	bad = t;
	bad.slot[1].u.gcra.mult = 0;
	assert_false(sl_tunable_validate(&bad));
	bad = t;
	bad.slot[0].kind = SL_KIND_FIXED;
	assert_false(sl_tunable_validate(&bad));
	memset(&bad, 0xa5, sizeof(bad));
	assert_false(sl_tunable_validate(&bad));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tunable_token_keeps_debt),
		cmocka_unit_test(test_tunable_token_full_stays_full),
		cmocka_unit_test(test_tunable_leaky_keeps_queue),
		cmocka_unit_test(test_tunable_fixed_keeps_count),
		cmocka_unit_test(test_tunable_sliding_keeps_counts),
		cmocka_unit_test(test_tunable_conc_limit),
		cmocka_unit_test(test_tunable_errors),
		cmocka_unit_test(test_tunable_validate),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
