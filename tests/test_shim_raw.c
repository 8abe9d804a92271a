/* SPDX-License-Identifier: MIT */
/*
 * test_shim_raw.c - a matched transfer of a single-threaded process is the
 * system call glibc's function would make, made by the shim's hot path
 * (rawcall.h): the function in the slot is not called, and the program
 * sees what the function would give it. One scenario (stream and datagram sockets, every
 * transfer the raw path covers, a would-block receive, a send to a closed
 * peer, a truncated datagram) runs twice, the raw path allowed and not:
 * each call's result and errno, the bytes and addresses received, the
 * rules' counters and this thread's credit must be the same. The slot's
 * function is called instead when it is not the glibc function it was
 * resolved to, and once the process has a second thread (last test: the
 * process stays multi-threaded).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/single_threaded.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_shim.h"

#include "../shim/credit.h"
#include "../shim/rawcall.h"

#define T0 (5 * 1000000000ull)
/* A sanitizer's runtime defines send and the rest ahead of glibc. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif
#define RULES "10GB/s,family=inet+unix"

static struct sl_real saved;

/* A credit slice is good for the whole test (the TSC is the real one). */
static int long_span(uint64_t ns, uint64_t *ticks)
{
	(void)ns;
	*ticks = (uint64_t)1 << 62;
	return 1;
}

static int setup(void **state)
{
	(void)state;
	shim_setup(&saved, T0);
	sl__credit_span = long_span;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	shim_teardown(&saved);
	sl__credit_span = sl__clock_tsc_span;
	return 0;
}

/* What one run of the scenario saw. */
#define N_CALLS 16
struct outcome {
	int64_t r[N_CALLS];
	int64_t err[N_CALLS];
	int64_t counts[2][4]; /* per rule: calls, admitted, refused, bytes */
	int64_t units[2];     /* this thread's credit of each rule */
};

static void note(struct outcome *o, int *k, ssize_t r)
{
	o->r[*k] = r;
	o->err[*k] = r < 0 ? errno : 0;
	(*k)++;
}

static void udp_bound(int *fd, struct sockaddr_in *a)
{
	*a = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(*a);
	*fd = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(*fd >= 0);
	assert_dec_equal(bind(*fd, (struct sockaddr *)a, sizeof(*a)), 0);
	assert_dec_equal(getsockname(*fd, (struct sockaddr *)a, &l), 0);
}

/* The scenario; asserts what glibc's functions give, and records it. */
static void scenario(struct outcome *o)
{
	memset(o, 0, sizeof(*o));
	use_policy2("SLUICE_SEND", RULES, "SLUICE_RECV", RULES);
	int sv[2], k = 0;
	char in[16];
	assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	note(o, &k, send(sv[0], "hello", 5, 0));
	note(o, &k, recv(sv[1], in, sizeof(in), 0));
	assert_memory_equal(in, "hello", 5);
	note(o, &k, write(sv[0], "ab", 2));
	note(o, &k, read(sv[1], in, 2));
	assert_memory_equal(in, "ab", 2);
	struct iovec out2[2] = {{"12", 2}, {"345", 3}}, in2[2] = {{in, 2}, {in + 8, 3}};
	note(o, &k, writev(sv[0], out2, 2));
	note(o, &k, readv(sv[1], in2, 2));
	assert_memory_equal(in, "12", 2);
	assert_memory_equal(in + 8, "345", 3);
	struct msghdr m = {.msg_iov = out2, .msg_iovlen = 1};
	note(o, &k, sendmsg(sv[0], &m, 0));
	m.msg_iov = in2;
	note(o, &k, recvmsg(sv[1], &m, 0));
	assert_memory_equal(in, "12", 2);
	note(o, &k, recv(sv[1], in, sizeof(in), MSG_DONTWAIT)); /* nothing there */
	assert_dec_equal(o->err[k - 1], EAGAIN);
	/* That gave this thread's credit back (a wait may follow): a send
	 * takes a slice again, so that the next one is the hot path's. */
	note(o, &k, send(sv[0], "q", 1, 0));
	note(o, &k, recv(sv[1], in, 1, 0));
	close(sv[1]);
	note(o, &k, send(sv[0], "z", 1, MSG_NOSIGNAL)); /* the peer is gone */
	assert_dec_equal(o->err[k - 1], EPIPE);
	close(sv[0]);

	int u0, u1;
	struct sockaddr_in a0, a1, from;
	udp_bound(&u0, &a0);
	udp_bound(&u1, &a1);
	note(o, &k, sendto(u0, "dgram", 5, 0, (struct sockaddr *)&a1, sizeof(a1)));
	socklen_t fl = sizeof(from);
	memset(&from, 0, sizeof(from));
	note(o, &k, recvfrom(u1, in, sizeof(in), 0, (struct sockaddr *)&from, &fl));
	assert_memory_equal(in, "dgram", 5);
	assert_dec_equal(fl, sizeof(from));
	assert_dec_equal(from.sin_port, a0.sin_port);
	note(o, &k, sendto(u0, "trunc!", 6, 0, (struct sockaddr *)&a1, sizeof(a1)));
	struct iovec small = {in, 2};
	memset(&from, 0, sizeof(from));
	struct msghdr mu = {.msg_name = &from,
			    .msg_namelen = sizeof(from),
			    .msg_iov = &small,
			    .msg_iovlen = 1};
	note(o, &k, recvmsg(u1, &mu, 0));
	assert_true(mu.msg_flags & MSG_TRUNC);
	assert_dec_equal(mu.msg_namelen, sizeof(from));
	assert_dec_equal(from.sin_port, a0.sin_port);
	close(u0);
	close(u1);

	const int64_t want[] = {5, 5, 2, 2, 5, 5, 2, 2, -1, 1, 1, -1, 5, 5, 6, 2};
	assert_dec_equal(k, sizeof(want) / sizeof(want[0]));
	for (int i = 0; i < k; i++)
		assert_dec_equal(o->r[i], want[i]);
	for (unsigned i = 0; i < 2; i++) {
		const struct sl_rstats *s = test_stats(i);
		o->counts[i][0] = (int64_t)s->calls;
		o->counts[i][1] = (int64_t)s->admitted;
		o->counts[i][2] = (int64_t)s->refused;
		o->counts[i][3] = (int64_t)s->bytes;
		o->units[i] = (int64_t)sl__credit[i].units;
	}
}

static void assert_same(const struct outcome *a, const struct outcome *b)
{
	for (int i = 0; i < N_CALLS; i++) {
		assert_dec_equal(a->r[i], b->r[i]);
		assert_dec_equal(a->err[i], b->err[i]);
	}
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 4; j++)
			assert_dec_equal(a->counts[i][j], b->counts[i][j]);
		assert_dec_equal(a->units[i], b->units[i]);
	}
}

/* Raw and through glibc's function: the same outcome. The bytes counted
 * are the bytes that went (5 + 2 + 5 + 2 + 1 + 5 + 6 sent, 5 + 2 + 5 + 2
 * + 1 + 5 + 2 received), the failed send and receive none. */
static void test_shim_raw_same_outcome(void **state)
{
	(void)state;
	/* The wrapper files, linked even when a sanitizer's runtime defines
	 * their names (anchors.h). */
	assert_dec_equal(sl__wrap_send_anchor + sl__wrap_recv_anchor + sl__wrap_fd_anchor, 3);
	struct outcome raw, called;
	scenario(&raw);
	for (int i = 0; i < SL_REAL_COUNT; i++)
		atomic_store(&sl__real.libc[i], NULL);
	scenario(&called);
	assert_same(&raw, &called);
	assert_dec_equal(raw.counts[0][3], 26);
	assert_dec_equal(raw.counts[1][3], 22);
}

static int n_spy;

static ssize_t spy_send(int fd, const void *b, size_t n, int flags)
{
	n_spy++;
	return saved.send(fd, b, n, flags);
}

/* A matched send with spy_send in the slot: the hot path does not call it
 * while the slot's glibc function is spy_send (the raw path), and calls it
 * once it is not. */
static void test_shim_raw_skips_the_slot(void **state)
{
	(void)state;
	if (!SL_RAWCALL)
		skip();
	if (SANITIZED) {
		/* dlsym(RTLD_NEXT) found the sanitizer's interceptor: another
		 * interposer, whose function the raw path must not skip. */
		assert_null(saved.libc[SL_REAL_send]);
		skip();
	}
	use_policy("SLUICE_SEND", RULES);
	int sv[2];
	char c;
	assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_true(saved.libc[SL_REAL_send] == (void *)saved.send);
	assert_null(saved.libc[SL_REAL_sendfile]);
	n_spy = 0;
	sl__real.send = spy_send;
	atomic_store(&sl__real.libc[SL_REAL_send], (void *)spy_send);
	/* The first send takes the general path (a credit slice), which
	 * calls the slot; the second is the hot path's. */
	assert_dec_equal(send(sv[0], "a", 1, 0), 1);
	assert_dec_equal(n_spy, 1);
	assert_dec_equal(send(sv[0], "b", 1, 0), 1);
	assert_dec_equal(n_spy, 1);
	atomic_store(&sl__real.libc[SL_REAL_send], NULL);
	assert_dec_equal(send(sv[0], "c", 1, 0), 1);
	assert_dec_equal(n_spy, 2);
	for (const char *w = "abc"; *w != 0; w++) {
		assert_dec_equal(read(sv[1], &c, 1), 1);
		assert_dec_equal(c, *w);
	}
	close(sv[0]);
	close(sv[1]);
}

static void *idle(void *arg)
{
	return arg;
}

/* Once a second thread has run, glibc's function is called (its
 * cancellation point stays glibc's), though the slot allows the raw path. */
static void test_shim_raw_threads_call_glibc(void **state)
{
	(void)state;
	if (!SL_RAWCALL || SANITIZED)
		skip();
	use_policy("SLUICE_SEND", RULES);
	int sv[2];
	assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	n_spy = 0;
	sl__real.send = spy_send;
	atomic_store(&sl__real.libc[SL_REAL_send], (void *)spy_send);
	assert_dec_equal(send(sv[0], "a", 1, 0), 1); /* the general path (above) */
	assert_dec_equal(send(sv[0], "a", 1, 0), 1);
	assert_dec_equal(n_spy, 1);
	pthread_t t;
	assert_dec_equal(pthread_create(&t, NULL, idle, NULL), 0);
	assert_dec_equal(pthread_join(t, NULL), 0);
	assert_dec_equal(__libc_single_threaded, 0);
	assert_dec_equal(send(sv[0], "b", 1, 0), 1);
	assert_dec_equal(n_spy, 2);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_shim_raw_same_outcome, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_raw_skips_the_slot, setup, teardown),
		/* Last: the process keeps its second thread's mark. */
		cmocka_unit_test_setup_teardown(test_shim_raw_threads_call_glibc, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
