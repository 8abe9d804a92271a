/* SPDX-License-Identifier: MIT */
/*
 * abprog.c - one network client for the A/B test of the two modes
 * (tests/integration/test_modes_ab.py), built twice by it: `gcc -O2`
 * (dynamic: sluice runs it in preload mode) and `gcc -static -O2`
 * (supervised mode). The same code, so any difference in what it measures
 * is a difference between the modes.
 *
 *   abprog connect6 PORT N          N blocking connects over AF_INET6 to
 *                                   [::ffff:127.0.0.1]:PORT, each closed at once
 *   abprog connect4 PORT N          the same over AF_INET to 127.0.0.1:PORT
 *   abprog upload PORT SIZE CHUNK   connect, write() SIZE pattern bytes in
 *                                   CHUNK-byte write()s (partial writes go on
 *                                   from where they stopped), close
 *   abprog upload6 PORT SIZE CHUNK  the same over AF_INET6 to [::ffff:127.0.0.1]
 *   abprog download PORT SIZE       connect, read() until SIZE bytes or EOF,
 *                                   each byte compared with the pattern
 *   abprog udp PORT N LEN           N sendto()s of LEN bytes on one AF_INET
 *                                   UDP socket to 127.0.0.1:PORT
 *   abprog threads PORT SIZE T [H]  T threads, each connects (thread i to
 *                                   127.0.0.(1 + i % H), H = 1 unless given)
 *                                   and uploads SIZE / T pattern bytes in
 *                                   64 KiB write()s
 *   abprog fds PORT SIZE K          one thread, K connections to 127.0.0.1,
 *                                   SIZE / K pattern bytes each in 64 KiB
 *                                   write()s taking the sockets in turn
 *
 * The pattern: the 8-byte little-endian word at offset 8k of a stream is
 * (k + 1) * 0x9E3779B97F4A7C15 mod 2^64, so every offset of a stream has its
 * own bytes (a lost, repeated or reordered piece shows). Each connection's
 * stream, and the UDP datagrams put end to end, start at offset 0.
 *
 * Prints one JSON line: {"mode", "elapsed": seconds (CLOCK_MONOTONIC, from
 * before the first socket to after the last close), "bytes": moved,
 * "calls": connects, write()s, read()s or sendto()s that moved something,
 * "errors": calls that failed (other than EINTR), "eintr", "bad": download
 * bytes that differ from the pattern, "slowest": the slowest thread's or
 * connection's seconds}. Exit 0 unless the arguments are wrong; the test
 * judges "errors". An alarm ends it after 60 s whatever happens.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PIECE (64u << 10) /* write size of the threads and fds modes */
#define MAX_T 64          /* most threads or connections */
#define MAX_RETRY 10000   /* most EINTR retries of one call */

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Byte `off` of the pattern. */
static unsigned char pattern_at(uint64_t off)
{
	uint64_t w = ((off >> 3) + 1) * UINT64_C(0x9E3779B97F4A7C15);
	return (unsigned char)(w >> (8 * (off & 7)));
}

static void pattern_fill(unsigned char *buf, uint64_t off, size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern_at(off + i);
}

/* Counters of one thread (or of the whole program). */
struct tally {
	unsigned long long bytes;
	long calls, errors, eintr, bad;
};

/* A stream socket of `domain`, retried on EINTR (in supervised mode a
 * signal may interrupt even socket()). -1 on failure, counted. */
static int make_socket(int domain, int type, struct tally *t)
{
	for (int k = 0; k < MAX_RETRY; k++) {
		int fd = socket(domain, type, 0);
		if (fd >= 0)
			return fd;
		if (errno != EINTR)
			break;
		t->eintr++;
	}
	t->errors++;
	return -1;
}

/* Connect fd to sa; true once connected. A connect interrupted and
 * restarted may report EALREADY, then EISCONN when it is done. */
static bool do_connect(int fd, const struct sockaddr *sa, socklen_t len, struct tally *t)
{
	for (int k = 0; k < MAX_RETRY; k++) {
		if (connect(fd, sa, len) == 0)
			return true;
		if (errno == EISCONN)
			return true;
		if (errno != EINTR && errno != EALREADY)
			break;
		t->eintr++;
		if (errno == EALREADY)
			usleep(1000);
	}
	t->errors++;
	return false;
}

/* A connected TCP socket to 127.0.0.`host`:port over AF_INET, or (v6) to
 * [::ffff:127.0.0.1]:port over AF_INET6; -1 on failure, counted. */
static int dial(int port, int host, bool v6, struct tally *t)
{
	int fd = make_socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, t);
	if (fd < 0)
		return -1;
	bool ok;
	if (v6) {
		int off = 0; /* mapped addresses need a dual-stack socket */
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
		struct sockaddr_in6 a = {.sin6_family = AF_INET6,
					 .sin6_port = htons((unsigned short)port)};
		inet_pton(AF_INET6, "::ffff:127.0.0.1", &a.sin6_addr);
		ok = do_connect(fd, (struct sockaddr *)&a, sizeof(a), t);
	} else {
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_port = htons((unsigned short)port),
					.sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)host)};
		ok = do_connect(fd, (struct sockaddr *)&a, sizeof(a), t);
	}
	if (!ok) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Write buf[0, len) to fd, going on after partial writes. False on an
 * error (counted). */
static bool write_all(int fd, const unsigned char *buf, size_t len, struct tally *t)
{
	size_t done = 0;
	for (int k = 0; done < len && k < MAX_RETRY;) {
		ssize_t n = write(fd, buf + done, len - done);
		if (n < 0 && errno == EINTR) {
			t->eintr++;
			k++;
			continue;
		}
		if (n <= 0) {
			t->errors++;
			return false;
		}
		t->calls++;
		t->bytes += (unsigned long long)n;
		done += (size_t)n;
	}
	if (done < len) {
		t->errors++;
		return false;
	}
	return true;
}

/* Upload size pattern bytes to fd in chunk-byte write()s. */
static void upload_fd(int fd, unsigned long long size, size_t chunk, unsigned char *buf,
		      struct tally *t)
{
	for (unsigned long long off = 0; off < size;) {
		size_t want = size - off < chunk ? (size_t)(size - off) : chunk;
		pattern_fill(buf, off, want);
		if (!write_all(fd, buf, want, t))
			return;
		off += want;
	}
}

struct job {
	int port, host;
	unsigned long long size;
	struct tally t;
	double elapsed;
};

static void *upload_thread(void *arg)
{
	struct job *j = arg;
	unsigned char buf[PIECE];
	double t0 = now();
	int fd = dial(j->port, j->host, false, &j->t);
	if (fd >= 0) {
		upload_fd(fd, j->size, PIECE, buf, &j->t);
		close(fd);
	}
	j->elapsed = now() - t0;
	return NULL;
}

static void add(struct tally *to, const struct tally *from)
{
	to->bytes += from->bytes;
	to->calls += from->calls;
	to->errors += from->errors;
	to->eintr += from->eintr;
	to->bad += from->bad;
}

static int usage(void)
{
	fprintf(stderr, "usage: abprog connect6|connect4 PORT N | upload|upload6 PORT SIZE CHUNK | "
			"download PORT SIZE | udp PORT N LEN | threads PORT SIZE T [H] | "
			"fds PORT SIZE K\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return usage();
	const char *mode = argv[1];
	int port = atoi(argv[2]);
	unsigned long long a3 = strtoull(argv[3], NULL, 10);
	unsigned long long a4 = argc > 4 ? strtoull(argv[4], NULL, 10) : 0;
	unsigned long long a5 = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;
	if (port <= 0 || port > 65535)
		return usage();
	alarm(60);
	static unsigned char buf[1u << 20];
	struct tally t = {0};
	double slowest = 0, t0 = now();
	if (strcmp(mode, "connect6") == 0 || strcmp(mode, "connect4") == 0) {
		bool v6 = mode[7] == '6';
		for (unsigned long long i = 0; i < a3; i++) {
			double c0 = now();
			int fd = dial(port, 1, v6, &t);
			if (fd >= 0) {
				t.calls++;
				close(fd);
			}
			double took = now() - c0;
			slowest = took > slowest ? took : slowest;
		}
	} else if ((strcmp(mode, "upload") == 0 || strcmp(mode, "upload6") == 0) && argc == 5) {
		size_t chunk = a4 == 0 ? 1 : a4 > sizeof(buf) ? sizeof(buf) : (size_t)a4;
		int fd = dial(port, 1, mode[6] == '6', &t);
		if (fd >= 0) {
			upload_fd(fd, a3, chunk, buf, &t);
			close(fd);
		}
	} else if (strcmp(mode, "download") == 0) {
		int fd = dial(port, 1, false, &t);
		for (int k = 0; fd >= 0 && t.bytes < a3 && k < 10000000;) {
			unsigned long long left = a3 - t.bytes;
			size_t want = left < 256u << 10 ? (size_t)left : 256u << 10;
			ssize_t n = read(fd, buf, want);
			if (n < 0 && errno == EINTR) {
				t.eintr++;
				k++;
				continue;
			}
			if (n < 0)
				t.errors++;
			if (n <= 0)
				break;
			for (ssize_t i = 0; i < n; i++)
				t.bad += buf[i] != pattern_at(t.bytes + (uint64_t)i);
			t.calls++;
			t.bytes += (unsigned long long)n;
		}
		if (fd >= 0)
			close(fd);
	} else if (strcmp(mode, "udp") == 0 && argc == 5) {
		size_t len = a4 > 65507 ? 65507 : (size_t)a4;
		int fd = make_socket(AF_INET, SOCK_DGRAM, &t);
		struct sockaddr_in a = {.sin_family = AF_INET,
					.sin_port = htons((unsigned short)port),
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		for (unsigned long long i = 0; fd >= 0 && i < a3; i++) {
			pattern_fill(buf, i * len, len);
			ssize_t n = -1;
			for (int k = 0; k < MAX_RETRY; k++) {
				n = sendto(fd, buf, len, 0, (struct sockaddr *)&a, sizeof(a));
				if (n >= 0 || errno != EINTR)
					break;
				t.eintr++;
			}
			if (n != (ssize_t)len) {
				t.errors++;
				continue;
			}
			t.calls++;
			t.bytes += (unsigned long long)n;
		}
		if (fd >= 0)
			close(fd);
	} else if (strcmp(mode, "threads") == 0 && (argc == 5 || argc == 6)) {
		static struct job jobs[MAX_T];
		static pthread_t tids[MAX_T];
		unsigned long long n = a4 < 1 ? 1 : a4 > MAX_T ? MAX_T : a4;
		int hosts = a5 < 1 ? 1 : a5 > 254 ? 254 : (int)a5;
		for (unsigned long long i = 0; i < n; i++) {
			jobs[i] = (struct job){.port = port,
					       .host = 1 + (int)(i % (unsigned)hosts),
					       .size = a3 / n + (i < a3 % n)};
			if (pthread_create(&tids[i], NULL, upload_thread, &jobs[i]) != 0) {
				t.errors++;
				n = i;
				break;
			}
		}
		for (unsigned long long i = 0; i < n; i++) {
			pthread_join(tids[i], NULL);
			add(&t, &jobs[i].t);
			slowest = jobs[i].elapsed > slowest ? jobs[i].elapsed : slowest;
		}
	} else if (strcmp(mode, "fds") == 0 && argc == 5) {
		int fds[MAX_T];
		unsigned long long off[MAX_T], size[MAX_T];
		unsigned long long n = a4 < 1 ? 1 : a4 > MAX_T ? MAX_T : a4;
		for (unsigned long long i = 0; i < n; i++) {
			fds[i] = dial(port, 1, false, &t);
			off[i] = 0;
			size[i] = a3 / n + (i < a3 % n);
		}
		/* The sockets in turn, one 64 KiB write() each, until all are done
		 * (at most SIZE / 64 KiB + K rounds). */
		for (bool more = true; more;) {
			more = false;
			for (unsigned long long i = 0; i < n; i++) {
				if (fds[i] < 0 || off[i] >= size[i])
					continue;
				unsigned long long left = size[i] - off[i];
				size_t want = left < PIECE ? (size_t)left : PIECE;
				pattern_fill(buf, off[i], want);
				if (write_all(fds[i], buf, want, &t)) {
					off[i] += want;
				} else {
					close(fds[i]);
					fds[i] = -1;
				}
				more = more || (fds[i] >= 0 && off[i] < size[i]);
			}
		}
		for (unsigned long long i = 0; i < n; i++)
			if (fds[i] >= 0)
				close(fds[i]);
	} else {
		return usage();
	}
	double el = now() - t0;
	printf("{\"mode\": \"%s\", \"elapsed\": %.6f, \"bytes\": %llu, \"calls\": %ld, "
	       "\"errors\": %ld, \"eintr\": %ld, \"bad\": %ld, \"slowest\": %.6f}\n",
	       mode, el, t.bytes, t.calls, t.errors, t.eintr, t.bad, slowest);
	return 0;
}
