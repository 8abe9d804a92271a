/* SPDX-License-Identifier: MIT */
/*
 * test_core_window.c - fixed window (core/fixed.c) and sliding window
 * (core/sliding.c) with an injected clock: window boundaries, reserve on the
 * virtual counter, the weighted estimate and its retry hints, quanta for
 * large limits, time going backwards, overflow points, refund (never into
 * another window), charge (debt), available (exact against acquire).
 */
#include "test_core.h"

/* Fixed window: 3 units per 1000 ns, windows aligned on the epoch 5000. */
static void test_core_window_fixed_boundaries(void **state)
{
	(void)state;
	struct sl_fixed w;
	assert_dec_equal(sl_fixed_init(&w, 3, 1000, 5000), SL_OK);
	for (int i = 0; i < 3; i++)
		expect_decision(sl_fixed_acquire(&w, 1, 5000, POLICE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 1, 5000, POLICE), SL_REFUSE, 1000);
	expect_decision(sl_fixed_acquire(&w, 1, 5999, POLICE), SL_REFUSE, 1);
	expect_decision(sl_fixed_acquire(&w, 1, 6000, POLICE), SL_ADMIT, 0);
	/* 3 do not fit in what is left (2): wait for the next window. */
	expect_decision(sl_fixed_acquire(&w, 3, 6000, POLICE), SL_REFUSE, 1000);
	expect_decision(sl_fixed_acquire(&w, 2, 6999, POLICE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 4, 6999, RESERVE), SL_NEVER, UINT64_MAX);
	expect_decision(sl_fixed_acquire(&w, 0, 6999, POLICE), SL_ADMIT, 0);
	assert_dec_equal(sl_fixed_available(&w, 6999), 0);
	assert_dec_equal(sl_fixed_available(&w, 7000), 3);
}

static void test_core_window_fixed_reserve(void **state)
{
	(void)state;
	struct sl_fixed w;
	assert_dec_equal(sl_fixed_init(&w, 3, 1000, 5000), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 3, 6000, POLICE), SL_ADMIT, 0);
	/* Reserve books the next windows on the same counter. */
	expect_decision(sl_fixed_acquire(&w, 2, 6000, RESERVE), SL_ADMIT, 1000);
	expect_decision(sl_fixed_acquire(&w, 2, 6000, RESERVE), SL_ADMIT, 2000);
	/* The counter has moved on to window 3: the unit left over in window 2
	 * is not handed out (a virtual counter never fills holes), so police
	 * in window 2 waits for window 3's last unit. */
	expect_decision(sl_fixed_acquire(&w, 1, 7000, POLICE), SL_REFUSE, 1000);
	expect_decision(sl_fixed_acquire(&w, 1, 7000, 500), SL_REFUSE, 500);
	expect_decision(sl_fixed_acquire(&w, 1, 7000, 1000), SL_ADMIT, 1000);
	assert_dec_equal(sl_fixed_available(&w, 7000), 0);
	assert_dec_equal(sl_fixed_available(&w, 8000), 0);
	assert_dec_equal(sl_fixed_available(&w, 9000), 3);
}

static void test_core_window_fixed_refund_backwards(void **state)
{
	(void)state;
	struct sl_fixed w;
	assert_dec_equal(sl_fixed_init(&w, 3, 1000, 5000), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 3, 9000, POLICE), SL_ADMIT, 0);
	assert_dec_equal(sl_fixed_refund(&w, 2, 9000), SL_OK);
	assert_dec_equal(sl_fixed_available(&w, 9000), 2);
	/* Refunding more than was taken empties the window, no more. */
	assert_dec_equal(sl_fixed_refund(&w, 10, 9000), SL_OK);
	assert_dec_equal(sl_fixed_available(&w, 9000), 3);
	expect_decision(sl_fixed_acquire(&w, 3, 9500, POLICE), SL_ADMIT, 0);
	/* A refund in a later window cannot give back an old window's units. */
	assert_dec_equal(sl_fixed_refund(&w, 3, 10000), SL_OK);
	assert_dec_equal(sl_fixed_available(&w, 9999), 0);
	/* Time going backwards sees the later window's counter: stricter. */
	expect_decision(sl_fixed_acquire(&w, 3, 10000, POLICE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 1, 9999, POLICE), SL_REFUSE, 1001);
	assert_dec_equal(sl_fixed_available(&w, 9999), 0);
	/* Before the epoch counts as the epoch. */
	expect_decision(sl_fixed_acquire(&w, 1, 0, POLICE), SL_REFUSE, 6000);
}

/* The reviewer's sequence, N = 10 per second, everything reserved at t = 0:
 * A takes 8, B reserves 5 (window 1), A refunds 8, C takes 3, D reserves
 * 10. A's refund used to move the counter back into window 0 and erase B's
 * booking, so that C and D then put 15 units into window 1. Now the
 * refund finds the counter in window 1 and gives nothing back. */
static void test_core_window_fixed_refund_keeps_bookings(void **state)
{
	(void)state;
	struct sl_fixed w;
	assert_dec_equal(sl_fixed_init(&w, 10, SEC, 0), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 8, 0, RESERVE), SL_ADMIT, 0);        /* A */
	expect_decision(sl_fixed_acquire(&w, 5, 0, RESERVE), SL_ADMIT, SEC);      /* B */
	assert_dec_equal(sl_fixed_refund(&w, 8, 0), SL_OK);                       /* A */
	expect_decision(sl_fixed_acquire(&w, 3, 0, RESERVE), SL_ADMIT, SEC);      /* C */
	expect_decision(sl_fixed_acquire(&w, 10, 0, RESERVE), SL_ADMIT, 2 * SEC); /* D */
	/* Window 1 holds B's 5 and C's 3: 8 units. Its last 2 were skipped by
	 * D (no holes are filled), so window 1 admits nothing more. */
	assert_dec_equal(sl_fixed_available(&w, SEC), 0);
	expect_decision(sl_fixed_acquire(&w, 1, SEC, POLICE), SL_REFUSE, 2 * SEC);

	/* A refund in the window its units were booked for (now = the
	 * acquire's now + wait) gives them back while nothing later is booked. */
	assert_dec_equal(sl_fixed_init(&w, 10, SEC, 0), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 8, 0, RESERVE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 5, 0, RESERVE), SL_ADMIT, SEC);
	assert_dec_equal(sl_fixed_refund(&w, 5, SEC), SL_OK);
	assert_dec_equal(sl_fixed_available(&w, SEC), 10);
	/* Booked again, then window 2 is booked too: window 1's refund is
	 * dropped, and so is one whose window is over. */
	expect_decision(sl_fixed_acquire(&w, 5, 0, RESERVE), SL_ADMIT, SEC);
	expect_decision(sl_fixed_acquire(&w, 6, 0, RESERVE), SL_ADMIT, 2 * SEC);
	assert_dec_equal(sl_fixed_refund(&w, 5, SEC), SL_OK);
	assert_dec_equal(sl_fixed_available(&w, SEC), 0);
	assert_dec_equal(sl_fixed_refund(&w, 5, 3 * SEC), SL_OK);
	assert_dec_equal(sl_fixed_available(&w, 2 * SEC), 4);
	/* A full window (counter exactly at the next window's start) still
	 * takes its own refund. */
	expect_decision(sl_fixed_acquire(&w, 4, 2 * SEC, POLICE), SL_ADMIT, 0);
	assert_dec_equal(sl_fixed_available(&w, 2 * SEC), 0);
	assert_dec_equal(sl_fixed_refund(&w, 3, 2 * SEC), SL_OK);
	assert_dec_equal(sl_fixed_available(&w, 2 * SEC), 3);
}

/* Charge: units already used go on the counter as debt, into later windows
 * as needed. */
static void test_core_window_fixed_charge(void **state)
{
	(void)state;
	struct sl_fixed w;
	assert_dec_equal(sl_fixed_init(&w, 10, SEC, 0), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 4, 0, POLICE), SL_ADMIT, 0);
	/* 4 + 25: windows 0 and 1 full, window 2 holds 9. */
	assert_dec_equal(sl_fixed_charge(&w, 25, 0), SL_OK);
	assert_dec_equal(sl_fixed_available(&w, 0), 0);
	expect_decision(sl_fixed_acquire(&w, 1, 0, POLICE), SL_REFUSE, 2 * SEC);
	assert_dec_equal(sl_fixed_available(&w, SEC), 0);
	assert_dec_equal(sl_fixed_available(&w, 2 * SEC), 1);
	expect_decision(sl_fixed_acquire(&w, 1, SEC, RESERVE), SL_ADMIT, SEC);
	expect_decision(sl_fixed_acquire(&w, 1, 2 * SEC + SEC / 2, POLICE), SL_REFUSE, SEC / 2);
	/* n == 0 changes nothing; a charge after idle windows starts at the
	 * current window. */
	assert_dec_equal(sl_fixed_charge(&w, 0, 5 * SEC), SL_OK);
	assert_dec_equal(sl_fixed_available(&w, 5 * SEC), 10);
	assert_dec_equal(sl_fixed_charge(&w, 3, 5 * SEC), SL_OK);
	assert_dec_equal(sl_fixed_available(&w, 5 * SEC), 7);
	/* A charge goes after bookings in later windows. */
	expect_decision(sl_fixed_acquire(&w, 8, 5 * SEC, RESERVE), SL_ADMIT, SEC);
	assert_dec_equal(sl_fixed_charge(&w, 2, 5 * SEC), SL_OK);
	assert_dec_equal(sl_fixed_available(&w, 6 * SEC), 0);
	expect_decision(sl_fixed_acquire(&w, 1, 6 * SEC, POLICE), SL_REFUSE, SEC);
	/* Saturates: beyond the horizon, every acquire is never. */
	assert_dec_equal(sl_fixed_charge(&w, UINT64_MAX, 5 * SEC), SL_OK);
	assert_dec_equal(sl_fixed_charge(&w, 1, 5 * SEC), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 1, 5 * SEC, RESERVE), SL_NEVER, UINT64_MAX);
	assert_dec_equal(sl_fixed_available(&w, 100 * SEC), 0);
}

static void test_core_window_fixed_rates(void **state)
{
	(void)state;
	struct sl_fixed w;
	/* One per hour. */
	assert_dec_equal(sl_fixed_init(&w, 1, HOUR, 0), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 1, 0, POLICE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 1, 0, POLICE), SL_REFUSE, HOUR);
	expect_decision(sl_fixed_acquire(&w, 1, HOUR - 1, POLICE), SL_REFUSE, 1);
	expect_decision(sl_fixed_acquire(&w, 1, HOUR, POLICE), SL_ADMIT, 0);
	/* 10^10 per second. */
	assert_dec_equal(sl_fixed_init(&w, 10000000000ull, SEC, 0), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 10000000000ull, 0, POLICE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 1, 0, POLICE), SL_REFUSE, SEC);
	expect_decision(sl_fixed_acquire(&w, 5000000000ull, SEC, POLICE), SL_ADMIT, 0);
	assert_dec_equal(sl_fixed_available(&w, SEC), 5000000000ull);
	/* 3 per 7 s. */
	assert_dec_equal(sl_fixed_init(&w, 3, 7 * SEC, 0), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 3, 1, POLICE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 1, 1, POLICE), SL_REFUSE, 7 * SEC - 1);
	expect_decision(sl_fixed_acquire(&w, 3, 7 * SEC, POLICE), SL_ADMIT, 0);
}

static void test_core_window_fixed_overflow(void **state)
{
	(void)state;
	struct sl_fixed w;
	assert_dec_equal(sl_fixed_init(&w, 0, SEC, 0), SL_EINVAL);
	assert_dec_equal(sl_fixed_init(&w, 1, 0, 0), SL_EINVAL);
	/* 2^40 per ns would overflow the counter within 2^24 ns. */
	assert_dec_equal(sl_fixed_init(&w, 1ull << 40, 1, 0), SL_ERANGE);
	assert_dec_equal(sl_fixed_init(&w, 3, 1000, 0), SL_OK);
	expect_decision(sl_fixed_acquire(&w, UINT64_MAX, 0, RESERVE), SL_NEVER, UINT64_MAX);

	/* The counter's horizon: 2 windows of 2^57 ns for N = 2^63 - 1. */
	const uint64_t n = UINT64_MAX / 2, win = 1ull << 57;
	assert_dec_equal(sl_fixed_init(&w, n, win, 0), SL_OK);
	expect_decision(sl_fixed_acquire(&w, n, 0, POLICE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 1, 0, POLICE), SL_REFUSE, win);
	expect_decision(sl_fixed_acquire(&w, 1, win, POLICE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 1, 2 * win, POLICE), SL_NEVER, UINT64_MAX);
	assert_dec_equal(sl_fixed_available(&w, UINT64_MAX), 0);

	/* Epoch 0, now at UINT64_MAX: small limits keep working. */
	assert_dec_equal(sl_fixed_init(&w, 3, 1000, 0), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 3, UINT64_MAX - 1000, POLICE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 1, UINT64_MAX - 1000, POLICE), SL_REFUSE,
			1000 - (UINT64_MAX - 1000) % 1000);
	/* The last window that starts below 2^64 ns works; the next is never. */
	expect_decision(sl_fixed_acquire(&w, 3, UINT64_MAX, POLICE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 1, UINT64_MAX, POLICE), SL_NEVER, UINT64_MAX);
	/* ...large ones are past their 58-year horizon: never, not wrapped. */
	assert_dec_equal(sl_fixed_init(&w, 10000000000ull, SEC, 0), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 1, UINT64_MAX, POLICE), SL_NEVER, UINT64_MAX);

	/* Epoch at 2^63. */
	assert_dec_equal(sl_fixed_init(&w, 3, 1000, 1ull << 63), SL_OK);
	expect_decision(sl_fixed_acquire(&w, 3, UINT64_MAX, POLICE), SL_ADMIT, 0);
	expect_decision(sl_fixed_acquire(&w, 1, UINT64_MAX, POLICE), SL_REFUSE, 193);
	expect_decision(sl_fixed_acquire(&w, 1, 5, POLICE), SL_REFUSE, (UINT64_MAX >> 1) + 193);
}

/* Sliding window: 10 per 1000 ns from epoch 0. */
static void test_core_window_sliding_estimate(void **state)
{
	(void)state;
	struct sl_sliding s;
	assert_dec_equal(sl_sliding_init(&s, 10, 1000, 0), SL_OK);
	expect_decision(sl_sliding_acquire(&s, 10, 0), SL_ADMIT, 0);
	/* Full: the previous window must weigh 9 or less, at 100 ns into the
	 * next window. */
	expect_decision(sl_sliding_acquire(&s, 1, 0), SL_REFUSE, 1100);
	expect_decision(sl_sliding_acquire(&s, 1, 1099), SL_REFUSE, 1);
	expect_decision(sl_sliding_acquire(&s, 1, 1100), SL_ADMIT, 0);
	/* Half-way: 10 * 0.5 + 1 used, 4 left. */
	expect_decision(sl_sliding_acquire(&s, 4, 1500), SL_ADMIT, 0);
	expect_decision(sl_sliding_acquire(&s, 1, 1500), SL_REFUSE, 100);
	assert_dec_equal(sl_sliding_available(&s, 1500), 0);
	assert_dec_equal(sl_sliding_available(&s, 1600), 1);
	/* Next window: the 5 of window 1 weigh fully at its start. */
	assert_dec_equal(sl_sliding_available(&s, 2000), 5);
	assert_dec_equal(sl_sliding_available(&s, 2500), 7);
	/* Two windows later both are over. */
	assert_dec_equal(sl_sliding_available(&s, 3999), 10);
	expect_decision(sl_sliding_acquire(&s, 11, 3999), SL_NEVER, UINT64_MAX);
	expect_decision(sl_sliding_acquire(&s, 0, 3999), SL_ADMIT, 0);
}

static void test_core_window_sliding_backwards(void **state)
{
	(void)state;
	struct sl_sliding s;
	assert_dec_equal(sl_sliding_init(&s, 10, 1000, 0), SL_OK);
	expect_decision(sl_sliding_acquire(&s, 10, 5000), SL_ADMIT, 0);
	/* A stale now in window 4 is judged at window 5's start: refused, not
	 * given a fresh window 4. */
	expect_decision(sl_sliding_acquire(&s, 1, 4999), SL_REFUSE, 1100);
	assert_dec_equal(sl_sliding_available(&s, 4999), 0);
	assert_dec_equal(sl_sliding_available(&s, 4000), 0);
	/* Before the epoch counts as the epoch (window 0, far older). */
	assert_dec_equal(sl_sliding_available(&s, 0), 0);
	/* Window 6 at its start still sees window 5 at full weight. */
	expect_decision(sl_sliding_acquire(&s, 1, 6000), SL_REFUSE, 100);
}

static void test_core_window_sliding_rates(void **state)
{
	(void)state;
	struct sl_sliding s;
	/* One per hour: the estimate keeps the previous unit at weight > 0
	 * until the end of the next window (rounded up: never more). */
	assert_dec_equal(sl_sliding_init(&s, 1, HOUR, 0), SL_OK);
	expect_decision(sl_sliding_acquire(&s, 1, 0), SL_ADMIT, 0);
	expect_decision(sl_sliding_acquire(&s, 1, 0), SL_REFUSE, 2 * HOUR);
	expect_decision(sl_sliding_acquire(&s, 1, 2 * HOUR), SL_ADMIT, 0);
	/* 3 per 7 s. */
	assert_dec_equal(sl_sliding_init(&s, 3, 7 * SEC, 0), SL_OK);
	expect_decision(sl_sliding_acquire(&s, 3, 0), SL_ADMIT, 0);
	expect_decision(sl_sliding_acquire(&s, 1, 0), SL_REFUSE, 9333333334ull);
	expect_decision(sl_sliding_acquire(&s, 1, 9333333333ull), SL_REFUSE, 1);
	expect_decision(sl_sliding_acquire(&s, 1, 9333333334ull), SL_ADMIT, 0);
	/* 10^10 per second: counted in quanta of 9537 units; the whole limit
	 * fits an empty window and counts as 1048548 quanta (10000002276
	 * units), which weigh on the next window until 228 ns into it. */
	assert_dec_equal(sl_sliding_init(&s, 10000000000ull, SEC, 0), SL_OK);
	assert_dec_equal(s.quantum, 9537);
	assert_dec_equal(s.limit_q, 1048548);
	assert_dec_equal(sl_sliding_available(&s, 0), 10000000000ull);
	expect_decision(sl_sliding_acquire(&s, 10000000000ull, 0), SL_ADMIT, 0);
	expect_decision(sl_sliding_acquire(&s, 1, 0), SL_REFUSE, SEC + 228);
}

static void test_core_window_sliding_quanta(void **state)
{
	(void)state;
	struct sl_sliding s;
	assert_dec_equal(sl_sliding_init(&s, 3000000, 1000, 0), SL_OK);
	assert_dec_equal(s.quantum, 3);
	assert_dec_equal(s.limit_q, 1000000);
	/* 2999999 units round up to 10^6 quanta: the window is full. */
	expect_decision(sl_sliding_acquire(&s, 2999999, 0), SL_ADMIT, 0);
	expect_decision(sl_sliding_acquire(&s, 1, 0), SL_REFUSE, 1001);
	assert_dec_equal(sl_sliding_available(&s, 0), 0);
	assert_dec_equal(sl_sliding_available(&s, 2000), 3000000);
	/* Counts overstate, never understate: 1 unit is a whole quantum (3
	 * units), and a refund gives back whole quanta only (1 unit: none). */
	expect_decision(sl_sliding_acquire(&s, 1, 2000), SL_ADMIT, 0);
	assert_dec_equal(sl_sliding_available(&s, 2000), 2999997);
	assert_dec_equal(sl_sliding_refund(&s, 1, 2000), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 2000), 2999997);
	assert_dec_equal(sl_sliding_refund(&s, 3, 2000), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 2000), 3000000);
	/* 2^21 + 1 units: quantum 3, 699051 quanta cover the limit exactly. */
	assert_dec_equal(sl_sliding_init(&s, (1u << 21) + 1, 1000, 0), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 0), (1u << 21) + 1);
	assert_dec_equal(sl_sliding_init(&s, 0, 1000, 0), SL_EINVAL);
	assert_dec_equal(sl_sliding_init(&s, 1, 0, 0), SL_EINVAL);
}

/* The reviewer's limits: whenever the quantum does not divide N, floor(N /
 * q) quanta used to make acquire(N) SL_NEVER on an empty window while
 * available() said N - 2 or so. Now any n <= N fits an empty window and
 * available() is the largest n that acquire admits. */
static void test_core_window_sliding_full_limit(void **state)
{
	(void)state;
	const struct {
		uint64_t limit, quantum, limit_q;
	} cases[] = {
		{5242880, 6, 873814},
		{2000000, 2, 1000000},
		{1048576, 2, 524288},
		{1048575, 1, 1048575},
		{10000000000ull, 9537, 1048548},
		{UINT64_MAX, 17592202821649ull, 1048575},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sl_sliding s;
		const uint64_t n = cases[i].limit;
		assert_dec_equal(sl_sliding_init(&s, n, SEC, 0), SL_OK);
		assert_dec_equal(s.quantum, cases[i].quantum);
		assert_dec_equal(s.limit_q, cases[i].limit_q);
		assert_dec_equal(sl_sliding_available(&s, 0), n);
		expect_decision(sl_sliding_acquire(&s, n, 0), SL_ADMIT, 0);
		assert_dec_equal(sl_sliding_available(&s, 0), 0);
		assert_dec_equal(sl_sliding_acquire(&s, 1, 0).verdict, SL_REFUSE);
		/* Two windows later, the whole limit again. */
		assert_dec_equal(sl_sliding_available(&s, 2 * SEC), n);
		expect_decision(sl_sliding_acquire(&s, n, 2 * SEC), SL_ADMIT, 0);
	}

	/* 5 MiB per second, quantum 6: the limit counts as 873814 quanta
	 * (5242884 units), so the next window admits 1 unit once the weight
	 * of those is 5242879 or less, 954 ns into it. */
	struct sl_sliding s;
	assert_dec_equal(sl_sliding_init(&s, 5242880, SEC, 0), SL_OK);
	expect_decision(sl_sliding_acquire(&s, 5242880, 0), SL_ADMIT, 0);
	expect_decision(sl_sliding_acquire(&s, 1, 0), SL_REFUSE, SEC + 954);
	expect_decision(sl_sliding_acquire(&s, 1, SEC + 953), SL_REFUSE, 1);
	expect_decision(sl_sliding_acquire(&s, 1, SEC + 954), SL_ADMIT, 0);
	/* Never more than N in a window: 5242878 units are 873813 quanta
	 * exactly; then 6 do not fit, 2 do, and the window is full. */
	expect_decision(sl_sliding_acquire(&s, 5242878, 4 * SEC), SL_ADMIT, 0);
	assert_dec_equal(sl_sliding_available(&s, 4 * SEC), 2);
	assert_dec_equal(sl_sliding_acquire(&s, 6, 4 * SEC).verdict, SL_REFUSE);
	expect_decision(sl_sliding_acquire(&s, 2, 4 * SEC), SL_ADMIT, 0);
	assert_dec_equal(sl_sliding_acquire(&s, 1, 4 * SEC).verdict, SL_REFUSE);
}

/* available() agrees with acquire() at every point of a sequence: n =
 * available is admitted and n + 1 refused (checked on copies). */
static void test_core_window_sliding_available_exact(void **state)
{
	(void)state;
	const uint64_t limits[] = {10, 3000000, 5242880, 10000000000ull};
	for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
		const uint64_t limit = limits[i];
		struct sl_sliding s, t;
		assert_dec_equal(sl_sliding_init(&s, limit, 1000, 0), SL_OK);
		uint64_t x = 12345; /* LCG: deterministic request sizes and times */
		uint64_t now = 0;
		int admitted = 0, refused = 0;
		for (int k = 0; k < 400; k++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			now += (x >> 33) % 97;
			const uint64_t avail = sl_sliding_available(&s, now);
			assert_true(avail <= limit);
			memcpy(&t, &s, sizeof(s));
			if (avail > 0)
				expect_decision(sl_sliding_acquire(&t, avail, now), SL_ADMIT, 0);
			memcpy(&t, &s, sizeof(s));
			if (avail < limit)
				assert_dec_equal(sl_sliding_acquire(&t, avail + 1, now).verdict,
						 SL_REFUSE);
			/* Take a random share of what is there (or refuse). */
			const uint64_t n = 1 + (x >> 20) % (limit / 3 + 1);
			const struct sl_decision d = sl_sliding_acquire(&s, n, now);
			assert_dec_equal(d.verdict, n <= avail ? SL_ADMIT : SL_REFUSE);
			admitted += d.verdict == SL_ADMIT;
			refused += d.verdict == SL_REFUSE;
			/* The hint is exact: refused one ns before, admitted at it. */
			if (d.verdict == SL_REFUSE) {
				memcpy(&t, &s, sizeof(s));
				assert_dec_equal(sl_sliding_acquire(&t, n, now + d.wait_ns - 1)
							 .verdict,
						 SL_REFUSE);
				expect_decision(sl_sliding_acquire(&t, n, now + d.wait_ns),
						SL_ADMIT, 0);
			}
		}
		/* The sequence exercised both answers. */
		if (admitted < 50 || refused < 50)
			fail_msg("limit %llu: %d admitted, %d refused", (unsigned long long)limit,
				 admitted, refused);
	}
}

/* Charge: units already used fill the current window, never beyond it. */
static void test_core_window_sliding_charge(void **state)
{
	(void)state;
	struct sl_sliding s;
	assert_dec_equal(sl_sliding_init(&s, 10, 1000, 0), SL_OK);
	expect_decision(sl_sliding_acquire(&s, 4, 0), SL_ADMIT, 0);
	assert_dec_equal(sl_sliding_charge(&s, 3, 0), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 0), 3);
	/* Over the limit: the count saturates at a full window. */
	assert_dec_equal(sl_sliding_charge(&s, 100, 0), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 0), 0);
	expect_decision(sl_sliding_acquire(&s, 1, 0), SL_REFUSE, 1100);
	/* The full window weighs on the next one like any full window, and
	 * no more: the 93 units beyond it are forgotten. */
	assert_dec_equal(sl_sliding_available(&s, 1500), 5);
	assert_dec_equal(sl_sliding_charge(&s, 0, 1500), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 1500), 5);
	assert_dec_equal(sl_sliding_charge(&s, UINT64_MAX, 1500), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 1500), 0);
	assert_dec_equal(sl_sliding_available(&s, 2500), 5);
	assert_dec_equal(sl_sliding_available(&s, 3000), 10);
	/* Quanta: a charge of 1 unit counts a whole quantum (6 units). */
	assert_dec_equal(sl_sliding_init(&s, 5242880, SEC, 0), SL_OK);
	assert_dec_equal(sl_sliding_charge(&s, 1, 0), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 0), 5242874);
	assert_dec_equal(sl_sliding_charge(&s, UINT64_MAX, 0), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 0), 0);
	assert_dec_equal(sl_sliding_available(&s, 2 * SEC), 5242880);
}

static void test_core_window_sliding_refund_overflow(void **state)
{
	(void)state;
	struct sl_sliding s;
	assert_dec_equal(sl_sliding_init(&s, 10, 1000, 0), SL_OK);
	expect_decision(sl_sliding_acquire(&s, 7, 10000), SL_ADMIT, 0);
	assert_dec_equal(sl_sliding_refund(&s, 3, 10000), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 10000), 6);
	assert_dec_equal(sl_sliding_refund(&s, 100, 10000), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 10000), 10);
	expect_decision(sl_sliding_acquire(&s, 10, 10999), SL_ADMIT, 0);
	/* The window is over: a refund gives nothing back. */
	assert_dec_equal(sl_sliding_refund(&s, 5, 11000), SL_OK);
	assert_dec_equal(sl_sliding_available(&s, 11000), 0);
	expect_decision(sl_sliding_acquire(&s, UINT64_MAX, 11000), SL_NEVER, UINT64_MAX);

	/* Epoch at 2^63, now at UINT64_MAX; and epoch 0, now at UINT64_MAX. */
	assert_dec_equal(sl_sliding_init(&s, 10, 1000, 1ull << 63), SL_OK);
	expect_decision(sl_sliding_acquire(&s, 10, UINT64_MAX), SL_ADMIT, 0);
	expect_decision(sl_sliding_acquire(&s, 10, UINT64_MAX), SL_REFUSE, 193 + 1000);
	assert_dec_equal(sl_sliding_init(&s, 10, 1000, 0), SL_OK);
	expect_decision(sl_sliding_acquire(&s, 10, UINT64_MAX), SL_ADMIT, 0);
	assert_dec_equal(sl_sliding_available(&s, UINT64_MAX), 0);
	/* A huge window: the weighted product needs 128 bits. */
	assert_dec_equal(sl_sliding_init(&s, 1000000, 1ull << 63, 0), SL_OK);
	expect_decision(sl_sliding_acquire(&s, 1000000, 0), SL_ADMIT, 0);
	assert_dec_equal(sl_sliding_available(&s, (1ull << 63) + (1ull << 62)), 500000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_window_fixed_boundaries),
		cmocka_unit_test(test_core_window_fixed_reserve),
		cmocka_unit_test(test_core_window_fixed_refund_backwards),
		cmocka_unit_test(test_core_window_fixed_refund_keeps_bookings),
		cmocka_unit_test(test_core_window_fixed_charge),
		cmocka_unit_test(test_core_window_fixed_rates),
		cmocka_unit_test(test_core_window_fixed_overflow),
		cmocka_unit_test(test_core_window_sliding_estimate),
		cmocka_unit_test(test_core_window_sliding_backwards),
		cmocka_unit_test(test_core_window_sliding_rates),
		cmocka_unit_test(test_core_window_sliding_quanta),
		cmocka_unit_test(test_core_window_sliding_full_limit),
		cmocka_unit_test(test_core_window_sliding_available_exact),
		cmocka_unit_test(test_core_window_sliding_charge),
		cmocka_unit_test(test_core_window_sliding_refund_overflow),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
