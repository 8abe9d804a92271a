/* SPDX-License-Identifier: MIT */
/*
 * test_shim_epoll_fork.c - a fork taken while another thread holds the
 * epoll mirror's per-fd lock (epoll.c): the child must not inherit the held
 * lock. A thread loops on epoll_ctl of one fd while the main thread forks
 * 200 times; each child calls epoll_ctl on that fd and exits. A child that
 * spins on the inherited lock is killed after 5 s and fails the test (the
 * first one ends it).
 *
 * The fork handler is registered by the shim's constructor only when the
 * environment has rules, so main() runs the test again with SLUICE_RECV set
 * (real clock, real kernel: nothing is faked here).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_assert.h"

#include "init.h"
#include "ready.h"

/* Links init.c (the constructor that registers the fork handler). */
int (*volatile const sl_test_init_anchor)(const struct sl_policy *) = sl__state_init_unsync;

#define FORKS 200

static int ep, fds[2];
static atomic_int stop;

static void *churn(void *arg)
{
	(void)arg;
	struct epoll_event e = {.events = EPOLLIN};
	while (!atomic_load(&stop)) {
		e.events ^= EPOLLOUT;
		epoll_ctl(ep, EPOLL_CTL_MOD, fds[0], &e);
	}
	return NULL;
}

/* Wait up to 5 s for pid; kill it after. Returns its status or -1. */
static int reap(pid_t pid)
{
	for (int i = 0; i < 5000; i++) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return st;
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

static void test_shim_epoll_fork_lock(void **state)
{
	(void)state;
	assert_true(sl__ready_on()); /* the epoll mirror is in use */
	ep = epoll_create1(0);
	assert_true(ep >= 0);
	assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	struct epoll_event e = {.events = EPOLLIN};
	assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &e), 0);
	pthread_t t;
	assert_dec_equal(pthread_create(&t, NULL, churn, NULL), 0);
	int hung = 0;
	for (int i = 0; i < FORKS; i++) {
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			struct epoll_event c = {.events = EPOLLIN};
			_exit(epoll_ctl(ep, EPOLL_CTL_MOD, fds[0], &c) == 0 ? 0 : 3);
		}
		int st = reap(pid);
		if (st < 0) {
			hung++;
			break; /* one is enough: a spinning child costs a core */
		}
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	assert_dec_equal(hung, 0);
	close(ep);
	close(fds[0]);
	close(fds[1]);
}

int main(int argc, char **argv)
{
	(void)argc;
	if (getenv("SLUICE_RECV") == NULL) {
		setenv("SLUICE_RECV", "1MiB/s", 1);
		execv("/proc/self/exe", argv);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shim_epoll_fork_lock),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
