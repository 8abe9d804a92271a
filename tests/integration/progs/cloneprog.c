/* SPDX-License-Identifier: MIT */
/*
 * cloneprog.c PORT - for test_shim_clone.py: the two clone() shapes of
 * Chromium's sandbox, then a throttled upload from a clone child.
 *
 *  1. clone(fn, stack, CLONE_VM | CLONE_VFORK | CLONE_SETTLS | SIGCHLD, ...,
 *     tls = a zeroed buffer): the child runs on a TLS of the caller's
 *     making, makes a system call through syscall() and _exits, as
 *     Chromium's chroot helper does. Its status is printed.
 *  2. clone(fn, stack, SIGCHLD): a child with memory of its own (a fork
 *     that runs no atfork handler) connects to 127.0.0.1:PORT and sends
 *     256 KiB, closes it, opens /dev/null (the same number) and writes
 *     256 KiB there; it exits 0 if all went and the file's writes took
 *     under 0.2 s (8: they were throttled as the socket's). Its status and
 *     the seconds it took are printed.
 * Output: "vm_child STATUS" and "fork_child STATUS SECONDS", one per line.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STACK (64 * 1024)

static int port;

/* On a zeroed TLS: no errno, no stdio; raw calls only. */
static int vm_child(void *arg)
{
	(void)arg;
	if (syscall(SYS_getppid) <= 0)
		_exit(3);
	_exit(0);
}

static double now_s(void);

static int fork_child(void *arg)
{
	(void)arg;
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((unsigned short)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) != 0)
		_exit(4);
	static char buf[256 * 1024];
	size_t off = 0;
	while (off < sizeof(buf)) {
		ssize_t n = send(s, buf + off, sizeof(buf) - off, 0);
		if (n <= 0)
			_exit(5);
		off += (size_t)n;
	}
	close(s);
	/* The number again, now a file: not the socket's any more. */
	int f = open("/dev/null", O_WRONLY);
	if (f != s)
		_exit(6);
	double t0 = now_s();
	for (off = 0; off < sizeof(buf);) {
		ssize_t n = write(f, buf + off, sizeof(buf) - off);
		if (n <= 0)
			_exit(7);
		off += (size_t)n;
	}
	_exit(now_s() - t0 < 0.2 ? 0 : 8);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	port = argc > 1 ? atoi(argv[1]) : 0;
	static char stack1[STACK] __attribute__((aligned(16)));
	static char stack2[STACK] __attribute__((aligned(16)));
	static char tls[STACK] __attribute__((aligned(64))); /* zeroed, as Chromium's */
	int st = -1;
	pid_t p = clone(vm_child, stack1 + STACK, CLONE_VM | CLONE_VFORK | CLONE_SETTLS | SIGCHLD,
			NULL, NULL, tls, NULL);
	if (p > 0 && waitpid(p, &st, 0) != p)
		st = -1;
	printf("vm_child %d\n", st);
	double t0 = now_s();
	p = clone(fork_child, stack2 + STACK, SIGCHLD, NULL, NULL, NULL, NULL);
	st = -1;
	if (p > 0 && waitpid(p, &st, 0) != p)
		st = -1;
	printf("fork_child %d %.3f\n", st, now_s() - t0);
	return 0;
}
