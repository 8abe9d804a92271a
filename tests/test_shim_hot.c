/* SPDX-License-Identifier: MIT */
/*
 * test_shim_hot.c - what a matched call that is not limited costs the shim:
 * the socket's timeout (SO_SNDTIMEO / SO_RCVTIMEO, one getsockopt each) is
 * read only when a wait is due, and a send reads the clock once. Counted
 * with a getsockopt defined here, which the shim (linked into this binary)
 * calls instead of libc's and which forwards to the next definition, and
 * with a fake clock that counts its readings. The fd's O_NONBLOCK (an
 * F_GETFL) is read only when a wait is due too: counted with a fake fcntl
 * in the shim's table of real functions.
 *
 * The behaviour the timeout stands for is checked too: a wait within it
 * goes ahead, a wait beyond it fails with EAGAIN at once, nothing sent.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_shim.h"

#define MS 1000000ull
#define T0 (5 * 1000000000ull)

static int n_timeout_reads, n_sent, n_getfl;
static uint64_t last_sent_at;

/* The shim reads a socket's timeout through the real getsockopt. */
static int (*next_getsockopt)(int, int, int, void *, socklen_t *);

static int count_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	if (level == SOL_SOCKET && (name == SO_SNDTIMEO || name == SO_RCVTIMEO))
		n_timeout_reads++;
	return next_getsockopt(fd, level, name, val, len);
}

static ssize_t fake_send(int fd, const void *b, size_t len, int flags)
{
	(void)fd, (void)b, (void)flags;
	n_sent++;
	last_sent_at = fake_now;
	return (ssize_t)len;
}

static int (*next_fcntl)(int, int, ...);

static int fake_fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	long arg = va_arg(ap, long);
	va_end(ap);
	if (cmd == F_GETFL)
		n_getfl++;
	return next_fcntl(fd, cmd, arg);
}

static ssize_t fake_recv(int fd, void *b, size_t len, int flags)
{
	(void)fd, (void)b, (void)flags;
	return (ssize_t)len;
}

struct fix {
	int sv[2]; /* a connected AF_UNIX stream pair (the rules say family=unix) */
	struct sl_real saved;
};

static int setup(void **state)
{
	static struct fix f;
	shim_setup(&f.saved, T0);
	n_timeout_reads = n_sent = n_getfl = 0;
	assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, f.sv), 0);
	sl__real.send = fake_send;
	sl__real.recv = fake_recv;
	next_fcntl = f.saved.fcntl;
	sl__real.fcntl = fake_fcntl;
	if (next_getsockopt == NULL) /* libc's, not the shim's wrapper */
		*(void **)&next_getsockopt = dlsym(RTLD_NEXT, "getsockopt");
	sl__real.getsockopt = count_getsockopt;
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	shim_teardown(&f->saved);
	close(f->sv[0]);
	close(f->sv[1]);
	return 0;
}

static void set_timeout(int fd, int opt, long ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	assert_dec_equal(setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv)), 0);
}

/* 1000 B/s, burst 1000 B, SO_SNDTIMEO 300 ms: 100 bytes go at once without
 * a look at the timeout; 1000 more wait 100 ms (within it, one look); 1000
 * more would wait 1 s: EAGAIN at once, nothing sent, no sleep. */
static void test_shim_hot_send_timeout_when_due(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,family=unix");
	set_timeout(f->sv[0], SO_SNDTIMEO, 300);
	assert_dec_equal(send(f->sv[0], buf, 100, 0), 100);
	assert_dec_equal(n_timeout_reads, 0);
	assert_dec_equal(send(f->sv[0], buf, 1000, 0), 1000);
	assert_dec_equal(n_timeout_reads, 1);
	assert_dec_equal(n_sleeps, 1);
	assert_dec_equal(last_sent_at, T0 + 100 * MS);
	errno = 0;
	assert_dec_equal(send(f->sv[0], buf, 1000, 0), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(n_sent, 2);
	assert_dec_equal(n_sleeps, 1);
	assert_dec_equal(n_timeout_reads, 2);
}

/* A byte rule far above what is sent: no timeout read, one clock reading
 * per send once the fd is classified (classification resets per-fd
 * limiters, which reads the clock too). */
static void test_shim_hot_send_one_clock_read(void **state)
{
	struct fix *f = *state;
	char b = 'x';
	use_policy("SLUICE_SEND", "1GiB/s,family=unix");
	set_timeout(f->sv[0], SO_SNDTIMEO, 300);
	assert_dec_equal(send(f->sv[0], &b, 1, 0), 1);
	n_clock_reads = 0;
	for (int i = 0; i < 3; i++)
		assert_dec_equal(send(f->sv[0], &b, 1, 0), 1);
	assert_dec_equal(n_sent, 4);
	assert_dec_equal(n_clock_reads, 3);
	assert_dec_equal(n_timeout_reads, 0);
	assert_dec_equal(n_sleeps, 0);
}

/* The receive side: a recv within its rule does not read SO_RCVTIMEO. */
static void test_shim_hot_recv_no_timeout_read(void **state)
{
	struct fix *f = *state;
	char b[16];
	use_policy("SLUICE_RECV", "1GiB/s,family=unix");
	set_timeout(f->sv[0], SO_RCVTIMEO, 300);
	for (int i = 0; i < 3; i++)
		assert_dec_equal(recv(f->sv[0], b, sizeof(b), 0), (ssize_t)sizeof(b));
	assert_dec_equal(n_timeout_reads, 0);
	assert_dec_equal(n_sleeps, 0);
}

/* Non-blocking (nonblock=eagain, the default): 1000 B/s, burst 1000 B. 100
 * bytes go without a look at the fd's flags; of 1000 more, the 900 there
 * are go at once (one look: a wait was due); then EAGAIN (one more look).
 * MSG_DONTWAIT needs no look. Nothing ever sleeps. */
static void test_shim_hot_nonblock_flags_when_due(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,family=unix");
	assert_dec_equal(fcntl(f->sv[0], F_SETFL, O_NONBLOCK), 0);
	n_getfl = 0;
	assert_dec_equal(send(f->sv[0], buf, 100, 0), 100);
	assert_dec_equal(n_getfl, 0);
	assert_dec_equal(send(f->sv[0], buf, 1000, 0), 900);
	assert_dec_equal(n_getfl, 1);
	errno = 0;
	assert_dec_equal(send(f->sv[0], buf, 1000, 0), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(n_getfl, 2);
	errno = 0;
	assert_dec_equal(send(f->sv[1], buf, 1000, MSG_DONTWAIT), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(n_getfl, 2);
	assert_dec_equal(n_sent, 2);
	assert_dec_equal(n_sleeps, 0);
}

int main(void)
{
	/* Link the wrappers even when ASan's interceptors define the names. */
	assert_dec_equal(sl__wrap_send_anchor + sl__wrap_recv_anchor + sl__wrap_sock_anchor, 3);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_shim_hot_send_timeout_when_due, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_shim_hot_send_one_clock_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_hot_recv_no_timeout_read, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_shim_hot_nonblock_flags_when_due, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
