/* SPDX-License-Identifier: MIT */
/*
 * test_shim_hup.c - end-of-stream bits under a receive limit (shim/hup.c):
 * on a socket whose reads a byte rule may cut, poll and epoll_wait report
 * IN without RDHUP/HUP (a program would take a cut read after them as the
 * end of the stream: haproxy drops the rest); without a receive byte rule
 * they are reported as the kernel gives them; an event with HUP but without
 * IN because IN is held back waits for the end of the hold and then comes
 * with IN, without HUP.
 *
 * The clock is fake (sl__clock_ns); sockets and the kernel's readiness are
 * real (loopback TCP), and every wait has timeout 0.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ready.h"
#include "test_shim.h"

#define MS 1000000ull
#define T0 (5000 * MS)

struct fix {
	int lst, cli, srv;
	struct sockaddr_in addr;
	struct sl_real saved;
};

static int setup(void **state)
{
	static struct fix f;
	shim_setup(&f.saved, T0);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	close(f->cli);
	close(f->srv);
	close(f->lst);
	shim_teardown(&f->saved);
	return 0;
}

/* The rule in force, then a pair whose client wrote 10 bytes and shut its
 * side: the server's socket has data queued and the peer's FIN. */
static void pair_with_fin(struct fix *f, const char *var, const char *spec)
{
	use_policy(var, spec);
	loopback_pair(&f->lst, &f->cli, &f->srv, &f->addr);
	assert_dec_equal(send(f->cli, "0123456789", 10, 0), 10);
	assert_dec_equal(shutdown(f->cli, SHUT_WR), 0);
	nanosleep(&(struct timespec){.tv_nsec = 20 * 1000000}, NULL); /* the FIN is there */
}

static uint32_t epoll_once(int fd, uint32_t events)
{
	int ep = epoll_create1(0);
	struct epoll_event e = {.events = events, .data.u64 = 7}, out[2];
	assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e), 0);
	int n = epoll_wait(ep, out, 2, 0);
	close(ep);
	assert_true(n == 0 || (n == 1 && out[0].data.u64 == 7));
	return n == 1 ? out[0].events : 0;
}

static short poll_once(int fd, short events)
{
	struct pollfd p = {.fd = fd, .events = events};
	int n = poll(&p, 1, 0);
	assert_true(n == 0 || n == 1);
	return n == 1 ? p.revents : 0;
}

static void test_shim_hup_hidden_under_recv(void **state)
{
	struct fix *f = *state;
	pair_with_fin(f, "SLUICE_RECV", "1MiB/s");
	assert_dec_equal(epoll_once(f->srv, EPOLLIN | EPOLLRDHUP), EPOLLIN);
	assert_dec_equal(poll_once(f->srv, POLLIN | POLLRDHUP), POLLIN);
	/* The program learns of the end by reading 0 after the data. */
	char b[32];
	assert_dec_equal(recv(f->srv, b, sizeof(b), 0), 10);
	assert_dec_equal(recv(f->srv, b, sizeof(b), 0), 0);
}

static void test_shim_hup_shown_without_recv_rule(void **state)
{
	struct fix *f = *state;
	pair_with_fin(f, "SLUICE_SEND", "1MiB/s");
	assert_dec_equal(epoll_once(f->srv, EPOLLIN | EPOLLRDHUP), EPOLLIN | EPOLLRDHUP);
	assert_dec_equal(poll_once(f->srv, POLLIN | POLLRDHUP), POLLIN | POLLRDHUP);
}

static void test_shim_hup_waits_for_hold(void **state)
{
	struct fix *f = *state;
	pair_with_fin(f, "SLUICE_RECV", "1MiB/s");
	assert_dec_equal(shutdown(f->srv, SHUT_WR), 0); /* both sides shut: HUP */
	nanosleep(&(struct timespec){.tv_nsec = 20 * 1000000}, NULL);
	int ep = epoll_create1(0);
	struct epoll_event e = {.events = EPOLLIN | EPOLLOUT, .data.u64 = 9}, out[2];
	assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_ADD, f->srv, &e), 0);
	sl__ready_hold(f->srv, SL_DIR_IN, fake_now + 50 * MS);
	/* IN held: the kernel has OUT|HUP; that waits for the hold. */
	assert_dec_equal(epoll_wait(ep, out, 2, 0), 0);
	assert_dec_equal(poll_once(f->srv, POLLIN | POLLOUT), 0);
	/* IN not asked: no read follows, HUP is shown. */
	assert_dec_equal(poll_once(f->srv, POLLOUT), POLLOUT | POLLHUP);
	fake_now += 50 * MS;
	assert_dec_equal(epoll_wait(ep, out, 2, 0), 1);
	assert_dec_equal(out[0].data.u64, 9);
	assert_dec_equal(out[0].events, EPOLLIN | EPOLLOUT);
	assert_dec_equal(poll_once(f->srv, POLLIN | POLLOUT), POLLIN | POLLOUT);
	close(ep);
}

int main(void)
{
	/* Link the wrappers from the archive even where a sanitizer runtime
	 * defines poll and epoll_wait too. */
	assert_dec_equal(sl__poll_anchor + (sl__epoll_anchor & sl__epwait_anchor) +
				 sl__wrap_recv_anchor,
			 3);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_shim_hup_hidden_under_recv, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_hup_shown_without_recv_rule, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_shim_hup_waits_for_hold, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
