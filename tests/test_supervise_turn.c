/* SPDX-License-Identifier: MIT */
/*
 * test_supervise_turn.c - conns:adaptive in supervised mode (supervise/turn.c)
 * driven through the handlers with made-up notifications, as
 * test_supervise_step.c does: this file defines what supervise/notif.c does
 * (every answer recorded with its instant) and what supervise/place.c does
 * (an accepted socket is installed at fd 600, 601, ... of this process), so
 * the linker takes neither. The program is this test's own thread; its
 * peers are loopback clients of a listener of its own. The clock is the
 * fake one: every instant asserted below is exact.
 *
 * What is checked: a turn holds one slot from the accept to the first send,
 * the next receive waits for the request without a slot and then takes
 * one, a full limit makes a reject rule reset a keep-alive connection (and
 * refuse an accept with a reset), a delay rule waits for the slot, the
 * latency of a turn reaches the controller, whose new limit retunes the
 * limiter, and a connection closed in a turn gives its slot back without a
 * sample.
 *
 * System protection (load1=, cpu=, rt=): each such rule's gate is a second
 * concurrency limit on the same turns. Turns slower than rt= (or the host
 * over load1=, as host.c's functions defined here report it) close the
 * gate down to the peak completion rate x the no-load latency, plus one:
 * an accept past it is refused and its connection reset, a keep-alive
 * request waits half the no-load latency and is reset; fast turns never
 * close it; a dry-run rule admits.
 *
 * The client side (a program's connects): a connect takes no slot and
 * never waits; a request's send starts a turn on the rule's client limit
 * (apart from the server's: a proxy's upstream requests go while its
 * server turns hold every server slot), held with the engine's backoff
 * when it is full (reset after half the no-load latency under reject,
 * EAGAIN at SO_SNDTIMEO, never for a non-blocking send), and the answer's
 * first byte ends it, its latency from the send a sample; the controller
 * moves the client limit.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_core.h"
#include "test_policy.h"

#include "../common/segment.h"
#include "../common/shm_format.h"
#include "../engine/adaptive.h"
#include "../supervise/calls.h"
#include "../supervise/client.h"
#include "../supervise/conns.h"
#include "../supervise/filter.h"
#include "../supervise/gate.h"
#include "../supervise/host.h"
#include "../supervise/io.h"
#include "../supervise/loop.h"
#include "../supervise/notif.h"
#include "../supervise/place.h"
#include "../supervise/sock.h"
#include "../supervise/state.h"
#include "../supervise/target.h"
#include "../supervise/turn.h"

#define T0 (1000 * MS)
#define FD0 600 /* where the first accepted socket is installed */

/* ---- the fake notification fd and placement --------------------------- */

struct answer {
	uint64_t id;
	int64_t val;
	int err;
	bool cont; /* SECCOMP_USER_NOTIF_FLAG_CONTINUE */
	uint64_t at;
};

static struct {
	uint64_t now;
	int n;
	struct answer a[64];
	int next_fd; /* the next accepted socket's number */
	/* The host (host.c's functions): the load average in 1/1000
	 * (UINT64_MAX: unreadable), the CPUs' ticks (advanced by each read
	 * by busy_step of total_step, total_step 0: unreadable), reads. */
	uint64_t load1, busy, total, busy_step, total_step;
	unsigned host_reads;
} fake;

uint64_t sl_sup_now_ns(void)
{
	return fake.now;
}

static int record(uint64_t id, int64_t val, int err, bool cont)
{
	assert_true(fake.n < 64);
	fake.a[fake.n++] = (struct answer){id, val, err, cont, fake.now};
	return 0;
}

int sl_sup_answer(struct sl_sup *s, uint64_t id, int64_t val, int err)
{
	(void)s;
	return record(id, err != 0 ? 0 : val, err, false);
}

int sl_sup_continue(struct sl_sup *s, uint64_t id)
{
	(void)s;
	return record(id, 0, 0, true);
}

bool sl_sup_valid(const struct sl_sup *s, uint64_t id)
{
	(void)s;
	(void)id;
	return true;
}

void sl_sup_warn(const char *fmt, ...)
{
	(void)fmt;
}

bool sl_sup_host_load1(uint64_t *milli)
{
	fake.host_reads++;
	*milli = fake.load1;
	return fake.load1 != UINT64_MAX;
}

bool sl_sup_host_cpu(uint64_t *busy, uint64_t *total)
{
	if (fake.total_step == 0)
		return false;
	fake.busy += fake.busy_step;
	fake.total += fake.total_step;
	*busy = fake.busy;
	*total = fake.total;
	return true;
}

/* ADDFD: the socket lands at the next number of this process. */
int sl_sup_place(struct sl_sup *s, struct sl_sup_thread *th, uint64_t id, int srcfd, bool cloexec)
{
	(void)s;
	(void)th;
	(void)cloexec;
	const int fd = fake.next_fd++;
	assert_dec_equal(dup3(srcfd, fd, O_CLOEXEC), fd);
	record(id, fd, 0, false);
	return fd;
}

/* ---- the rig ------------------------------------------------------------ */

struct rig {
	struct sl_sup s;
	char dir[64];
	int lis; /* the program's listener on 127.0.0.1 */
	uint16_t port;
	uint64_t next_id;
};

static struct rig *rig_new(const char *rules)
{
	struct rig *r = calloc(1, sizeof(*r));
	assert_non_null(r);
	snprintf(r->dir, sizeof(r->dir), "/tmp/sl-turn.XXXXXX");
	assert_non_null(mkdtemp(r->dir));
	sl_seg_use_dir_unsync(r->dir);
	memset(&fake, 0, sizeof(fake));
	fake.now = T0;
	fake.next_fd = FD0;
	fake.load1 = UINT64_MAX;
	r->s.policy = policy_of(rules);
	sl_sup_traps_of(&r->s.policy, &r->s.traps);
	r->s.feat.wait_killable = true;
	r->s.listener = -1;
	r->s.calls = calloc(SL_SUP_CALLS_MAX, sizeof(*r->s.calls));
	assert_non_null(r->s.calls);
	r->lis = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	assert_dec_equal(bind(r->lis, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_dec_equal(listen(r->lis, 8), 0);
	assert_dec_equal(getsockname(r->lis, (struct sockaddr *)&a, &al), 0);
	r->port = ntohs(a.sin_port);
	r->next_id = 1;
	return r;
}

static void rig_free(struct rig *r)
{
	for (unsigned i = 0; i < r->s.calls_hi; i++)
		if (r->s.calls[i].used)
			sl_sup_call_free(&r->s, &r->s.calls[i]);
	sl_sup_target_free(&r->s);
	assert_null(r->s.turns);
	free(r->s.calls);
	close(r->lis);
	for (int fd = FD0; fd < fake.next_fd; fd++)
		close(fd);
	assert_dec_equal(rmdir(r->dir), 0);
	free(r);
}

/* A client connected to the program's listener (not yet accepted). */
static int client(struct rig *r)
{
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				.sin_port = htons(r->port)};
	assert_dec_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	return c;
}

static struct seccomp_notif req_of(struct rig *r, int nr, uint64_t a0, uint64_t a1, uint64_t a2,
				   uint64_t a3)
{
	struct seccomp_notif q = {.id = r->next_id++, .pid = (uint32_t)gettid()};
	q.data.nr = nr;
	q.data.arch = AUDIT_ARCH_X86_64;
	q.data.args[0] = a0;
	q.data.args[1] = a1;
	q.data.args[2] = a2;
	q.data.args[3] = a3;
	return q;
}

/* The one held call (asserted), or NULL if none is held. */
static struct sl_sup_call *held_call(struct rig *r)
{
	struct sl_sup_call *c = NULL;
	for (unsigned i = 0; i < r->s.calls_hi; i++)
		if (r->s.calls[i].used) {
			assert_null(c);
			c = &r->s.calls[i];
		}
	return c;
}

/* Step the held call at instant `at` (its deadline, or its fd ready, as
 * the loop would); true if it ended. */
static bool step_at(struct rig *r, uint64_t at)
{
	struct sl_sup_call *c = held_call(r);
	assert_non_null(c);
	fake.now = at;
	c->wait = SL_SUP_WAIT_NONE;
	if (!sl_sup_step(&r->s, c, fake.now))
		return false;
	sl_sup_call_free(&r->s, c);
	return true;
}

/* The program accepts (blocking accept4): the fd it was given. */
static int do_accept(struct rig *r)
{
	const int n = fake.n;
	struct seccomp_notif q = req_of(r, SYS_accept4, (uint64_t)r->lis, 0, 0, SOCK_CLOEXEC);
	sl_sup_on_accept(&r->s, &q);
	assert_dec_equal(fake.n, n + 1);
	assert_dec_equal(fake.a[n].id, q.id);
	return fake.a[n].err != 0 ? -fake.a[n].err : (int)fake.a[n].val;
}

static char rbuf[256];

/* The program's receive on fd: the request's notification (handled). */
static struct seccomp_notif do_recv(struct rig *r, int fd, int flags)
{
	struct seccomp_notif q = req_of(r, SYS_recvfrom, (uint64_t)fd, (uintptr_t)rbuf,
					sizeof(rbuf), (uint64_t)flags);
	sl_sup_on_recv(&r->s, &q);
	return q;
}

/* The program's send of its answer on fd (handled). */
static struct seccomp_notif do_send(struct rig *r, int fd)
{
	static const char ok[] = "OK\n";
	struct seccomp_notif q = req_of(r, SYS_write, (uint64_t)fd, (uintptr_t)ok, 3, 0);
	sl_sup_on_send(&r->s, &q);
	return q;
}

/* What the kernel does with a receive the supervisor let continue. */
static void kernel_recv(int fd, size_t want)
{
	char b[64];
	assert_dec_equal(recv(fd, b, sizeof(b), MSG_DONTWAIT), (ssize_t)want);
}

/* Wait (really) until fd has bytes to read: loopback is quick. */
static void until_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	assert_dec_equal(poll(&p, 1, 2000), 1);
}

/* A client's request on cl, there (really) for the program's fd. */
static void request(int cl, int fd)
{
	assert_dec_equal(write(cl, "GET\n", 4), 4);
	until_readable(fd);
}

static uint64_t in_flight(struct rig *r)
{
	const struct sl_limiter *l = sl_sup_turn_lim(&r->s, 0, fake.now);
	return atomic_load_explicit(&l->u.tun.held, memory_order_relaxed);
}

static uint64_t win_count(struct rig *r)
{
	return atomic_load_explicit(&sl_sup_turn_adapt(&r->s, 0)->win_count, memory_order_relaxed);
}

static uint64_t win_sum_ns(struct rig *r)
{
	return atomic_load_explicit(&sl_sup_turn_adapt(&r->s, 0)->win_sum_ns, memory_order_relaxed);
}

/* ---- the tests -------------------------------------------------------- */

/* A turn holds its slot from the accept to the first send: the receive
 * before the request goes to the kernel at once (the accept's turn runs,
 * its latency from the accept, as in the preload), the send ends the turn
 * (50 ms, a sample). The next receive waits for the next request with no
 * slot held, then takes one; the send after it gives it back. */
static void test_turn_accept_to_send(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:adaptive,initial=4,min=1,max=8");
	/* Placed high and trapped: no send or recv rule needed. */
	assert_dec_equal(r->s.traps.turns, 1);
	int cl = client(r);
	assert_dec_equal(do_accept(r), FD0);
	assert_dec_equal(in_flight(r), 1);
	/* The server reads before the request came: the accept's turn runs,
	 * the kernel receives (and blocks there). */
	struct seccomp_notif q = do_recv(r, FD0, 0);
	assert_dec_equal(fake.n, 2);
	assert_dec_equal(fake.a[1].id, q.id);
	assert_true(fake.a[1].cont);
	assert_null(held_call(r));
	assert_dec_equal(in_flight(r), 1);
	request(cl, FD0);
	kernel_recv(FD0, 4);
	assert_dec_equal(in_flight(r), 1);
	assert_dec_equal(win_count(r), 0);
	/* The answer: the turn ends, its latency (from the accept) a sample. */
	fake.now = T0 + 50 * MS;
	q = do_send(r, FD0);
	assert_dec_equal(fake.n, 3);
	assert_true(fake.a[2].cont); /* no send rule: the kernel sends */
	assert_null(held_call(r));
	assert_dec_equal(in_flight(r), 0);
	assert_dec_equal(win_count(r), 1);
	assert_dec_equal(win_sum_ns(r), 50 * MS);
	assert_dec_equal(write(FD0, "OK\n", 3), 3);
	/* A second send in the same answer: nothing more. */
	q = do_send(r, FD0);
	assert_dec_equal(in_flight(r), 0);
	assert_dec_equal(win_count(r), 1);
	/* Keep-alive: the next receive waits, with no slot, for the request. */
	fake.now = T0 + 60 * MS;
	q = do_recv(r, FD0, 0);
	assert_dec_equal(held_call(r)->wait, SL_SUP_WAIT_IO);
	assert_dec_equal(in_flight(r), 0);
	request(cl, FD0);
	assert_true(step_at(r, T0 + 200 * MS));
	assert_dec_equal(fake.a[fake.n - 1].id, q.id);
	assert_true(fake.a[fake.n - 1].cont);
	assert_dec_equal(in_flight(r), 1);
	kernel_recv(FD0, 4);
	/* Receives within the turn pass at once, no second slot. */
	q = do_recv(r, FD0, MSG_DONTWAIT);
	assert_true(fake.a[fake.n - 1].cont);
	assert_null(held_call(r));
	assert_dec_equal(in_flight(r), 1);
	fake.now = T0 + 230 * MS;
	q = do_send(r, FD0);
	assert_dec_equal(in_flight(r), 0);
	/* The first window (100 ms at least) closed with these two samples:
	 * they left it for the next one. */
	assert_dec_equal(atomic_load_explicit(&sl_sup_turn_adapt(&r->s, 0)->updates,
					      memory_order_relaxed),
			 1);
	assert_dec_equal(atomic_load_explicit(&sl_sup_turn_adapt(&r->s, 0)->latency_ns,
					      memory_order_relaxed),
			 40 * MS); /* (50 + 30) / 2 */
	/* The client closes: the next receive is no turn (the kernel's 0). */
	close(cl);
	until_readable(FD0);
	fake.now = T0 + 300 * MS;
	do_recv(r, FD0, 0);
	assert_null(held_call(r));
	assert_true(fake.a[fake.n - 1].cont);
	assert_dec_equal(in_flight(r), 0);
	rig_free(r);
}

/* The latency of the turns reaches the controller and its new limit the
 * limiter: under aimd, two turns of 40 ms in a window of 160 ms with the
 * limit used (one in flight of 2) take it from 2 to 3, and the limiter
 * admits 3 connections, not 4. */
static void test_turn_retunes(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:adaptive,initial=2,min=1,max=8,algo=aimd,action=reject");
	int cl = client(r);
	assert_dec_equal(do_accept(r), FD0);
	request(cl, FD0);
	fake.now = T0 + 10 * MS;
	do_recv(r, FD0, 0);
	kernel_recv(FD0, 4);
	fake.now = T0 + 50 * MS;
	do_send(r, FD0);
	assert_dec_equal(sl_adapt_limit(sl_sup_turn_adapt(&r->s, 0)), 2);
	request(cl, FD0);
	fake.now = T0 + 120 * MS;
	do_recv(r, FD0, 0);
	kernel_recv(FD0, 4);
	fake.now = T0 + 160 * MS;
	do_send(r, FD0);
	const struct sl_adapt *a = sl_sup_turn_adapt(&r->s, 0);
	assert_dec_equal(sl_adapt_limit(a), 3);
	assert_dec_equal(atomic_load_explicit(&a->noload_ns, memory_order_relaxed), 40 * MS);
	const struct sl_tunable *t = (const void *)sl_sup_turn_lim(&r->s, 0, fake.now);
	assert_dec_equal(sl_tunable_current(t)->params.amount, 3);
	/* Three connections in their first turn at once; the fourth is
	 * refused at its accept and reset. */
	int more[3];
	for (int i = 0; i < 3; i++) {
		more[i] = client(r);
		assert_dec_equal(do_accept(r), FD0 + 1 + i);
	}
	assert_dec_equal(in_flight(r), 3);
	const int n = fake.n;
	int late = client(r);
	struct seccomp_notif q = req_of(r, SYS_accept4, (uint64_t)r->lis, 0, 0, SOCK_CLOEXEC);
	sl_sup_on_accept(&r->s, &q);
	assert_dec_equal(fake.n, n + 1);
	assert_dec_equal(fake.a[n].err, ECONNABORTED);
	char b;
	assert_dec_equal(recv(late, &b, 1, 0), -1); /* reset (SO_LINGER 0) */
	assert_dec_equal(errno, ECONNRESET);
	assert_true(atomic_load_explicit(&a->bound_ns, memory_order_relaxed) != 0);
	for (int i = 0; i < 3; i++)
		close(more[i]);
	close(late);
	close(cl);
	rig_free(r);
}

/* action=reject with the limit full (1): a keep-alive connection's next
 * request waits for a slot with the engine's backoff (1, 2, 4, 8, 16 ms)
 * up to half the no-load latency (not measured yet: 50 ms), then its
 * connection is reset and the receive fails with ECONNRESET. */
static void test_turn_reject_resets(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:adaptive,initial=1,min=1,max=1,action=reject");
	int ca = client(r);
	assert_dec_equal(do_accept(r), FD0);
	request(ca, FD0);
	do_recv(r, FD0, 0);
	kernel_recv(FD0, 4);
	do_send(r, FD0);
	assert_dec_equal(in_flight(r), 0);
	int cb = client(r); /* takes the one slot */
	assert_dec_equal(do_accept(r), FD0 + 1);
	assert_dec_equal(in_flight(r), 1);
	request(ca, FD0);
	const int n = fake.n;
	struct seccomp_notif q = do_recv(r, FD0, 0);
	assert_dec_equal(fake.n, n);
	const uint64_t due[] = {T0 + 1 * MS,  T0 + 3 * MS,  T0 + 7 * MS,
				T0 + 15 * MS, T0 + 31 * MS, T0 + 50 * MS};
	for (int i = 0; i < 6; i++) {
		struct sl_sup_call *c = held_call(r);
		assert_dec_equal(c->wait, SL_SUP_WAIT_TIME);
		assert_dec_equal(c->due_ns, due[i]);
		assert_dec_equal(step_at(r, due[i]), i == 5); /* the last one resets */
	}
	assert_null(held_call(r));
	assert_dec_equal(fake.n, n + 1);
	assert_dec_equal(fake.a[n].id, q.id);
	assert_dec_equal(fake.a[n].err, ECONNRESET);
	assert_dec_equal(fake.a[n].at, T0 + 50 * MS);
	struct linger lg;
	socklen_t ll = sizeof(lg);
	assert_dec_equal(getsockopt(FD0, SOL_SOCKET, SO_LINGER, &lg, &ll), 0);
	assert_dec_equal(lg.l_onoff, 1);
	assert_dec_equal(lg.l_linger, 0);
	char b[8];
	assert_dec_equal(recv(ca, b, sizeof(b), 0), 0); /* the client is told */
	assert_dec_equal(in_flight(r), 1);              /* B's turn only */
	close(ca);
	close(cb);
	rig_free(r);
}

/* action=delay (max-delay 200 ms): the request waits for the slot that
 * another connection's answer frees, and goes at the next retry. A
 * non-blocking receive with no slot free goes at once, uncounted. */
static void test_turn_delay_waits(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:adaptive,initial=1,min=1,max=1,max-delay=200ms");
	int ca = client(r);
	assert_dec_equal(do_accept(r), FD0);
	request(ca, FD0);
	do_recv(r, FD0, 0);
	kernel_recv(FD0, 4);
	do_send(r, FD0); /* A idle */
	int cb = client(r);
	assert_dec_equal(do_accept(r), FD0 + 1); /* B's turn holds the slot */
	/* A non-blocking receive on A: not held, uncounted. */
	request(ca, FD0);
	int n = fake.n;
	do_recv(r, FD0, MSG_DONTWAIT);
	assert_dec_equal(fake.n, n + 1);
	assert_true(fake.a[n].cont);
	assert_null(held_call(r));
	assert_dec_equal(in_flight(r), 1);
	kernel_recv(FD0, 4);
	do_send(r, FD0); /* no turn ran: nothing given back */
	assert_dec_equal(in_flight(r), 1);
	/* A blocking one waits for B's answer. */
	request(ca, FD0);
	n = fake.n;
	struct seccomp_notif q = do_recv(r, FD0, 0);
	assert_dec_equal(held_call(r)->due_ns, T0 + 1 * MS);
	assert_false(step_at(r, T0 + 1 * MS));
	assert_false(step_at(r, T0 + 3 * MS));
	assert_dec_equal(held_call(r)->due_ns, T0 + 7 * MS);
	/* B's client sends, B's server answers at +5 ms: its slot is free. */
	request(cb, FD0 + 1);
	/* (B's receive and send go at once: A's call stays the one held.) */
	fake.now = T0 + 4 * MS;
	do_recv(r, FD0 + 1, 0);
	kernel_recv(FD0 + 1, 4);
	fake.now = T0 + 5 * MS;
	do_send(r, FD0 + 1);
	assert_dec_equal(in_flight(r), 0);
	assert_true(step_at(r, T0 + 7 * MS));
	assert_dec_equal(fake.a[fake.n - 1].id, q.id);
	assert_true(fake.a[fake.n - 1].cont);
	assert_dec_equal(fake.a[fake.n - 1].at, T0 + 7 * MS);
	assert_dec_equal(in_flight(r), 1);
	kernel_recv(FD0, 4);
	close(ca);
	close(cb);
	rig_free(r);
}

/* A connection closed in a turn (close is not trapped): the sweep finds it
 * gone and gives its slot back, with no sample. */
static void test_turn_gone(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:adaptive,initial=2,min=1,max=4");
	int cl = client(r);
	assert_dec_equal(do_accept(r), FD0);
	request(cl, FD0);
	fake.now = T0 + 10 * MS;
	do_recv(r, FD0, 0);
	kernel_recv(FD0, 4);
	assert_dec_equal(in_flight(r), 1);
	sl_sup_conns_sweep(&r->s);
	assert_dec_equal(in_flight(r), 1); /* still open */
	close(FD0);
	fake.now = T0 + 90 * MS;
	sl_sup_conns_sweep(&r->s);
	assert_dec_equal(in_flight(r), 0);
	assert_dec_equal(win_count(r), 0);
	close(cl);
	rig_free(r);
}

/* ---- system protection -------------------------------------------------- */

/* Rule i's gate: its turns in flight, its controller. */
static uint64_t gate_in_flight(struct rig *r, unsigned i)
{
	const struct sl_limiter *l = sl_sup_gate_lim(&r->s, i, fake.now);
	assert_non_null(l);
	return atomic_load_explicit(&l->u.tun.held, memory_order_relaxed);
}

static const struct sl_adapt *gate_of(struct rig *r, unsigned i)
{
	const struct sl_adapt *a = sl_sup_gate_adapt(&r->s, i);
	assert_non_null(a);
	return a;
}

/* Rule i's refusals in the program's status record (dry-run: would-be). */
static uint64_t refused_of(struct rig *r, unsigned i)
{
	const struct sl_sup_thread *th = sl_sup_thread_of(&r->s, (pid_t)gettid());
	assert_non_null(th);
	assert_non_null(th->proc->rec);
	return atomic_load_explicit(&sl_shm_stat_stats(th->proc->rec)[i].refused,
				    memory_order_relaxed);
}

/* A keep-alive server: n connections (fds FD0.., clients cl[]), each in
 * turn at `at` ends its turn (the answer) and, if `next`, starts the next
 * (the client's request, the server's receive: a slot of each gate). */
static void round_at(struct rig *r, const int *cl, int n, uint64_t at, bool next)
{
	fake.now = at;
	fake.n = 0; /* the answers are not looked at */
	for (int k = 0; k < n; k++) {
		do_send(r, FD0 + k);
		if (!next)
			continue;
		request(cl[k], FD0 + k);
		do_recv(r, FD0 + k, 0);
		assert_null(held_call(r)); /* a slot at once: no wait */
		assert_true(fake.a[fake.n - 1].cont);
		kernel_recv(FD0 + k, 4);
	}
}

/* Four connections accepted at T0, their first requests received. */
static void four_accepted(struct rig *r, int *cl)
{
	for (int k = 0; k < 4; k++) {
		cl[k] = client(r);
		assert_dec_equal(do_accept(r), FD0 + k);
	}
	for (int k = 0; k < 4; k++) {
		request(cl[k], FD0 + k);
		do_recv(r, FD0 + k, 0); /* the accept's turn runs: the kernel's */
		assert_true(fake.a[fake.n - 1].cont);
		kernel_recv(FD0 + k, 4);
	}
}

/* The serving common to the rt= tests: four connections with turns of
 * 40 ms for 1.2 s (windows of 120 ms, each closed by the first answer of
 * its last round), under rt=50ms: the gate stays open, and the
 * completion rate is measured once a stretch of 1 s is over (from the
 * first window's end at +120 ms to +1200 ms: 108 turns, 100/s). Then
 * turns of 200 ms: at +1400 ms the first answer closes a window of the
 * three answers of 40 ms at +1200 ms and itself, 80 ms on average, over
 * rt=: the gate's limit is max(1, 100/s x 40 ms) + 1 = 5, with B, C and
 * D in flight. */
static void slow_after_fast(struct rig *r, int *cl)
{
	four_accepted(r, cl);
	const struct sl_adapt *a = gate_of(r, 0);
	assert_dec_equal(gate_in_flight(r, 0), 4);
	for (int k = 1; k <= 30; k++) {
		round_at(r, cl, 4, T0 + 40 * (uint64_t)k * MS, true);
		assert_dec_equal(sl_adapt_limit(a), SL_ADAPT_LIMIT_MAX);
	}
	struct sl_adapt_view v;
	sl_adapt_view(a, &v);
	assert_dec_equal(v.updates, 10);
	assert_dec_equal(v.over, 0);
	assert_dec_equal(v.rate, 100);
	assert_dec_equal(v.noload_ns, 40 * MS);
	assert_dec_equal(gate_in_flight(r, 0), 4);
	/* The slow turns: A's answer first. */
	fake.now = T0 + 1400 * MS;
	fake.n = 0;
	do_send(r, FD0);
	sl_adapt_view(a, &v);
	assert_dec_equal(v.updates, 11);
	assert_dec_equal(v.latency_ns, 80 * MS);
	assert_dec_equal(v.over, SL_ADAPT_OVER_RT);
	assert_dec_equal(v.limit, 5);
	const struct sl_tunable *t = (const void *)sl_sup_gate_lim(&r->s, 0, fake.now);
	assert_dec_equal(sl_tunable_current(t)->params.amount, 5);
	assert_dec_equal(gate_in_flight(r, 0), 3);
}

/* conns:7,rt=50ms (action delay): turns slower than rt= close the gate to
 * 5 turns; two more connections fill it, the third is refused at once
 * (system protection never waits at accept) with ECONNABORTED and reset,
 * its conns slot given back (an eighth connection fits in conns:7 later).
 * A keep-alive request on the idle A waits for a gate slot at most half
 * the no-load latency (20 ms, whatever the action), then A is reset. */
static void test_gate_refuses_slow(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:7,rt=50ms");
	r->s.verbose = true; /* the gate's window on stderr */
	/* Turns are followed: placed high, sends and receives trapped. */
	assert_dec_equal(r->s.traps.turns, 0);
	assert_dec_equal(r->s.traps.gates, 1);
	assert_true(sl_sup_traps_turns(&r->s.traps));
	int cl[8];
	slow_after_fast(r, cl);
	const struct sl_adapt *a = gate_of(r, 0);
	for (int k = 4; k < 6; k++) {
		cl[k] = client(r);
		assert_dec_equal(do_accept(r), FD0 + k);
	}
	assert_dec_equal(gate_in_flight(r, 0), 5);
	assert_dec_equal(atomic_load_explicit(&a->bound_ns, memory_order_relaxed), 0);
	cl[6] = client(r);
	assert_dec_equal(do_accept(r), -ECONNABORTED);
	assert_null(held_call(r));
	assert_dec_equal(fake.a[fake.n - 1].at, T0 + 1400 * MS);
	char b;
	assert_dec_equal(recv(cl[6], &b, 1, 0), -1); /* reset (SO_LINGER 0) */
	assert_dec_equal(errno, ECONNRESET);
	assert_true(atomic_load_explicit(&a->bound_ns, memory_order_relaxed) != 0);
	assert_dec_equal(gate_in_flight(r, 0), 5);
	assert_dec_equal(refused_of(r, 0), 1);
	/* A's next request: no gate slot, retried with the engine's backoff
	 * up to 20 ms, then reset. */
	request(cl[0], FD0);
	fake.n = 0;
	struct seccomp_notif q = do_recv(r, FD0, 0);
	assert_dec_equal(fake.n, 0);
	const uint64_t due[] = {T0 + 1401 * MS, T0 + 1403 * MS, T0 + 1407 * MS, T0 + 1415 * MS,
				T0 + 1420 * MS};
	for (int i = 0; i < 5; i++) {
		struct sl_sup_call *c = held_call(r);
		assert_dec_equal(c->wait, SL_SUP_WAIT_TIME);
		assert_dec_equal(c->due_ns, due[i]);
		assert_dec_equal(step_at(r, due[i]), i == 4);
	}
	assert_dec_equal(fake.n, 1);
	assert_dec_equal(fake.a[0].id, q.id);
	assert_dec_equal(fake.a[0].err, ECONNRESET);
	char buf[8];
	assert_dec_equal(recv(cl[0], buf, sizeof(buf), 0), 0); /* the client is told */
	assert_dec_equal(gate_in_flight(r, 0), 5);
	assert_dec_equal(refused_of(r, 0), 2);
	/* B answers (its turn of 220 ms, in the window begun at +1400 ms):
	 * a gate slot is free, and conns:7 has room for H (A to F, H): the
	 * refused connection's slot came back. */
	fake.n = 0;
	do_send(r, FD0 + 1);
	assert_dec_equal(gate_in_flight(r, 0), 4);
	assert_dec_equal(sl_adapt_limit(a), 5);
	cl[7] = client(r);
	assert_dec_equal(do_accept(r), FD0 + 6);
	assert_null(held_call(r));
	assert_dec_equal(gate_in_flight(r, 0), 5);
	for (int k = 0; k < 8; k++)
		close(cl[k]);
	rig_free(r);
}

/* The same rule with turns of 10 ms, under rt=, for 1.5 s (600 turns at
 * 400/s): the gate never closes, and three more connections (seven turns
 * in flight, past what a closed gate would allow: 400/s x 10 ms + 1 = 5)
 * are all admitted. */
static void test_gate_fast_open(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:7,rt=50ms");
	int cl[7];
	four_accepted(r, cl);
	const struct sl_adapt *a = gate_of(r, 0);
	for (int k = 1; k <= 150; k++) {
		round_at(r, cl, 4, T0 + 10 * (uint64_t)k * MS, true);
		assert_dec_equal(sl_adapt_limit(a), SL_ADAPT_LIMIT_MAX);
	}
	struct sl_adapt_view v;
	sl_adapt_view(a, &v);
	assert_true(v.updates >= 10);
	assert_dec_equal(v.over, 0);
	assert_dec_equal(v.rate, 400);
	assert_dec_equal(v.noload_ns, 10 * MS);
	assert_dec_equal(v.latency_ns, 10 * MS);
	for (int k = 4; k < 7; k++) {
		cl[k] = client(r);
		assert_dec_equal(do_accept(r), FD0 + k);
	}
	assert_dec_equal(gate_in_flight(r, 0), 7);
	assert_dec_equal(atomic_load_explicit(&a->bound_ns, memory_order_relaxed), 0);
	assert_dec_equal(refused_of(r, 0), 0);
	for (int k = 0; k < 7; k++)
		close(cl[k]);
	rig_free(r);
}

/* action=dry-run: the gate closes as above, but the accept past it is
 * admitted (without a gate slot, counted as a would-be refusal), and a
 * keep-alive request that finds the gate full goes on at once,
 * uncounted. */
static void test_gate_dry_run(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:7,rt=50ms,action=dry-run");
	int cl[7];
	slow_after_fast(r, cl);
	for (int k = 4; k < 6; k++) {
		cl[k] = client(r);
		assert_dec_equal(do_accept(r), FD0 + k);
	}
	assert_dec_equal(gate_in_flight(r, 0), 5);
	cl[6] = client(r);
	assert_dec_equal(do_accept(r), FD0 + 6); /* admitted */
	assert_null(held_call(r));
	assert_dec_equal(gate_in_flight(r, 0), 5);
	assert_dec_equal(refused_of(r, 0), 1);
	/* A's next request: no slot, no wait, no reset. */
	request(cl[0], FD0);
	fake.n = 0;
	do_recv(r, FD0, 0);
	assert_null(held_call(r));
	assert_dec_equal(fake.n, 1);
	assert_true(fake.a[0].cont);
	assert_dec_equal(gate_in_flight(r, 0), 5);
	kernel_recv(FD0, 4);
	for (int k = 0; k < 7; k++)
		close(cl[k]);
	rig_free(r);
}

/* accept:1000/s,load1=4,cpu=90%: the host's figures (read when the gate
 * is made, then at most every second, at a gate's turn end or an accept)
 * close the gate as soon as a reading says the load is over 4 (not at the
 * next window's end), at the completion rate measured meanwhile (100/s x
 * 40 ms + 1 = 5), fast turns or not; the accept past it is refused with the
 * accept rule's ECONNABORTED and reset. */
static void test_gate_host_load(void **state)
{
	(void)state;
	struct rig *r = rig_new("accept:1000/s,load1=4,cpu=90%");
	fake.load1 = 2000;
	fake.busy_step = 50;
	fake.total_step = 100;
	int cl[6];
	four_accepted(r, cl);
	const struct sl_adapt *a = gate_of(r, 0);
	/* Read when the gate was made (the first accept, T0), then at the
	 * first turn's end a second later (+1000 ms). */
	assert_dec_equal(fake.host_reads, 1);
	round_at(r, cl, 4, T0 + 40 * MS, true);
	assert_dec_equal(fake.host_reads, 1);
	uint64_t host = atomic_load_explicit(&a->host, memory_order_relaxed);
	assert_dec_equal(host & 0xffffffffu, 2000 + 1);
	assert_dec_equal(host >> 32, 0); /* the CPU: no earlier reading */
	for (int k = 2; k <= 25; k++)
		round_at(r, cl, 4, T0 + 40 * (uint64_t)k * MS, true);
	assert_dec_equal(fake.host_reads, 2);
	host = atomic_load_explicit(&a->host, memory_order_relaxed);
	assert_dec_equal(host >> 32, 500 + 1); /* 50 busy of 100 ticks */
	fake.load1 = 8000;
	for (int k = 26; k <= 49; k++) {
		round_at(r, cl, 4, T0 + 40 * (uint64_t)k * MS, true);
		assert_dec_equal(sl_adapt_limit(a), SL_ADAPT_LIMIT_MAX);
	}
	/* +2000 ms: read again, over load1: the limit at once. */
	round_at(r, cl, 4, T0 + 2000 * MS, true);
	assert_dec_equal(fake.host_reads, 3);
	struct sl_adapt_view v;
	sl_adapt_view(a, &v);
	assert_dec_equal(v.over, SL_ADAPT_OVER_LOAD1);
	assert_dec_equal(v.rate, 100);
	assert_dec_equal(v.noload_ns, 40 * MS);
	assert_dec_equal(v.limit, 5);
	assert_dec_equal(gate_in_flight(r, 0), 4);
	cl[4] = client(r);
	assert_dec_equal(do_accept(r), FD0 + 4);
	assert_dec_equal(gate_in_flight(r, 0), 5);
	cl[5] = client(r);
	assert_dec_equal(do_accept(r), -ECONNABORTED);
	char b;
	assert_dec_equal(recv(cl[5], &b, 1, 0), -1);
	assert_dec_equal(errno, ECONNRESET);
	assert_dec_equal(gate_in_flight(r, 0), 5);
	assert_dec_equal(refused_of(r, 0), 1);
	for (int k = 0; k < 6; k++)
		close(cl[k]);
	rig_free(r);
}

/* ---- the client side --------------------------------------------------- */

#define CFD0 700 /* the program's first connecting socket */

/* The program's stream socket at fd `at` (where sock.c places it) connects
 * to the rig's listener: the connect's notification (it continues at once,
 * asserted), then the kernel's connect. Returns the server's end (the
 * upstream server is the test). */
static int do_connect(struct rig *r, int at)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_dec_equal(dup3(s, at, O_CLOEXEC), at);
	close(s);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				.sin_port = htons(r->port)};
	const int n = fake.n;
	struct seccomp_notif q = req_of(r, SYS_connect, (uint64_t)at, (uintptr_t)&a, sizeof(a), 0);
	sl_sup_on_connect(&r->s, &q);
	assert_dec_equal(fake.n, n + 1);
	assert_dec_equal(fake.a[n].id, q.id);
	assert_true(fake.a[n].cont);
	assert_null(held_call(r));
	assert_dec_equal(connect(at, (struct sockaddr *)&a, sizeof(a)), 0);
	const int peer = accept4(r->lis, NULL, NULL, SOCK_CLOEXEC);
	assert_true(peer >= 0);
	return peer;
}

/* The program's request on fd (a blocking send, handled): it went on at
 * once (the kernel's send made here) or is held (true). */
static bool do_request(struct rig *r, int fd, int flags, struct seccomp_notif *q)
{
	static const char get[] = "GET\n";
	const int n = fake.n;
	*q = req_of(r, SYS_sendto, (uint64_t)fd, (uintptr_t)get, 4, (uint64_t)flags);
	sl_sup_on_send(&r->s, q);
	if (fake.n == n)
		return true;
	assert_dec_equal(fake.n, n + 1);
	assert_dec_equal(fake.a[n].id, q->id);
	assert_true(fake.a[n].cont);
	assert_dec_equal(send(fd, get, 4, MSG_DONTWAIT), 4);
	return false;
}

/* The upstream server answers on peer; the program's receive on fd at
 * `at` goes to the kernel at once (asserted). */
static void answer_at(struct rig *r, int peer, int fd, uint64_t at)
{
	assert_dec_equal(write(peer, "OK\n", 3), 3);
	until_readable(fd);
	fake.now = at;
	const int n = fake.n;
	do_recv(r, fd, 0);
	assert_dec_equal(fake.n, n + 1);
	assert_true(fake.a[n].cont);
	kernel_recv(fd, 3);
}

static uint64_t client_in_flight(struct rig *r)
{
	const struct sl_limiter *l = sl_sup_client_lim(&r->s, 0, fake.now);
	assert_non_null(l);
	return atomic_load_explicit(&l->u.tun.held, memory_order_relaxed);
}

static const struct sl_adapt *client_adapt(struct rig *r)
{
	const struct sl_adapt *a = sl_sup_client_adapt(&r->s, 0);
	assert_non_null(a);
	return a;
}

static uint64_t client_count(struct rig *r)
{
	return atomic_load_explicit(&client_adapt(r)->win_count, memory_order_relaxed);
}

static uint64_t client_sum_ns(struct rig *r)
{
	return atomic_load_explicit(&client_adapt(r)->win_sum_ns, memory_order_relaxed);
}

/* Under conns:adaptive alone a stream socket is placed high when made
 * (its sends and receives trapped: a client's turns), a datagram one is
 * the kernel's; a connect continues at once, takes no slot and registers
 * the connection, with the rule's client limit, not the server's. */
static void test_client_connect(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:adaptive,initial=1,min=1,max=1");
	assert_false(r->s.traps.place);
	struct seccomp_notif q = req_of(r, SYS_socket, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0, 0);
	sl_sup_on_socket(&r->s, &q);
	assert_dec_equal(fake.n, 1);
	assert_dec_equal(fake.a[0].val, FD0); /* placed */
	q = req_of(r, SYS_socket, AF_INET, SOCK_DGRAM, 0, 0);
	sl_sup_on_socket(&r->s, &q);
	assert_dec_equal(fake.n, 2);
	assert_true(fake.a[1].cont);
	for (int k = 0; k < 2; k++) {
		int peer = do_connect(r, CFD0 + k);
		close(peer);
	}
	assert_dec_equal(client_in_flight(r), 0);
	assert_dec_equal(sl_adapt_limit(client_adapt(r)), 1);
	assert_null(sl_sup_turn_adapt(&r->s, 0));
	close(CFD0);
	close(CFD0 + 1);
	rig_free(r);
}

/* initial=2,max=2: three connections (none waits at its connect), a
 * request on each: two turns start, the third blocking send is held and
 * retried with the engine's backoff. The first answer's receive at +2 ms
 * ends its turn (2 ms, a sample) and the held send goes at its next retry
 * (+3 ms), its turn from then. A blocking receive before its answer is
 * held until the data is there, and the turn ends then (7 ms). A second
 * send in a running turn, a receive on an idle connection: nothing. */
static void test_client_turns(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:adaptive,initial=2,max=2");
	int peer[3];
	for (int k = 0; k < 3; k++)
		peer[k] = do_connect(r, CFD0 + k);
	assert_dec_equal(client_in_flight(r), 0);
	struct seccomp_notif q;
	assert_false(do_request(r, CFD0, 0, &q));
	assert_false(do_request(r, CFD0 + 1, 0, &q));
	assert_dec_equal(client_in_flight(r), 2);
	assert_true(do_request(r, CFD0 + 2, 0, &q));
	struct sl_sup_call *c = held_call(r);
	assert_dec_equal(c->wait, SL_SUP_WAIT_TIME);
	assert_dec_equal(c->due_ns, T0 + 1 * MS);
	assert_false(step_at(r, T0 + 1 * MS));
	assert_dec_equal(held_call(r)->due_ns, T0 + 3 * MS);
	answer_at(r, peer[0], CFD0, T0 + 2 * MS);
	assert_dec_equal(client_in_flight(r), 1);
	assert_dec_equal(client_count(r), 1);
	assert_dec_equal(client_sum_ns(r), 2 * MS);
	assert_true(step_at(r, T0 + 3 * MS));
	assert_dec_equal(fake.a[fake.n - 1].id, q.id);
	assert_true(fake.a[fake.n - 1].cont);
	assert_dec_equal(client_in_flight(r), 2);
	assert_dec_equal(send(CFD0 + 2, "GET\n", 4, 0), 4);
	/* More of the same request: nothing. */
	assert_false(do_request(r, CFD0 + 2, 0, &q));
	assert_dec_equal(client_in_flight(r), 2);
	/* A blocking receive before the answer: held until it comes. */
	fake.now = T0 + 5 * MS;
	q = do_recv(r, CFD0 + 2, 0);
	assert_dec_equal(held_call(r)->wait, SL_SUP_WAIT_IO);
	assert_dec_equal(held_call(r)->events, POLLIN);
	assert_dec_equal(client_in_flight(r), 2);
	assert_dec_equal(write(peer[2], "OK\n", 3), 3);
	until_readable(CFD0 + 2);
	assert_true(step_at(r, T0 + 10 * MS));
	assert_dec_equal(fake.a[fake.n - 1].id, q.id);
	assert_true(fake.a[fake.n - 1].cont);
	kernel_recv(CFD0 + 2, 3);
	assert_dec_equal(client_in_flight(r), 1);
	assert_dec_equal(client_count(r), 2);
	assert_dec_equal(client_sum_ns(r), 9 * MS);
	/* An idle connection's receive: no turn, the kernel's. */
	const int n = fake.n;
	do_recv(r, CFD0, MSG_DONTWAIT);
	assert_dec_equal(fake.n, n + 1);
	assert_true(fake.a[n].cont);
	assert_null(sl_sup_turn_adapt(&r->s, 0)); /* the server's limit: untouched */
	for (int k = 0; k < 3; k++) {
		close(peer[k]);
		close(CFD0 + k);
	}
	rig_free(r);
}

/* action=reject, the client limit full (1): a request waits with the
 * engine's backoff up to 50 ms (no no-load latency measured yet), then its
 * connection is reset and the send fails with ECONNRESET, a refusal. */
static void test_client_reject_resets(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:adaptive,initial=1,min=1,max=1,action=reject");
	int pa = do_connect(r, CFD0), pb = do_connect(r, CFD0 + 1);
	struct seccomp_notif q;
	assert_false(do_request(r, CFD0, 0, &q));
	assert_true(do_request(r, CFD0 + 1, 0, &q));
	const int n = fake.n;
	const uint64_t due[] = {T0 + 1 * MS,  T0 + 3 * MS,  T0 + 7 * MS,
				T0 + 15 * MS, T0 + 31 * MS, T0 + 50 * MS};
	for (int i = 0; i < 6; i++) {
		struct sl_sup_call *c = held_call(r);
		assert_dec_equal(c->wait, SL_SUP_WAIT_TIME);
		assert_dec_equal(c->due_ns, due[i]);
		assert_dec_equal(step_at(r, due[i]), i == 5);
	}
	assert_dec_equal(fake.n, n + 1);
	assert_dec_equal(fake.a[n].id, q.id);
	assert_dec_equal(fake.a[n].err, ECONNRESET);
	assert_dec_equal(fake.a[n].at, T0 + 50 * MS);
	struct linger lg;
	socklen_t ll = sizeof(lg);
	assert_dec_equal(getsockopt(CFD0 + 1, SOL_SOCKET, SO_LINGER, &lg, &ll), 0);
	assert_dec_equal(lg.l_onoff, 1);
	assert_dec_equal(lg.l_linger, 0);
	char b[8];
	assert_dec_equal(recv(pb, b, sizeof(b), 0), 0); /* the server is told */
	assert_dec_equal(refused_of(r, 0), 1);
	assert_true(atomic_load_explicit(&client_adapt(r)->bound_ns, memory_order_relaxed) != 0);
	assert_dec_equal(client_in_flight(r), 1); /* A's turn only */
	close(pa);
	close(pb);
	close(CFD0);
	close(CFD0 + 1);
	rig_free(r);
}

/* action=delay (unbounded), the client limit full (1): a non-blocking send
 * (MSG_DONTWAIT, or O_NONBLOCK) goes on at once, its turn uncounted; a
 * blocking one with SO_SNDTIMEO 20 ms fails with EAGAIN then; a blocking
 * one without waits until A's answer frees the slot. The server ending a
 * turn's connection (EOF) and a client closing one in its turn give the
 * slot back, without a sample. */
static void test_client_nonblock_waits(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:adaptive,initial=1,min=1,max=1");
	int pa = do_connect(r, CFD0), pb = do_connect(r, CFD0 + 1);
	struct seccomp_notif q;
	assert_false(do_request(r, CFD0, 0, &q));
	assert_false(do_request(r, CFD0 + 1, MSG_DONTWAIT, &q));
	assert_null(held_call(r));
	assert_dec_equal(fcntl(CFD0 + 1, F_SETFL, O_NONBLOCK), 0);
	assert_false(do_request(r, CFD0 + 1, 0, &q));
	assert_dec_equal(fcntl(CFD0 + 1, F_SETFL, 0), 0);
	assert_dec_equal(client_in_flight(r), 1);
	answer_at(r, pb, CFD0 + 1, T0 + 1 * MS); /* no turn ran: nothing */
	assert_dec_equal(client_in_flight(r), 1);
	assert_dec_equal(client_count(r), 0);
	/* SO_SNDTIMEO bounds the wait (20 ms: whole jiffies at any HZ). */
	struct timeval tv = {0, 20000};
	assert_dec_equal(setsockopt(CFD0 + 1, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	fake.now = T0 + 10 * MS;
	assert_true(do_request(r, CFD0 + 1, 0, &q));
	const uint64_t due[] = {T0 + 11 * MS, T0 + 13 * MS, T0 + 17 * MS, T0 + 25 * MS,
				T0 + 30 * MS};
	for (int i = 0; i < 5; i++) {
		assert_dec_equal(held_call(r)->due_ns, due[i]);
		assert_dec_equal(step_at(r, due[i]), i == 4);
	}
	assert_dec_equal(fake.a[fake.n - 1].id, q.id);
	assert_dec_equal(fake.a[fake.n - 1].err, EAGAIN);
	tv.tv_usec = 0;
	assert_dec_equal(setsockopt(CFD0 + 1, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
	/* Without it, the request waits for A's answer. */
	fake.now = T0 + 30 * MS;
	assert_true(do_request(r, CFD0 + 1, 0, &q));
	assert_false(step_at(r, T0 + 31 * MS));
	assert_dec_equal(held_call(r)->due_ns, T0 + 33 * MS);
	answer_at(r, pa, CFD0, T0 + 32 * MS);
	assert_dec_equal(client_count(r), 1);
	assert_dec_equal(client_sum_ns(r), 32 * MS);
	assert_true(step_at(r, T0 + 33 * MS));
	assert_dec_equal(fake.a[fake.n - 1].id, q.id);
	assert_true(fake.a[fake.n - 1].cont);
	assert_dec_equal(send(CFD0 + 1, "GET\n", 4, 0), 4);
	assert_dec_equal(client_in_flight(r), 1);
	/* B's server closes without an answer (its requests read first: a
	 * FIN, not a reset): the end of the stream ends the turn, no
	 * sample. */
	until_readable(pb);
	char buf[64];
	while (recv(pb, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
	close(pb);
	until_readable(CFD0 + 1);
	fake.now = T0 + 40 * MS;
	do_recv(r, CFD0 + 1, 0);
	assert_true(fake.a[fake.n - 1].cont);
	assert_dec_equal(client_in_flight(r), 0);
	assert_dec_equal(client_count(r), 1);
	/* A's next request, then A closed in its turn: the sweep gives the
	 * slot back, no sample. */
	assert_false(do_request(r, CFD0, 0, &q));
	assert_dec_equal(client_in_flight(r), 1);
	sl_sup_conns_sweep(&r->s);
	assert_dec_equal(client_in_flight(r), 1); /* still open */
	close(CFD0);
	sl_sup_conns_sweep(&r->s);
	assert_dec_equal(client_in_flight(r), 0);
	assert_dec_equal(client_count(r), 1);
	close(pa);
	close(CFD0 + 1);
	rig_free(r);
}

/* A proxy under one rule, initial=1,max=1: its accepted connection's turn
 * holds the only server slot, and its upstream request still goes at
 * once, on the client limit; each turn's latency goes to its own
 * controller (20 ms upstream, 30 ms served). */
static void test_client_proxy(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:adaptive,initial=1,min=1,max=1,action=reject");
	int cl = client(r);
	assert_dec_equal(do_accept(r), FD0);
	assert_dec_equal(in_flight(r), 1);
	int up = do_connect(r, CFD0);
	struct seccomp_notif q;
	assert_false(do_request(r, CFD0, 0, &q));
	assert_null(held_call(r));
	assert_dec_equal(client_in_flight(r), 1);
	assert_dec_equal(in_flight(r), 1);
	answer_at(r, up, CFD0, T0 + 20 * MS);
	assert_dec_equal(client_in_flight(r), 0);
	fake.now = T0 + 30 * MS;
	do_send(r, FD0);
	assert_dec_equal(in_flight(r), 0);
	assert_dec_equal(client_count(r), 1);
	assert_dec_equal(client_sum_ns(r), 20 * MS);
	assert_dec_equal(win_count(r), 1);
	assert_dec_equal(win_sum_ns(r), 30 * MS);
	close(cl);
	close(up);
	close(CFD0);
	rig_free(r);
}

/* The filter's answer to socket(AF_INET, type) under rules (a classic BPF
 * run of the loads and jumps it is made of). */
static uint32_t socket_verdict(const char *rules, uint32_t type)
{
	struct sl_policy p = policy_of(rules);
	struct sl_sup_traps t;
	struct sock_filter ins[256];
	sl_sup_traps_of(&p, &t);
	const int n = sl_sup_filter_build(&t, ins, 256);
	assert_true(n > 0);
	const struct seccomp_data d = {.nr = SYS_socket,
				       .arch = AUDIT_ARCH_X86_64,
				       .args = {AF_INET, type, 0}};
	uint32_t a = 0;
	for (int pc = 0; pc < n; pc++) {
		const struct sock_filter *f = &ins[pc];
		if (f->code == (BPF_LD | BPF_W | BPF_ABS))
			memcpy(&a, (const char *)&d + f->k, 4);
		else if (f->code == (BPF_JMP | BPF_JEQ | BPF_K))
			pc += a == f->k ? f->jt : f->jf;
		else if (f->code == (BPF_JMP | BPF_JGE | BPF_K))
			pc += a >= f->k ? f->jt : f->jf;
		else if (f->code == (BPF_RET | BPF_K))
			return f->k;
		else
			fail_msg("unexpected BPF instruction %#x at %d", f->code, pc);
	}
	fail_msg("the filter fell off its end");
	return 0;
}

/* socket() is trapped under conns:adaptive alone for stream sockets only
 * (with or without SOCK_NONBLOCK, SOCK_CLOEXEC): they may connect and have
 * client turns; under plain conns rules never; with byte rules always. */
static void test_client_filter(void **state)
{
	(void)state;
	const uint32_t notif = SECCOMP_RET_USER_NOTIF, allow = SECCOMP_RET_ALLOW;
	const uint32_t stream[] = {SOCK_STREAM, SOCK_STREAM | SOCK_NONBLOCK,
				   SOCK_STREAM | SOCK_CLOEXEC,
				   SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC};
	for (int k = 0; k < 4; k++) {
		assert_dec_equal(socket_verdict("conns:adaptive", stream[k]), notif);
		assert_dec_equal(socket_verdict("conns:100", stream[k]), allow);
	}
	assert_dec_equal(socket_verdict("conns:adaptive", SOCK_DGRAM), allow);
	assert_dec_equal(socket_verdict("conns:adaptive", SOCK_DGRAM | SOCK_CLOEXEC), allow);
	assert_dec_equal(socket_verdict("conns:adaptive", SOCK_RAW), allow);
	assert_dec_equal(socket_verdict("conns:adaptive;send:1MiB/s", SOCK_DGRAM), notif);
}

/* The client turns' latency moves the client limit (aimd: 50 ms then 40
 * ms, from 2 to 3, the no-load latency 40 ms; --verbose says so), and
 * action=reject then waits half the no-load latency (20 ms) for a slot. */
static void test_client_retunes(void **state)
{
	(void)state;
	struct rig *r = rig_new("conns:adaptive,initial=2,min=1,max=8,algo=aimd,action=reject");
	r->s.verbose = true;
	int peer[4];
	for (int k = 0; k < 4; k++)
		peer[k] = do_connect(r, CFD0 + k);
	struct seccomp_notif q;
	assert_false(do_request(r, CFD0, 0, &q));
	answer_at(r, peer[0], CFD0, T0 + 50 * MS);
	assert_dec_equal(sl_adapt_limit(client_adapt(r)), 2);
	fake.now = T0 + 120 * MS;
	assert_false(do_request(r, CFD0, 0, &q));
	answer_at(r, peer[0], CFD0, T0 + 160 * MS);
	const struct sl_adapt *a = client_adapt(r);
	assert_dec_equal(sl_adapt_limit(a), 3);
	assert_dec_equal(atomic_load_explicit(&a->noload_ns, memory_order_relaxed), 40 * MS);
	const struct sl_tunable *t = (const void *)sl_sup_client_lim(&r->s, 0, fake.now);
	assert_dec_equal(sl_tunable_current(t)->params.amount, 3);
	for (int k = 0; k < 3; k++)
		assert_false(do_request(r, CFD0 + k, 0, &q));
	assert_true(do_request(r, CFD0 + 3, 0, &q));
	const uint64_t due[] = {T0 + 161 * MS, T0 + 163 * MS, T0 + 167 * MS, T0 + 175 * MS,
				T0 + 180 * MS};
	for (int i = 0; i < 5; i++) {
		assert_dec_equal(held_call(r)->due_ns, due[i]);
		assert_dec_equal(step_at(r, due[i]), i == 4);
	}
	assert_dec_equal(fake.a[fake.n - 1].err, ECONNRESET);
	assert_dec_equal(client_in_flight(r), 3);
	for (int k = 0; k < 4; k++) {
		close(peer[k]);
		close(CFD0 + k);
	}
	rig_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_turn_accept_to_send),
		cmocka_unit_test(test_turn_retunes),
		cmocka_unit_test(test_turn_reject_resets),
		cmocka_unit_test(test_turn_delay_waits),
		cmocka_unit_test(test_turn_gone),
		cmocka_unit_test(test_gate_refuses_slow),
		cmocka_unit_test(test_gate_fast_open),
		cmocka_unit_test(test_gate_dry_run),
		cmocka_unit_test(test_gate_host_load),
		cmocka_unit_test(test_client_connect),
		cmocka_unit_test(test_client_turns),
		cmocka_unit_test(test_client_reject_resets),
		cmocka_unit_test(test_client_nonblock_waits),
		cmocka_unit_test(test_client_proxy),
		cmocka_unit_test(test_client_retunes),
		cmocka_unit_test(test_client_filter),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
