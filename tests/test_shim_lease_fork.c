/* SPDX-License-Identifier: MIT */
/*
 * test_shim_lease_fork.c - fork() while the lease thread is inside a Redis
 * command (lease.c, redis.c, ownfd.c). The "server" is a unix socket that
 * listens and never answers: the lease thread's first command waits there
 * for its reply timeout, holding the connections' I/O lock. A program
 * thread forks then; the child's first throttled call starts its own lease
 * thread, whose first command takes the same lock. Before the fork child
 * made that lock anew it waited for ever (test_redis.py's fork case hung
 * CI for 90 minutes, 1 run in 5 here). The child must end within 15 s
 * (its own command gives up after the 2 s timeout, then on-error applies).
 * Not a *_thread test: TSan ends a multi-threaded process's fork child
 * that starts a thread.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_assert.h"

#include "../shim/act.h"
#include "../shim/init.h"
#include "../shim/redis.h"
#include "../shim/state.h"

static char dir[64], sock[96];
static int mute = -1;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/sl-lease-fork-XXXXXX");
	if (mkdtemp(dir) == NULL) /* 0700, unpredictable */
		return -1;
	snprintf(sock, sizeof(sock), "%s/mute.sock", dir);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
	mute = socket(AF_UNIX, SOCK_STREAM, 0);
	/* Connections wait in the backlog: connect succeeds, nothing is read
	 * or answered. */
	if (mute < 0 || bind(mute, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(mute, 16) != 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	close(mute);
	unlink(sock);
	rmdir(dir);
	return 0;
}

static void admit_one(void)
{
	struct sl_call c;
	struct sl_grant g;
	sl__call_begin(&c, -1, SL_OP_CONNECT, NULL, 0);
	(void)sl__admit(&c, 1u, 1, &g); /* admitted or refused: on-error decides */
}

static void test_fork_during_a_command(void **state)
{
	(void)state;
	if (sl__redis_load() != 0)
		skip(); /* no libhiredis on this machine */
	char url[160], err[SL_ERR_MAX];
	snprintf(url, sizeof(url), "unix://%s", sock);
	struct sl_policy p;
	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, "SLUICE_CONNECT", "100/s,redis=forkkey,on-error=open", err,
				sizeof(err)) != 0 ||
	    sl_policy_parse_var(&p, "SLUICE_REDIS", url, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_dec_equal(sl__state_init_unsync(&p), 0);
	admit_one(); /* starts the lease thread */
	/* Its first command is written by now and waits for a reply that
	 * never comes (2 s), holding the I/O lock. */
	usleep(300000);
	uint64_t t0 = now_ns();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		admit_one();
		_exit(0);
	}
	int status = 0;
	pid_t got = 0;
	while ((got = waitpid(pid, &status, WNOHANG)) == 0 && now_ns() - t0 < 15000000000ull)
		usleep(20000);
	if (got == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	printf("measured: the fork child's first call ended after %.3f s\n",
	       (double)(now_ns() - t0) / 1e9);
	assert_dec_equal(got, pid); /* it ended by itself */
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	sl_policy_init(&p);
	assert_dec_equal(sl__state_init_unsync(&p), 0); /* joins the lease thread */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fork_during_a_command),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
