/* SPDX-License-Identifier: MIT */
/*
 * test_core_tunable_thread.c - retunes racing with acquires in 4 threads
 * (run under TSan by make sanitize). Between two retunes the test waits
 * for every worker to finish the operation it was in (the grace period the
 * core asks for), not for the workers to stop: acquires still race with
 * every retune.
 */
#include <pthread.h>
#include <sched.h>

#include "test_core.h"

#define T0 (5 * SEC)

/* Threads take single units from a token bucket at a frozen clock (no
 * refill) while the main thread retunes it back and forth between two
 * rates with the same burst: units are carried over rounded up and a racing
 * admission is counted at least once, so no more than the burst is ever
 * admitted in total. A concurrency limit retuned between 2 and 4 never has
 * more than 4 holders. */
#define TH 4
#define TH_OPS 20000
static struct sl_tunable race_tok, race_conc;
static _Atomic uint64_t race_admitted, race_inside, race_max_inside;
/* Operations each worker finished (release: its reads of a slot happen
 * before the retune that waits for the count to move, see below). */
static _Atomic uint64_t race_progress[TH];

static void *race_worker(void *arg)
{
	_Atomic uint64_t *progress = arg;
	for (int i = 0; i < TH_OPS; i++) {
		if (sl_limiter_acquire(&race_tok.head, 1, T0, POLICE).verdict == SL_ADMIT)
			atomic_fetch_add(&race_admitted, 1);
		if (sl_limiter_acquire(&race_conc.head, 1, T0, POLICE).verdict == SL_ADMIT) {
			uint64_t in = atomic_fetch_add(&race_inside, 1) + 1;
			uint64_t m = atomic_load(&race_max_inside);
			while (in > m && !atomic_compare_exchange_weak(&race_max_inside, &m, in))
				;
			atomic_fetch_sub(&race_inside, 1);
			sl_limiter_release(&race_conc.head, 1);
		}
		atomic_fetch_add_explicit(progress, 1, memory_order_release);
	}
	/* Done: never holds up a grace period again. */
	atomic_store_explicit(progress, UINT64_MAX, memory_order_release);
	return NULL;
}

/* The grace period that sluice_core.h asks of callers between two retunes
 * (a retune rewrites the slot that the previous one retired): wait until
 * every worker has finished the operation it was in at the last retune. */
static void race_grace(void)
{
	uint64_t seen[TH];
	for (int i = 0; i < TH; i++)
		seen[i] = atomic_load_explicit(&race_progress[i], memory_order_acquire);
	for (int i = 0; i < TH; i++)
		while (seen[i] != UINT64_MAX &&
		       atomic_load_explicit(&race_progress[i], memory_order_acquire) == seen[i])
			sched_yield();
}

static void test_tunable_thread_retune_race(void **state)
{
	(void)state;
	struct sl_params a = params(SL_KIND_TOKEN, 1000, SEC, 5000);
	struct sl_params b = params(SL_KIND_TOKEN, 3000, SEC, 5000);
	struct sl_params c2 = params(SL_KIND_CONC, 2, 0, 0), c4 = params(SL_KIND_CONC, 4, 0, 0);
	assert_dec_equal(sl_tunable_init(&race_tok, &a, T0), SL_OK);
	assert_dec_equal(sl_tunable_init(&race_conc, &c4, T0), SL_OK);
	pthread_t th[TH];
	for (int i = 0; i < TH; i++)
		assert_dec_equal(pthread_create(&th[i], NULL, race_worker, &race_progress[i]), 0);
	for (int r = 0; r < 2000; r++) {
		race_grace();
		assert_dec_equal(sl_tunable_retune(&race_tok, r % 2 ? &a : &b, T0), SL_OK);
		assert_dec_equal(sl_tunable_retune(&race_conc, r % 2 ? &c4 : &c2, T0), SL_OK);
	}
	for (int i = 0; i < TH; i++)
		pthread_join(th[i], NULL);
	uint64_t admitted = atomic_load(&race_admitted);
	print_message("admitted %llu of burst 5000, max holders %llu\n",
		      (unsigned long long)admitted,
		      (unsigned long long)atomic_load(&race_max_inside));
	assert_true(admitted <= 5000);
	assert_true(admitted >= 1);
	assert_true(atomic_load(&race_max_inside) <= 4);
	assert_dec_equal(atomic_load(&race_conc.head.u.tun.held), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tunable_thread_retune_race),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
