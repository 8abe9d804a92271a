/* SPDX-License-Identifier: MIT */
/*
 * test_shim_vfork.c - a child that shares our memory (vfork, clone with
 * CLONE_VM) and closes or dup2()s fds before its exec or _exit leaves the
 * parent's tables as they were (shim/vfork.h).
 *
 * What CPython's subprocess does: vfork, then close_range(3, ~0U, 0) and
 * dup2 in the child. Before the fix, the child's wrappers forgot the
 * parent's epoll registrations (the event of a pipe registered by the
 * parent was then dropped by epoll_wait, which waited on: asyncio hung) and
 * released the parent's conns slots.
 *
 * Real kernel, real clock. main() runs the tests again with rules in the
 * environment (a conns rule on loopback and a never-limiting receive rule),
 * so that the constructor makes the shim active.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_assert.h"

#include "fd.h"
#include "init.h"
#include "ready.h"
#include "vfork.h"

/* Links init.c (the constructor that reads the environment). */
int (*volatile const sl_test_init_anchor)(const struct sl_policy *) = sl__state_init_unsync;

/* What a child does to every fd from 3 up before it "execs". */
enum how { CLOSE_RANGE, CLOSE_EACH, DUP2_OVER, SYSCALL_CLOSE_RANGE };

static void child_closes(enum how how, int hi)
{
	switch (how) {
	case CLOSE_RANGE:
		close_range(3, ~0U, 0);
		break;
	case CLOSE_EACH:
		for (int fd = 3; fd <= hi; fd++)
			close(fd);
		break;
	case DUP2_OVER: /* what subprocess does for stdin/stdout: over every fd */
		for (int fd = 3; fd <= hi; fd++)
			dup2(0, fd);
		break;
	case SYSCALL_CLOSE_RANGE:
		syscall(SYS_close_range, 3, ~0U, 0);
		break;
	}
}

/* A pipe registered in an epoll set by the parent; a vfork child closes
 * everything; the parent's epoll_wait must still see the pipe's event,
 * with the data it registered. */
static void epoll_survives(enum how how)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	assert_true(ep >= 0);
	int p[2];
	assert_dec_equal(pipe2(p, O_CLOEXEC), 0);
	struct epoll_event e = {.events = EPOLLIN, .data.u64 = 0x1234567890ull};
	assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &e), 0);
	int hi = ep > p[1] ? ep : p[1];
	pid_t pid = vfork();
	if (pid == 0) {
		child_closes(how, hi);
		_exit(0);
	}
	assert_true(pid > 0);
	assert_dec_equal(sl__vforked, 0); /* the parent is not the child */
	int st;
	assert_dec_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_dec_equal(write(p[1], "x", 1), 1);
	struct epoll_event got[4];
	int n = epoll_wait(ep, got, 4, 2000);
	assert_dec_equal(n, 1);
	assert_true(got[0].data.u64 == 0x1234567890ull);
	assert_true(got[0].events & EPOLLIN);
	close(p[0]);
	close(p[1]);
	close(ep);
}

static void test_vfork_close_range_keeps_epoll(void **state)
{
	(void)state;
	assert_true(sl__ready_on()); /* the epoll mirror is in use */
	epoll_survives(CLOSE_RANGE);
}

static void test_vfork_close_keeps_epoll(void **state)
{
	(void)state;
	epoll_survives(CLOSE_EACH);
}

static void test_vfork_dup2_keeps_epoll(void **state)
{
	(void)state;
	epoll_survives(DUP2_OVER);
}

static void test_vfork_syscall_close_range_keeps_epoll(void **state)
{
	(void)state;
	epoll_survives(SYSCALL_CLOSE_RANGE);
}

/* A loopback listener; its port in *port. */
static int listener(in_port_t *port)
{
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(l >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_dec_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_dec_equal(listen(l, 8), 0);
	socklen_t len = sizeof(a);
	assert_dec_equal(getsockname(l, (struct sockaddr *)&a, &len), 0);
	*port = a.sin_port;
	return l;
}

static int dial(in_port_t port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(s >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = port,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	assert_dec_equal(connect(s, (struct sockaddr *)&a, sizeof(a)), 0);
	return s;
}

/* The parent's connection holds the one conns slot; a vfork child closes
 * it (its own copy) and dup2()s over it: the parent's fd still holds the
 * slot, so a second connect is refused (action=reject) until the parent
 * closes its own. */
static void test_vfork_keeps_conns_slot(void **state)
{
	(void)state;
	in_port_t port;
	int l = listener(&port);
	int c = dial(port);
	assert_true(atomic_load(&sl__fdbits[c]) & SL_FDB_CONN);
	for (int how = CLOSE_RANGE; how <= SYSCALL_CLOSE_RANGE; how++) {
		pid_t pid = vfork();
		if (pid == 0) {
			child_closes((enum how)how, c);
			_exit(0);
		}
		assert_true(pid > 0);
		assert_dec_equal(waitpid(pid, NULL, 0), pid);
		assert_true(atomic_load(&sl__fdbits[c]) & SL_FDB_CONN);
	}
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = port,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	errno = 0;
	assert_dec_equal(connect(s, (struct sockaddr *)&a, sizeof(a)), -1);
	assert_int_not_equal(errno, 0);
	close(s);
	close(c); /* the slot is free again */
	int d = dial(port);
	close(d);
	close(l);
}

static char stack[64 * 1024] __attribute__((aligned(16)));
static int clone_child(void *arg)
{
	child_closes(CLOSE_RANGE, *(int *)arg);
	return 0;
}

/* clone(CLONE_VM | CLONE_VFORK), as posix_spawn implementations do: the
 * wrapper notes it, and the child (getpid() differs) changes nothing. */
static void test_clone_vm_keeps_epoll(void **state)
{
	(void)state;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	int p[2];
	assert_dec_equal(pipe2(p, O_CLOEXEC), 0);
	struct epoll_event e = {.events = EPOLLIN, .data.u64 = 77};
	assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &e), 0);
	int hi = ep > p[1] ? ep : p[1];
	pid_t pid = clone(clone_child, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD,
			  &hi);
	assert_true(pid > 0);
	assert_dec_equal(waitpid(pid, NULL, 0), pid);
	assert_true(atomic_load(&sl__vm_shared) != 0);
	assert_false(sl__vm_child()); /* in the parent: its own pid */
	assert_dec_equal(write(p[1], "x", 1), 1);
	struct epoll_event got;
	assert_dec_equal(epoll_wait(ep, &got, 1, 2000), 1);
	assert_true(got.data.u64 == 77);
	/* The parent's own close still forgets (its tables are its own). */
	close(p[0]);
	assert_dec_equal(atomic_load(&sl__fdbits[p[0]]), 0);
	close(p[1]);
	close(ep);
}

/* A fork child is not a memory-sharing child, even once one existed: its
 * close forgets in its own tables. */
static void test_fork_child_is_not_vm_child(void **state)
{
	(void)state;
	pid_t pid = fork();
	if (pid == 0)
		_exit(sl__vm_child() ? 3 : 0);
	int st;
	assert_dec_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_dec_equal(WEXITSTATUS(st), 0);
}

int main(int argc, char **argv)
{
	(void)argc;
	if (getenv("SLUICE_CONNS") == NULL) {
		setenv("SLUICE_CONNS", "1,to=127.0.0.1,action=reject", 1);
		setenv("SLUICE_RECV", "10GB/s", 1);
		execv("/proc/self/exe", argv);
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vfork_close_range_keeps_epoll),
		cmocka_unit_test(test_vfork_close_keeps_epoll),
		cmocka_unit_test(test_vfork_dup2_keeps_epoll),
		cmocka_unit_test(test_vfork_syscall_close_range_keeps_epoll),
		cmocka_unit_test(test_vfork_keeps_conns_slot),
		cmocka_unit_test(test_clone_vm_keeps_epoll),
		cmocka_unit_test(test_fork_child_is_not_vm_child),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
