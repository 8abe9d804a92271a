/* SPDX-License-Identifier: MIT */
/*
 * test_shim_sandbox.c - what the shim may do to an fd whose meaning it
 * cannot check (issue 19): a process under a seccomp filter (sandbox.h)
 * gets no query system call from the shim, and an fd that changed behind
 * the wrappers' back, or a sleep the system refuses, makes the call pass
 * through instead of holding it back.
 *
 * The fake clock and sleep of test_shim.h; send is a fake that records
 * (instant, length); getsockopt and fcntl are counting fakes in front of
 * the real ones (every query the shim makes goes through them or through
 * getsockname/getpeername, which classification makes only after a
 * getsockopt).
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_shim.h"
#include "../shim/record.h"
#include "../shim/sandbox.h"

#define SEC 1000000000ull
#define T0 (7 * SEC)

static struct {
	uint64_t t[64];
	size_t len[64];
	int n;
} sent;
static int n_getsockopt, n_fcntl;
static struct sl_real saved;
static int lst, cli, srv;
static int refuse_sleep; /* the fake sleep fails with this (0: it sleeps) */

static ssize_t fake_send(int fd, const void *b, size_t len, int flags)
{
	(void)fd, (void)b, (void)flags;
	assert_true(sent.n < 64);
	sent.t[sent.n] = fake_now;
	sent.len[sent.n++] = len;
	return (ssize_t)len;
}

static int count_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	n_getsockopt++;
	return saved.getsockopt(fd, level, name, val, len);
}

static int count_fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	unsigned long arg = va_arg(ap, unsigned long);
	va_end(ap);
	n_fcntl++;
	return saved.fcntl(fd, cmd, arg);
}

static int sleep_or_refuse(uint64_t deadline)
{
	if (refuse_sleep != 0) {
		n_sleeps++;
		return refuse_sleep;
	}
	return fake_sleep(deadline);
}

static int setup(void **state)
{
	(void)state;
	shim_setup(&saved, T0);
	struct sockaddr_in in;
	loopback_pair(&lst, &cli, &srv, &in);
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B");
	sl__sleep_until = sleep_or_refuse;
	refuse_sleep = 0;
	sent.n = n_getsockopt = n_fcntl = 0;
	sl__real.send = fake_send;
	sl__real.getsockopt = count_getsockopt;
	sl__real.fcntl = count_fcntl;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	sl__sandbox_reset_unsync();
	shim_teardown(&saved);
	close(lst);
	close(cli);
	close(srv);
	return 0;
}

/* Fds classified before the filter (the constructor's scan) keep their
 * rules in the sandbox, and nothing is asked: 3000 bytes go out in three
 * pieces a second apart with no getsockopt (classification, SO_SNDTIMEO)
 * and no fcntl (O_NONBLOCK). */
static void test_sandbox_classified_before(void **state)
{
	(void)state;
	static char buf[3000];
	sl__fd_scan_unsync();
	int before = n_getsockopt;
	assert_true(before > 0); /* the scan did ask */
	sl__sandbox_enter("test");
	assert_true(sl__sandboxed());
	assert_dec_equal(send(srv, buf, sizeof(buf), 0), 3000);
	assert_dec_equal(sent.n, 3);
	for (int i = 0; i < 3; i++) {
		assert_dec_equal(sent.t[i], T0 + (uint64_t)i * SEC);
		assert_dec_equal(sent.len[i], 1000);
	}
	assert_dec_equal(n_getsockopt, before);
	assert_dec_equal(n_fcntl, 0);
	assert_dec_equal(sl__rec_unclassified_count(), 0);
}

/* A socket never classified before the filter passes through, unthrottled,
 * with no query, and is counted once as unclassified however often it is
 * used. A dup of a classified socket shares its class with no query. */
static void test_sandbox_unclassified_passes(void **state)
{
	(void)state;
	static char buf[3000];
	(void)sl__fd_rec(srv);
	sl__sandbox_enter("test");
	int before = n_getsockopt;
	assert_dec_equal(send(cli, buf, sizeof(buf), 0), 3000);
	assert_dec_equal(send(cli, buf, sizeof(buf), 0), 3000);
	assert_dec_equal(sent.n, 2);
	assert_dec_equal(sent.t[1], T0);
	assert_dec_equal(sl__rec_unclassified_count(), 1);
	int d = dup(srv);
	assert_true(d >= 0);
	assert_dec_equal(send(d, buf, 2000, 0), 2000);
	assert_dec_equal(sent.n, 4); /* 1000 now, 1000 a second later */
	assert_dec_equal(sent.t[3], T0 + SEC);
	assert_dec_equal(n_getsockopt, before);
	assert_dec_equal(n_fcntl, 0);
	close(d);
}

/* A sleep the system refuses (a filter answering EPERM) makes the call pass
 * through instead of spinning or failing: all 3000 bytes at T0, one sleep
 * tried. */
static void test_sandbox_sleep_refused(void **state)
{
	(void)state;
	static char buf[3000];
	refuse_sleep = EPERM;
	assert_dec_equal(send(srv, buf, sizeof(buf), 0), 3000);
	assert_dec_equal(n_sleeps, 1);
	size_t total = 0;
	for (int i = 0; i < sent.n; i++) {
		assert_dec_equal(sent.t[i], T0);
		total += sent.len[i];
	}
	assert_dec_equal(total, 3000);
}

/* An fd whose inode is not the one its record kept (it changed through a
 * path no wrapper saw) is not held back when the rule would act: the burst
 * goes out, the identity check finds the change, the rest passes at once
 * and the fd is forgotten (classified afresh on its next call). */
static void test_identity_changed(void **state)
{
	(void)state;
	static char buf[3000];
	assert_non_null(sl__fd_rec(srv));
	assert_true(sl__fd_same(srv));
	sl__fdrecs[srv].ino ^= 1; /* as if the number now were another file */
	assert_dec_equal(send(srv, buf, sizeof(buf), 0), 3000);
	assert_dec_equal(n_sleeps, 0);
	assert_dec_equal(sent.len[0], 1000);
	for (int i = 0; i < sent.n; i++)
		assert_dec_equal(sent.t[i], T0);
	assert_false(atomic_load(&sl__fdbits[srv]) & SL_FDB_READY);
	/* Classified again, it is the socket: the next send waits for its
	 * tokens (the 1000 taken by the first piece). */
	assert_dec_equal(send(srv, buf, 1000, 0), 1000);
	assert_dec_equal(sent.t[sent.n - 1], T0 + SEC);
}

/* syscall(SYS_close) forgets what the fd meant, like close; other numbers
 * pass with the real syscall()'s return and errno; a new fd from open is
 * marked "not a socket" with no query. */
static void test_syscall_and_open(void **state)
{
	(void)state;
	assert_dec_equal(sl__wrap_fd_anchor, 1);
	int d = dup(srv);
	assert_true(d >= 0);
	assert_true(atomic_load(&sl__fdbits[d]) & SL_FDB_READY);
	assert_dec_equal(syscall(SYS_close, d), 0);
	assert_dec_equal(atomic_load(&sl__fdbits[d]), 0);
	errno = 0;
	assert_dec_equal(syscall(SYS_close, d), -1);
	assert_dec_equal(errno, EBADF);
	assert_dec_equal(syscall(SYS_getpid), getpid());
	/* A stale socket record on the number open() is about to return. */
	d = dup(srv);
	assert_true(d >= 0);
	assert_dec_equal(syscall(SYS_close, d), 0);
	atomic_store(&sl__fdbits[d], SL_FDB_READY); /* matches every rule */
	int before = n_getsockopt;
	int o = open("/dev/null", O_WRONLY);
	assert_dec_equal(o, d);
	assert_dec_equal(atomic_load(&sl__fdbits[o]), SL_FDB_READY | SL_FDB_PASS_ALL);
	assert_dec_equal(n_getsockopt, before);
	close(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_sandbox_classified_before, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sandbox_unclassified_passes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sandbox_sleep_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_identity_changed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_syscall_and_open, setup, teardown),
	};
	assert_dec_equal(sl__wrap_send_anchor + sl__wrap_sock_anchor + sl__wrap_sockopt_anchor, 3);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
