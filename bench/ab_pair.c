/* SPDX-License-Identifier: MIT */
/*
 * ab_pair.c - one side of a wall-clock A/B run in long-lived processes
 * (bench/ab_pair.py drives several at once, one per library or none).
 *
 *   ab_pair PORT    connect to 127.0.0.1:PORT (a `flow drain`), then for
 *                   each line "N" on stdin make N 1-byte blocking send()
 *                   calls and print "NS" (nanoseconds per call) on stdout
 *
 * The driver asks each process for one batch in turn, so the processes'
 * batches interleave in time and a noisy moment of the machine hits them
 * all; a process is started once, so its start-up, its address-space
 * layout and its connection's set-up are the same for all its batches.
 * Ends on EOF, on an error (exit 1), or after 600 s (alarm). Loopback only.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define AB_TIME_LIMIT_S 600
#define AB_MAX_CALLS 10000000UL

static uint64_t ab_now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: ab_pair PORT (then a call count per line on stdin)\n");
		return 2;
	}
	alarm(AB_TIME_LIMIT_S);
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)atoi(argv[1])),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	const int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		perror("ab_pair: connect");
		return 1;
	}
	char line[64];
	const char byte = 'x';
	while (fgets(line, sizeof line, stdin) != NULL) {
		const unsigned long n = strtoul(line, NULL, 10);
		if (n == 0 || n > AB_MAX_CALLS) {
			fprintf(stderr, "ab_pair: bad count %s", line);
			return 2;
		}
		const uint64_t t0 = ab_now_ns();
		for (unsigned long i = 0; i < n; i++) {
			if (send(fd, &byte, 1, 0) != 1) {
				perror("ab_pair: send");
				return 1;
			}
		}
		printf("%.3f\n", (double)(ab_now_ns() - t0) / (double)n);
		fflush(stdout);
	}
	close(fd);
	return 0;
}
