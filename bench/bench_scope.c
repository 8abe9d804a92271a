/* SPDX-License-Identifier: MIT */
/*
 * bench_scope.c - the cost of one admission, process scope vs shared scope.
 *
 *   bench_scope [core [N]] single thread, clock injected: sl_limiter_acquire
 *                          on a plain limiter, on a tunable one in private
 *                          memory (what per=process uses), and on a tunable
 *                          one in a MAP_SHARED /dev/shm file (what
 *                          shared=NAME uses); ns per call, best of 5 runs.
 *   bench_scope send [N]   N one-byte send() calls on a connected loopback
 *                          UDP socket (drained every 64 calls); ns per call.
 *                          Run it under LD_PRELOAD=libsluice.so with
 *                          SLUICE_SEND=1000000000/s (never waits) with and
 *                          without ,shared=NAME to compare the two scopes
 *                          end to end (bench/bench_scope.sh does, A B A B).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "sluice_core.h"

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Best-of-5 ns per acquire on l; the injected clock moves 1 ns per call
 * (1e9 units/s, burst 1e6: every call is admitted). */
static double time_acquire(struct sl_limiter *l, long n)
{
	double best = 1e18;
	uint64_t now = 1000000000u, admitted = 0;
	for (int run = 0; run < 5; run++) {
		uint64_t t0 = mono_ns();
		for (long i = 0; i < n; i++)
			admitted += sl_limiter_acquire(l, 1, now++, 0).verdict == SL_ADMIT;
		double per = (double)(mono_ns() - t0) / (double)n;
		best = per < best ? per : best;
	}
	if (admitted != 5u * (uint64_t)n)
		fprintf(stderr, "bench_scope: %llu of %ld admitted\n", (unsigned long long)admitted,
			5 * n);
	return best;
}

static int bench_core(long n)
{
	const struct sl_params p = {.kind = SL_KIND_TOKEN,
				    .amount = 1000000000u,
				    .period_ns = 1000000000u,
				    .burst = 1000000u};
	static struct sl_limiter plain;
	static struct sl_tunable priv;
	char path[64];
	snprintf(path, sizeof(path), "/dev/shm/sluice-bench-%d", (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || ftruncate(fd, sizeof(struct sl_tunable)) != 0) {
		perror(path);
		return 1;
	}
	struct sl_tunable *shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED,
					 fd, 0);
	close(fd);
	unlink(path);
	if (shared == MAP_FAILED || sl_limiter_init(&plain, &p, 1) != SL_OK ||
	    sl_tunable_init(&priv, &p, 1) != SL_OK || sl_tunable_init(shared, &p, 1) != SL_OK)
		return 1;
	double a = time_acquire(&plain, n), b = time_acquire(&priv.head, n),
	       c = time_acquire(&shared->head, n);
	printf("core acquire, ns/call (best of 5 x %ld): plain %.2f  tunable private %.2f  "
	       "tunable /dev/shm %.2f  (shared/private %.3f)\n",
	       n, a, b, c, c / b);
	return 0;
}

static int bench_send(long n)
{
	int rx = socket(AF_INET, SOCK_DGRAM, 0), tx = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	if (bind(rx, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    getsockname(rx, (struct sockaddr *)&a, &al) != 0 ||
	    connect(tx, (struct sockaddr *)&a, sizeof(a)) != 0) {
		perror("bench_scope: socket setup");
		return 1;
	}
	fcntl(rx, F_SETFL, O_NONBLOCK);
	char b = 'x', sink[64];
	uint64_t t0 = mono_ns();
	for (long i = 0; i < n; i++) {
		if (send(tx, &b, 1, 0) != 1) {
			perror("send");
			return 1;
		}
		if ((i & 63) == 63)
			while (recv(rx, sink, sizeof(sink), 0) > 0)
				;
	}
	printf("send: %.1f ns/call over %ld calls\n", (double)(mono_ns() - t0) / (double)n, n);
	return 0;
}

int main(int argc, char **argv)
{
	long n = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
	/* No argument: the core comparison, as `make bench` runs it. */
	if (argc == 1 || strcmp(argv[1], "core") == 0)
		return bench_core(n > 0 ? n : 20000000);
	if (argc > 1 && strcmp(argv[1], "send") == 0)
		return bench_send(n > 0 ? n : 300000);
	fputs("usage: bench_scope [core|send [N]]\n", stderr);
	return 2;
}
