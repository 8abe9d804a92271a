/* SPDX-License-Identifier: MIT */
/*
 * test_core_thread.c - 8 threads (and 2 forked processes) hammering one
 * limiter of each kind, with a fake clock the workers advance themselves.
 *
 * The clock is an atomic counter: each operation advances it by a random
 * step and uses the value it got, so times are unique but reach the limiter
 * out of order (a thread can be preempted between reading the clock and its
 * CAS), which is exactly the "stale now" case. After a fixed number of
 * operations the test checks the bounds exactly:
 *   token:   units admitted <= (latest act time - epoch) / T + burst
 *   leaky:   the same with burst 1, and no wait beyond the capacity
 *   fixed:   units per window (by act time) <= N
 *   sliding: units per window <= N, and the weighted estimate at the last
 *            admission of each window <= N (windows are separated by a
 *            barrier, so no admission of window k runs after window k+1)
 *   conc:    units in use never above the limit, final held == 0, every
 *            acquire matched by one release; a limit-1 limiter used as a
 *            lock around a plain counter lets TSan check acquire/release.
 * Workers never call cmocka (it is not thread-safe): they count violations
 * in atomics that the main thread asserts on.
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

#define NTHREADS 8
#define OPS 20000    /* operations per thread (per process when forked) */
#define STEP_MAX 250 /* clock step per operation: 0..249 ns */
#define NWIN 4096    /* windows tracked; the clock stays well below */
#define EPOCH 1000000000ull

/* Sliding: rounds of one window each, separated by a barrier. */
#define SLIDE_W 1000000ull
#define SLIDE_N 40
#define ROUNDS 40
#define ROUND_OPS 150
/* Spread each round's times over the whole window. */
#define SLIDE_STEP_MAX (2 * SLIDE_W / (ROUND_OPS * NTHREADS))

struct arena {
	struct sl_limiter lim;
	struct sl_limiter guard; /* concurrency 1: a lock for `guarded` */
	_Atomic uint64_t clock;
	_Atomic uint64_t admitted;
	_Atomic uint64_t max_act;
	_Atomic uint64_t violations;
	_Atomic uint64_t inuse;
	_Atomic uint64_t guard_admits;
	uint64_t guarded; /* plain: only touched while holding `guard` */
	_Atomic uint64_t pos[ROUNDS];
	_Atomic uint64_t win_units[NWIN];
	_Atomic uint64_t win_emax[NWIN];
	pthread_barrier_t barrier;
};

struct worker {
	struct arena *a;
	uint64_t seed;
	void (*run)(struct arena *a, uint64_t *seed);
};

/* A reproducible stream of garbage (64-bit LCG, high bits folded in). */
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

/* A fresh, unique, out-of-order-prone time. */
static uint64_t tick(struct arena *a, uint64_t *seed)
{
	uint64_t step = rnd(seed) % STEP_MAX;
	return atomic_fetch_add_explicit(&a->clock, step, memory_order_relaxed) + step;
}

/* Token or leaky bucket: police and reserve-with-timeout mixed. */
static void run_gcra(struct arena *a, uint64_t *seed)
{
	const bool leaky = a->lim.kind == SL_KIND_LEAKY;
	for (int i = 0; i < OPS; i++) {
		const uint64_t now = tick(a, seed);
		const uint64_t n = leaky ? 1 : 1 + rnd(seed) % 3;
		const uint64_t max_wait = (rnd(seed) & 1) ? 0 : rnd(seed) % 5000;
		struct sl_decision d = sl_limiter_acquire(&a->lim, n, now, max_wait);
		if (d.verdict != SL_ADMIT)
			continue;
		atomic_fetch_add(&a->admitted, n);
		atomic_max(&a->max_act, now + d.wait_ns);
		/* Leaky capacity 4: at most 3 units queued ahead of this one. */
		if (d.wait_ns > max_wait || (leaky && d.wait_ns > 3 * 1000))
			atomic_fetch_add(&a->violations, 1);
	}
}

/* Fixed window: police and reserve-with-timeout, units per act window. */
static void run_fixed(struct arena *a, uint64_t *seed)
{
	const uint64_t w = a->lim.params.period_ns;
	for (int i = 0; i < OPS; i++) {
		const uint64_t now = tick(a, seed);
		const uint64_t n = 1 + rnd(seed) % 3;
		const uint64_t max_wait = (rnd(seed) & 1) ? 0 : rnd(seed) % (2 * w);
		struct sl_decision d = sl_limiter_acquire(&a->lim, n, now, max_wait);
		if (d.verdict != SL_ADMIT)
			continue;
		const uint64_t win = (now + d.wait_ns - EPOCH) / w;
		if (win >= NWIN || d.wait_ns > max_wait)
			atomic_fetch_add(&a->violations, 1);
		else
			atomic_fetch_add(&a->win_units[win], n);
	}
}

/* Sliding window: one window per round, all threads in the same round. */
static void run_sliding(struct arena *a, uint64_t *seed)
{
	for (int r = 0; r < ROUNDS; r++) {
		pthread_barrier_wait(&a->barrier);
		for (int i = 0; i < ROUND_OPS; i++) {
			uint64_t off = atomic_fetch_add(&a->pos[r], rnd(seed) % SLIDE_STEP_MAX);
			off = off < SLIDE_W - 1 ? off : SLIDE_W - 1;
			const uint64_t n = 1 + rnd(seed) % 3;
			struct sl_decision d = sl_limiter_acquire(&a->lim, n,
								  EPOCH + r * SLIDE_W + off, 0);
			if (d.verdict != SL_ADMIT)
				continue;
			atomic_fetch_add(&a->win_units[r], n);
			atomic_max(&a->win_emax[r], off);
		}
		pthread_barrier_wait(&a->barrier);
	}
}

/* Concurrency: hold, check the count in use, release. */
static void run_conc(struct arena *a, uint64_t *seed)
{
	const uint64_t limit = a->lim.params.amount;
	for (int i = 0; i < OPS; i++) {
		const uint64_t n = 1 + rnd(seed) % 2;
		struct sl_decision d = sl_limiter_acquire(&a->lim, n, 0, 0);
		if (d.verdict == SL_ADMIT) {
			if (atomic_fetch_add(&a->inuse, n) + n > limit)
				atomic_fetch_add(&a->violations, 1);
			atomic_fetch_sub(&a->inuse, n);
			if (sl_limiter_release(&a->lim, n) != SL_OK)
				atomic_fetch_add(&a->violations, 1);
		}
		if (sl_limiter_acquire(&a->guard, 1, 0, 0).verdict == SL_ADMIT) {
			a->guarded++; /* a data race unless acquire/release order it */
			atomic_fetch_add(&a->guard_admits, 1);
			if (sl_limiter_release(&a->guard, 1) != SL_OK)
				atomic_fetch_add(&a->violations, 1);
		}
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	/* Start together, so that the threads really contend. */
	pthread_barrier_wait(&w->a->barrier);
	w->run(w->a, &w->seed);
	return NULL;
}

static struct arena *arena_new(const struct sl_params *p)
{
	struct arena *a = mmap(NULL, sizeof(*a), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			       -1, 0);
	assert_true(a != MAP_FAILED);
	assert_dec_equal(sl_limiter_init(&a->lim, p, EPOCH), SL_OK);
	struct sl_params g = {.kind = SL_KIND_CONC, .amount = 1};
	assert_dec_equal(sl_limiter_init(&a->guard, &g, EPOCH), SL_OK);
	atomic_store(&a->clock, EPOCH);
	atomic_store(&a->max_act, EPOCH);
	return a;
}

static void arena_free(struct arena *a)
{
	assert_dec_equal(atomic_load(&a->violations), 0);
	munmap(a, sizeof(*a));
}

/* Run `run` on NTHREADS threads (pthread_create publishes the initialised
 * arena; pthread_join publishes the workers' counts). */
static void run_threads(struct arena *a, void (*run)(struct arena *, uint64_t *))
{
	pthread_t t[NTHREADS];
	struct worker w[NTHREADS];
	assert_dec_equal(pthread_barrier_init(&a->barrier, NULL, NTHREADS), 0);
	for (int i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){.a = a,
				       .seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1),
				       .run = run};
		assert_dec_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++)
		assert_dec_equal(pthread_join(t[i], NULL), 0);
	pthread_barrier_destroy(&a->barrier);
}

/* Run `run` in 2 forked processes sharing the arena (MAP_SHARED). */
static void run_processes(struct arena *a, void (*run)(struct arena *, uint64_t *))
{
	pid_t pid[2];
	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			uint64_t seed = 0x2545f4914f6cdd1dull * (uint64_t)(i + 7);
			run(a, &seed);
			_exit(0);
		}
	}
	for (int i = 0; i < 2; i++) {
		int status = 0;
		assert_dec_equal(waitpid(pid[i], &status, 0), pid[i]);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
}

/* Token/leaky bound: admitted units fill disjoint slots of T = 1000 ns
 * (exact in ticks) that all lie in [EPOCH, max_act + burst * T]. */
static void check_gcra_bound(struct arena *a, uint64_t burst)
{
	const uint64_t admitted = atomic_load(&a->admitted);
	const uint64_t bound = (atomic_load(&a->max_act) - EPOCH) / 1000 + burst;
	print_message("admitted %llu units, bound %llu\n", (unsigned long long)admitted,
		      (unsigned long long)bound);
	assert_true(admitted > 0);
	assert_in_range(admitted, 1, bound);
}

static void test_core_thread_token(void **state)
{
	(void)state;
	struct sl_params p = {.kind = SL_KIND_TOKEN, .amount = 1, .period_ns = 1000, .burst = 8};
	struct arena *a = arena_new(&p);
	run_threads(a, run_gcra);
	check_gcra_bound(a, 8);
	arena_free(a);
}

static void test_core_thread_leaky(void **state)
{
	(void)state;
	struct sl_params p = {.kind = SL_KIND_LEAKY, .amount = 1, .period_ns = 1000, .burst = 4};
	struct arena *a = arena_new(&p);
	run_threads(a, run_gcra);
	check_gcra_bound(a, 1);
	arena_free(a);
}

static void check_fixed_bound(struct arena *a, uint64_t limit)
{
	uint64_t total = 0, full = 0;
	for (int k = 0; k < NWIN; k++) {
		const uint64_t u = atomic_load(&a->win_units[k]);
		if (u > limit)
			fail_msg("window %d holds %llu > %llu", k, (unsigned long long)u,
				 (unsigned long long)limit);
		total += u;
		full += u == limit;
	}
	print_message("admitted %llu units, %llu full windows\n", (unsigned long long)total,
		      (unsigned long long)full);
	assert_true(full > 0);
}

static void test_core_thread_fixed(void **state)
{
	(void)state;
	struct sl_params p = {.kind = SL_KIND_FIXED, .amount = 50, .period_ns = 100000};
	struct arena *a = arena_new(&p);
	run_threads(a, run_fixed);
	check_fixed_bound(a, 50);
	arena_free(a);
}

static void test_core_thread_sliding(void **state)
{
	(void)state;
	struct sl_params p = {.kind = SL_KIND_SLIDING, .amount = SLIDE_N, .period_ns = SLIDE_W};
	struct arena *a = arena_new(&p);
	run_threads(a, run_sliding);
	uint64_t total = 0;
	for (int r = 0; r < ROUNDS; r++) {
		const uint64_t cur = atomic_load(&a->win_units[r]);
		const uint64_t prev = r ? atomic_load(&a->win_units[r - 1]) : 0;
		const uint64_t e = atomic_load(&a->win_emax[r]);
		/* The last admission of window r (in CAS order) saw all of
		 * window r's units and the previous window at weight
		 * (W - e) / W for some e <= e_max. */
		const uint64_t weighted = cur ? (prev * (SLIDE_W - e) + SLIDE_W - 1) / SLIDE_W : 0;
		if (cur + weighted > SLIDE_N)
			fail_msg("window %d: %llu + weighted %llu > %d", r, (unsigned long long)cur,
				 (unsigned long long)weighted, SLIDE_N);
		total += cur;
	}
	print_message("admitted %llu units in %d windows\n", (unsigned long long)total, ROUNDS);
	assert_true(total >= ROUNDS);
	arena_free(a);
}

static void check_conc(struct arena *a, uint64_t expected_guard_admits_min)
{
	assert_dec_equal(sl_conc_held(&a->lim.u.conc), 0);
	assert_dec_equal(sl_conc_held(&a->guard.u.conc), 0);
	assert_dec_equal(atomic_load(&a->inuse), 0);
	assert_dec_equal(a->guarded, atomic_load(&a->guard_admits));
	assert_true(a->guarded >= expected_guard_admits_min);
	assert_true(sl_limiter_validate(&a->lim));
}

static void test_core_thread_conc(void **state)
{
	(void)state;
	struct sl_params p = {.kind = SL_KIND_CONC, .amount = 3};
	struct arena *a = arena_new(&p);
	run_threads(a, run_conc);
	check_conc(a, 1);
	arena_free(a);
}

static void test_core_thread_fork_token(void **state)
{
	(void)state;
	struct sl_params p = {.kind = SL_KIND_TOKEN, .amount = 1, .period_ns = 1000, .burst = 8};
	struct arena *a = arena_new(&p);
	run_processes(a, run_gcra);
	check_gcra_bound(a, 8);
	assert_true(sl_limiter_validate(&a->lim));
	arena_free(a);
}

static void test_core_thread_fork_fixed(void **state)
{
	(void)state;
	struct sl_params p = {.kind = SL_KIND_FIXED, .amount = 50, .period_ns = 100000};
	struct arena *a = arena_new(&p);
	run_processes(a, run_fixed);
	check_fixed_bound(a, 50);
	arena_free(a);
}

static void test_core_thread_fork_conc(void **state)
{
	(void)state;
	struct sl_params p = {.kind = SL_KIND_CONC, .amount = 3};
	struct arena *a = arena_new(&p);
	run_processes(a, run_conc);
	check_conc(a, 1);
	arena_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_thread_token),
		cmocka_unit_test(test_core_thread_leaky),
		cmocka_unit_test(test_core_thread_fixed),
		cmocka_unit_test(test_core_thread_sliding),
		cmocka_unit_test(test_core_thread_conc),
		cmocka_unit_test(test_core_thread_fork_token),
		cmocka_unit_test(test_core_thread_fork_fixed),
		cmocka_unit_test(test_core_thread_fork_conc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
