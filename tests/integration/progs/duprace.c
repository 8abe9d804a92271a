/* SPDX-License-Identifier: MIT */
/*
 * duprace.c - a close racing a dup of a socket whose connect waits for a
 * conns slot (tests/integration/test_shim_duprace.py).
 *
 *   duprace PORT ROUNDS
 *
 * Run under SLUICE_CONNS=1. Each round: connect a (takes the slot), connect
 * b non-blocking (deferred: it waits for the slot), then one thread dup()s
 * b while this one closes b, each after a spin that varies from round to
 * round so that either may come first. Then a closes (the slot frees). If
 * the dup won (it returned an fd), that fd's connect must start and
 * connect; a third connect checks that no slot was lost. Prints one line:
 * "ROUNDS rounds, W dups won, C connected, U unconnected, S slots stuck".
 */
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static struct sockaddr_in sa;
static atomic_int go, victim, result, ready;
static atomic_int spin_dup;

static int nbconnect(void)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	(void)connect(s, (struct sockaddr *)&sa, sizeof(sa));
	return s;
}

static int writable(int s, int ms)
{
	struct pollfd p = {s, POLLOUT, 0};
	return poll(&p, 1, ms) == 1 && (p.revents & POLLOUT);
}

static void spin(int n)
{
	for (volatile int k = 0; k < n; k++)
		;
}

static void *duper(void *arg)
{
	(void)arg;
	atomic_store(&ready, 1);
	while (!atomic_load(&go))
		;
	spin(atomic_load(&spin_dup));
	atomic_store(&result, dup(atomic_load(&victim)));
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: duprace PORT ROUNDS\n");
		return 2;
	}
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)atoi(argv[1]));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	const int rounds = atoi(argv[2]);
	int won = 0, connected = 0, unconnected = 0, stuck = 0;
	for (int i = 0; i < rounds; i++) {
		int a = nbconnect();
		writable(a, 2000);
		int b = nbconnect();
		atomic_store(&victim, b);
		atomic_store(&go, 0);
		atomic_store(&ready, 0);
		atomic_store(&result, -2);
		atomic_store(&spin_dup, (i % 50) * 20);
		pthread_t t;
		pthread_create(&t, NULL, duper, NULL);
		while (!atomic_load(&ready))
			;
		atomic_store(&go, 1);
		spin((i % 97) * 30);
		close(b);
		pthread_join(t, NULL);
		int d = atomic_load(&result);
		close(a);
		if (d >= 0) {
			won++;
			struct sockaddr_storage ss;
			socklen_t l = sizeof(ss);
			if (writable(d, 1500) && getpeername(d, (struct sockaddr *)&ss, &l) == 0)
				connected++;
			else
				unconnected++;
			close(d);
		}
		int c = nbconnect();
		if (!writable(c, 1500))
			stuck++;
		close(c);
	}
	printf("%d rounds, %d dups won, %d connected, %d unconnected, %d slots stuck\n", rounds,
	       won, connected, unconnected, stuck);
	return 0;
}
