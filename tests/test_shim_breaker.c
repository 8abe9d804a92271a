/* SPDX-License-Identifier: MIT */
/*
 * test_shim_breaker.c - the shim's circuit breakers (shim/breaker.c) with a
 * fake clock and fake connect/getsockopt in struct sl_real: exact counts of
 * the connects that reach the "kernel", the errno of those that do not, and
 * the half-open probe, for blocking and non-blocking connects.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_shim.h"

#include "../shim/breaker.h"

#define T0 (50 * 1000000000ull)
#define MS 1000000ull
#define SEC 1000000000ull

static int n_connects;
static int connect_err; /* what the fake connect fails with; 0: success */
static int soerror;     /* SO_ERROR of the fake */
static int tcp_state;   /* TCP_INFO state of the fake */
static struct sl_real saved;

static int fake_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	(void)fd, (void)sa, (void)len;
	n_connects++;
	if (connect_err == 0)
		return 0;
	errno = connect_err;
	return -1;
}

static int fake_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	if (level == SOL_SOCKET && name == SO_ERROR) {
		memcpy(val, &soerror, sizeof(int));
		*len = sizeof(int);
		return 0;
	}
	if (level == IPPROTO_TCP && name == TCP_INFO) {
		struct tcp_info ti;
		memset(&ti, 0, sizeof(ti));
		ti.tcpi_state = (uint8_t)tcp_state;
		memcpy(val, &ti, *len < sizeof(ti) ? *len : sizeof(ti));
		return 0;
	}
	return saved.getsockopt(fd, level, name, val, len);
}

static int setup(void **state)
{
	(void)state;
	shim_setup(&saved, T0);
	n_connects = 0;
	connect_err = ECONNREFUSED;
	soerror = 0;
	tcp_state = TCP_CLOSE;
	sl__real.connect = fake_connect;
	sl__real.getsockopt = fake_getsockopt;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	shim_teardown(&saved);
	return 0;
}

/* connect() to 127.0.0.1:port on a fresh TCP socket; returns the errno (0
 * on success) and closes the socket unless *keep is given. */
static int try_connect(uint16_t port, int *keep)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(s >= 0);
	struct sockaddr_in in = {.sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int r = connect(s, (struct sockaddr *)&in, sizeof(in));
	int e = r == 0 ? 0 : errno;
	if (keep != NULL)
		*keep = s;
	else
		close(s);
	return e;
}

/* errors=3: three refusals reach the kernel, then every connect fails with
 * EHOSTUNREACH without one; after open=2s exactly one probe goes; its
 * failure reopens for 2 s, its success closes. */
static void test_shim_breaker_blocking(void **state)
{
	(void)state;
	use_policy("SLUICE_BREAK", "errors=3,window=1s,open=2s,errno=EHOSTUNREACH");
	assert_dec_equal(sl__break_n, 1);
	for (int i = 0; i < 3; i++)
		assert_dec_equal(try_connect(9, NULL), ECONNREFUSED);
	assert_dec_equal(n_connects, 3);
	for (int i = 0; i < 5; i++)
		assert_dec_equal(try_connect(9, NULL), EHOSTUNREACH);
	assert_dec_equal(n_connects, 3); /* no system call while open */
	fake_now = T0 + 2 * SEC - 1;
	assert_dec_equal(try_connect(9, NULL), EHOSTUNREACH);
	fake_now = T0 + 2 * SEC;
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED); /* the probe, refused */
	assert_dec_equal(n_connects, 4);
	fake_now = T0 + 4 * SEC - 1;
	assert_dec_equal(try_connect(9, NULL), EHOSTUNREACH);
	assert_dec_equal(n_connects, 4);
	fake_now = T0 + 4 * SEC;
	connect_err = 0;
	assert_dec_equal(try_connect(9, NULL), 0); /* the probe connects: closed */
	for (int i = 0; i < 3; i++)
		assert_dec_equal(try_connect(9, NULL), 0);
	assert_dec_equal(n_connects, 8);
	/* Closed with an empty window: three new failures to open again. */
	connect_err = ECONNREFUSED;
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED);
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED);
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED);
	assert_dec_equal(try_connect(9, NULL), EHOSTUNREACH);
	assert_dec_equal(n_connects, 11);
}

/* per=peer (the default): another port of the same address is another
 * destination; per=process: one breaker for all. */
static void test_shim_breaker_scope(void **state)
{
	(void)state;
	use_policy("SLUICE_BREAK", "errors=2");
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED);
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED);
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED); /* broken: the default errno */
	assert_dec_equal(n_connects, 2);
	connect_err = 0;
	assert_dec_equal(try_connect(10, NULL), 0);
	assert_dec_equal(n_connects, 3);
	use_policy("SLUICE_BREAK", "errors=2,per=process,to=127.0.0.0/8");
	connect_err = ECONNREFUSED;
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED);
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED);
	connect_err = 0;
	assert_dec_equal(try_connect(10, NULL), ECONNREFUSED);
	assert_dec_equal(n_connects, 5);
}

/* Errors that say nothing of the destination, and refusals by sluice's own
 * rate rules, are not counted. */
static void test_shim_breaker_what_counts(void **state)
{
	(void)state;
	use_policy2("SLUICE_BREAK", "errors=2", "SLUICE_CONNECT", "1/s,action=reject");
	connect_err = ECONNREFUSED;
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED); /* real: 1 */
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED); /* the rate rule's */
	assert_dec_equal(n_connects, 1);
	fake_now += SEC;
	connect_err = EACCES;
	assert_dec_equal(try_connect(9, NULL), EACCES); /* not a failure of the peer */
	fake_now += SEC;
	connect_err = ETIMEDOUT;
	assert_dec_equal(try_connect(9, NULL), ETIMEDOUT); /* real: 2, opens */
	fake_now += SEC;
	assert_dec_equal(try_connect(9, NULL), ECONNREFUSED);
	assert_dec_equal(n_connects, 3);
}

/* Non-blocking: the outcome comes from getsockopt(SO_ERROR); while the
 * probe is in progress every other connect fails at once. */
static void test_shim_breaker_nonblocking(void **state)
{
	(void)state;
	use_policy("SLUICE_BREAK", "errors=2,open=1s,errno=EHOSTUNREACH");
	int s, e;
	socklen_t l = sizeof(e);
	connect_err = EINPROGRESS;
	tcp_state = TCP_SYN_SENT;
	for (int i = 0; i < 2; i++) {
		assert_dec_equal(try_connect(9, &s), EINPROGRESS);
		soerror = 0; /* still connecting: nothing known */
		assert_dec_equal(getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &l), 0);
		soerror = ECONNREFUSED;
		tcp_state = TCP_CLOSE;
		assert_dec_equal(getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &l), 0);
		assert_dec_equal(e, ECONNREFUSED);
		tcp_state = TCP_SYN_SENT;
		close(s);
	}
	assert_dec_equal(try_connect(9, NULL), EHOSTUNREACH);
	assert_dec_equal(n_connects, 2);
	fake_now = T0 + SEC;
	assert_dec_equal(try_connect(9, &s), EINPROGRESS);    /* the probe */
	assert_dec_equal(try_connect(9, NULL), EHOSTUNREACH); /* others fail meanwhile */
	assert_dec_equal(n_connects, 3);
	/* SO_ERROR 0 on a socket not yet connecting (a deferred connect
	 * waiting for its rate slot) says nothing yet. */
	soerror = 0;
	tcp_state = TCP_CLOSE;
	assert_dec_equal(getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &l), 0);
	assert_dec_equal(try_connect(9, NULL), EHOSTUNREACH); /* still half-open */
	/* It connected; the peer may already have closed (CLOSE_WAIT). */
	soerror = 0;
	tcp_state = TCP_CLOSE_WAIT;
	assert_dec_equal(getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &l), 0);
	assert_dec_equal(e, 0);
	close(s);
	connect_err = 0;
	assert_dec_equal(try_connect(9, NULL), 0);
	assert_dec_equal(n_connects, 4);
}

int main(void)
{
	/* Link the wrappers even when ASan's interceptors define the names. */
	assert_dec_equal(sl__wrap_sock_anchor + sl__wrap_sockopt_anchor, 2);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_shim_breaker_blocking, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_breaker_scope, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_breaker_what_counts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_breaker_nonblocking, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
