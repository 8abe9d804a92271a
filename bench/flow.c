/* SPDX-License-Identifier: MIT */
/*
 * flow.c - the load generator and timestamping receiver of the comparison
 * benchmarks (bench/compare/run.py drives it).
 *
 * Every benchmark run pairs one throttled program with one unthrottled peer.
 * The throttled program is this binary run under the tool being measured
 * (sluice, trickle, pv in a pipe, or nothing inside a tc-shaped namespace),
 * so every tool sees exactly the same system calls: blocking send()/recv()
 * of fixed-size chunks, connect() in a loop, or a tight loop of 1-byte calls.
 * The peer records CLOCK_MONOTONIC at every read so the driver can compute
 * mean rate, the largest 100 ms window and time to first byte afterwards.
 * CLOCK_MONOTONIC is shared by all processes and network namespaces of a
 * host, so a sender and a receiver in different namespaces agree on time.
 *
 * The name lacks the bench_ prefix on purpose: scripts/run-bench.sh runs
 * every build/bench/bench_* binary, and this one only makes sense when driven.
 *
 * Modes (ADDR is a numeric IPv4 or IPv6 address; a listening mode binds port
 * 0 and prints "port N" on stdout once it listens):
 *   sink ADDR NCONN LOG            accept NCONN connections, read them all to
 *                                  EOF, log "t_ns bytes" for every read
 *   source ADDR BYTES CHUNK        accept one connection, send BYTES
 *   drain ADDR                     accept one connection, read it to EOF
 *   accepter ADDR N                accept and close N connections
 *   send ADDR PORT BYTES CHUNK [-] connect and send BYTES in CHUNK-byte
 *                                  blocking send() calls ('-': data read
 *                                  from stdin, for pv)
 *   recv ADDR PORT CHUNK LOG       connect and recv() to EOF, logging reads
 *   threads ADDR PORT NTHREADS BYTES_EACH CHUNK
 *                                  NTHREADS threads, one connection each
 *   connects ADDR PORT N LOG       N connect()+close(), logging each connect
 *   burst OP SPEC                  print "burst N": the burst sluice gives
 *                                  the rule SPEC of OP (send, recv,
 *                                  connect), defaults filled in by policy/
 *   overhead devnull ITERS         ns per 1-byte write() to /dev/null
 *   overhead send1 ITERS ADDR PORT ns per 1-byte send() on one TCP socket
 *                                  (both: median of 21 batches)
 * Every mode ends itself after 120 s (alarm) so no run can hang a benchmark.
 * Exit status 0 on success, 1 on a system error (message on stderr), 2 on
 * bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "policy.h"

#define FLOW_TIME_LIMIT_S 120
#define FLOW_MAX_CONN 64
#define FLOW_READ_BUF (64 * 1024)
#define FLOW_MAX_RECORDS (1u << 21)

/* One timestamped read or connect. */
struct flow_record {
	uint64_t t_ns;
	uint64_t bytes;
};

static struct flow_record *records;
static size_t n_records;
static uint64_t t0_ns;

static uint64_t flow_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void flow_die(const char *what)
{
	fprintf(stderr, "flow: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* Parse a non-negative decimal; exits with status 2 on anything else. */
static uint64_t flow_num(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-') {
		fprintf(stderr, "flow: not a number: '%s'\n", s);
		exit(2);
	}
	return v;
}

static void flow_record_add(uint64_t t_ns, uint64_t bytes)
{
	if (!records) {
		records = calloc(FLOW_MAX_RECORDS, sizeof *records);
		if (!records)
			flow_die("calloc");
	}
	if (n_records < FLOW_MAX_RECORDS) {
		records[n_records].t_ns = t_ns;
		records[n_records].bytes = bytes;
		n_records++;
	} else {
		/* Full: fold into the last record rather than lose bytes. */
		records[n_records - 1].t_ns = t_ns;
		records[n_records - 1].bytes += bytes;
	}
}

/* Write "t0 T0" then one "t_ns bytes" line per record. */
static void flow_log_write(const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		flow_die(path);
	fprintf(f, "t0 %llu\n", (unsigned long long)t0_ns);
	for (size_t i = 0; i < n_records; i++)
		fprintf(f, "%llu %llu\n", (unsigned long long)records[i].t_ns,
			(unsigned long long)records[i].bytes);
	if (fclose(f) != 0)
		flow_die(path);
}

static void flow_addr(const char *host, const char *port, struct sockaddr_storage *ss,
		      socklen_t *len)
{
	struct addrinfo hints, *ai;
	memset(&hints, 0, sizeof hints);
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		fprintf(stderr, "flow: address %s port %s: %s\n", host, port, gai_strerror(rc));
		exit(2);
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
}

/* Listen on host:0 with a large backlog and print "port N". */
static int flow_listen(const char *host)
{
	struct sockaddr_storage ss;
	socklen_t len;
	flow_addr(host, "0", &ss, &len);
	int fd = socket(ss.ss_family, SOCK_STREAM, 0);
	if (fd < 0)
		flow_die("socket");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&ss, len) < 0)
		flow_die("bind");
	if (listen(fd, 4096) < 0)
		flow_die("listen");
	len = sizeof ss;
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		flow_die("getsockname");
	unsigned port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
						      : ((struct sockaddr_in6 *)&ss)->sin6_port);
	printf("port %u\n", port);
	fflush(stdout);
	return fd;
}

static int flow_connect(const char *host, const char *port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	flow_addr(host, port, &ss, &len);
	int fd = socket(ss.ss_family, SOCK_STREAM, 0);
	if (fd < 0)
		flow_die("socket");
	if (connect(fd, (struct sockaddr *)&ss, len) < 0)
		flow_die("connect");
	return fd;
}

static int flow_accept(int lfd)
{
	int fd;
	do
		fd = accept(lfd, NULL, NULL);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		flow_die("accept");
	return fd;
}

/* Send exactly n bytes in blocking calls (a short send is resumed). */
static void flow_send_all(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, buf, n, 0);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			flow_die("send");
		buf += w;
		n -= (size_t)w;
	}
}

static int flow_sink(const char *host, size_t nconn, const char *log)
{
	if (nconn == 0 || nconn > FLOW_MAX_CONN) {
		fprintf(stderr, "flow: sink: 1..%d connections\n", FLOW_MAX_CONN);
		return 2;
	}
	int lfd = flow_listen(host);
	struct pollfd pfd[FLOW_MAX_CONN];
	for (size_t i = 0; i < nconn; i++) {
		pfd[i].fd = flow_accept(lfd);
		pfd[i].events = POLLIN;
		if (i == 0)
			t0_ns = flow_now_ns();
	}
	close(lfd);
	static char buf[FLOW_READ_BUF];
	size_t open_conns = nconn;
	while (open_conns > 0) {
		if (poll(pfd, nconn, -1) < 0) {
			if (errno == EINTR)
				continue;
			flow_die("poll");
		}
		for (size_t i = 0; i < nconn; i++) {
			if (pfd[i].fd < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t r = read(pfd[i].fd, buf, sizeof buf);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				close(pfd[i].fd);
				pfd[i].fd = -1;
				open_conns--;
				continue;
			}
			flow_record_add(flow_now_ns(), (uint64_t)r);
		}
	}
	flow_log_write(log);
	return 0;
}

static int flow_source(const char *host, uint64_t bytes, size_t chunk)
{
	int lfd = flow_listen(host);
	int fd = flow_accept(lfd);
	char *buf = calloc(1, chunk);
	if (!buf)
		flow_die("calloc");
	for (uint64_t sent = 0; sent < bytes; sent += chunk)
		flow_send_all(fd, buf, bytes - sent < chunk ? (size_t)(bytes - sent) : chunk);
	close(fd);
	return 0;
}

static int flow_drain(const char *host)
{
	int lfd = flow_listen(host);
	int fd = flow_accept(lfd);
	/* Wake once per 64 KiB, not once per segment: a sender of 1-byte sends
	 * then pays for its own calls, not for waking this process, which made
	 * the overhead's A/B ratios swing from 0.5 to 2.5 here. EOF still
	 * returns what is left. */
	int lowat = 65536;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat) != 0)
		flow_die("SO_RCVLOWAT");
	static char buf[FLOW_READ_BUF];
	ssize_t r;
	while ((r = read(fd, buf, sizeof buf)) != 0)
		if (r < 0 && errno != EINTR)
			flow_die("read");
	return 0;
}

static int flow_accepter(const char *host, uint64_t n)
{
	int lfd = flow_listen(host);
	for (uint64_t i = 0; i < n; i++)
		close(flow_accept(lfd));
	return 0;
}

static int flow_send(const char *host, const char *port, uint64_t bytes, size_t chunk,
		     int from_stdin)
{
	char *buf = calloc(1, chunk);
	if (!buf)
		flow_die("calloc");
	int fd = flow_connect(host, port);
	uint64_t sent = 0;
	while (sent < bytes) {
		size_t n = bytes - sent < chunk ? (size_t)(bytes - sent) : chunk;
		if (from_stdin) {
			ssize_t r = read(0, buf, n);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				flow_die("read stdin");
			if (r == 0)
				break;
			n = (size_t)r;
		}
		flow_send_all(fd, buf, n);
		sent += n;
	}
	close(fd);
	return 0;
}

static int flow_recv(const char *host, const char *port, size_t chunk, const char *log)
{
	char *buf = malloc(chunk);
	if (!buf)
		flow_die("malloc");
	int fd = flow_connect(host, port);
	t0_ns = flow_now_ns();
	for (;;) {
		ssize_t r = recv(fd, buf, chunk, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			flow_die("recv");
		if (r == 0)
			break;
		flow_record_add(flow_now_ns(), (uint64_t)r);
	}
	close(fd);
	flow_log_write(log);
	return 0;
}

struct flow_thread_arg {
	const char *host, *port;
	uint64_t bytes;
	size_t chunk;
};

static void *flow_thread_main(void *p)
{
	const struct flow_thread_arg *a = p;
	flow_send(a->host, a->port, a->bytes, a->chunk, 0);
	return NULL;
}

static int flow_threads(const char *host, const char *port, size_t nthreads, uint64_t bytes,
			size_t chunk)
{
	pthread_t tid[FLOW_MAX_CONN];
	struct flow_thread_arg arg = {host, port, bytes, chunk};
	if (nthreads == 0 || nthreads > FLOW_MAX_CONN) {
		fprintf(stderr, "flow: threads: 1..%d threads\n", FLOW_MAX_CONN);
		return 2;
	}
	for (size_t i = 0; i < nthreads; i++)
		if (pthread_create(&tid[i], NULL, flow_thread_main, &arg) != 0) {
			fprintf(stderr, "flow: pthread_create failed\n");
			return 1;
		}
	for (size_t i = 0; i < nthreads; i++)
		pthread_join(tid[i], NULL);
	return 0;
}

static int flow_connects(const char *host, const char *port, uint64_t n, const char *log)
{
	struct sockaddr_storage ss;
	socklen_t len;
	flow_addr(host, port, &ss, &len);
	t0_ns = flow_now_ns();
	for (uint64_t i = 0; i < n; i++) {
		int fd = socket(ss.ss_family, SOCK_STREAM, 0);
		if (fd < 0)
			flow_die("socket");
		if (connect(fd, (struct sockaddr *)&ss, len) < 0)
			flow_die("connect");
		flow_record_add(flow_now_ns(), 1);
		close(fd);
	}
	flow_log_write(log);
	return 0;
}

static int flow_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/*
 * Time ITERS 1-byte calls in FLOW_BATCHES equal batches and print
 * "ns_per_call X" with X the median batch's mean: a batch that a noisy
 * neighbour interrupted is an outlier and does not move the median.
 */
#define FLOW_BATCHES 21
static int flow_overhead(const char *what, uint64_t iters, const char *host, const char *port)
{
	int fd;
	int is_send = strcmp(what, "send1") == 0;
	if (is_send) {
		if (!host || !port)
			return 2;
		fd = flow_connect(host, port);
	} else if (strcmp(what, "devnull") == 0) {
		fd = open("/dev/null", O_WRONLY);
		if (fd < 0)
			flow_die("/dev/null");
	} else {
		return 2;
	}
	uint64_t per_batch = iters / FLOW_BATCHES ? iters / FLOW_BATCHES : 1;
	double ns[FLOW_BATCHES];
	char byte = 'x';
	for (int b = 0; b < FLOW_BATCHES; b++) {
		uint64_t start = flow_now_ns();
		for (uint64_t i = 0; i < per_batch; i++) {
			ssize_t w = is_send ? send(fd, &byte, 1, 0) : write(fd, &byte, 1);
			if (w != 1)
				flow_die(is_send ? "send" : "write");
		}
		ns[b] = (double)(flow_now_ns() - start) / (double)per_batch;
	}
	close(fd);
	qsort(ns, FLOW_BATCHES, sizeof ns[0], flow_cmp_double);
	printf("ns_per_call %.2f\n", ns[FLOW_BATCHES / 2]);
	return 0;
}

/* Print the burst that policy/ fills in for one rule (the targets need it). */
static int flow_burst(const char *op, const char *spec)
{
	static const char *const ops[] = {"connect", "accept", "send", "recv"};
	char err[SL_ERR_MAX];
	struct sl_rule r;
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		if (strcmp(op, ops[i]) != 0)
			continue;
		if (sl_rule_parse(&r, (enum sl_op)i, spec, "SLUICE_RULE", err, sizeof err) < 0) {
			fprintf(stderr, "flow: %s\n", err);
			return 2;
		}
		printf("burst %llu\n", (unsigned long long)r.burst);
		return 0;
	}
	return 2;
}

static int flow_usage(void)
{
	fprintf(stderr, "usage: flow sink|source|drain|accepter|send|recv|threads|connects|"
			"burst|overhead ARGS (see bench/flow.c)\n");
	return 2;
}

int main(int argc, char **argv)
{
	alarm(FLOW_TIME_LIMIT_S);
	if (argc < 3)
		return flow_usage();
	const char *m = argv[1];
	if ((!strcmp(m, "source") && argc == 5 && flow_num(argv[4]) == 0) ||
	    (!strcmp(m, "send") && argc >= 6 && flow_num(argv[5]) == 0) ||
	    (!strcmp(m, "recv") && argc == 6 && flow_num(argv[4]) == 0) ||
	    (!strcmp(m, "threads") && argc == 7 && flow_num(argv[6]) == 0)) {
		fprintf(stderr, "flow: CHUNK must be at least 1\n");
		return 2;
	}
	if (!strcmp(m, "sink") && argc == 5)
		return flow_sink(argv[2], flow_num(argv[3]), argv[4]);
	if (!strcmp(m, "source") && argc == 5)
		return flow_source(argv[2], flow_num(argv[3]), flow_num(argv[4]));
	if (!strcmp(m, "drain") && argc == 3)
		return flow_drain(argv[2]);
	if (!strcmp(m, "accepter") && argc == 4)
		return flow_accepter(argv[2], flow_num(argv[3]));
	if (!strcmp(m, "send") && (argc == 6 || (argc == 7 && !strcmp(argv[6], "-"))))
		return flow_send(argv[2], argv[3], flow_num(argv[4]), flow_num(argv[5]), argc == 7);
	if (!strcmp(m, "recv") && argc == 6)
		return flow_recv(argv[2], argv[3], flow_num(argv[4]), argv[5]);
	if (!strcmp(m, "threads") && argc == 7)
		return flow_threads(argv[2], argv[3], flow_num(argv[4]), flow_num(argv[5]),
				    flow_num(argv[6]));
	if (!strcmp(m, "connects") && argc == 6)
		return flow_connects(argv[2], argv[3], flow_num(argv[4]), argv[5]);
	if (!strcmp(m, "burst") && argc == 4)
		return flow_burst(argv[2], argv[3]);
	if (!strcmp(m, "overhead") && (argc == 4 || argc == 6))
		return flow_overhead(argv[2], flow_num(argv[3]), argc == 6 ? argv[4] : NULL,
				     argc == 6 ? argv[5] : NULL);
	return flow_usage();
}
