/* SPDX-License-Identifier: MIT */
/*
 * test_core_warmup_thread.c - threads and forked processes sharing one
 * warm-up limiter in MAP_SHARED memory, with a fake clock the workers
 * advance themselves (an atomic counter: times are unique but reach the
 * limiter out of order, the "stale now" case). Checks, exactly:
 *   - no more units act by any instant t than the stable rate allows:
 *     admitted <= t / S + burst (each admission moves the schedule by at
 *     least S, and a unit acts at most (burst - 1) S before its slot);
 *   - no more units act within the warm-up period than M - T + burst (the
 *     schedule moves at least as in saturation from cold: idleness and
 *     refills only make it colder);
 *   - the 16-byte state stays consistent: the stored permits never exceed
 *     M, and the final schedule covers every admitted unit's stable cost.
 * Run under TSan by `make sanitize` (its name ends in _thread). Workers
 * never call cmocka; they count violations in atomics.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_assert.h"

#include "sluice_core.h"

#define NTHREADS 4
#define NPROC 2
#define OPS 20000
#define EPOCH 1000000000ull
/* 100000 units/s (S = 10 us), warm-up 20 ms, cold 3, burst 3: T = 1000,
 * M = 2000, so M - T = 1000 units in the warm-up period. */
#define RATE 100000ull
#define S_NS 10000ull
#define WARMUP 20000000ull
#define BURST 3ull
#define M_UNITS 2000ull
#define STEP_MAX 400 /* ns per operation: 12 workers x 20000 ops ~ 48 ms */

struct arena {
	struct sl_limiter lim;
	_Atomic uint64_t clock;
	_Atomic uint64_t admitted;
	_Atomic uint64_t charged;
	_Atomic uint64_t in_warmup;
	_Atomic uint64_t max_act;
	_Atomic uint64_t violations;
};

static uint64_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s ^ (*s >> 29);
}

static void atomic_max(_Atomic uint64_t *p, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(p, memory_order_relaxed);
	while (cur < v && !atomic_compare_exchange_weak_explicit(p, &cur, v, memory_order_relaxed,
								 memory_order_relaxed))
		;
}

struct worker {
	struct arena *a;
	uint64_t seed;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	struct arena *a = w->a;
	uint64_t seed = w->seed;
	for (int i = 0; i < OPS; i++) {
		const uint64_t now = atomic_fetch_add_explicit(&a->clock, 1 + rnd(&seed) % STEP_MAX,
							       memory_order_relaxed);
		const uint64_t mode = rnd(&seed) % 4;
		/* Police, short reserves (up to 0.5 ms) and, now and then, a
		 * charge. */
		struct sl_decision d;
		if (mode == 3 && i % 64 == 0) {
			sl_limiter_charge(&a->lim, 1, now);
			atomic_fetch_add_explicit(&a->charged, 1, memory_order_relaxed);
			continue;
		}
		d = sl_limiter_acquire(&a->lim, 1, now, mode == 0 ? 0 : 500000u);
		if (d.verdict != SL_ADMIT)
			continue;
		const uint64_t act = now + d.wait_ns;
		atomic_fetch_add_explicit(&a->admitted, 1, memory_order_relaxed);
		if (act - EPOCH < WARMUP)
			atomic_fetch_add_explicit(&a->in_warmup, 1, memory_order_relaxed);
		atomic_max(&a->max_act, act);
		if (sl_warmup_stored(&a->lim.u.warm, now) > M_UNITS)
			atomic_fetch_add_explicit(&a->violations, 1, memory_order_relaxed);
	}
	return NULL;
}

static void run_threads(struct arena *a, uint64_t seed)
{
	pthread_t th[NTHREADS];
	struct worker w[NTHREADS];
	for (int i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){.a = a, .seed = seed * 977 + (uint64_t)i};
		assert_dec_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
}

static void test_warmup_thread_bounds(void **state)
{
	(void)state;
	struct arena *a = mmap(NULL, sizeof(*a), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			       -1, 0);
	assert_true(a != MAP_FAILED);
	struct sl_params p = {.kind = SL_KIND_WARMUP,
			      .cold = 3,
			      .amount = RATE,
			      .period_ns = 1000000000ull,
			      .burst = BURST,
			      .warmup_ns = WARMUP};
	assert_dec_equal(sl_limiter_init(&a->lim, &p, EPOCH), SL_OK);
	atomic_store(&a->clock, EPOCH);
	pid_t kids[NPROC];
	for (int k = 0; k < NPROC; k++) {
		kids[k] = fork();
		assert_true(kids[k] >= 0);
		if (kids[k] == 0) {
			run_threads(a, 100 + (uint64_t)k);
			_exit(0);
		}
	}
	run_threads(a, 1);
	for (int k = 0; k < NPROC; k++) {
		int st;
		assert_dec_equal(waitpid(kids[k], &st, 0), kids[k]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	const uint64_t admitted = atomic_load(&a->admitted);
	const uint64_t max_act = atomic_load(&a->max_act) - EPOCH;
	const uint64_t in_warmup = atomic_load(&a->in_warmup);
	print_message("admitted %llu, last act %llu ns, %llu in the warm-up period\n",
		      (unsigned long long)admitted, (unsigned long long)max_act,
		      (unsigned long long)in_warmup);
	assert_dec_equal(atomic_load(&a->violations), 0);
	/* Enough happened for the bounds to mean something. */
	assert_true(admitted > 100);
	assert_true(admitted > 2000);
	assert_true(admitted <= max_act / S_NS + BURST);
	assert_true(in_warmup <= 1000 + BURST);
	/* The schedule covers every unit's stable cost (charges included). */
	const uint64_t charged = atomic_load(&a->charged);
	assert_true(charged > 0);
	assert_true(atomic_load(&a->lim.u.warm.sched_ns) >= (admitted + charged) * S_NS);
	assert_true(sl_limiter_validate(&a->lim));
	munmap(a, sizeof(*a));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_warmup_thread_bounds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
