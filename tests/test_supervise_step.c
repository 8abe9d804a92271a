/* SPDX-License-Identifier: MIT */
/*
 * test_supervise_step.c - the supervisor's handlers and steps driven by a
 * fake notification fd: this file defines what supervise/notif.c does
 * (answer, continue, ID_VALID, the clock, warnings), so the linker never
 * takes notif.o, and every answer is recorded with the instant it was given.
 * The target of each made-up notification is this test's own thread (the
 * supervisor reads its memory and duplicates its fds as it would a
 * program's), and the sockets are loopback TCP pairs moved to fds >= 512,
 * where the supervisor places the sockets it traps. The clock is the fake
 * one: every instant asserted below is exact.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_core.h"
#include "test_policy.h"

#include "../common/segment.h"
#include "../supervise/calls.h"
#include "../supervise/filter.h"
#include "../supervise/io.h"
#include "../supervise/loop.h"
#include "../supervise/notif.h"
#include "../supervise/sock.h"
#include "../supervise/state.h"
#include "../supervise/target.h"

#define T0 (1000 * MS)

/* ---- the fake notification fd (what notif.c does for the real one) ---- */

struct answer {
	uint64_t id;
	int64_t val;
	int err;
	bool cont; /* SECCOMP_USER_NOTIF_FLAG_CONTINUE */
	uint64_t at;
};

static struct {
	uint64_t now;
	bool gone; /* every notification cancelled (ID_VALID fails) */
	int n;
	struct answer a[32];
	int warnings;
} fake;

uint64_t sl_sup_now_ns(void)
{
	return fake.now;
}

static int record(uint64_t id, int64_t val, int err, bool cont)
{
	if (fake.gone)
		return -ENOENT;
	assert_true(fake.n < 32);
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
	return !fake.gone;
}

void sl_sup_warn(const char *fmt, ...)
{
	(void)fmt;
	fake.warnings++;
}

/* ---- the rig: a supervisor, loopback sockets at high fds ------------- */

struct rig {
	struct sl_sup s;
	char dir[64];
	int lis; /* a listener on 127.0.0.1 */
	uint16_t port;
	uint64_t next_id;
};

static struct rig *rig_new(const char *rules, bool killable)
{
	struct rig *r = calloc(1, sizeof(*r));
	assert_non_null(r);
	/* The per-process records go to a private directory of this test's. */
	snprintf(r->dir, sizeof(r->dir), "/tmp/sl-step.XXXXXX");
	assert_non_null(mkdtemp(r->dir));
	sl_seg_use_dir_unsync(r->dir);
	memset(&fake, 0, sizeof(fake));
	fake.now = T0;
	r->s.policy = policy_of(rules);
	sl_sup_traps_of(&r->s.policy, &r->s.traps);
	r->s.feat.wait_killable = killable;
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
	free(r->s.calls);
	close(r->lis);
	/* Empty: the record of this process was removed with it. */
	assert_dec_equal(rmdir(r->dir), 0);
	free(r);
}

/* A connected pair: the program's end moved to fd `at` (>= 512), the peer
 * end returned. */
static int rig_pair(struct rig *r, int at, bool nonblock)
{
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				.sin_port = htons(r->port)};
	assert_dec_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	int peer = accept4(r->lis, NULL, NULL, SOCK_CLOEXEC);
	assert_true(peer >= 0);
	assert_dec_equal(dup3(c, at, O_CLOEXEC), at);
	close(c);
	if (nonblock)
		fcntl(at, F_SETFL, O_NONBLOCK);
	return peer;
}

/* A notification of this thread's call nr(a0, a1, a2, ...). */
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
static struct sl_sup_call *held(struct rig *r)
{
	struct sl_sup_call *c = NULL;
	for (unsigned i = 0; i < r->s.calls_hi; i++)
		if (r->s.calls[i].used) {
			assert_null(c);
			c = &r->s.calls[i];
		}
	return c;
}

/* Advance the held call at its due instant; true if it ended (freed). */
static bool step_due(struct rig *r)
{
	struct sl_sup_call *c = held(r);
	assert_non_null(c);
	fake.now = c->due_ns;
	if (!sl_sup_step(&r->s, c, fake.now))
		return false;
	sl_sup_call_free(&r->s, c);
	return true;
}

static void on_notif(struct rig *r, const struct seccomp_notif *q)
{
	switch (sl_sup_on_of((long)q->data.nr)) {
	case SL_SUP_ON_SEND:
		sl_sup_on_send(&r->s, q);
		break;
	case SL_SUP_ON_RECV:
		sl_sup_on_recv(&r->s, q);
		break;
	case SL_SUP_ON_CONNECT:
		sl_sup_on_connect(&r->s, q);
		break;
	default:
		fail_msg("no handler for system call %d", q->data.nr);
	}
}

static void pattern(unsigned char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 7 + seed);
}

/* Read exactly n bytes from fd (blocking) and check them against want. */
static void expect_bytes(int fd, const unsigned char *want, size_t n)
{
	unsigned char got[4096];
	assert_true(n <= sizeof(got));
	size_t have = 0;
	while (have < n) {
		ssize_t k = read(fd, got + have, n - have);
		assert_true(k > 0);
		have += (size_t)k;
	}
	assert_memory_equal(got, want, n);
}

/* ---- the send family -------------------------------------------------- */

/* A blocking write of 250 bytes under 1000 B/s, burst 100: the filter
 * waits killable, so the call goes on piece by piece inside one call: 100
 * at once, 100 at +100 ms, 50 at +150 ms, one answer of 250 then. */
static void test_step_send_pieces(void **state)
{
	(void)state;
	struct rig *r = rig_new("send:1000B/s,burst=100B", true);
	int peer = rig_pair(r, 600, false);
	unsigned char buf[250];
	pattern(buf, sizeof(buf), 1);
	struct seccomp_notif q = req_of(r, SYS_write, 600, (uintptr_t)buf, sizeof(buf), 0);
	on_notif(r, &q);
	assert_dec_equal(fake.n, 0);
	assert_dec_equal(held(r)->done, 100);
	assert_dec_equal(held(r)->due_ns, T0 + 100 * MS);
	assert_false(step_due(r));
	assert_dec_equal(held(r)->done, 200);
	assert_dec_equal(held(r)->due_ns, T0 + 150 * MS);
	assert_true(step_due(r));
	assert_dec_equal(fake.n, 1);
	assert_dec_equal(fake.a[0].id, q.id);
	assert_dec_equal(fake.a[0].val, 250);
	assert_dec_equal(fake.a[0].err, 0);
	assert_dec_equal(fake.a[0].at, T0 + 150 * MS);
	expect_bytes(peer, buf, sizeof(buf));
	assert_null(held(r));
	close(peer);
	close(600);
	rig_free(r);
}

/* Without WAIT_KILLABLE_RECV a signal could cancel the call between two
 * pieces, so each call is answered with its first piece's count (a short
 * write, as the kernel may give); the next call waits for its tokens. */
static void test_step_send_short_counts(void **state)
{
	(void)state;
	struct rig *r = rig_new("send:1000B/s,burst=100B", false);
	int peer = rig_pair(r, 600, false);
	unsigned char buf[250];
	pattern(buf, sizeof(buf), 2);
	struct seccomp_notif q1 = req_of(r, SYS_write, 600, (uintptr_t)buf, sizeof(buf), 0);
	on_notif(r, &q1);
	assert_dec_equal(fake.n, 1);
	assert_dec_equal(fake.a[0].val, 100);
	assert_dec_equal(fake.a[0].at, T0);
	assert_null(held(r));
	/* The program writes the rest: held until its tokens are there. */
	struct seccomp_notif q2 = req_of(r, SYS_sendto, 600, (uintptr_t)(buf + 100),
					 sizeof(buf) - 100, 0);
	on_notif(r, &q2);
	assert_dec_equal(fake.n, 1);
	assert_dec_equal(held(r)->due_ns, T0 + 100 * MS);
	assert_true(step_due(r));
	assert_dec_equal(fake.n, 2);
	assert_dec_equal(fake.a[1].id, q2.id);
	assert_dec_equal(fake.a[1].val, 100);
	assert_dec_equal(fake.a[1].at, T0 + 100 * MS);
	expect_bytes(peer, buf, 200);
	close(peer);
	close(600);
	rig_free(r);
}

/* A non-blocking socket is never answered with a made-up EAGAIN: its call
 * is held for its tokens, then answered with one piece. */
static void test_step_send_nonblock_held(void **state)
{
	(void)state;
	struct rig *r = rig_new("send:1000B/s,burst=100B", true);
	int peer = rig_pair(r, 600, true);
	unsigned char buf[150];
	pattern(buf, sizeof(buf), 3);
	struct seccomp_notif q1 = req_of(r, SYS_write, 600, (uintptr_t)buf, sizeof(buf), 0);
	on_notif(r, &q1);
	assert_dec_equal(fake.n, 1);
	assert_dec_equal(fake.a[0].val, 100); /* non-blocking: one piece */
	struct seccomp_notif q2 = req_of(r, SYS_write, 600, (uintptr_t)(buf + 100), 50, 0);
	on_notif(r, &q2);
	assert_dec_equal(fake.n, 1);
	assert_dec_equal(held(r)->due_ns, T0 + 50 * MS);
	assert_true(step_due(r));
	assert_dec_equal(fake.n, 2);
	assert_dec_equal(fake.a[1].val, 50);
	assert_dec_equal(fake.a[1].err, 0);
	expect_bytes(peer, buf, sizeof(buf));
	close(peer);
	close(600);
	rig_free(r);
}

/* action=reject: the call that would wait is refused with the rule's
 * errno (EAGAIN by default for a transfer), nothing sent, no call held. */
static void test_step_send_reject(void **state)
{
	(void)state;
	struct rig *r = rig_new("send:1000B/s,burst=100B,action=reject", true);
	int peer = rig_pair(r, 600, false);
	unsigned char buf[100];
	pattern(buf, sizeof(buf), 4);
	struct seccomp_notif q1 = req_of(r, SYS_write, 600, (uintptr_t)buf, sizeof(buf), 0);
	on_notif(r, &q1);
	struct seccomp_notif q2 = req_of(r, SYS_write, 600, (uintptr_t)buf, sizeof(buf), 0);
	on_notif(r, &q2);
	assert_dec_equal(fake.n, 2);
	assert_dec_equal(fake.a[0].val, 100);
	assert_dec_equal(fake.a[1].id, q2.id);
	assert_dec_equal(fake.a[1].val, 0);
	assert_dec_equal(fake.a[1].err, EAGAIN);
	assert_null(held(r));
	expect_bytes(peer, buf, sizeof(buf));
	close(peer);
	close(600);
	rig_free(r);
}

/* A call cancelled while held (the program's thread got a fatal signal,
 * or the call was restarted): no answer, nothing sent; its units go back,
 * so the next call at the same instant goes at once. */
static void test_step_send_cancelled(void **state)
{
	(void)state;
	struct rig *r = rig_new("send:1000B/s,burst=100B", false);
	int peer = rig_pair(r, 600, false);
	unsigned char buf[100];
	pattern(buf, sizeof(buf), 5);
	struct seccomp_notif q1 = req_of(r, SYS_write, 600, (uintptr_t)buf, sizeof(buf), 0);
	on_notif(r, &q1); /* the burst */
	/* writev: a write of 60 would be a fast send (continued, see below) */
	struct iovec v60 = {buf, 60};
	struct seccomp_notif q2 = req_of(r, SYS_writev, 600, (uintptr_t)&v60, 1, 0);
	on_notif(r, &q2);
	assert_dec_equal(held(r)->due_ns, T0 + 60 * MS);
	fake.gone = true;
	assert_true(step_due(r)); /* read, then ID_VALID fails: not sent */
	fake.gone = false;
	assert_dec_equal(fake.n, 1);
	/* The 60 units taken for q2 were given back: a call of 60 now goes. */
	struct seccomp_notif q3 = req_of(r, SYS_writev, 600, (uintptr_t)&v60, 1, 0);
	on_notif(r, &q3);
	assert_dec_equal(fake.n, 2);
	assert_dec_equal(fake.a[1].id, q3.id);
	assert_dec_equal(fake.a[1].val, 60);
	assert_dec_equal(fake.a[1].at, T0 + 60 * MS);
	unsigned char want[160];
	memcpy(want, buf, 100);
	memcpy(want + 100, buf, 60);
	expect_bytes(peer, want, sizeof(want));
	close(peer);
	close(600);
	rig_free(r);
}

/* The fast send: once the full path has looked at a blocking stream
 * socket, a write of at most one piece on it is charged its whole length
 * and continues in the kernel (no copy), at once when the tokens are there,
 * at its slot when not; a cancelled one gives its units back. Another
 * socket moved to the same fd, a non-blocking one, a write bigger than the
 * burst or with MSG_DONTWAIT take the full path again. */
static void test_step_send_fast_continue(void **state)
{
	(void)state;
	struct rig *r = rig_new("send:1000B/s,burst=100B", true);
	int peer = rig_pair(r, 600, false);
	unsigned char buf[100];
	pattern(buf, sizeof(buf), 9);
	struct seccomp_notif q = req_of(r, SYS_write, 600, (uintptr_t)buf, 40, 0);
	on_notif(r, &q); /* the full path: sent by the supervisor */
	assert_dec_equal(fake.n, 1);
	assert_false(fake.a[0].cont);
	assert_dec_equal(fake.a[0].val, 40);
	expect_bytes(peer, buf, 40);
	q = req_of(r, SYS_write, 600, (uintptr_t)buf, 60, 0);
	on_notif(r, &q); /* 60 of the 60 tokens left: continued at once */
	assert_dec_equal(fake.n, 2);
	assert_true(fake.a[1].cont);
	assert_dec_equal(fake.a[1].at, T0);
	assert_null(held(r));
	q = req_of(r, SYS_sendto, 600, (uintptr_t)buf, 50, MSG_NOSIGNAL);
	on_notif(r, &q); /* no tokens: held for 50 ms, then continued */
	assert_dec_equal(fake.n, 2);
	assert_true(held(r)->cont);
	assert_dec_equal(held(r)->due_ns, T0 + 50 * MS);
	fake.gone = true;
	assert_true(step_due(r)); /* cancelled at +50 ms: its 50 units go back */
	fake.gone = false;
	q = req_of(r, SYS_write, 600, (uintptr_t)buf, 50, 0);
	on_notif(r, &q); /* at +50 ms the 50 given back are there: at once */
	assert_null(held(r));
	assert_dec_equal(fake.n, 3);
	assert_true(fake.a[2].cont);
	assert_dec_equal(fake.a[2].at, T0 + 50 * MS);
	/* MSG_DONTWAIT, and more than one piece: the full path (sent). */
	fake.now = T0 + 200 * MS;
	q = req_of(r, SYS_sendto, 600, (uintptr_t)buf, 10, MSG_DONTWAIT);
	on_notif(r, &q);
	assert_dec_equal(fake.n, 4);
	assert_false(fake.a[3].cont);
	assert_dec_equal(fake.a[3].val, 10);
	expect_bytes(peer, buf, 10);
	/* Another socket at fd 600, non-blocking: the full path again (the
	 * inode differs), sent by the supervisor, and so are the next ones. */
	int peer2 = rig_pair(r, 600, true);
	close(peer);
	fake.now = T0 + 400 * MS;
	for (int i = 0; i < 2; i++) {
		q = req_of(r, SYS_write, 600, (uintptr_t)buf, 20, 0);
		on_notif(r, &q);
		assert_dec_equal(fake.n, 5 + i);
		assert_false(fake.a[4 + i].cont);
		assert_dec_equal(fake.a[4 + i].val, 20);
		expect_bytes(peer2, buf, 20);
	}
	close(peer2);
	close(600);
	rig_free(r);
}

/* An fd up here that is no socket (a pipe the program moved there itself)
 * is not the supervisor's: the call continues in the kernel, uncounted;
 * so does a receive that consumes nothing (MSG_PEEK). */
static void test_step_send_unplaced_continues(void **state)
{
	(void)state;
	struct rig *r = rig_new("send:1000B/s,burst=100B;recv:1000B/s", true);
	int fds[2];
	assert_dec_equal(pipe2(fds, O_CLOEXEC), 0);
	assert_dec_equal(dup3(fds[1], 601, O_CLOEXEC), 601); /* a pipe up here */
	char b[10] = "0123456789";
	struct seccomp_notif q = req_of(r, SYS_write, 601, (uintptr_t)b, sizeof(b), 0);
	on_notif(r, &q);
	assert_dec_equal(fake.n, 1);
	assert_true(fake.a[0].cont);
	assert_null(held(r));
	int peer = rig_pair(r, 602, false);
	assert_dec_equal(write(peer, b, sizeof(b)), sizeof(b));
	struct seccomp_notif p = req_of(r, SYS_recvfrom, 602, (uintptr_t)b, sizeof(b), MSG_PEEK);
	on_notif(r, &p);
	assert_dec_equal(fake.n, 2);
	assert_true(fake.a[1].cont);
	close(fds[0]);
	close(fds[1]);
	close(601);
	close(602);
	close(peer);
	rig_free(r);
}

/* ---- the receive family ----------------------------------------------- */

/* 250 bytes queued, reads of 250 under 1000 B/s, burst 100: 100 at once,
 * 100 at +100 ms, 50 at +150 ms, and the bytes arrive in order, once. */
static void test_step_recv_pieces(void **state)
{
	(void)state;
	struct rig *r = rig_new("recv:1000B/s,burst=100B", true);
	int peer = rig_pair(r, 600, false);
	unsigned char sent[250], got[250];
	pattern(sent, sizeof(sent), 6);
	assert_dec_equal(write(peer, sent, sizeof(sent)), sizeof(sent));
	usleep(20000); /* loopback: queued well before */
	size_t have = 0;
	const uint64_t at[] = {T0, T0 + 100 * MS, T0 + 150 * MS};
	const int64_t count[] = {100, 100, 50};
	for (int i = 0; i < 3; i++) {
		struct seccomp_notif q = req_of(r, SYS_read, 600, (uintptr_t)(got + have),
						sizeof(got) - have, 0);
		on_notif(r, &q);
		if (fake.n == i) { /* held: its tokens come later */
			assert_dec_equal(held(r)->due_ns, at[i]);
			assert_true(step_due(r));
		}
		assert_dec_equal(fake.n, i + 1);
		assert_dec_equal(fake.a[i].id, q.id);
		assert_dec_equal(fake.a[i].val, count[i]);
		assert_dec_equal(fake.a[i].at, at[i]);
		have += (size_t)fake.a[i].val;
	}
	assert_memory_equal(got, sent, sizeof(sent));
	/* Nothing left queued: what was delivered was consumed, once. */
	char more;
	assert_dec_equal(recv(600, &more, 1, MSG_DONTWAIT), -1);
	assert_dec_equal(errno, EAGAIN);
	close(peer);
	close(600);
	rig_free(r);
}

/* A unix stream (family=unix): what was delivered is consumed once. A
 * unix socket refuses the MSG_TRUNC discard TCP takes, and the same bytes
 * used to be delivered again and again. */
static void test_step_recv_unix_once(void **state)
{
	(void)state;
	struct rig *r = rig_new("recv:1000B/s,burst=100B,family=unix", true);
	int sv[2];
	assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_dec_equal(dup3(sv[0], 600, O_CLOEXEC), 600);
	close(sv[0]);
	unsigned char sent[250], got[250];
	pattern(sent, sizeof(sent), 7);
	assert_dec_equal(write(sv[1], sent, sizeof(sent)), sizeof(sent));
	size_t have = 0;
	for (int i = 0; i < 3 && have < sizeof(got); i++) {
		struct seccomp_notif q = req_of(r, SYS_read, 600, (uintptr_t)(got + have),
						sizeof(got) - have, 0);
		on_notif(r, &q);
		if (fake.n == i)
			assert_true(step_due(r));
		assert_dec_equal(fake.n, i + 1);
		assert_true(fake.a[i].val > 0);
		have += (size_t)fake.a[i].val;
	}
	assert_dec_equal(have, sizeof(sent));
	assert_memory_equal(got, sent, sizeof(sent));
	char more;
	assert_dec_equal(recv(600, &more, 1, MSG_DONTWAIT), -1);
	assert_dec_equal(errno, EAGAIN);
	close(sv[1]);
	close(600);
	rig_free(r);
}

/* ---- connect ---------------------------------------------------------- */

/* connect:2/s, burst 1: the first connect continues at once, the second
 * is held for 500 ms and then continues in the kernel. */
static void test_step_connect_rate(void **state)
{
	(void)state;
	struct rig *r = rig_new("connect:2/s,burst=1", true);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				.sin_port = htons(r->port)};
	for (int i = 0; i < 2; i++) {
		int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_dec_equal(dup3(s, 610 + i, O_CLOEXEC), 610 + i);
		close(s);
		struct seccomp_notif q = req_of(r, SYS_connect, (uint64_t)(610 + i), (uintptr_t)&a,
						sizeof(a), 0);
		on_notif(r, &q);
		if (i == 1) {
			assert_dec_equal(fake.n, 1);
			assert_dec_equal(held(r)->due_ns, T0 + 500 * MS);
			assert_true(step_due(r));
		}
		assert_dec_equal(fake.n, i + 1);
		assert_true(fake.a[i].cont);
		assert_dec_equal(fake.a[i].id, q.id);
		assert_dec_equal(fake.a[i].at, i == 0 ? T0 : T0 + 500 * MS);
	}
	close(610);
	close(611);
	rig_free(r);
}

/* A throttled socket moved below 512: the call continues (the kernel
 * moves it), warned of once for the whole program; not under --trap-stdio
 * when it lands on fds 0-2, nor when it lands high. */
static void test_step_dup_warns(void **state)
{
	(void)state;
	struct rig *r = rig_new("send:1000B/s", true);
	int peer = rig_pair(r, 600, false);
	struct seccomp_notif q = req_of(r, SYS_dup2, 600, 700, 0, 0); /* high: trapped */
	sl_sup_on_dup(&r->s, &q);
	assert_dec_equal(fake.warnings, 0);
	r->s.traps.stdio = true;
	q = req_of(r, SYS_dup2, 600, 1, 0, 0);
	sl_sup_on_dup(&r->s, &q);
	assert_dec_equal(fake.warnings, 0);
	r->s.traps.stdio = false;
	for (int i = 0; i < 3; i++) {
		q = req_of(r, SYS_dup3, 600, 1, 0, 0);
		sl_sup_on_dup(&r->s, &q);
	}
	assert_dec_equal(fake.warnings, 1);
	assert_dec_equal(fake.n, 5);
	for (int i = 0; i < fake.n; i++)
		assert_true(fake.a[i].cont);
	close(peer);
	close(600);
	rig_free(r);
}

/* The dispatch table: every trapped call has its handler, others none. */
static void test_step_dispatch(void **state)
{
	(void)state;
	const struct {
		long nr;
		enum sl_sup_on on;
	} want[] = {
		{SYS_write, SL_SUP_ON_SEND},        {SYS_sendmmsg, SL_SUP_ON_SEND},
		{SYS_pwritev2, SL_SUP_ON_SEND},     {SYS_read, SL_SUP_ON_RECV},
		{SYS_recvmmsg, SL_SUP_ON_RECV},     {SYS_preadv2, SL_SUP_ON_RECV},
		{SYS_sendfile, SL_SUP_ON_SENDFILE}, {SYS_splice, SL_SUP_ON_SENDFILE},
		{SYS_socket, SL_SUP_ON_SOCKET},     {SYS_accept4, SL_SUP_ON_ACCEPT},
		{SYS_connect, SL_SUP_ON_CONNECT},   {SYS_dup2, SL_SUP_ON_DUP},
		{SYS_fcntl, SL_SUP_ON_DUP},         {SYS_openat, SL_SUP_ON_NONE},
		{SYS_close, SL_SUP_ON_NONE},        {-1, SL_SUP_ON_NONE},
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		assert_dec_equal(sl_sup_on_of(want[i].nr), want[i].on);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_step_send_pieces),
		cmocka_unit_test(test_step_send_short_counts),
		cmocka_unit_test(test_step_send_nonblock_held),
		cmocka_unit_test(test_step_send_reject),
		cmocka_unit_test(test_step_send_cancelled),
		cmocka_unit_test(test_step_send_fast_continue),
		cmocka_unit_test(test_step_send_unplaced_continues),
		cmocka_unit_test(test_step_recv_pieces),
		cmocka_unit_test(test_step_recv_unix_once),
		cmocka_unit_test(test_step_connect_rate),
		cmocka_unit_test(test_step_dup_warns),
		cmocka_unit_test(test_step_dispatch),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
