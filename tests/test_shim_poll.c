/* SPDX-License-Identifier: MIT */
/*
 * test_shim_poll.c - event loops under the shim (nonblock=eagain): partial
 * sends and EAGAIN on non-blocking sockets, the ready instant they leave,
 * and poll, select and epoll (level-triggered, edge-triggered, oneshot)
 * hiding a throttled fd until exactly that instant; deferred non-blocking
 * connect; non-blocking accept; nonblock=sleep; an epoll fd inside poll.
 *
 * The clock is fake (sl__clock_ns); sockets, data and the kernel's readiness
 * are real (loopback TCP). The real waits (ppoll, pselect, epoll_wait,
 * epoll_pwait2) are replaced by fakes that record the timeout the shim
 * asked for, ask the kernel with (almost) no timeout, and, when the kernel
 * has nothing, advance the fake clock by the whole timeout: a wait "sleeps"
 * in no time, so the exact instants the shim wakes at can be asserted.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_shim.h"
#include "../shim/wake.h"

#define MS 1000000ull
#define SEC 1000000000ull
#define T0 (5 * SEC)
#define MAX_WAITS 16
#define NONE UINT64_MAX

/* ---- fakes ---------------------------------------------------------------- */

struct wait_rec {
	uint64_t at;         /* fake time of the call */
	uint64_t timeout_ns; /* NONE: no timeout */
	int fd0;             /* poll: fds[0].fd as given to the kernel */
	short ev0;           /* poll: fds[0].events */
	bool in_wset;        /* select: the watched fd is in the write set */
};

static struct wait_rec waits[MAX_WAITS];
static int n_waits, watch_fd;
static struct sl_real saved;

static struct wait_rec *record(uint64_t timeout_ns)
{
	assert_true(n_waits < MAX_WAITS);
	struct wait_rec *w = &waits[n_waits++];
	memset(w, 0, sizeof(*w));
	w->at = fake_now;
	w->timeout_ns = timeout_ns;
	return w;
}

/* After the kernel answered r: an empty answer took the whole timeout. */
static int advance(int r, uint64_t timeout_ns)
{
	if (r == 0 && timeout_ns != NONE)
		fake_now += timeout_ns;
	return r;
}

/* 20 ms of real time at most: enough for loopback events to arrive. */
static const struct timespec real_short = {.tv_sec = 0, .tv_nsec = 20 * 1000000};

static uint64_t ts_ns(const struct timespec *ts)
{
	return ts == NULL ? NONE : (uint64_t)ts->tv_sec * SEC + (uint64_t)ts->tv_nsec;
}

static const struct timespec *real_ts(const struct timespec *ts)
{
	return ts == NULL || ts_ns(ts) > ts_ns(&real_short) ? &real_short : ts;
}

static int fake_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
	struct wait_rec *w = record(ts_ns(ts));
	w->fd0 = fds[0].fd;
	w->ev0 = fds[0].events;
	return advance(saved.ppoll(fds, n, real_ts(ts), mask), ts_ns(ts));
}

static int fake_pselect(int nfds, fd_set *r, fd_set *wr, fd_set *x, const struct timespec *ts,
			const sigset_t *mask)
{
	struct wait_rec *w = record(ts_ns(ts));
	w->in_wset = wr != NULL && FD_ISSET(watch_fd, wr);
	return advance(saved.pselect(nfds, r, wr, x, real_ts(ts), mask), ts_ns(ts));
}

static int fake_epoll_wait(int ep, struct epoll_event *ev, int max, int ms)
{
	uint64_t t = ms < 0 ? NONE : (uint64_t)ms * MS;
	record(t);
	return advance(saved.epoll_wait(ep, ev, max, ms < 0 || ms > 20 ? 20 : ms), t);
}

static int fake_epoll_pwait2(int ep, struct epoll_event *ev, int max, const struct timespec *ts,
			     const sigset_t *mask)
{
	record(ts_ns(ts));
	return advance(saved.epoll_pwait2(ep, ev, max, real_ts(ts), mask), ts_ns(ts));
}

/* ---- fixture ---------------------------------------------------------------- */

struct fix {
	int lst, cli, srv; /* a connected loopback TCP pair and its listener */
	struct sockaddr_in addr;
	char buf[4096];
};

static void set_nonblock(int fd)
{
	assert_dec_equal(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
}

static int setup(void **state)
{
	static struct fix f;
	shim_setup(&saved, T0);
	n_waits = 0;
	loopback_pair(&f.lst, &f.cli, &f.srv, &f.addr);
	memset(f.buf, 'x', sizeof(f.buf));
	sl__real.ppoll = fake_ppoll;
	sl__real.pselect = fake_pselect;
	sl__real.epoll_wait = fake_epoll_wait;
	sl__real.epoll_pwait2 = fake_epoll_pwait2;
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	shim_teardown(&saved);
	close(f->lst);
	close(f->cli);
	close(f->srv);
	return 0;
}

/* 1000 B/s with a 100 B burst: an nb wait is for 50 B (half the burst,
 * under 100 ms of the rate), so a drained bucket is ready again 50 ms later. */
#define RATE_SPEC "1000B/s,burst=100B"

/* Drain the send bucket of f->cli at T0: 100 of 400 bytes go out. */
static void throttle_send(struct fix *f)
{
	assert_dec_equal(send(f->cli, f->buf, 400, 0), 100);
	uint64_t until = NONE;
	assert_dec_equal(sl__ready_hidden(f->cli, fake_now, &until), SL_HIDE_OUT);
	assert_dec_equal(until, T0 + 50 * MS);
}

/* ---- tests -------------------------------------------------------------------- */

static void test_shim_poll_send_partial_then_eagain(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	set_nonblock(f->cli);
	throttle_send(f);
	errno = 0;
	assert_dec_equal(send(f->cli, f->buf, 400, 0), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(n_sleeps, 0); /* nothing ever sleeps in place */
	fake_now = T0 + 50 * MS;       /* exactly the 50 B of the nb wait */
	assert_dec_equal(send(f->cli, f->buf, 400, 0), 50);
	uint64_t until = NONE;
	assert_dec_equal(sl__ready_hidden(f->cli, fake_now, &until), SL_HIDE_OUT);
	assert_dec_equal(until, T0 + 100 * MS);
	assert_dec_equal(sl__ready_hidden(f->cli, T0 + 100 * MS, &until), 0);
}

/* Event-loop throttling is counted: a call cut short or answered EAGAIN
 * is delayed, and its delay is how much longer its fd is held back (a
 * refusal inside a hold adds nothing). */
static void test_shim_poll_stats(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	set_nonblock(f->cli);
	struct sl_rstats *st = &sl__st.stats[0];
	throttle_send(f); /* 100 of 400 B, held until T0 + 50 ms */
	assert_dec_equal(atomic_load(&st->delayed), 1);
	assert_dec_equal(atomic_load(&st->delay_ns), 50 * MS);
	assert_dec_equal(atomic_load(&st->max_delay_ns), 50 * MS);
	fake_now = T0 + 20 * MS;
	assert_dec_equal(send(f->cli, f->buf, 400, 0), -1); /* EAGAIN inside the hold */
	assert_dec_equal(atomic_load(&st->delayed), 2);
	assert_dec_equal(atomic_load(&st->delay_ns), 50 * MS);
	fake_now = T0 + 50 * MS;
	assert_dec_equal(send(f->cli, f->buf, 400, 0), 50); /* held until T0 + 100 ms */
	assert_dec_equal(atomic_load(&st->delayed), 3);
	assert_dec_equal(atomic_load(&st->delay_ns), 100 * MS);
	assert_dec_equal(test_stats(0)->calls, 3);
}

static void test_shim_poll_msg_dontwait(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	/* A blocking socket: MSG_DONTWAIT alone makes the call non-blocking. */
	assert_dec_equal(send(f->cli, f->buf, 400, MSG_DONTWAIT), 100);
	errno = 0;
	assert_dec_equal(send(f->cli, f->buf, 400, MSG_DONTWAIT), -1);
	assert_dec_equal(errno, EWOULDBLOCK);
	assert_dec_equal(n_sleeps, 0);
	/* Without it the same socket waits in place. */
	assert_dec_equal(send(f->cli, f->buf, 40, 0), 40);
	assert_true(n_sleeps > 0);
}

static void test_shim_poll_nonblock_sleep(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC ",nonblock=sleep");
	set_nonblock(f->cli);
	assert_dec_equal(send(f->cli, f->buf, 400, 0), 400);
	assert_true(n_sleeps > 0);
	assert_dec_equal(fake_now, T0 + 300 * MS); /* 300 bytes past the burst */
	uint64_t until = NONE;
	assert_dec_equal(sl__ready_hidden(f->cli, fake_now, &until), 0);
}

static void test_shim_poll_hides_until_ready(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	set_nonblock(f->cli);
	throttle_send(f);
	struct pollfd p = {.fd = f->cli, .events = POLLOUT};
	assert_dec_equal(poll(&p, 1, 1000), 1);
	assert_dec_equal(p.fd, f->cli);
	assert_dec_equal(p.events, POLLOUT);
	assert_dec_equal(p.revents, POLLOUT);
	assert_dec_equal(fake_now, T0 + 50 * MS);
	assert_dec_equal(n_waits, 2);
	assert_dec_equal(waits[0].fd0, ~f->cli); /* nothing left to wait for: skipped */
	assert_dec_equal(waits[0].timeout_ns, 50 * MS);
	assert_dec_equal(waits[1].fd0, f->cli);
	assert_dec_equal(waits[1].timeout_ns, 950 * MS);
}

static void test_shim_poll_other_direction_kept(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	set_nonblock(f->cli);
	throttle_send(f);
	assert_dec_equal(saved.send(f->srv, "ping", 4, 0), 4); /* cli is readable now */
	struct pollfd p = {.fd = f->cli, .events = POLLIN | POLLOUT};
	assert_dec_equal(poll(&p, 1, 1000), 1);
	assert_dec_equal(p.revents, POLLIN); /* not POLLOUT before T0 + 50 ms */
	assert_dec_equal(p.events, POLLIN | POLLOUT);
	assert_dec_equal(waits[0].ev0, POLLIN);
	assert_dec_equal(fake_now, T0);
}

static void test_shim_poll_select(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	set_nonblock(f->cli);
	throttle_send(f);
	watch_fd = f->cli;
	fd_set w;
	FD_ZERO(&w);
	FD_SET(f->cli, &w);
	struct timeval tv = {.tv_sec = 1, .tv_usec = 0};
	assert_dec_equal(select(f->cli + 1, NULL, &w, NULL, &tv), 1);
	assert_true(FD_ISSET(f->cli, &w));
	assert_dec_equal(fake_now, T0 + 50 * MS);
	assert_dec_equal(n_waits, 2);
	assert_false(waits[0].in_wset);
	assert_dec_equal(waits[0].timeout_ns, 50 * MS);
	assert_true(waits[1].in_wset);
	assert_dec_equal(tv.tv_sec, 0); /* the time left, as Linux reports it */
	assert_dec_equal(tv.tv_usec, 950000);
}

static int epoll_with(int fd, uint32_t events, uint64_t data)
{
	int ep = epoll_create1(0);
	assert_true(ep >= 0);
	struct epoll_event e = {.events = events, .data.u64 = data};
	assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e), 0);
	return ep;
}

static void test_shim_poll_epoll_level(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	set_nonblock(f->cli);
	int ep = epoll_with(f->cli, EPOLLOUT, 0xfeed);
	struct epoll_event ev[4];
	assert_dec_equal(epoll_wait(ep, ev, 4, 0), 1);
	assert_dec_equal(ev[0].data.u64, 0xfeed);
	throttle_send(f);
	n_waits = 0;
	/* Level-triggered and writable all along: no event, and no spin,
	 * before the tokens are there. */
	assert_dec_equal(epoll_wait(ep, ev, 4, 1000), 1);
	assert_dec_equal(ev[0].events, EPOLLOUT);
	assert_dec_equal(ev[0].data.u64, 0xfeed);
	assert_dec_equal(fake_now, T0 + 50 * MS);
	assert_dec_equal(n_waits, 2);
	assert_dec_equal(waits[0].timeout_ns, 50 * MS);
	close(ep);
}

/* A fresh socket under the bucket another socket drains (nb.h: the wait
 * wrappers' question): reported at once while the bucket is full (at rest,
 * answered inline), held while it is drained until a wait's worth is
 * there, reported at once when half full (the full look) and when full
 * again. poll and epoll ask the same question. */
static void test_shim_poll_fresh_at_rest(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	const int fresh = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fresh >= 0);
	assert_dec_equal(connect(fresh, (struct sockaddr *)&f->addr, sizeof(f->addr)), 0);
	set_nonblock(fresh);
	set_nonblock(f->cli);
	const int ep = epoll_with(fresh, EPOLLOUT, 0xf00d);
	struct epoll_event ev[4];
	struct pollfd p = {.fd = fresh, .events = POLLOUT};
	/* Full. */
	assert_dec_equal(poll(&p, 1, 1000), 1);
	assert_dec_equal(p.revents, POLLOUT);
	assert_dec_equal(epoll_wait(ep, ev, 4, 1000), 1);
	assert_dec_equal(ev[0].data.u64, 0xf00d);
	assert_dec_equal(fake_now, T0);
	/* Drained by the other socket, whose turn (fair.c) has the first
	 * 50 B at T0 + 50 ms: the fresh one waits for the next 50 B. */
	throttle_send(f);
	assert_dec_equal(poll(&p, 1, 1000), 1);
	assert_dec_equal(p.revents, POLLOUT);
	assert_dec_equal(fake_now, T0 + 100 * MS);
	/* Not at rest, but a wait's worth is there: reported at once. */
	assert_dec_equal(epoll_wait(ep, ev, 4, 1000), 1);
	assert_dec_equal(ev[0].events, EPOLLOUT);
	assert_dec_equal(fake_now, T0 + 100 * MS);
	/* Drained again, by the fresh socket itself (50 B are there): epoll
	 * holds it until the next 50 B. */
	assert_dec_equal(send(fresh, f->buf, 400, 0), 50);
	assert_dec_equal(epoll_wait(ep, ev, 4, 1000), 1);
	assert_dec_equal(fake_now, T0 + 150 * MS);
	/* Full again. */
	fake_now += 300 * MS;
	const uint64_t full = fake_now;
	assert_dec_equal(poll(&p, 1, 1000), 1);
	assert_dec_equal(epoll_wait(ep, ev, 4, 1000), 1);
	assert_dec_equal(fake_now, full);
	close(ep);
	close(fresh);
}

static void test_shim_poll_epoll_edge(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	set_nonblock(f->cli);
	int ep = epoll_with(f->cli, EPOLLOUT | EPOLLET, 7);
	struct epoll_event ev[4];
	assert_dec_equal(epoll_wait(ep, ev, 4, 0), 1);
	assert_dec_equal(epoll_wait(ep, ev, 4, 0), 0); /* the edge was taken */
	throttle_send(f);
	/* The socket buffer never filled, so the kernel has no new edge to
	 * give: the shim delivers the one the partial send implied. */
	assert_dec_equal(epoll_wait(ep, ev, 4, 1000), 1);
	assert_dec_equal(ev[0].data.u64, 7);
	assert_dec_equal(fake_now, T0 + 50 * MS);
	assert_dec_equal(epoll_wait(ep, ev, 4, 0), 0); /* once */
	close(ep);
}

static void test_shim_poll_epoll_oneshot(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_RECV", RATE_SPEC);
	set_nonblock(f->srv);
	int ep = epoll_with(f->srv, EPOLLIN | EPOLLONESHOT, 0xabc);
	assert_dec_equal(send(f->cli, f->buf, 1000, 0), 1000);
	struct epoll_event ev[4];
	assert_dec_equal(epoll_wait(ep, ev, 4, 1000), 1);
	assert_dec_equal(ev[0].data.u64, 0xabc);
	assert_dec_equal(recv(f->srv, f->buf, 1000, 0), 100); /* the burst */
	struct epoll_event e = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 0xabd};
	assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_MOD, f->srv, &e), 0); /* re-armed */
	assert_dec_equal(epoll_wait(ep, ev, 4, 1000), 1);
	assert_dec_equal(ev[0].data.u64, 0xabd);
	assert_dec_equal(fake_now, T0 + 50 * MS);
	/* Delivered, so disarmed: a new throttle must not re-arm it. */
	assert_dec_equal(recv(f->srv, f->buf, 1000, 0), 50);
	assert_dec_equal(epoll_wait(ep, ev, 4, 100), 0);
	assert_dec_equal(fake_now, T0 + 150 * MS);
	close(ep);
}

/* Two non-blocking receivers share one receive limiter (per=process):
 * their turns come in the order they waited (fair.c), 50 B each (half the
 * burst), not both at the instant the first one's units are there. */
static void test_shim_poll_recv_turns(void **state)
{
	struct fix *f = *state;
	int lst2, cli2, srv2;
	struct sockaddr_in a2;
	loopback_pair(&lst2, &cli2, &srv2, &a2);
	use_policy("SLUICE_RECV", RATE_SPEC);
	set_nonblock(f->srv);
	set_nonblock(srv2);
	assert_dec_equal(send(f->cli, f->buf, 1000, 0), 1000);
	assert_dec_equal(send(cli2, f->buf, 1000, 0), 1000);
	uint64_t until = NONE;
	/* A takes the burst and waits for its turn: 50 B at T0 + 50 ms. */
	assert_dec_equal(recv(f->srv, f->buf, 1000, 0), 100);
	assert_dec_equal(sl__ready_hidden(f->srv, fake_now, &until), SL_HIDE_IN);
	assert_dec_equal(until, T0 + 50 * MS);
	/* B finds nothing: its turn comes after A's (without turns it was
	 * ready at T0 + 50 ms too, and whoever the loop served first won). */
	errno = 0;
	assert_dec_equal(recv(srv2, f->buf, 1000, 0), -1);
	assert_dec_equal(errno, EAGAIN);
	until = NONE;
	assert_dec_equal(sl__ready_hidden(srv2, fake_now, &until), SL_HIDE_IN);
	assert_dec_equal(until, T0 + 100 * MS);
	fake_now = T0 + 50 * MS;
	/* B before its turn gets nothing, and keeps its turn. */
	errno = 0;
	assert_dec_equal(recv(srv2, f->buf, 1000, 0), -1);
	assert_dec_equal(errno, EAGAIN);
	until = NONE;
	assert_dec_equal(sl__ready_hidden(srv2, fake_now, &until), SL_HIDE_IN);
	assert_dec_equal(until, T0 + 100 * MS);
	/* A's turn: its 50 B; its next turn is after B's. */
	assert_dec_equal(recv(f->srv, f->buf, 1000, 0), 50);
	until = NONE;
	assert_dec_equal(sl__ready_hidden(f->srv, fake_now, &until), SL_HIDE_IN);
	assert_dec_equal(until, T0 + 150 * MS);
	fake_now = T0 + 100 * MS;
	assert_dec_equal(recv(srv2, f->buf, 1000, 0), 50);
	until = NONE;
	assert_dec_equal(sl__ready_hidden(srv2, fake_now, &until), SL_HIDE_IN);
	assert_dec_equal(until, T0 + 200 * MS);
	fake_now = T0 + 150 * MS;
	assert_dec_equal(recv(f->srv, f->buf, 1000, 0), 50);
	assert_dec_equal(n_sleeps, 0);
	close(srv2);
	close(cli2);
	close(lst2);
}

/* One wait reports three connections ready to receive under one limiter
 * whose bucket is full (nb.h, a wait's round). Before, all three were
 * reported (the bucket at rest), the first receive took the whole burst and
 * the next two got EAGAIN after "ready". Now the first two have turns
 * reserved in the order reported (50 B each: the burst of 100), the third's
 * turn is the next 50 B, at T0 + 50 ms, and it is held back until then. poll,
 * select and epoll_wait alike (how: 0, 1, 2). */
enum { ROUND_POLL, ROUND_SELECT, ROUND_EPOLL };

/* The fds of fd[0..2] that a wait of kind how reports ready at once to
 * receive (out false) or to send (out true). */
static unsigned round_wait(int how, const int fd[3], bool out)
{
	const short ev = out ? POLLOUT : POLLIN;
	unsigned got = 0;
	if (how == ROUND_POLL) {
		struct pollfd p[3];
		for (int k = 0; k < 3; k++)
			p[k] = (struct pollfd){.fd = fd[k], .events = ev};
		const int n = poll(p, 3, 1000);
		for (int k = 0; k < 3; k++)
			got |= p[k].revents == ev ? 1u << k : 0;
		assert_dec_equal(n, __builtin_popcount(got));
	} else if (how == ROUND_SELECT) {
		fd_set r;
		FD_ZERO(&r);
		int hi = 0;
		for (int k = 0; k < 3; k++) {
			FD_SET(fd[k], &r);
			hi = fd[k] > hi ? fd[k] : hi;
		}
		struct timeval tv = {.tv_sec = 1, .tv_usec = 0};
		const int n = out ? select(hi + 1, NULL, &r, NULL, &tv)
				  : select(hi + 1, &r, NULL, NULL, &tv);
		for (int k = 0; k < 3; k++)
			got |= FD_ISSET(fd[k], &r) ? 1u << k : 0;
		assert_dec_equal(n, __builtin_popcount(got));
	} else {
		const int ep = epoll_create1(0);
		assert_true(ep >= 0);
		for (int k = 0; k < 3; k++) {
			struct epoll_event e = {.events = out ? EPOLLOUT : EPOLLIN,
						.data.u64 = (uint64_t)k};
			assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_ADD, fd[k], &e), 0);
		}
		struct epoll_event ev4[4];
		const int n = epoll_wait(ep, ev4, 4, 1000);
		for (int k = 0; k < n; k++)
			got |= 1u << ev4[k].data.u64;
		assert_dec_equal(n, __builtin_popcount(got));
		close(ep);
	}
	return got;
}

/* Two more connected loopback pairs beside the fixture's, for a round. */
struct pairs2 {
	int lst[2], cli[2], srv[2];
};

static void pairs2_open(struct pairs2 *p)
{
	struct sockaddr_in a;
	for (int k = 0; k < 2; k++)
		loopback_pair(&p->lst[k], &p->cli[k], &p->srv[k], &a);
}

static void pairs2_close(const struct pairs2 *p)
{
	for (int k = 0; k < 2; k++) {
		close(p->srv[k]);
		close(p->cli[k]);
		close(p->lst[k]);
	}
}

/* One step of a round test: a wait reports the fds of `got` at `at_ms`
 * after T0, and fd k (one of them) moves `moved` bytes. */
struct round_step {
	unsigned got;
	unsigned at_ms;
	int k;
	ssize_t moved;
};

/* The steps after the first wait, each checked against the rule's bound
 * (1000 B/s, burst 100 B: never more than 100 B + 1 B per ms so far). */
static void round_steps(int how, const int fd[3], bool out, char *buf, size_t n, ssize_t total,
			const struct round_step *st, int nst)
{
	for (int q = 0; q < nst; q++) {
		assert_dec_equal(round_wait(how, fd, out), st[q].got);
		assert_dec_equal(fake_now, T0 + st[q].at_ms * MS);
		const ssize_t m = out ? send(fd[st[q].k], buf, n, 0) : recv(fd[st[q].k], buf, n, 0);
		assert_dec_equal(m, st[q].moved);
		total += m;
		assert_true(total <= 100 + (ssize_t)st[q].at_ms);
	}
}

static void round_case(struct fix *f, int how)
{
	struct pairs2 p;
	pairs2_open(&p);
	use_policy("SLUICE_RECV", RATE_SPEC);
	const int fd[3] = {f->srv, p.srv[0], p.srv[1]};
	const int peer[3] = {f->cli, p.cli[0], p.cli[1]};
	for (int k = 0; k < 3; k++) {
		set_nonblock(fd[k]);
		assert_dec_equal(send(peer[k], f->buf, 1000, 0), 1000);
	}
	/* All three at once: a round of three fds shares the piece four ways,
	 * a turn of 25 B each (before, turns of half the piece: two fds, the
	 * third held back 50 ms; under a rule that never limits, one fd of
	 * 3000). Nothing is held back. */
	assert_dec_equal(round_wait(how, fd, false), 7u);
	assert_dec_equal(fake_now, T0);
	uint64_t until = NONE;
	assert_dec_equal(sl__ready_hidden(fd[2], fake_now, &until), 0);
	/* Each reported one receives at least its turn, none EAGAIN after
	 * "ready"; the first also the 25 B left free. */
	assert_dec_equal(recv(fd[0], f->buf, 1000, 0), 50);
	assert_dec_equal(recv(fd[1], f->buf, 1000, 0), 25);
	assert_dec_equal(recv(fd[2], f->buf, 1000, 0), 25);
	/* Then each at its next turn (half the piece), in order. */
	const struct round_step st[] = {{1, 50, 0, 50}, {2, 100, 1, 50}, {4, 150, 2, 50}};
	round_steps(how, fd, false, f->buf, 1000, 100, st, 3);
	assert_dec_equal(n_sleeps, 0);
	pairs2_close(&p);
}

static void test_shim_poll_round_poll(void **state)
{
	round_case(*state, ROUND_POLL);
}

static void test_shim_poll_round_select(void **state)
{
	round_case(*state, ROUND_SELECT);
}

static void test_shim_poll_round_epoll(void **state)
{
	round_case(*state, ROUND_EPOLL);
}

/* The same round for sends: three connections reported writable at once
 * with the send bucket full. Before turns, the first send took the whole
 * burst (a partial write of what the rule allowed now) and the next two got
 * EAGAIN after "ready". Each reported fd has its turn of 25 B (as
 * round_case), and sends at least it. n is each send's size: 1000 (past the
 * rule's piece: the general path) or 40 (the fast path's size, which
 * leaves the call to the general path while turns are kept: the fd's own
 * turn pays first, then what is free). */
static void round_send_case(struct fix *f, int how, size_t n)
{
	struct pairs2 p;
	pairs2_open(&p);
	use_policy("SLUICE_SEND", RATE_SPEC);
	const int fd[3] = {f->cli, p.cli[0], p.cli[1]};
	for (int k = 0; k < 3; k++)
		set_nonblock(fd[k]);
	assert_dec_equal(round_wait(how, fd, true), 7u);
	assert_dec_equal(fake_now, T0);
	uint64_t until = NONE;
	assert_dec_equal(sl__ready_hidden(fd[2], fake_now, &until), 0);
	const bool big = n == 1000;
	/* 1000: 25 + 25 free, 25, 25. 40: 25 + 15 free, 25 + 10 free, 25.
	 * epoll the same: the kernel's fourth event, the shim's wake-up timer
	 * (expired in an earlier test, never read), filled epoll_wait's four
	 * and is replaced by another (ep_wake_room); before, the round shared
	 * among four events, 20 B turns, and sends of 60, 20, 20. */
	assert_dec_equal(send(fd[0], f->buf, n, 0), big ? 50 : 40);
	assert_dec_equal(send(fd[1], f->buf, n, 0), big ? 25 : 35);
	assert_dec_equal(send(fd[2], f->buf, n, 0), 25);
	/* Then each at its turn: half the piece, or what its last call still
	 * wanted (fd 1: 5 B, fd 2: 15 B). */
	const struct round_step big_st[] = {{1, 50, 0, 50}, {2, 100, 1, 50}, {4, 150, 2, 50}};
	const struct round_step small_st[] = {{2, 5, 1, 5},
					      {4, 20, 2, 15},
					      {1, 70, 0, 40},
					      {2, 105, 1, 35}};
	round_steps(how, fd, true, f->buf, n, 100, big ? big_st : small_st, big ? 3 : 4);
	assert_dec_equal(n_sleeps, 0);
	pairs2_close(&p);
}

static void test_shim_poll_round_send_poll(void **state)
{
	round_send_case(*state, ROUND_POLL, 1000);
}

static void test_shim_poll_round_send_select(void **state)
{
	round_send_case(*state, ROUND_SELECT, 1000);
}

static void test_shim_poll_round_send_epoll(void **state)
{
	round_send_case(*state, ROUND_EPOLL, 1000);
}

static void test_shim_poll_round_send_small(void **state)
{
	round_send_case(*state, ROUND_POLL, 40);
}

/* A rule that never limits is not seen by a wait that reports many fds:
 * 40 connected pairs, all writable, all reported (before, the second fd's
 * turn of half a piece waited for the bucket's rounding: 1 of 40), and
 * each then sends its byte. */
#define MANY 40
static void test_shim_poll_round_never_limits(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "10GB/s,family=unix");
	int sv[MANY][2];
	struct pollfd p[MANY];
	for (int k = 0; k < MANY; k++) {
		assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv[k]), 0);
		set_nonblock(sv[k][0]);
		p[k] = (struct pollfd){.fd = sv[k][0], .events = POLLOUT};
	}
	assert_dec_equal(poll(p, MANY, 1000), MANY);
	assert_dec_equal(fake_now, T0);
	for (int k = 0; k < MANY; k++) {
		assert_dec_equal(p[k].revents, POLLOUT);
		assert_dec_equal(send(sv[k][0], f->buf, 1, 0), 1);
	}
	assert_dec_equal(n_sleeps, 0);
	for (int k = 0; k < MANY; k++) {
		close(sv[k][0]);
		close(sv[k][1]);
	}
}

/* A small send while turns are kept, the bucket holding more than the
 * turns: its fd's turn pays for it and the rest of the turn goes back, as
 * the general path settles it; the fast path (which would spend the
 * bucket's units, or this thread's credit, and leave the turn kept) is not
 * taken while any turn is kept (fair.h). */
static void test_shim_poll_round_send_fast_kept(void **state)
{
	struct fix *f = *state;
	struct pairs2 p;
	pairs2_open(&p);
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B");
	const int fd[3] = {f->cli, p.cli[0], p.cli[1]};
	for (int k = 0; k < 3; k++)
		set_nonblock(fd[k]);
	/* Each reported fd holds a turn of 100 B (100 ms at the rate). */
	assert_dec_equal(round_wait(ROUND_POLL, fd, true), 7u);
	assert_dec_equal(sl_limiter_available(sl__st.rule_lim[0], fake_now), 700);
	assert_dec_equal(atomic_load(&sl__st.fair_kept), 3);
	/* Without the check: 660 (the bucket paid) and 3 turns kept. */
	assert_dec_equal(send(fd[0], f->buf, 40, 0), 40);
	assert_dec_equal(sl_limiter_available(sl__st.rule_lim[0], fake_now), 760);
	assert_dec_equal(atomic_load(&sl__st.fair_kept), 2);
	assert_dec_equal(send(fd[1], f->buf, 40, 0), 40);
	assert_dec_equal(sl_limiter_available(sl__st.rule_lim[0], fake_now), 820);
	assert_dec_equal(atomic_load(&sl__st.fair_kept), 1);
	assert_dec_equal(n_sleeps, 0);
	pairs2_close(&p);
}

/* Turns kept by fds a loop stopped serving (reported, never called since)
 * hold most of the bucket: a round's new turn is what is left, and its fd
 * is reported (before, its turn of the full share waited 5 ms for the rest
 * and the fd was held back: under a rule that never limits, CPython's
 * test_selectors saw a zero-timeout select report nothing). */
static void test_shim_poll_round_kept_elsewhere(void **state)
{
	struct fix *f = *state;
	struct pairs2 p, q;
	pairs2_open(&p);
	pairs2_open(&q);
	/* A piece of 1000 B; a turn is at most half of it, 500 B. */
	use_policy("SLUICE_SEND", "10000B/s,burst=1000B");
	const int fd[5] = {f->cli, p.cli[0], p.cli[1], q.cli[0], q.cli[1]};
	struct pollfd a[4];
	for (int k = 0; k < 5; k++)
		set_nonblock(fd[k]);
	for (int k = 0; k < 4; k++)
		a[k] = (struct pollfd){.fd = fd[k], .events = POLLOUT};
	/* Four reported: a fifth of the piece each, 200 B kept four times. */
	assert_dec_equal(poll(a, 4, 1000), 4);
	assert_dec_equal(sl_limiter_available(sl__st.rule_lim[0], fake_now), 200);
	/* Two of them again, with a fifth fd: its share, a quarter (250 B),
	 * is more than the 200 B left; its turn is those 200 B. */
	struct pollfd b[3] = {{.fd = fd[0], .events = POLLOUT},
			      {.fd = fd[1], .events = POLLOUT},
			      {.fd = fd[4], .events = POLLOUT}};
	assert_dec_equal(poll(b, 3, 0), 3);
	assert_dec_equal(b[2].revents, POLLOUT);
	assert_dec_equal(fake_now, T0);
	assert_dec_equal(sl_limiter_available(sl__st.rule_lim[0], fake_now), 0);
	assert_dec_equal(atomic_load(&sl__st.fair_kept), 5);
	/* It sends its turn, no more: nothing else is free at T0. */
	assert_dec_equal(send(fd[4], f->buf, 1000, 0), 200);
	/* The fds not served keep theirs: each still sends its 200 B. */
	assert_dec_equal(send(fd[2], f->buf, 1000, 0), 200);
	assert_dec_equal(n_sleeps, 0);
	pairs2_close(&q);
	pairs2_close(&p);
}

/* The wake-up timer's event (wake.c) takes the only room of a wait for one
 * event: the wait asks again and reports the program's. The timer expired
 * before the set was made (it is never read), so the new set's first wait
 * gets its edge; CPython's selectors wait for as many events as fds are
 * registered, and select(0) over one writable socket returned nothing. */
static void test_shim_poll_epoll_wake_room(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	close(epoll_create1(0)); /* the process's wake-up timer is made */
	sl__wake_enter();
	sl__wake_lowered(1); /* armed at an instant past: expired now */
	sl__wake_leave();
	const int ep = epoll_with(f->cli, EPOLLOUT, 9);
	struct epoll_event ev[1];
	n_waits = 0;
	assert_dec_equal(epoll_wait(ep, ev, 1, 0), 1);
	assert_dec_equal(ev[0].data.u64, 9);
	assert_dec_equal(ev[0].events, EPOLLOUT);
	assert_dec_equal(n_waits, 2); /* the timer's event, then the fd's */
	assert_dec_equal(epoll_wait(ep, ev, 1, 0), 1);
	assert_dec_equal(n_waits, 3);
	close(ep);
}

/* A per=thread turn is the reserving thread's: another thread's call on
 * the fd uses its own limiter, and the turn's units go back to the
 * reserving thread's (before, the other thread spent them on top of its
 * own burst, and the reserving thread found them gone). */
struct other_recv {
	int fd;
	char *buf;
	ssize_t got;
};

static void *recv_in_thread(void *arg)
{
	struct other_recv *o = arg;
	o->got = recv(o->fd, o->buf, 1000, 0);
	return NULL;
}

static void test_shim_poll_turn_other_thread(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_RECV", RATE_SPEC ",per=thread");
	set_nonblock(f->srv);
	assert_dec_equal(send(f->cli, f->buf, 1000, 0), 1000);
	/* This thread takes its burst and keeps a turn of 50 B at T0 + 50 ms. */
	assert_dec_equal(recv(f->srv, f->buf, 1000, 0), 100);
	fake_now = T0 + 50 * MS;
	/* Another thread: its own burst only. */
	struct other_recv o = {f->srv, f->buf, 0};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, recv_in_thread, &o), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_dec_equal(o.got, 100);
	/* This thread: the 50 B its turn held, given back to its limiter. */
	assert_dec_equal(recv(f->srv, f->buf, 1000, 0), 50);
}

/* The same for two senders sharing one send limiter. */
static void test_shim_poll_send_turns(void **state)
{
	struct fix *f = *state;
	int lst2, cli2, srv2;
	struct sockaddr_in a2;
	loopback_pair(&lst2, &cli2, &srv2, &a2);
	use_policy("SLUICE_SEND", RATE_SPEC);
	set_nonblock(f->cli);
	set_nonblock(cli2);
	uint64_t until = NONE;
	throttle_send(f); /* A: 100 B, its turn at T0 + 50 ms */
	errno = 0;
	assert_dec_equal(send(cli2, f->buf, 400, 0), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(sl__ready_hidden(cli2, fake_now, &until), SL_HIDE_OUT);
	assert_dec_equal(until, T0 + 100 * MS); /* B: after A */
	fake_now = T0 + 50 * MS;
	assert_dec_equal(send(f->cli, f->buf, 400, 0), 50);
	until = NONE;
	assert_dec_equal(sl__ready_hidden(f->cli, fake_now, &until), SL_HIDE_OUT);
	assert_dec_equal(until, T0 + 150 * MS); /* A again: after B */
	fake_now = T0 + 100 * MS;
	assert_dec_equal(send(cli2, f->buf, 400, 0), 50);
	until = NONE;
	assert_dec_equal(sl__ready_hidden(cli2, fake_now, &until), SL_HIDE_OUT);
	assert_dec_equal(until, T0 + 200 * MS);
	assert_dec_equal(n_sleeps, 0);
	close(srv2);
	close(cli2);
	close(lst2);
}

/* A non-blocking recvmmsg returns what the tokens allow, or EAGAIN with the
 * fd held back (it waited in place). */
static void test_shim_poll_recvmmsg(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_RECV", RATE_SPEC);
	set_nonblock(f->srv);
	assert_dec_equal(send(f->cli, f->buf, 400, 0), 400);
	char b[4][100];
	struct iovec iov[4];
	struct mmsghdr v[4];
	memset(v, 0, sizeof(v));
	for (int i = 0; i < 4; i++) {
		iov[i] = (struct iovec){.iov_base = b[i], .iov_len = sizeof(b[i])};
		v[i].msg_hdr.msg_iov = &iov[i];
		v[i].msg_hdr.msg_iovlen = 1;
	}
	assert_dec_equal(recvmmsg(f->srv, v, 4, 0, NULL), 4); /* charged after: 400 B */
	assert_dec_equal(send(f->cli, f->buf, 100, 0), 100);
	errno = 0;
	assert_dec_equal(recvmmsg(f->srv, v, 4, 0, NULL), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(n_sleeps, 0);
	uint64_t until = NONE;
	assert_dec_equal(sl__ready_hidden(f->srv, fake_now, &until), SL_HIDE_IN);
	assert_true(until > T0 + 250 * MS); /* the 300 B of debt first */
	fake_now = until;
	assert_dec_equal(recvmmsg(f->srv, v, 4, 0, NULL), 1);
}

static void test_shim_poll_deferred_connect(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_CONNECT", "1/s");
	int a = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int b = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int r = connect(a, (struct sockaddr *)&f->addr, sizeof(f->addr));
	assert_true(r == 0 || errno == EINPROGRESS); /* the burst: connects now */
	errno = 0;
	assert_dec_equal(connect(b, (struct sockaddr *)&f->addr, sizeof(f->addr)), -1);
	assert_dec_equal(errno, EINPROGRESS);
	assert_dec_equal(n_sleeps, 0);
	int soerr = -1;
	socklen_t l = sizeof(soerr);
	assert_dec_equal(getsockopt(b, SOL_SOCKET, SO_ERROR, &soerr, &l), 0);
	assert_dec_equal(soerr, 0);
	errno = 0;
	assert_dec_equal(connect(b, (struct sockaddr *)&f->addr, sizeof(f->addr)), -1);
	assert_dec_equal(errno, EALREADY);
	struct pollfd p = {.fd = b, .events = POLLOUT};
	assert_dec_equal(poll(&p, 1, 5000), 1);
	assert_dec_equal(p.revents, POLLOUT);
	assert_dec_equal(fake_now, T0 + SEC);
	assert_dec_equal(waits[0].fd0, ~b); /* not even POLLHUP before its slot */
	assert_dec_equal(waits[0].timeout_ns, SEC);
	assert_dec_equal(getsockopt(b, SOL_SOCKET, SO_ERROR, &soerr, &l), 0);
	assert_dec_equal(soerr, 0);
	int c1 = accept(f->lst, NULL, NULL), c2 = accept(f->lst, NULL, NULL);
	assert_true(c1 >= 0 && c2 >= 0);
	close(c1);
	close(c2);
	close(a);
	close(b);
}

static void test_shim_poll_accept_epoll(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_ACCEPT", "1/s");
	set_nonblock(f->lst);
	int c1 = socket(AF_INET, SOCK_STREAM, 0), c2 = socket(AF_INET, SOCK_STREAM, 0);
	assert_dec_equal(connect(c1, (struct sockaddr *)&f->addr, sizeof(f->addr)), 0);
	assert_dec_equal(connect(c2, (struct sockaddr *)&f->addr, sizeof(f->addr)), 0);
	int ep = epoll_with(f->lst, EPOLLIN, 42);
	int s1 = accept(f->lst, NULL, NULL);
	assert_true(s1 >= 0);
	errno = 0;
	assert_dec_equal(accept(f->lst, NULL, NULL), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(n_sleeps, 0);
	struct epoll_event ev[4];
	n_waits = 0;
	assert_dec_equal(epoll_wait(ep, ev, 4, 5000), 1);
	assert_dec_equal(ev[0].data.u64, 42);
	assert_dec_equal(fake_now, T0 + SEC);
	assert_dec_equal(waits[0].timeout_ns, SEC);
	int s2 = accept(f->lst, NULL, NULL);
	assert_true(s2 >= 0);
	close(s1);
	close(s2);
	close(c1);
	close(c2);
	close(ep);
}

static void test_shim_poll_epoll_inside_poll(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	set_nonblock(f->cli);
	int ep = epoll_with(f->cli, EPOLLOUT, 9);
	struct epoll_event ev[4];
	assert_dec_equal(epoll_wait(ep, ev, 4, 0), 1);
	throttle_send(f);
	n_waits = 0;
	/* A loop that polls the epoll fd (GLib, nested loops): poll runs the
	 * timer too, so the epoll fd turns readable at the ready instant. */
	struct pollfd p = {.fd = ep, .events = POLLIN};
	assert_dec_equal(poll(&p, 1, 1000), 1);
	assert_dec_equal(fake_now, T0 + 50 * MS);
	assert_dec_equal(waits[0].timeout_ns, 50 * MS);
	assert_dec_equal(epoll_wait(ep, ev, 4, 0), 1);
	assert_dec_equal(ev[0].data.u64, 9);
	close(ep);
}

static void test_shim_poll_epoll_data_kept(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", RATE_SPEC);
	/* A pipe (never throttled) and a socket in one set, with pointer data:
	 * the program gets its own data back, and MOD/DEL behave. */
	int pfd[2];
	assert_dec_equal(pipe(pfd), 0);
	int ep = epoll_with(pfd[1], EPOLLOUT, (uint64_t)(uintptr_t)&pfd[1]);
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = f};
	assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_ADD, f->cli, &e), 0);
	errno = 0;
	assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_ADD, f->cli, &e), -1);
	assert_dec_equal(errno, EEXIST);
	assert_dec_equal(send(f->srv, "x", 1, 0), 1);
	struct epoll_event ev[4];
	assert_dec_equal(epoll_wait(ep, ev, 4, 1000), 2);
	bool saw_pipe = false, saw_sock = false;
	for (int i = 0; i < 2; i++) {
		saw_pipe |= ev[i].data.ptr == &pfd[1] && ev[i].events == EPOLLOUT;
		saw_sock |= ev[i].data.ptr == f && ev[i].events == EPOLLIN;
	}
	assert_true(saw_pipe && saw_sock);
	assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_DEL, f->cli, NULL), 0);
	errno = 0;
	assert_dec_equal(epoll_ctl(ep, EPOLL_CTL_MOD, f->cli, &e), -1);
	assert_dec_equal(errno, ENOENT);
	assert_dec_equal(epoll_wait(ep, ev, 4, 0), 1);
	assert_ptr_equal(ev[0].data.ptr, &pfd[1]);
	close(ep);
	close(pfd[0]);
	close(pfd[1]);
}

int main(void)
{
	/* Link the wrappers even when ASan's interceptors define the names. */
	assert_dec_equal(sl__wrap_send_anchor + sl__wrap_recv_anchor + sl__wrap_sock_anchor +
				 sl__poll_anchor + (sl__epoll_anchor & sl__epwait_anchor) +
				 sl__wrap_sockopt_anchor,
			 6);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_shim_poll_send_partial_then_eagain, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_stats, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_msg_dontwait, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_nonblock_sleep, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_hides_until_ready, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_other_direction_kept, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_select, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_epoll_level, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_fresh_at_rest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_epoll_edge, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_epoll_oneshot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_recv_turns, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_round_poll, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_round_select, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_round_epoll, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_round_send_poll, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_round_send_select, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_round_send_epoll, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_round_send_small, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_round_never_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_round_send_fast_kept, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_turn_other_thread, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_send_turns, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_recvmmsg, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_deferred_connect, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_accept_epoll, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_epoll_inside_poll, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_epoll_data_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_round_kept_elsewhere, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_shim_poll_epoll_wake_room, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
