/* SPDX-License-Identifier: MIT */
/*
 * test_shim.c - the preload shim's wrappers with fake libc functions and an
 * injected clock: exact piece sequences of a throttled send, refusals and
 * their errnos, errno preservation, pass-through of unmatched fds, receive
 * caps, partial transfers, EINTR, max-delay, conns slots across dup/close,
 * refused accepts, dry-run and the SLUICE_STATS line.
 *
 * The wrappers are linked into this binary from the shim archive, so calling
 * send() here calls the shim. struct sl_real's send/recv/connect/... slots
 * are pointed at fakes that record (fake time, length) and move no data;
 * sl__clock_ns and sl__sleep_until are pointed at a fake clock that a sleep
 * advances to its deadline at once. The fds are real loopback TCP sockets
 * (made with the real functions before the fakes are installed), because
 * classification asks the kernel what an fd is.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_shim.h"

#define MS 1000000ull
#define SEC 1000000000ull
#define T0 (5 * SEC)
#define MAX_EVENTS 512

/* ---- fakes -------------------------------------------------------------- */

struct event {
	uint64_t t;
	size_t len;
};

static struct event events[MAX_EVENTS];
static int n_events;
static ssize_t short_at_len = -1; /* a piece this long returns half */
static int n_connects, n_accepts;
static int accept_fd = -1;
static int accept_flags; /* the flags the fake accept4 last saw */

static ssize_t record(size_t len)
{
	assert_true(n_events < MAX_EVENTS);
	events[n_events].t = fake_now;
	events[n_events].len = len;
	n_events++;
	if (short_at_len >= 0 && (size_t)short_at_len == len)
		return (ssize_t)len / 2;
	return (ssize_t)len;
}

static ssize_t fake_send(int fd, const void *b, size_t len, int flags)
{
	(void)fd, (void)b, (void)flags;
	return record(len);
}

static int sendto_flags[MAX_EVENTS]; /* flags, and 1 << 30 if an address came */

static ssize_t fake_sendto(int fd, const void *b, size_t len, int flags, const struct sockaddr *to,
			   socklen_t tolen)
{
	(void)fd, (void)b, (void)tolen;
	sendto_flags[n_events] = flags | (to != NULL ? 1 << 30 : 0);
	return record(len);
}

static ssize_t fake_write(int fd, const void *b, size_t len)
{
	(void)fd, (void)b;
	return record(len);
}

static ssize_t fake_recv(int fd, void *b, size_t len, int flags)
{
	(void)fd, (void)flags;
	memset(b, 'r', len);
	return record(len);
}

static int fake_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	(void)fd, (void)sa, (void)len;
	n_connects++;
	return 0;
}

static int fake_accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	(void)fd;
	n_accepts++;
	accept_flags = flags;
	if (sa != NULL && len == NULL) { /* as the kernel */
		errno = EFAULT;
		return -1;
	}
	struct sockaddr_in in = {.sin_family = AF_INET,
				 .sin_port = htons(4000),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (sa != NULL && len != NULL) {
		memcpy(sa, &in, *len < sizeof(in) ? *len : sizeof(in));
		*len = sizeof(in);
	}
	return accept_fd;
}

/* ---- fixture -------------------------------------------------------------- */

static void on_signal(int sig)
{
	(void)sig;
}

/* Install a handler for sig, with SA_RESTART if restart, or SIG_DFL. */
static void handle(int sig, bool on, bool restart)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on ? on_signal : SIG_DFL;
	sa.sa_flags = restart ? SA_RESTART : 0;
	assert_dec_equal(sigaction(sig, &sa, NULL), 0);
}

struct fix {
	int lst, cli, srv; /* a connected loopback TCP pair and its listener */
	int pipefd[2];
	struct sl_real saved;
};

static int setup(void **state)
{
	static struct fix f;
	shim_setup(&f.saved, T0);
	n_events = n_connects = n_accepts = 0;
	short_at_len = -1;
	/* A handler without SA_RESTART: a signal in a wait is EINTR (see
	 * test_shim_sa_restart for the other case). */
	handle(SIGUSR2, true, false);
	struct sockaddr_in in;
	loopback_pair(&f.lst, &f.cli, &f.srv, &in);
	assert_dec_equal(pipe(f.pipefd), 0);
	sl__real.send = fake_send;
	sl__real.sendto = fake_sendto;
	sl__real.write = fake_write;
	sl__real.recv = fake_recv;
	sl__real.connect = fake_connect;
	sl__real.accept4 = fake_accept4;
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	shim_teardown(&f->saved);
	handle(SIGUSR2, false, false);
	close(f->lst);
	close(f->cli);
	close(f->srv);
	close(f->pipefd[0]);
	close(f->pipefd[1]);
	return 0;
}

static void expect_event(int i, uint64_t t, size_t len)
{
	assert_true(i < n_events);
	assert_dec_equal(events[i].t, t);
	assert_dec_equal(events[i].len, len);
}

/* ---- tests ---------------------------------------------------------------- */

/* 10000 bytes at 1000 B/s, burst 1000: ten pieces of 1000, one a second,
 * and the full count returned. */
static void test_shim_send_pieces(void **state)
{
	struct fix *f = *state;
	static char buf[10000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B");
	assert_dec_equal(send(f->cli, buf, sizeof(buf), 0), 10000);
	assert_dec_equal(n_events, 10);
	for (int i = 0; i < 10; i++)
		expect_event(i, T0 + (uint64_t)i * SEC, 1000);
	/* write() on the same socket shares the bucket: 500 more bytes are due
	 * half a second after the last piece. */
	assert_dec_equal(write(f->cli, buf, 500), 500);
	expect_event(10, T0 + 9500 * MS, 500);
}

/* A short piece ends the call with the true count; the unsent part of the
 * piece is refunded, so the next call goes out without waiting. */
static void test_shim_send_partial(void **state)
{
	struct fix *f = *state;
	static char buf[3000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B");
	short_at_len = 1000;
	assert_dec_equal(send(f->cli, buf, sizeof(buf), 0), 500);
	assert_dec_equal(n_events, 1);
	short_at_len = -1;
	assert_dec_equal(send(f->cli, buf, 500, 0), 500);
	expect_event(1, T0, 500);
}

/* A signal during the wait for the second piece: the first piece's count is
 * returned. A signal while nothing was sent: -1/EINTR, nothing sent, and the
 * reservation given back. */
static void test_shim_send_eintr(void **state)
{
	struct fix *f = *state;
	static char buf[3000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B");
	fake_sleep_eintr_at = 0;
	assert_dec_equal(send(f->cli, buf, sizeof(buf), 0), 1000);
	assert_dec_equal(n_events, 1);
	errno = 0;
	fake_sleep_eintr_at = 1;
	assert_dec_equal(send(f->cli, buf, 100, 0), -1);
	assert_dec_equal(errno, EINTR);
	assert_dec_equal(n_events, 1);
	/* Both interrupted reservations were given back: the bucket holds only
	 * the first piece, so 100 more bytes are due 100 ms after T0. */
	assert_dec_equal(send(f->cli, buf, 100, 0), 100);
	expect_event(1, T0 + 100 * MS, 100);
}

/* max-delay: a wait longer than it becomes the rule's refusal (EAGAIN for
 * send by default, or errno=), at once and with nothing sent. */
static void test_shim_send_max_delay(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,max-delay=500ms,errno=ENOBUFS");
	assert_dec_equal(send(f->cli, buf, 1000, 0), 1000);
	errno = 0;
	assert_dec_equal(send(f->cli, buf, 1000, 0), -1);
	assert_dec_equal(errno, ENOBUFS);
	assert_dec_equal(n_events, 1);
	assert_dec_equal(n_sleeps, 0);
	fake_now += 600 * MS; /* 600 ms later 400 ms remain: < max-delay */
	assert_dec_equal(send(f->cli, buf, 1000, 0), 1000);
	expect_event(1, T0 + SEC, 1000);
}

/* errno is preserved by a throttled call that succeeds. */
static void test_shim_errno_preserved(void **state)
{
	struct fix *f = *state;
	static char buf[2000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B");
	errno = 4242;
	assert_dec_equal(send(f->cli, buf, sizeof(buf), 0), 2000);
	assert_dec_equal(errno, 4242);
	errno = 4343;
	assert_dec_equal(recv(f->cli, buf, 10, 0), 10);
	assert_dec_equal(errno, 4343);
}

/* A pipe and a socket no rule matches go straight to libc, whole. */
static void test_shim_unmatched_passthrough(void **state)
{
	struct fix *f = *state;
	static char buf[10000];
	use_policy("SLUICE_RECV", "10B/s");
	assert_dec_equal(write(f->pipefd[1], buf, sizeof(buf)), 10000);
	assert_dec_equal(write(f->pipefd[1], buf, sizeof(buf)), 10000);
	assert_dec_equal(send(f->cli, buf, sizeof(buf), 0), 10000);
	assert_dec_equal(n_events, 3);
	assert_dec_equal(n_sleeps, 0);
	expect_event(2, T0, 10000);
	/* Classified once: the fast path's pass bits are set. */
	assert_true(sl__fd_pass(f->pipefd[1], SL_K_SEND));
	assert_true(sl__fd_pass(f->pipefd[1], SL_K_RECV));
	assert_true(sl__fd_pass(f->cli, SL_K_SEND));
	assert_false(sl__fd_pass(f->cli, SL_K_RECV));
	/* close forgets the classification. */
	int d = dup(f->pipefd[1]);
	assert_true(write(d, buf, 1) == 1);
	assert_true(sl__fd_pass(d, SL_K_SEND));
	close(d);
	assert_false(sl__fd_pass(d, SL_K_SEND));
}

/* A connected TCP socket whose peer no rule's to= fits passes straight
 * through, both ways, from its first call: the wrapper's pass bits, not
 * the general path on every call. A UDP socket keeps its candidates (a
 * sendto may name a peer that fits), and a rule that fits the TCP peer
 * still polices it. */
static int udp_self(void);

static void test_shim_unmatched_peer_passes(void **state)
{
	struct fix *f = *state;
	static char buf[100];
	use_policy("SLUICE_RULES", "send:10B/s,burst=10B,to=10.0.0.0/8;"
				   "recv:10B/s,burst=10B,to=10.0.0.0/8");
	assert_dec_equal(send(f->cli, buf, sizeof(buf), 0), 100);
	assert_dec_equal(send(f->cli, buf, sizeof(buf), 0), 100);
	assert_dec_equal(n_sleeps, 0);
	assert_true(sl__fd_pass(f->cli, SL_K_SEND));
	assert_true(sl__fd_pass(f->cli, SL_K_RECV));
	int u = udp_self();
	assert_dec_equal(send(u, buf, 1, 0), 1);
	assert_false(sl__fd_pass(u, SL_K_SEND));
	close(u);
	use_policy("SLUICE_SEND", "10B/s,burst=10B,to=127.0.0.0/8");
	assert_dec_equal(send(f->cli, buf, sizeof(buf), 0), 100);
	assert_false(sl__fd_pass(f->cli, SL_K_SEND));
	assert_true(n_sleeps > 0);
}

/* A receive asks the kernel for no more than the bucket holds, and the next
 * one waits until at least one byte is available. MSG_PEEK is free. */
static void test_shim_recv_cap(void **state)
{
	struct fix *f = *state;
	static char buf[5000];
	use_policy("SLUICE_RECV", "1000B/s,burst=1000B");
	assert_dec_equal(recv(f->cli, buf, 5000, MSG_PEEK), 5000);
	assert_dec_equal(recv(f->cli, buf, 5000, 0), 1000);
	expect_event(1, T0, 1000);
	assert_dec_equal(n_sleeps, 0);
	ssize_t r = recv(f->cli, buf, 5000, 0);
	assert_true(r >= 1 && r < 1000);
	assert_dec_equal(n_sleeps, 1);
	assert_true(events[2].t > T0);
	assert_true(events[2].t <= T0 + 2 * MS);
}

/* A blocking receive under a delay rule waits for 2 ms of the rate (at
 * most half the burst, never more than it asks for), not for one byte: 1 MB/s
 * with a 10 KB burst; the burst goes at once, then 2000 bytes 2 ms later,
 * not 1 byte 1 µs later (a receiver at full CPU, a few bytes per call). */
static void test_shim_recv_gathers(void **state)
{
	struct fix *f = *state;
	static char buf[16384];
	use_policy("SLUICE_RECV", "1MB/s,burst=10KB");
	assert_dec_equal(recv(f->cli, buf, sizeof(buf), 0), 10000);
	assert_dec_equal(recv(f->cli, buf, sizeof(buf), 0), 2000);
	assert_dec_equal(n_sleeps, 1);
	expect_event(1, T0 + 2 * MS, 2000);
	/* Asking for less than that waits for what it asks. */
	assert_dec_equal(recv(f->cli, buf, 100, 0), 100);
	expect_event(2, T0 + 2 * MS + 100 * 1000, 100);
}

/* Gathering gives way: with max-delay=1ms the 2 ms wait for 2000 bytes
 * would be refused, so the receive waits for one byte, as the limit allows;
 * a window's units come back only at its next window, so a fixed window
 * hands over the 1 byte it has at once rather than waiting for 2 ms worth. */
static void test_shim_recv_gather_limits(void **state)
{
	struct fix *f = *state;
	static char buf[16384];
	use_policy("SLUICE_RECV", "1MB/s,burst=10KB,max-delay=1ms");
	assert_dec_equal(recv(f->cli, buf, sizeof(buf), 0), 10000);
	assert_dec_equal(recv(f->cli, buf, sizeof(buf), 0), 1);
	expect_event(1, T0 + 1000, 1);
	use_policy("SLUICE_RECV", "10000B/4s,algo=fixed");
	n_sleeps = 0;
	assert_dec_equal(recv(f->cli, buf, 9999, 0), 9999);
	assert_dec_equal(recv(f->cli, buf, sizeof(buf), 0), 1);
	assert_dec_equal(n_sleeps, 0);
}

/* A connect refused by a rate rule fails with the configured errno and
 * never reaches the real connect. */
static void test_shim_connect_reject(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_CONNECT", "1/s,action=reject,errno=ENETUNREACH");
	struct sockaddr_in in = {.sin_family = AF_INET,
				 .sin_port = htons(9),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int s1 = socket(AF_INET, SOCK_STREAM, 0), s2 = socket(AF_INET, SOCK_STREAM, 0);
	assert_dec_equal(connect(s1, (struct sockaddr *)&in, sizeof(in)), 0);
	errno = 0;
	assert_dec_equal(connect(s2, (struct sockaddr *)&in, sizeof(in)), -1);
	assert_dec_equal(errno, ENETUNREACH);
	assert_dec_equal(n_connects, 1);
	fake_now += SEC;
	assert_dec_equal(connect(s2, (struct sockaddr *)&in, sizeof(in)), 0);
	assert_dec_equal(n_connects, 2);
	close(s1);
	close(s2);
	(void)f;
}

/* A connect on a TCP socket already connected (or connecting) is the
 * kernel's to answer: neither charged nor counted (a program polling
 * connect() until EISCONN would pay a token per call; a full conns limit
 * would wait for its own slot). f->cli was connected for real in setup. */
static void test_shim_connect_again_passes(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_RULES", "connect:1/s,burst=1,action=reject;conns:1");
	struct sockaddr_in peer;
	socklen_t l = sizeof(peer);
	assert_dec_equal(getpeername(f->cli, (struct sockaddr *)&peer, &l), 0);
	for (int i = 0; i < 3; i++)
		assert_dec_equal(connect(f->cli, (struct sockaddr *)&peer, sizeof(peer)), 0);
	assert_dec_equal(n_connects, 3);
	assert_dec_equal(n_sleeps, 0);
	assert_dec_equal(test_stats(0)->calls, 0);
	assert_dec_equal(test_stats(1)->calls, 0);
	/* A fresh socket is still charged: the token goes, the next is refused. */
	int s1 = socket(AF_INET, SOCK_STREAM, 0), s2 = socket(AF_INET, SOCK_STREAM, 0);
	assert_dec_equal(connect(s1, (struct sockaddr *)&peer, sizeof(peer)), 0);
	errno = 0;
	assert_dec_equal(connect(s2, (struct sockaddr *)&peer, sizeof(peer)), -1);
	assert_dec_equal(errno, ECONNREFUSED);
	assert_dec_equal(test_stats(0)->calls, 2);
	close(s1);
	close(s2);
}

/* conns=1 with reject: the slot is held until the last fd of the
 * connection (a dup too) is closed. */
static void test_shim_conns_dup_close(void **state)
{
	(void)state;
	use_policy("SLUICE_CONNS", "1,action=reject");
	struct sockaddr_in in = {.sin_family = AF_INET,
				 .sin_port = htons(9),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int s1 = socket(AF_INET, SOCK_STREAM, 0), s2 = socket(AF_INET, SOCK_STREAM, 0);
	assert_dec_equal(connect(s1, (struct sockaddr *)&in, sizeof(in)), 0);
	int d = fcntl(s1, F_DUPFD_CLOEXEC, 0);
	assert_true(d >= 0);
	errno = 0;
	assert_dec_equal(connect(s2, (struct sockaddr *)&in, sizeof(in)), -1);
	assert_dec_equal(errno, ECONNREFUSED);
	close(s1);
	assert_dec_equal(connect(s2, (struct sockaddr *)&in, sizeof(in)), -1);
	int d2 = dup2(d, 200);
	assert_dec_equal(d2, 200);
	close(d);
	assert_dec_equal(connect(s2, (struct sockaddr *)&in, sizeof(in)), -1);
	close(200);
	assert_dec_equal(connect(s2, (struct sockaddr *)&in, sizeof(in)), 0);
	assert_dec_equal(n_connects, 2);
	close(s2);
}

/* A refused accept takes the connection and resets it: the program sees
 * ECONNABORTED and the accepted fd is closed. */
static void test_shim_accept_reject(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_ACCEPT", "1/s,action=reject");
	accept_fd = socket(AF_INET, SOCK_STREAM, 0);
	int r = accept4(f->lst, NULL, NULL, 0);
	assert_dec_equal(r, accept_fd);
	close(accept_fd);
	accept_fd = socket(AF_INET, SOCK_STREAM, 0);
	errno = 0;
	assert_dec_equal(accept4(f->lst, NULL, NULL, 0), -1);
	assert_dec_equal(errno, ECONNABORTED);
	assert_dec_equal(n_accepts, 2);
	assert_dec_equal(fcntl(accept_fd, F_GETFD), -1); /* closed by the shim */
	assert_dec_equal(errno, EBADF);
}

/* dry-run never waits nor refuses; the stats line counts what would have
 * been delayed. */
static void test_shim_dry_run_stats(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	char path[] = "/tmp/test_shim_stats_XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	char val[64];
	snprintf(val, sizeof(val), "%s", path);
	use_policy2("SLUICE_SEND", "1000B/s,burst=1000B,action=dry-run", "SLUICE_STATS", val);
	for (int i = 0; i < 3; i++)
		assert_dec_equal(send(f->cli, buf, 1000, 0), 1000);
	assert_dec_equal(n_sleeps, 0);
	assert_dec_equal(n_events, 3);
	sl__real.write = f->saved.write; /* the stats line goes through it */
	sl__stats_write();
	char line[4096] = {0};
	fd = open(path, O_RDONLY);
	assert_true(read(fd, line, sizeof(line) - 1) > 0);
	close(fd);
	unlink(path);
	assert_non_null(strstr(line, "\"op\":\"send\",\"action\":\"dry-run\""));
	assert_non_null(strstr(line, "\"calls\":3,\"admitted\":3,\"delayed\":2,\"refused\":0"));
	assert_non_null(strstr(line, "\"bytes\":3000}"));
	assert_dec_equal(line[strlen(line) - 1], '\n');
}

/* A UDP socket on loopback connected to itself (classified as inet dgram). */
static int udp_self(void)
{
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(in);
	int u = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(u >= 0);
	assert_dec_equal(bind(u, (struct sockaddr *)&in, sizeof(in)), 0);
	assert_dec_equal(getsockname(u, (struct sockaddr *)&in, &l), 0);
	assert_dec_equal(SL_REAL(connect)(u, (struct sockaddr *)&in, sizeof(in)), 0);
	return u;
}

/* Received bytes are charged even when they are over what the limiter
 * admits: a 1400-byte datagram fills a 1000 B/s sliding window, so the next
 * receive waits (a policing charge used to drop it: unthrottled). */
static void test_shim_recv_charge_over_limit(void **state)
{
	(void)state;
	static char buf[1400];
	use_policy("SLUICE_RECV", "1000B/s,algo=sliding");
	int u = udp_self();
	assert_dec_equal(recv(u, buf, sizeof(buf), 0), 1400);
	assert_dec_equal(n_sleeps, 0);
	assert_dec_equal(recv(u, buf, sizeof(buf), 0), 1400);
	assert_dec_equal(n_sleeps, 1);
	expect_event(1, events[1].t, 1400);
	assert_true(events[1].t > T0);
	close(u);
}

/* A reservation in the next fixed window given back after a signal is
 * given back to that window (the slot's instant, not the clock's): the
 * next window then admits its full N at once. */
static void test_shim_refund_slot_window(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,algo=fixed");
	assert_dec_equal(send(f->cli, buf, 1000, 0), 1000);
	fake_sleep_eintr_at = 0;
	errno = 0;
	assert_dec_equal(send(f->cli, buf, 1000, 0), -1);
	assert_dec_equal(errno, EINTR);
	assert_dec_equal(fake_now, T0 + MS);
	fake_now = T0 + SEC;
	assert_dec_equal(send(f->cli, buf, 1000, 0), 1000);
	assert_dec_equal(n_sleeps, 1);
	expect_event(1, T0 + SEC, 1000);
}

/* dry-run changes nothing the program sees: a receive is not shortened and
 * a send is not split, however far over the rule they are. */
static void test_shim_dry_run_transparent(void **state)
{
	struct fix *f = *state;
	static char buf[10000];
	use_policy2("SLUICE_SEND", "1000B/s,burst=1000B,action=dry-run", "SLUICE_RECV",
		    "1000B/s,burst=1000B,action=dry-run");
	assert_dec_equal(send(f->cli, buf, sizeof(buf), 0), 10000);
	assert_dec_equal(n_events, 1);
	expect_event(0, T0, 10000);
	for (int i = 1; i <= 3; i++) {
		assert_dec_equal(recv(f->cli, buf, 5000, 0), 5000);
		expect_event(i, T0, 5000);
	}
	assert_dec_equal(n_sleeps, 0);
}

/* A sliding window's send is cut in pieces of 10 ms worth, so it keeps
 * close to the rate: 24000 bytes at 8000 B/s (window 1 s) are out by the
 * end of the third window (8000 at once, then 8000 in each of the next
 * two), not at 4 s as with whole-window pieces (half the rate). */
static void test_shim_sliding_pieces(void **state)
{
	struct fix *f = *state;
	static char buf[24000];
	use_policy("SLUICE_SEND", "8000B/s,algo=sliding");
	assert_dec_equal(send(f->cli, buf, sizeof(buf), 0), 24000);
	assert_true(n_events > 3);
	for (int i = 0; i < n_events; i++)
		assert_true(events[i].len <= 80);
	assert_true(events[n_events - 1].t >= T0 + 2900 * MS);
	assert_true(events[n_events - 1].t <= T0 + 3050 * MS);
}

/* Bad iovec or msghdr pointers reach the real call (EFAULT), on a matched
 * fd too: the shim does not fault reading them. */
static void test_shim_bad_pointers_efault(void **state)
{
	struct fix *f = *state;
	use_policy2("SLUICE_SEND", "1000B/s", "SLUICE_RECV", "1000B/s");
	const struct iovec *volatile bad = (const struct iovec *)16; /* opaque to -Werror */
	errno = 0;
	assert_dec_equal(writev(f->cli, bad, 2), -1);
	assert_dec_equal(errno, EFAULT);
	errno = 0;
	assert_dec_equal(sendmsg(f->cli, NULL, 0), -1);
	assert_dec_equal(errno, EFAULT);
	errno = 0;
	assert_dec_equal(readv(f->cli, bad, 2), -1);
	assert_dec_equal(errno, EFAULT);
	errno = 0;
	assert_dec_equal(recvmsg(f->cli, NULL, MSG_DONTWAIT), -1);
	assert_dec_equal(errno, EFAULT);
	struct msghdr m = {.msg_iov = (struct iovec *)8, .msg_iovlen = 1};
	errno = 0;
	assert_dec_equal(sendmsg(f->cli, &m, 0), -1);
	assert_dec_equal(errno, EFAULT);
}

/* per=fd limiters belong to the socket: a connect() that changes its peer
 * reclassifies the fd but keeps its bucket (it used to start a full one). */
static void test_shim_per_fd_survives_connect(void **state)
{
	(void)state;
	static char buf[10];
	use_policy("SLUICE_SEND", "1/s,burst=1,per=fd");
	int u = udp_self();
	struct sockaddr_in in;
	socklen_t l = sizeof(in);
	assert_dec_equal(getsockname(u, (struct sockaddr *)&in, &l), 0);
	assert_dec_equal(send(u, buf, sizeof(buf), 0), 10);
	assert_dec_equal(connect(u, (struct sockaddr *)&in, sizeof(in)), 0);
	assert_dec_equal(send(u, buf, sizeof(buf), 0), 10);
	assert_dec_equal(n_sleeps, 1);
	expect_event(1, T0 + SEC, 10);
	close(u);
	/* A new socket on the same fd number starts with a full bucket. */
	u = udp_self();
	assert_dec_equal(send(u, buf, sizeof(buf), 0), 10);
	assert_dec_equal(n_sleeps, 1);
	close(u);
}

/* The child after fork clears BUSY bits: the thread that held one is gone. */
static void test_shim_fork_clears_busy(void **state)
{
	struct fix *f = *state;
	atomic_fetch_or(&sl__fdbits[f->cli], SL_FDB_BUSY);
	sl__fdtab_after_fork_unsync();
	assert_dec_equal(atomic_load(&sl__fdbits[f->cli]) & SL_FDB_BUSY, 0);
	sl__scope_after_fork_unsync();
}

/* A signal during a wait after the real accept (per=peer) does not let the
 * connection skip its conns slot: with none free it is reset and the call
 * fails with EINTR; with one free it is returned holding it. */
static void test_shim_accept_eintr_conns(void **state)
{
	struct fix *f = *state;
	use_policy2("SLUICE_ACCEPT", "1/s,burst=1,per=peer", "SLUICE_CONNS", "1,action=reject");
	int a = socket(AF_INET, SOCK_STREAM, 0);
	accept_fd = a;
	assert_dec_equal(accept4(f->lst, NULL, NULL, 0), a);
	accept_fd = socket(AF_INET, SOCK_STREAM, 0);
	fake_sleep_eintr_at = 0;
	errno = 0;
	assert_dec_equal(accept4(f->lst, NULL, NULL, 0), -1);
	assert_dec_equal(errno, EINTR);
	assert_dec_equal(fcntl(accept_fd, F_GETFD), -1); /* reset and closed */
	close(a);                                        /* frees the slot */
	accept_fd = socket(AF_INET, SOCK_STREAM, 0);
	fake_sleep_eintr_at = 1;
	assert_dec_equal(accept4(f->lst, NULL, NULL, 0), accept_fd);
	/* It holds the slot: the next accept is refused by conns. */
	int b = accept_fd;
	accept_fd = socket(AF_INET, SOCK_STREAM, 0);
	fake_now += 10 * SEC;
	errno = 0;
	assert_dec_equal(accept4(f->lst, NULL, NULL, 0), -1);
	assert_dec_equal(errno, ECONNABORTED);
	close(b);
}

/* Calls the kernel would refuse reach it unchanged: accept4 with flags it
 * does not know or an address but no length; close_range with bad
 * flags fails and keeps the conns slot of the fd it did not close. */
static void test_shim_invalid_args(void **state)
{
	struct fix *f = *state;
	use_policy2("SLUICE_ACCEPT", "1/s", "SLUICE_CONNS", "1,action=reject");
	accept_fd = socket(AF_INET, SOCK_STREAM, 0);
	accept4(f->lst, NULL, NULL, -1);
	assert_dec_equal(accept_flags, -1);
	accept4(f->lst, NULL, NULL, 0x4000);
	assert_dec_equal(accept_flags, 0x4000);
	struct sockaddr_in in;
	errno = 0;
	assert_dec_equal(accept4(f->lst, (struct sockaddr *)&in, NULL, 0), -1);
	assert_dec_equal(errno, EFAULT);
	close(accept_fd);
	in = (struct sockaddr_in){.sin_family = AF_INET,
				  .sin_port = htons(9),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int s1 = socket(AF_INET, SOCK_STREAM, 0), s2 = socket(AF_INET, SOCK_STREAM, 0);
	assert_dec_equal(connect(s1, (struct sockaddr *)&in, sizeof(in)), 0);
	errno = 0;
	assert_dec_equal(close_range((unsigned)s1, (unsigned)s1, 0x40), -1);
	assert_dec_equal(errno, EINVAL);
	assert_dec_equal(connect(s2, (struct sockaddr *)&in, sizeof(in)), -1);
	assert_dec_equal(errno, ECONNREFUSED);
	close(s1);
	close(s2);
}

/* recvmsg(MSG_ERRQUEUE) reads the error queue: never delayed nor charged. */
static void test_shim_errqueue_passthrough(void **state)
{
	struct fix *f = *state;
	static char buf[5000];
	use_policy("SLUICE_RECV", "1000B/s,burst=1000B");
	assert_dec_equal(recv(f->cli, buf, sizeof(buf), 0), 1000);
	struct iovec v = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
	errno = 0;
	assert_dec_equal(recvmsg(f->cli, &m, MSG_ERRQUEUE), -1);
	assert_dec_equal(errno, EAGAIN); /* the real call: the queue is empty */
	assert_dec_equal(n_sleeps, 0);
}

/* A split sendto sends its one-shot parts once: MSG_FASTOPEN and the
 * address with the first piece, MSG_OOB with the last. */
static void test_shim_send_one_shot_flags(void **state)
{
	struct fix *f = *state;
	static char buf[3000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B");
	struct sockaddr_in in;
	socklen_t l = sizeof(in);
	assert_dec_equal(getpeername(f->cli, (struct sockaddr *)&in, &l), 0);
	assert_dec_equal(sendto(f->cli, buf, sizeof(buf), MSG_FASTOPEN | MSG_OOB,
				(struct sockaddr *)&in, l),
			 3000);
	assert_dec_equal(n_events, 3);
	assert_dec_equal(sendto_flags[0], MSG_FASTOPEN | 1 << 30);
	assert_dec_equal(sendto_flags[1], 0);
	assert_dec_equal(sendto_flags[2], MSG_OOB);
}

/* Rules without family= are for inet and inet6 only: a unix socket (a
 * journald stdout, say) is not throttled unless family=unix is given. */
static void test_shim_unix_default_family(void **state)
{
	(void)state;
	int sv[2];
	use_policy("SLUICE_SEND", "1/s,action=reject");
	assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	for (int i = 0; i < 3; i++)
		assert_dec_equal(write(sv[0], "x", 1), 1);
	assert_true(sl__fd_pass(sv[0], SL_K_SEND));
	use_policy("SLUICE_SEND", "1/s,action=reject,family=unix");
	sl__fd_forget(sv[0]);
	assert_dec_equal(write(sv[0], "x", 1), 1);
	errno = 0;
	assert_dec_equal(write(sv[0], "x", 1), -1);
	assert_dec_equal(errno, EAGAIN);
	close(sv[0]);
	close(sv[1]);
}

/* A socket closed through stdio (fdopen, fclose) is forgotten: a file that
 * gets its fd number next is not taken for the socket. */
static void test_shim_fclose_forgets(void **state)
{
	(void)state;
	use_policy("SLUICE_SEND", "1/s,action=reject");
	int u = udp_self();
	assert_dec_equal(send(u, "x", 1, 0), 1);
	assert_true(atomic_load(&sl__fdbits[u]) != 0);
	FILE *fp = fdopen(u, "w");
	assert_non_null(fp);
	assert_dec_equal(fclose(fp), 0);
	assert_dec_equal(atomic_load(&sl__fdbits[u]), 0);
	int fd = open("/dev/null", O_WRONLY);
	assert_dec_equal(fd, u);
	for (int i = 0; i < 3; i++)
		assert_dec_equal(write(fd, "x", 1), 1);
	close(fd);
}

/* When every installed handler has SA_RESTART, a signal during a wait
 * resumes it, as the kernel restarts a socket call: the full count; with a
 * socket timeout the kernel would not restart, and neither does the shim. */
static void test_shim_sa_restart(void **state)
{
	struct fix *f = *state;
	static char buf[3000];
	handle(SIGUSR2, false, false);
	handle(SIGUSR1, true, true);
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B");
	fake_sleep_eintr_at = 0;
	assert_dec_equal(send(f->cli, buf, sizeof(buf), 0), 3000);
	assert_dec_equal(n_events, 3);
	expect_event(1, T0 + SEC, 1000);
	assert_dec_equal(n_sleeps, 3);
	struct timeval tv = {.tv_sec = 100};
	assert_dec_equal(setsockopt(f->cli, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	fake_sleep_eintr_at = 3;
	errno = 0;
	assert_dec_equal(send(f->cli, buf, 1000, 0), -1);
	assert_dec_equal(errno, EINTR);
	handle(SIGUSR1, false, false);
}

int main(void)
{
	/* Link the wrappers even when ASan's interceptors define the names. */
	assert_dec_equal(sl__wrap_send_anchor + sl__wrap_recv_anchor + sl__wrap_sock_anchor, 3);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_shim_send_pieces, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_send_partial, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_send_eintr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_send_max_delay, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_errno_preserved, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_unmatched_passthrough, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_unmatched_peer_passes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_recv_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_recv_gathers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_recv_gather_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_connect_reject, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_connect_again_passes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_conns_dup_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_accept_reject, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_dry_run_stats, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_recv_charge_over_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_refund_slot_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_dry_run_transparent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_sliding_pieces, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_bad_pointers_efault, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_per_fd_survives_connect, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_fork_clears_busy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_accept_eintr_conns, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_invalid_args, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_errqueue_passthrough, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_send_one_shot_flags, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_unix_default_family, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_fclose_forgets, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_sa_restart, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
