/* SPDX-License-Identifier: MIT */
/*
 * sigclose.c [ROUNDS] - for test_shim_sigclose.py: a SIGALRM handler closes
 * a socket whose non-blocking connect waits for a conns slot, at a random
 * instant around this thread's close of the slot's holder, which starts
 * that connect (shim/connwait.c). Prints the rounds, how many connects
 * were deferred, and how many the handler closed; exits 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t victim = -1;
static volatile sig_atomic_t closed_in_handler;

static void on_alarm(int sig)
{
	(void)sig;
	int fd = victim;
	if (fd >= 0) {
		victim = -1;
		close(fd);
		closed_in_handler++;
	}
}

static int nb_socket(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
	return s;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20000;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(l, 4096) != 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) != 0)
		return 2;
	fcntl(l, F_SETFL, fcntl(l, F_GETFL) | O_NONBLOCK);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	unsigned seed = (unsigned)getpid();
	int deferred = 0;
	for (int i = 0; i < n; i++) {
		int s1 = nb_socket(), s2 = nb_socket();
		connect(s1, (struct sockaddr *)&a, sizeof(a)); /* takes the slot */
		errno = 0;
		if (connect(s2, (struct sockaddr *)&a, sizeof(a)) != 0 && errno == EINPROGRESS)
			deferred++;
		victim = s2;
		struct itimerval it = {{0, 0}, {0, 1 + (long)(rand_r(&seed) % 40)}};
		setitimer(ITIMER_REAL, &it, NULL);
		close(s1); /* gives the slot back: s2's connect starts here */
		for (volatile int k = 0; k < (int)(rand_r(&seed) % 2000); k++)
			;
		struct itimerval off = {{0, 0}, {0, 0}};
		setitimer(ITIMER_REAL, &off, NULL);
		int fd = victim;
		victim = -1;
		if (fd >= 0)
			close(fd);
		int c;
		while ((c = accept(l, NULL, NULL)) >= 0)
			close(c);
	}
	printf("%d rounds, %d deferred, %d closed in the handler\n", n, deferred,
	       (int)closed_in_handler);
	return 0;
}
