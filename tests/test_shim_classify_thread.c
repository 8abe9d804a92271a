/* SPDX-License-Identifier: MIT */
/*
 * test_shim_classify_thread.c - a call on an fd that another thread is
 * classifying waits for that classification, however long it takes, and is
 * then throttled and counted like any other.
 *
 * Before, the waiting thread gave up after 1000 sched_yields and its call
 * passed unthrottled and uncounted: under load (the classifier off the CPU,
 * or publishing the process's record) one send of 80 went free in
 * test_shim_credit_thread. Here the classifier's first query (getsockopt)
 * takes 100 ms of real time while a second thread sends on the same fd.
 *
 * The shim's real clock and sleep (two threads use them); the rule never
 * makes a call wait, so the clock only fills the bucket.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "test_shim.h"

static struct sl_real saved;
static int slow_fd = -1;
static atomic_int in_query; /* the classifier is inside its slow query */
static atomic_int n_slow;   /* queries on slow_fd */
static atomic_int n_others; /* ... by a thread other than the first */
static pthread_t first;
static _Atomic uint64_t query_end; /* when the slow query returned */
static _Atomic uint64_t b_end;     /* when thread B's send returned */

/* The shim's own clock and sleep, saved in main before any setup points
 * them at the fakes. */
static uint64_t (*real_clock)(void);
static int (*real_sleep)(uint64_t deadline);

/* The first query on slow_fd takes 100 ms. */
static int slow_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	if (fd == slow_fd && atomic_fetch_add(&n_slow, 1) == 0) {
		first = pthread_self();
		atomic_store(&in_query, 1);
		const struct timespec pause = {0, 100 * 1000000L};
		nanosleep(&pause, NULL);
		atomic_store(&query_end, real_clock());
	} else if (fd == slow_fd && !pthread_equal(first, pthread_self())) {
		atomic_fetch_add(&n_others, 1);
	}
	return saved.getsockopt(fd, level, name, val, len);
}

static int setup(void **state)
{
	(void)state;
	shim_setup(&saved, 0);
	sl__clock_ns = real_clock;
	sl__sleep_until = real_sleep;
	sl__real.getsockopt = slow_getsockopt;
	atomic_store(&in_query, 0);
	atomic_store(&n_slow, 0);
	atomic_store(&n_others, 0);
	atomic_store(&query_end, 0);
	atomic_store(&b_end, 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	shim_teardown(&saved);
	return 0;
}

static void *send_one(void *arg)
{
	static const char c = 'x';
	return (void *)(intptr_t)send(*(int *)arg, &c, 1, 0);
}

static void *send_one_timed(void *arg)
{
	void *r = send_one(arg);
	atomic_store(&b_end, real_clock());
	return r;
}

/* Thread A classifies cli (100 ms in getsockopt); thread B's send on cli,
 * started while A is inside, waits and is charged: both bytes counted,
 * both calls, the bucket 2 tokens down. */
static void test_second_thread_waits_for_classification(void **state)
{
	(void)state;
	int lst, cli, srv;
	struct sockaddr_in addr;
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B");
	loopback_pair(&lst, &cli, &srv, &addr);
	sl__fd_forget(cli); /* the next call classifies it anew */
	slow_fd = cli;

	pthread_t a, b;
	assert_int_equal(pthread_create(&a, NULL, send_one, &cli), 0);
	while (!atomic_load(&in_query))
		sched_yield();
	assert_int_equal(pthread_create(&b, NULL, send_one_timed, &cli), 0);
	void *ra, *rb;
	pthread_join(a, &ra);
	pthread_join(b, &rb);

	assert_dec_equal((intptr_t)ra, 1);
	assert_dec_equal((intptr_t)rb, 1);
	assert_true(atomic_load(&n_slow) >= 1);
	assert_dec_equal(atomic_load(&n_others), 0); /* classified once, by A */
	assert_dec_equal(test_stats(0)->calls, 2);
	assert_dec_equal(test_stats(0)->bytes, 2);
	/* B's send returned only after A's query did. */
	assert_true(atomic_load(&b_end) >= atomic_load(&query_end));
	char got[2];
	assert_dec_equal(recv(srv, got, 2, MSG_WAITALL), 2);
	close(cli);
	close(srv);
	close(lst);
	slow_fd = -1;
}

int main(void)
{
	real_clock = sl__clock_ns;
	real_sleep = sl__sleep_until;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_second_thread_waits_for_classification, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
