/* SPDX-License-Identifier: MIT */
/*
 * test_shim_clock_thread.c - the shim's TSC clock (clock.c): the line
 * fitted to clock_gettime, driven with made-up TSC rates and sample times,
 * then the live clock against clock_gettime for real, in one thread and in
 * four at once (their refits race; TSan runs this file).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_shim.h"

#define US 1000ull
#define MS 1000000ull

/* A made-up TSC at `ghz` GHz that read `t0` at ns 0. */
static uint64_t tsc_at(double ghz, uint64_t t0, uint64_t ns)
{
	return t0 + (uint64_t)((double)ns * ghz);
}

static uint64_t absdiff(uint64_t a, uint64_t b)
{
	return a > b ? a - b : b - a;
}

/* No line before SL_FIT_FIRST_NS of stretch; then a line that reads the
 * made-up clock within a few ns across its whole span, and only its span. */
static void test_clock_first_fit(void **state)
{
	(void)state;
	const double ghz = 2.445406;
	const uint64_t t0 = 123456789;
	struct sl_clock_line l = {.base_tsc = tsc_at(ghz, t0, 5 * MS), .base_ns = 5 * MS};
	uint64_t ns;
	assert_false(sl__clock_line_ns(&l, tsc_at(ghz, t0, 6 * MS), &ns));
	assert_dec_equal(sl__clock_line_fit(&l, tsc_at(ghz, t0, 14 * MS), 14 * MS), SL_FIT_WAIT);
	assert_dec_equal(l.mult, 0);
	assert_dec_equal(sl__clock_line_fit(&l, tsc_at(ghz, t0, 15 * MS), 15 * MS), SL_FIT_OK);
	assert_dec_equal(l.base_ns, 15 * MS);
	/* Good for twice the 10 ms it was fitted on, not beyond. */
	for (uint64_t t = 15 * MS; t < 35 * MS - US; t += 7 * US + 13) {
		assert_true(sl__clock_line_ns(&l, tsc_at(ghz, t0, t), &ns));
		assert_true(absdiff(ns, t) <= 2);
	}
	assert_false(sl__clock_line_ns(&l, tsc_at(ghz, t0, 35 * MS + US), &ns));
	assert_false(sl__clock_line_ns(&l, tsc_at(ghz, t0, 15 * MS) - 1, &ns));
	/* No line on a shorter stretch than the first's: a sample 1 ms on
	 * (with 1 µs of error) leaves the line as it is. */
	const struct sl_clock_line before = l;
	assert_dec_equal(sl__clock_line_fit(&l, tsc_at(ghz, t0, 16 * MS), 16 * MS + US),
			 SL_FIT_WAIT);
	assert_memory_equal(&l, &before, sizeof(l));
}

/* Refits every span, with samples off by up to ±400 ns (a wide pair): the
 * line stays within 1.5 µs of the clock, the span grows to SL_FIT_SPAN_NS
 * and stays there; a sudden change of 50 ppm in the rate (NTP's are
 * gradual) costs at most the 5 µs it makes over one span, and is followed. */
static void test_clock_refits_follow(void **state)
{
	(void)state;
	double ghz = 3.0;
	uint64_t t0 = 1000, tsc_now = t0, ns_now = 0, ns;
	struct sl_clock_line l = {.base_tsc = t0, .base_ns = 0};
	uint64_t jitter_seed = 1, max_err = 0, max_err_after = 0;
	int fits = 0;
	while (ns_now < 10000 * MS) {
		/* Advance 50 µs of real time. */
		ns_now += 50 * US;
		tsc_now += (uint64_t)(50 * US * ghz);
		if (ns_now == 5000 * MS)
			ghz *= 1.00005; /* NTP-like: the clock's view of the TSC rate moves */
		if (sl__clock_line_ns(&l, tsc_now, &ns)) {
			uint64_t e = absdiff(ns, ns_now),
				 *m = ns_now < 5000 * MS ? &max_err : &max_err_after;
			*m = e > *m ? e : *m;
			continue;
		}
		jitter_seed = jitter_seed * 6364136223846793005ull + 1442695040888963407ull;
		int64_t jitter = (int64_t)((jitter_seed >> 33) % 801) - 400;
		enum sl_fit f = sl__clock_line_fit(&l, tsc_now,
						   (uint64_t)((int64_t)ns_now + jitter));
		assert_int_not_equal(f, SL_FIT_OFF);
		fits += f == SL_FIT_OK;
	}
	print_message("worst error %llu ns, %llu ns after the change\n",
		      (unsigned long long)max_err, (unsigned long long)max_err_after);
	assert_true(max_err <= 1500);
	assert_true(max_err_after <= 6 * US);
	assert_dec_equal(l.span, (uint64_t)(((unsigned __int128)SL_FIT_SPAN_NS << 32) / l.mult));
	/* Spans of 20, 40, 80, then 100 ms: about 100 fits in 10 s. */
	assert_in_range(fits, 95, 110);
}

/* A TSC that changes its rate by 1% is found out at the next refit. */
static void test_clock_rate_change_off(void **state)
{
	(void)state;
	struct sl_clock_line l = {.base_tsc = 0, .base_ns = 0};
	assert_dec_equal(sl__clock_line_fit(&l, 20 * MS * 2, 20 * MS), SL_FIT_OK);
	struct sl_clock_line good = l;
	/* 20 ms on at 2 GHz, then 1.98 GHz for the next 20 ms. */
	assert_dec_equal(sl__clock_line_fit(&l, 40 * MS * 2, 40 * MS), SL_FIT_OK);
	assert_dec_equal(sl__clock_line_fit(&l, 80 * MS + (uint64_t)(20 * MS * 1.98), 60 * MS),
			 SL_FIT_OFF);
	/* A forward jump of the TSC alone (1 ms at once) too. */
	l = good;
	assert_dec_equal(sl__clock_line_fit(&l, 40 * MS * 2 + 2 * MS, 40 * MS), SL_FIT_OFF);
}

/* The TSC going back: a fresh base, no span, the rate kept; then the next
 * sample fits a line again. A sample older than the base waits. */
static void test_clock_tsc_back(void **state)
{
	(void)state;
	struct sl_clock_line l = {.base_tsc = 0, .base_ns = 0};
	assert_dec_equal(sl__clock_line_fit(&l, 20 * MS * 2, 20 * MS), SL_FIT_OK);
	const uint64_t mult = l.mult;
	assert_dec_equal(sl__clock_line_fit(&l, 10, 19 * MS), SL_FIT_WAIT);
	assert_dec_equal(sl__clock_line_fit(&l, 1000, 30 * MS), SL_FIT_OK);
	assert_dec_equal(l.base_tsc, 1000);
	assert_dec_equal(l.span, 0);
	assert_dec_equal(l.mult, mult);
	uint64_t ns;
	assert_false(sl__clock_line_ns(&l, 1001, &ns));
	assert_dec_equal(sl__clock_line_fit(&l, 1000 + 10 * MS * 2, 40 * MS), SL_FIT_OK);
	assert_true(sl__clock_line_ns(&l, 1000 + 10 * MS * 2 + 2000, &ns));
	assert_dec_equal(ns, 40 * MS + 1000);
}

/* No TSC rate outside [~1 MHz, 2^32 GHz): the line refuses it. */
static void test_clock_absurd_rate_off(void **state)
{
	(void)state;
	struct sl_clock_line l = {.base_tsc = 0, .base_ns = 0};
	assert_dec_equal(sl__clock_line_fit(&l, 10, 20 * MS), SL_FIT_OFF);
}

static uint64_t vdso_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Readings of sl__clock_ns for `ms` against clock_gettime: the worst
 * distance of one outside the readings around it. */
static uint64_t live_worst(uint64_t ms, uint64_t *n)
{
	uint64_t worst = 0;
	*n = 0;
	const uint64_t end = vdso_ns() + ms * MS;
	for (uint64_t before = vdso_ns(); before < end; before = vdso_ns()) {
		uint64_t t = sl__clock_ns(), after = vdso_ns();
		uint64_t e = t < before ? before - t : t > after ? t - after : 0;
		worst = e > worst ? e : worst;
		if (++*n % 1024 == 0)
			usleep(200);
	}
	return worst;
}

/* The live clock (the TSC where the machine allows it) against
 * clock_gettime for 400 ms: every reading between the readings around it,
 * give or take 50 µs (a generous bound: a line's error is about 1 µs). */
static void test_clock_live_follows_clock_gettime(void **state)
{
	(void)state;
	uint64_t (*before)(void) = sl__clock_ns, n;
	sl__clock_init();
	uint64_t worst = live_worst(400, &n);
	print_message("%s: %llu readings, worst %llu ns outside their bracket\n",
		      sl__clock_ns != before ? "TSC" : "clock_gettime", (unsigned long long)n,
		      (unsigned long long)worst);
	assert_true(worst <= 50 * US);
}

static void *live_thread(void *arg)
{
	uint64_t n;
	*(uint64_t *)arg = live_worst(300, &n);
	return NULL;
}

/* Four threads reading (and refitting) the one line at once. */
static void test_clock_live_threads(void **state)
{
	(void)state;
	sl__clock_init();
	pthread_t th[4];
	uint64_t worst[4];
	for (int i = 0; i < 4; i++)
		assert_dec_equal(pthread_create(&th[i], NULL, live_thread, &worst[i]), 0);
	for (int i = 0; i < 4; i++) {
		assert_dec_equal(pthread_join(th[i], NULL), 0);
		assert_true(worst[i] <= 50 * US);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clock_first_fit),
		cmocka_unit_test(test_clock_refits_follow),
		cmocka_unit_test(test_clock_rate_change_off),
		cmocka_unit_test(test_clock_tsc_back),
		cmocka_unit_test(test_clock_absurd_rate_off),
		cmocka_unit_test(test_clock_live_follows_clock_gettime),
		cmocka_unit_test(test_clock_live_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
