/* SPDX-License-Identifier: MIT */
/*
 * test_core_breaker_thread.c - threads sharing one circuit breaker, with a
 * fake clock they advance themselves; every attempt fails, so the breaker
 * cycles closed -> open -> half-open -> open ... Checks that the breaker
 * opened from closed exactly once, that every later trip is a failed probe
 * (trips = 1 + reopened), that the verdicts add up to the counters, and
 * that probes do not pile up: a second one is out only when the first was
 * replaced as lost (its report came more than open= of fake time later,
 * which a descheduled thread allows), so never more than two. Run under
 * TSan by `make sanitize`.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_assert.h"

#include "sluice_core.h"

#define NTHREADS 4
#define OPS 50000
#define OPEN_NS 2000u /* 2 us of fake time */

struct arena {
	struct sl_breaker b;
	_Atomic uint64_t clock;
	_Atomic int inflight;
	_Atomic uint64_t max_inflight, probes, passes, fails, reopened, opened;
};

static void *work(void *arg)
{
	struct arena *a = arg;
	for (int i = 0; i < OPS; i++) {
		const uint64_t now = atomic_fetch_add_explicit(&a->clock, 7, memory_order_relaxed);
		enum sl_brk_change ch;
		const enum sl_brk_verdict v = sl_breaker_enter(&a->b, now, &ch);
		if (v == SL_BRK_FAIL) {
			atomic_fetch_add_explicit(&a->fails, 1, memory_order_relaxed);
			continue;
		}
		if (v == SL_BRK_PROBE) {
			const int n = atomic_fetch_add_explicit(&a->inflight, 1,
								memory_order_relaxed) +
				      1;
			uint64_t m = atomic_load_explicit(&a->max_inflight, memory_order_relaxed);
			if ((uint64_t)n > m)
				atomic_store_explicit(&a->max_inflight, (uint64_t)n,
						      memory_order_relaxed);
			atomic_fetch_add_explicit(&a->probes, 1, memory_order_relaxed);
		} else {
			atomic_fetch_add_explicit(&a->passes, 1, memory_order_relaxed);
		}
		const uint64_t later = atomic_fetch_add_explicit(&a->clock, 7,
								 memory_order_relaxed);
		if (v == SL_BRK_PROBE)
			atomic_fetch_sub_explicit(&a->inflight, 1, memory_order_relaxed);
		sl_breaker_report(&a->b, later, true, v == SL_BRK_PROBE, &ch);
		if (ch == SL_BRK_REOPENED)
			atomic_fetch_add_explicit(&a->reopened, 1, memory_order_relaxed);
		if (ch == SL_BRK_OPENED)
			atomic_fetch_add_explicit(&a->opened, 1, memory_order_relaxed);
	}
	return NULL;
}

static void test_breaker_thread_one_probe(void **state)
{
	(void)state;
	static struct arena a;
	assert_true(sl_breaker_init(&a.b, 1000000u, OPEN_NS, 3, 0, 0, 1));
	atomic_store(&a.clock, 1);
	pthread_t th[NTHREADS];
	for (int i = 0; i < NTHREADS; i++)
		assert_dec_equal(pthread_create(&th[i], NULL, work, &a), 0);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	print_message("probes %llu, passes %llu, fast fails %llu, reopened %llu, opened %llu\n",
		      (unsigned long long)a.probes, (unsigned long long)a.passes,
		      (unsigned long long)a.fails, (unsigned long long)a.reopened,
		      (unsigned long long)a.opened);
	assert_true(atomic_load(&a.max_inflight) <= 2);
	assert_dec_equal(atomic_load(&a.opened), 1); /* from closed, once */
	assert_true(atomic_load(&a.probes) > 100);
	assert_dec_equal(atomic_load(&a.probes), atomic_load(&a.b.probes));
	assert_dec_equal(atomic_load(&a.fails), atomic_load(&a.b.fast_fails));
	assert_dec_equal(atomic_load(&a.passes) + atomic_load(&a.probes),
			 atomic_load(&a.b.attempts));
	assert_dec_equal(atomic_load(&a.b.trips), 1 + atomic_load(&a.reopened));
	assert_true(sl_breaker_validate(&a.b));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_breaker_thread_one_probe),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
