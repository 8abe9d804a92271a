/* SPDX-License-Identifier: MIT */
/*
 * test_core_breaker.c - the circuit breaker's state machine (core/breaker.c)
 * with an injected clock: exact sequences of verdicts and state changes.
 */
#include "test_core.h"

#define T0 (7 * SEC)

static void enter_is(struct sl_breaker *b, uint64_t now, enum sl_brk_verdict want,
		     enum sl_brk_change want_change)
{
	enum sl_brk_change ch;
	assert_dec_equal(sl_breaker_enter(b, now, &ch), want);
	assert_dec_equal(ch, want_change);
}

static void report_is(struct sl_breaker *b, uint64_t now, bool failure, bool probe,
		      enum sl_brk_change want_change)
{
	enum sl_brk_change ch;
	sl_breaker_report(b, now, failure, probe, &ch);
	assert_dec_equal(ch, want_change);
}

/* errors=5,window=1s,open=2s: five failures open it; open fails fast for
 * 2 s; then one probe, others fail; its failure reopens for 2 s, its
 * success closes with an empty window. */
static void test_breaker_count(void **state)
{
	(void)state;
	struct sl_breaker b;
	struct sl_brk_view v;
	assert_true(sl_breaker_init(&b, SEC, 2 * SEC, 5, 0, 0, T0));
	for (int i = 0; i < 4; i++) {
		enter_is(&b, T0 + i * MS, SL_BRK_PASS, SL_BRK_NO_CHANGE);
		report_is(&b, T0 + i * MS, true, false, SL_BRK_NO_CHANGE);
	}
	/* A success does not reset a count window. */
	enter_is(&b, T0 + 4 * MS, SL_BRK_PASS, SL_BRK_NO_CHANGE);
	report_is(&b, T0 + 4 * MS, false, false, SL_BRK_NO_CHANGE);
	sl_breaker_view(&b, T0 + 5 * MS, &v);
	assert_dec_equal(v.state, SL_BRK_CLOSED);
	assert_dec_equal(v.failures, 4);
	assert_dec_equal(v.attempts, 5);
	enter_is(&b, T0 + 5 * MS, SL_BRK_PASS, SL_BRK_NO_CHANGE);
	report_is(&b, T0 + 5 * MS, true, false, SL_BRK_OPENED);
	/* Open until T0 + 5 ms + 2 s. */
	enter_is(&b, T0 + 6 * MS, SL_BRK_FAIL, SL_BRK_NO_CHANGE);
	sl_breaker_view(&b, T0 + 6 * MS, &v);
	assert_dec_equal(v.state, SL_BRK_OPEN);
	assert_dec_equal(v.probe_in_ns, 2 * SEC - MS);
	enter_is(&b, T0 + 5 * MS + 2 * SEC - 1, SL_BRK_FAIL, SL_BRK_NO_CHANGE);
	/* A late report of an attempt made before it opened changes nothing. */
	report_is(&b, T0 + 7 * MS, true, false, SL_BRK_NO_CHANGE);
	const uint64_t t1 = T0 + 5 * MS + 2 * SEC;
	enter_is(&b, t1, SL_BRK_PROBE, SL_BRK_PROBING);
	enter_is(&b, t1, SL_BRK_FAIL, SL_BRK_NO_CHANGE);
	enter_is(&b, t1 + SEC, SL_BRK_FAIL, SL_BRK_NO_CHANGE);
	report_is(&b, t1 + SEC, true, true, SL_BRK_REOPENED);
	enter_is(&b, t1 + 3 * SEC - 1, SL_BRK_FAIL, SL_BRK_NO_CHANGE);
	enter_is(&b, t1 + 3 * SEC, SL_BRK_PROBE, SL_BRK_PROBING);
	report_is(&b, t1 + 3 * SEC + MS, false, true, SL_BRK_CLOSED_AGAIN);
	sl_breaker_view(&b, t1 + 3 * SEC + MS, &v);
	assert_dec_equal(v.state, SL_BRK_CLOSED);
	assert_dec_equal(v.failures, 0);
	enter_is(&b, t1 + 3 * SEC + MS, SL_BRK_PASS, SL_BRK_NO_CHANGE);
	assert_dec_equal(atomic_load(&b.trips), 2);
	assert_dec_equal(atomic_load(&b.probes), 2);
	assert_dec_equal(atomic_load(&b.fast_fails), 5);
}

/* The window slides: failures older than the window (ten 100 ms buckets
 * of a 1 s window) no longer count. */
static void test_breaker_window_slides(void **state)
{
	(void)state;
	struct sl_breaker b;
	struct sl_brk_view v;
	assert_true(sl_breaker_init(&b, SEC, SEC, 3, 0, 0, T0));
	report_is(&b, T0 + 50 * MS, true, false, SL_BRK_NO_CHANGE);  /* bucket 0 */
	report_is(&b, T0 + 550 * MS, true, false, SL_BRK_NO_CHANGE); /* bucket 5 */
	sl_breaker_view(&b, T0 + 999 * MS, &v);
	assert_dec_equal(v.failures, 2);
	/* At 1.0 s bucket 0 has left the window: two again, not three. */
	report_is(&b, T0 + 1000 * MS, true, false, SL_BRK_NO_CHANGE);
	sl_breaker_view(&b, T0 + 1000 * MS, &v);
	assert_dec_equal(v.failures, 2);
	report_is(&b, T0 + 1001 * MS, true, false, SL_BRK_OPENED);
	/* Long after, nothing is left. */
	sl_breaker_view(&b, T0 + 100 * SEC, &v);
	assert_dec_equal(v.failures, 0);
}

/* errors=50%,min=4: at least 4 attempts, half of them failed. */
static void test_breaker_ratio(void **state)
{
	(void)state;
	struct sl_breaker b;
	assert_true(sl_breaker_init(&b, 10 * SEC, SEC, 0, 50, 4, T0));
	report_is(&b, T0, true, false, SL_BRK_NO_CHANGE);
	report_is(&b, T0, true, false, SL_BRK_NO_CHANGE); /* 2 of 2, below min */
	report_is(&b, T0, false, false, SL_BRK_NO_CHANGE);
	report_is(&b, T0, false, false, SL_BRK_NO_CHANGE); /* 2 of 4, a success */
	report_is(&b, T0, false, false, SL_BRK_NO_CHANGE);
	report_is(&b, T0, true, false, SL_BRK_OPENED); /* 3 of 6 = 50 % */
}

/* A probe that never reports is replaced after open_ns. */
static void test_breaker_lost_probe(void **state)
{
	(void)state;
	struct sl_breaker b;
	assert_true(sl_breaker_init(&b, SEC, SEC, 1, 0, 0, T0));
	report_is(&b, T0, true, false, SL_BRK_OPENED);
	enter_is(&b, T0 + SEC, SL_BRK_PROBE, SL_BRK_PROBING);
	enter_is(&b, T0 + 2 * SEC - 1, SL_BRK_FAIL, SL_BRK_NO_CHANGE);
	enter_is(&b, T0 + 2 * SEC, SL_BRK_PROBE, SL_BRK_PROBING);
	/* Whichever probe reports first while half-open decides: here a
	 * success closes it, and the other's failure then changes nothing. */
	report_is(&b, T0 + 2 * SEC, false, true, SL_BRK_CLOSED_AGAIN);
	report_is(&b, T0 + 2 * SEC, true, true, SL_BRK_NO_CHANGE);
}

static void test_breaker_init_errors(void **state)
{
	(void)state;
	struct sl_breaker b;
	assert_false(sl_breaker_init(&b, 9, SEC, 5, 0, 0, 0));     /* window < 10 ns */
	assert_false(sl_breaker_init(&b, SEC, 0, 5, 0, 0, 0));     /* no open time */
	assert_false(sl_breaker_init(&b, SEC, SEC, 0, 0, 0, 0));   /* no threshold */
	assert_false(sl_breaker_init(&b, SEC, SEC, 0, 101, 5, 0)); /* > 100 % */
	assert_false(sl_breaker_init(&b, SEC, SEC, 0, 50, 0, 0));  /* ratio without min */
	assert_false(sl_breaker_init(&b, SEC, SEC, 3, 50, 5, 0));  /* both */
	assert_string_equal(sl_breaker_state_name(SL_BRK_HALF_OPEN), "half-open");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_breaker_count),
		cmocka_unit_test(test_breaker_window_slides),
		cmocka_unit_test(test_breaker_ratio),
		cmocka_unit_test(test_breaker_lost_probe),
		cmocka_unit_test(test_breaker_init_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
