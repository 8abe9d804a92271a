/* SPDX-License-Identifier: MIT */
/*
 * fdrace.c - a program whose own files and its supervised sockets compete
 * for fd numbers, built with `gcc -static` by
 * tests/integration/test_supervise_fdrace.py.
 *
 *   fdrace LOW THREADS ITERS
 *
 * Opens LOW files (/dev/null) first, so the program's next open() takes a
 * number above LOW; then THREADS threads open /dev/null and THREADS threads
 * make TCP sockets, ITERS times each, each keeping its last 16 open. Every
 * fd is checked (fstat) when it is made and again when it is closed: a file
 * that became a socket, or a socket that became a file, means an fd was
 * replaced under the program. Prints one JSON line: {"low": files opened
 * first, "opens": n, "socks": n, "errors": failed calls, "wrong_new": fds
 * of the wrong kind when made, "changed": fds whose kind changed while
 * held, "low_changed": first files changed at the end, "max_sock": the
 * highest socket fd seen}.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define HOLD 16
#define LOW_MAX 4096
#define THREADS_MAX 8

enum kind { K_NONE, K_SOCK, K_FILE };

static atomic_long opens, socks, errors, wrong_new, changed, max_sock;
static int iters;

static enum kind kind_of(int fd)
{
	struct stat st;
	if (fstat(fd, &st) != 0)
		return K_NONE;
	return S_ISSOCK(st.st_mode) ? K_SOCK : S_ISCHR(st.st_mode) ? K_FILE : K_NONE;
}

static int make(enum kind want)
{
	return want == K_SOCK ? socket(AF_INET, SOCK_STREAM, 0) : open("/dev/null", O_RDONLY);
}

/* ITERS fds of kind `want`, the last HOLD of them held. */
static void *worker(void *arg)
{
	const enum kind want = (enum kind)(long)arg;
	int held[HOLD];
	for (int i = 0; i < HOLD; i++)
		held[i] = -1;
	for (int i = 0; i < iters; i++) {
		int fd = make(want);
		if (fd < 0) {
			errors++;
			continue;
		}
		if (want == K_SOCK) {
			socks++;
			long m = max_sock;
			while (fd > m && !atomic_compare_exchange_weak(&max_sock, &m, fd))
				;
		} else {
			opens++;
		}
		if (kind_of(fd) != want)
			wrong_new++;
		int k = i % HOLD;
		if (held[k] >= 0) {
			if (kind_of(held[k]) != want)
				changed++;
			close(held[k]);
		}
		held[k] = fd;
	}
	for (int i = 0; i < HOLD; i++) {
		if (held[i] >= 0) {
			if (kind_of(held[i]) != want)
				changed++;
			close(held[i]);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int low = argc > 1 ? atoi(argv[1]) : 600;
	int nt = argc > 2 ? atoi(argv[2]) : 2;
	iters = argc > 3 ? atoi(argv[3]) : 3000;
	if (low < 0 || low > LOW_MAX || nt < 1 || nt > THREADS_MAX || iters < 1) {
		fprintf(stderr, "usage: fdrace LOW(0-%d) THREADS(1-%d) ITERS\n", LOW_MAX,
			THREADS_MAX);
		return 2;
	}
	static int keep[LOW_MAX];
	int n = 0;
	while (n < low) {
		int fd = open("/dev/null", O_RDONLY);
		if (fd < 0)
			break;
		keep[n++] = fd;
	}
	pthread_t t[2 * THREADS_MAX];
	for (int i = 0; i < nt; i++) {
		pthread_create(&t[2 * i], NULL, worker, (void *)(long)K_FILE);
		pthread_create(&t[2 * i + 1], NULL, worker, (void *)(long)K_SOCK);
	}
	for (int i = 0; i < 2 * nt; i++)
		pthread_join(t[i], NULL);
	int low_changed = 0;
	for (int i = 0; i < n; i++)
		low_changed += kind_of(keep[i]) != K_FILE;
	printf("{\"low\": %d, \"opens\": %ld, \"socks\": %ld, \"errors\": %ld, \"wrong_new\": %ld, "
	       "\"changed\": %ld, \"low_changed\": %d, \"max_sock\": %ld}\n",
	       n, (long)opens, (long)socks, (long)errors, (long)wrong_new, (long)changed,
	       low_changed, (long)max_sock);
	return 0;
}
