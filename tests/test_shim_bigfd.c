/* SPDX-License-Identifier: MIT */
/*
 * test_shim_bigfd.c - fds beyond 65536 are tracked too: the shim sizes its
 * fd tables by the RLIMIT_NOFILE hard limit it starts with (at most 2^20),
 * and passes fds beyond that through, at the cost of one bit test.
 *
 * This machine's hard limit is far lower, so the test binary defines
 * getrlimit (hard limit 300000) and the socket queries that classify an
 * fd (getsockopt, getsockname, getpeername): fds from FAKE_FD0 on are TCP
 * sockets connected to 127.0.0.1:80, with a fake send in the shim's table
 * of real functions. The shim (linked into this binary) calls these
 * instead of libc's; every other fd is forwarded to libc.
 */
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "test_shim.h"

#define MS 1000000ull
#define FAKE_FD0 200000
#define HARD 300000

static int n_sent;

int getrlimit(__rlimit_resource_t res, struct rlimit *rl)
{
	static int (*next)(__rlimit_resource_t, struct rlimit *);
	if (next == NULL)
		*(void **)&next = dlsym(RTLD_NEXT, "getrlimit");
	int r = next(res, rl);
	if (r == 0 && res == RLIMIT_NOFILE)
		rl->rlim_max = HARD;
	return r;
}

static int fake_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	static int (*next)(int, int, int, void *, socklen_t *);
	if (next == NULL)
		*(void **)&next = dlsym(RTLD_NEXT, "getsockopt");
	if (fd < FAKE_FD0)
		return next(fd, level, name, val, len);
	if (level == SOL_SOCKET && (name == SO_TYPE || name == SO_DOMAIN) && *len >= sizeof(int)) {
		*(int *)val = name == SO_TYPE ? SOCK_STREAM : AF_INET;
		*len = sizeof(int);
		return 0;
	}
	errno = ENOPROTOOPT;
	return -1;
}

static int fake_name(struct sockaddr *sa, socklen_t *len, uint16_t port)
{
	struct sockaddr_in in = {.sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	memcpy(sa, &in, *len < sizeof(in) ? *len : sizeof(in));
	*len = sizeof(in);
	return 0;
}

int getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	static int (*next)(int, struct sockaddr *, socklen_t *);
	if (next == NULL)
		*(void **)&next = dlsym(RTLD_NEXT, "getsockname");
	return fd < FAKE_FD0 ? next(fd, sa, len) : fake_name(sa, len, 40000);
}

int getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
	static int (*next)(int, struct sockaddr *, socklen_t *);
	if (next == NULL)
		*(void **)&next = dlsym(RTLD_NEXT, "getpeername");
	return fd < FAKE_FD0 ? next(fd, sa, len) : fake_name(sa, len, 80);
}

static ssize_t fake_send(int fd, const void *b, size_t len, int flags)
{
	(void)b, (void)flags;
	if (fd < FAKE_FD0) {
		errno = EBADF;
		return -1;
	}
	n_sent++;
	return (ssize_t)len;
}

static struct sl_real saved;

static int setup(void **state)
{
	(void)state;
	shim_setup(&saved, 5000 * MS);
	n_sent = 0;
	sl__real.send = fake_send;
	sl__real.getsockopt = fake_getsockopt; /* the classification asks it */
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	shim_teardown(&saved);
	return 0;
}

/* The tables cover the hard limit, rounded up to whole 64-fd words. */
static void test_bigfd_cap(void **state)
{
	(void)state;
	assert_dec_equal(sl__fd_cap, (HARD + 63) / 64 * 64);
}

/* fd 250000 is throttled like any other: 1000 B/s, burst 1000 B; 600 go at
 * once, 600 more wait 200 ms. Counted, and forgotten at close. */
static void test_bigfd_throttled(void **state)
{
	(void)state;
	static char buf[1000];
	const int fd = 250000;
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B");
	assert_dec_equal(send(fd, buf, 600, 0), 600);
	assert_dec_equal(n_sleeps, 0);
	assert_dec_equal(send(fd, buf, 600, 0), 600);
	assert_dec_equal(n_sleeps, 1);
	assert_dec_equal(fake_now, 5000 * MS + 200 * MS);
	assert_dec_equal(n_sent, 2);
	assert_dec_equal(test_stats(0)->bytes, 1200);
	assert_true(atomic_load(&sl__fdbits[fd]) & SL_FDB_READY);
	close(fd); /* EBADF from the kernel; the shim forgets it first */
	assert_dec_equal(atomic_load(&sl__fdbits[fd]), 0);
}

/* An fd beyond the tables passes through (the rule would make it wait 4
 * s), and every later call on it passes at its pass bit. */
static void test_bigfd_beyond_cap_passes(void **state)
{
	(void)state;
	static char buf[5000];
	const int fd = (HARD + 63) / 64 * 64 + 7;
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B");
	assert_dec_equal(send(fd, buf, 5000, 0), 5000);
	assert_true(sl__fd_pass(fd, SL_K_SEND));
	assert_dec_equal(send(fd, buf, 5000, 0), 5000);
	assert_dec_equal(n_sleeps, 0);
	assert_dec_equal(n_sent, 2);
	assert_dec_equal(test_stats(0)->calls, 0);
}

int main(void)
{
	/* Link the wrappers even when ASan's interceptors define the names. */
	assert_dec_equal(sl__wrap_send_anchor + sl__wrap_sock_anchor, 2);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_bigfd_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bigfd_throttled, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bigfd_beyond_cap_passes, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
