/* SPDX-License-Identifier: MIT */
/*
 * bench_warmup.c - cost of one acquire on the warm-up limiter (one 16-byte
 * CAS, core/warmup.c) next to the token bucket (one 8-byte CAS, gcra.c),
 * and of a closed circuit breaker's enter + report (core/breaker.c).
 *
 * ns per operation, 1 thread and 2 threads on one limiter, best of 5 runs of
 * OPS operations each; a synthetic clock (now += 50 ns per operation, so the
 * limiters admit most calls and the CAS is always taken): no clock read is
 * measured. The rate (10^9 per s, burst 1000) keeps both limiters warm and
 * admitting: the warm-up one pays its premium path only while stored
 * permits are above the threshold, which this clock drains within a few
 * thousand operations.
 *
 *   bench_warmup     prints one table
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "sluice_core.h"

#define OPS 4000000
#define RUNS 5

struct job {
	struct sl_limiter *l;
	struct sl_breaker *b;
	uint64_t max_wait;
	_Atomic uint64_t *clock;
};

static uint64_t mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *run(void *arg)
{
	struct job *j = arg;
	for (int i = 0; i < OPS; i++) {
		const uint64_t now = atomic_fetch_add_explicit(j->clock, 50, memory_order_relaxed);
		if (j->b != NULL) {
			enum sl_brk_change ch;
			sl_breaker_enter(j->b, now, &ch);
			sl_breaker_report(j->b, now, false, false, &ch);
		} else {
			sl_limiter_acquire(j->l, 1, now, j->max_wait);
		}
	}
	return NULL;
}

/* Best ns per operation over RUNS runs with `threads` threads. */
static double measure(const struct sl_params *p, bool breaker, uint64_t max_wait, int threads)
{
	double best = 1e30;
	for (int r = 0; r < RUNS; r++) {
		static struct sl_limiter l;
		static struct sl_breaker b;
		static _Atomic uint64_t clock;
		atomic_store(&clock, 1000);
		if (breaker)
			sl_breaker_init(&b, 10000000000ull, 5000000000ull, 1000000, 0, 0, 1000);
		else
			sl_limiter_init(&l, p, 1000);
		struct job j = {.l = &l,
				.b = breaker ? &b : NULL,
				.max_wait = max_wait,
				.clock = &clock};
		pthread_t th[2];
		const uint64_t t0 = mono();
		for (int t = 0; t < threads; t++)
			pthread_create(&th[t], NULL, run, &j);
		for (int t = 0; t < threads; t++)
			pthread_join(th[t], NULL);
		const double ns = (double)(mono() - t0) / ((double)OPS * threads);
		best = ns < best ? ns : best;
	}
	return best;
}

int main(void)
{
	const struct sl_params tok = {.kind = SL_KIND_TOKEN,
				      .amount = 1000000000,
				      .period_ns = 1000000000,
				      .burst = 1000};
	const struct sl_params warm = {.kind = SL_KIND_WARMUP,
				       .cold = 3,
				       .amount = 1000000000,
				       .period_ns = 1000000000,
				       .burst = 1000,
				       .warmup_ns = 1000000};
	printf("%-28s %12s %12s\n", "ns per operation", "1 thread", "2 threads");
	printf("%-28s %12.1f %12.1f\n", "token police", measure(&tok, false, 0, 1),
	       measure(&tok, false, 0, 2));
	printf("%-28s %12.1f %12.1f\n", "warm-up police", measure(&warm, false, 0, 1),
	       measure(&warm, false, 0, 2));
	printf("%-28s %12.1f %12.1f\n", "token reserve", measure(&tok, false, UINT64_MAX, 1),
	       measure(&tok, false, UINT64_MAX, 2));
	printf("%-28s %12.1f %12.1f\n", "warm-up reserve", measure(&warm, false, UINT64_MAX, 1),
	       measure(&warm, false, UINT64_MAX, 2));
	printf("%-28s %12.1f %12.1f\n", "breaker enter+report", measure(NULL, true, 0, 1),
	       measure(NULL, true, 0, 2));
	return 0;
}
