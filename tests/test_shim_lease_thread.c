/* SPDX-License-Identifier: MIT */
/*
 * test_shim_lease_thread.c - the lease thread and the Redis client (lease.c,
 * redis*.c) racing the program's threads, for TSan (make sanitize builds
 * every *_thread test with -fsanitize=thread): four threads admit connects
 * under connect:2000/s,redis=KEY for 1 s against a private redis-server
 * (unix socket in a 0700 temp dir, killed at the end), while the lease
 * thread tops up, expires and publishes banks; then the policy is replaced,
 * which joins the thread; then the same through a host pool (shared= with
 * redis=, the bank in a shared segment). The count admitted is checked against the rate
 * (strict upper bound, generous lower bound), so the test also fails if
 * nothing is leased. Skipped if redis-server is not installed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_assert.h"

#include "../shim/act.h"
#include "../shim/init.h"
#include "../common/segment.h"
#include "../shim/state.h"

#define RATE 2000
#define THREADS 4
#define RUN_NS 1000000000ull

extern char **environ;

static char dir[64], sock[96];
static pid_t server = -1;
static _Atomic uint64_t admitted;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int server_up(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	close(fd);
	return ok;
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/sl-lease-thread-XXXXXX");
	if (mkdtemp(dir) == NULL) /* 0700, unpredictable */
		return -1;
	snprintf(sock, sizeof(sock), "%s/r.sock", dir);
	char *argv[] = {"redis-server", "--port", "0", "--unixsocket",
			sock,           "--save", "",  "--appendonly",
			"no",           "--dir",  dir, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	int e = posix_spawnp(&server, "redis-server", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (e != 0) {
		server = -1;
		return 0; /* the test skips */
	}
	for (int i = 0; i < 500 && !server_up(); i++)
		usleep(10000);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (server > 0) {
		kill(server, SIGKILL);
		waitpid(server, NULL, 0);
	}
	unlink(sock);
	rmdir(dir);
	return 0;
}

static void *worker(void *arg)
{
	uint64_t end = *(const uint64_t *)arg;
	while (now_ns() < end) {
		struct sl_call c;
		struct sl_grant g;
		sl__call_begin(&c, -1, SL_OP_CONNECT, NULL, 0);
		if (sl__admit(&c, 1u, 1, &g) == 0 && now_ns() < end)
			/* Relaxed: a counter read after the joins. */
			atomic_fetch_add_explicit(&admitted, 1, memory_order_relaxed);
	}
	return NULL;
}

/* Four threads under `opts` (after the rate) for 1 s. */
static void race(const char *opts)
{
	if (server <= 0 || !server_up())
		skip();
	char spec[96], url[160], err[SL_ERR_MAX];
	snprintf(spec, sizeof(spec), "%d/s,%s", RATE, opts);
	atomic_store(&admitted, 0);
	snprintf(url, sizeof(url), "unix://%s", sock);
	struct sl_policy p;
	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, "SLUICE_CONNECT", spec, err, sizeof(err)) != 0 ||
	    sl_policy_parse_var(&p, "SLUICE_REDIS", url, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_dec_equal(sl__state_init_unsync(&p), 0);
	uint64_t t0 = now_ns(), end = t0 + RUN_NS;
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		assert_dec_equal(pthread_create(&t[i], NULL, worker, &end), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	uint64_t n = atomic_load_explicit(&admitted, memory_order_relaxed);
	/* At most the rate over the run plus the server's burst and one lease
	 * (20 at 2000/s: max(burst 10, 10 ms of the rate)); at least a third
	 * of the rate, however slow the sanitizer makes the calls. */
	printf("measured: %llu admitted in 1 s by %d threads at %d/s\n", (unsigned long long)n,
	       THREADS, RATE);
	assert_true(n <= RATE + 20 + 20);
	assert_true(n >= RATE / 3);
	/* Replacing the policy stops and joins the lease thread. */
	sl_policy_init(&p);
	assert_dec_equal(sl__state_init_unsync(&p), 0);
}

static void test_lease_thread_race(void **state)
{
	char opts[64];
	(void)state;
	snprintf(opts, sizeof(opts), "redis=tsan%ld", (long)getpid());
	race(opts);
}

/* The same through a host pool (shared= with redis=): the bank and the
 * election word are in the shared segment. */
static void test_lease_thread_pool(void **state)
{
	char opts[96], path[128];
	(void)state;
	snprintf(opts, sizeof(opts), "shared=tsan%ld,redis=tsanp%ld", (long)getpid(),
		 (long)getpid());
	race(opts);
	snprintf(path, sizeof(path), "shared-tsan%ld", (long)getpid());
	sl_seg_unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lease_thread_race),
		cmocka_unit_test(test_lease_thread_pool),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
