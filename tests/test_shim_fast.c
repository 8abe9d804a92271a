/* SPDX-License-Identifier: MIT */
/*
 * test_shim_fast.c - the send fast path (xfer.h): a send that every rule, all
 * per=process and not dry-run, admits at once is policed at one clock
 * reading and sent as it is. What must hold is that it is the general path
 * to the unit: what the kernel did not take is given back, an error gives
 * back everything and keeps its errno, the stats count the call as the
 * general path would, and a call one rule would delay or refuse leaves no
 * charge behind on the others before the general path decides it.
 *
 * The fake clock of test_shim.h, and a fake send/write/recv/read in the
 * shim's table of real functions, returning what each test asks for.
 *
 * The scopes and kinds of issue 13 (per=fd, per=thread, per=peer, dry-run,
 * sliding windows, several rules, the receive side) are checked two ways:
 * exact figures where the general path's answer is plain, and A/B runs of
 * one scenario, once as it comes (the fast path) and once with the fd
 * record's fast bits cleared (the general path decides every call), whose
 * returns, stats, limiter state words, sleeps and clock must be the same.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_assert.h"
#include "test_shim.h"

#define MS 1000000ull
#define SEC 1000000000ull
#define T0 (5 * 1000000000ull)

static int n_real;
static ssize_t next_result; /* -1: fail with next_errno; else min(len, it) */
static int next_errno;
static size_t last_len; /* what the last real call was asked to move */

static ssize_t fake_result(size_t len)
{
	n_real++;
	last_len = len;
	if (next_result < 0) {
		errno = next_errno;
		return -1;
	}
	return (size_t)next_result < len ? next_result : (ssize_t)len;
}

static size_t reenter_len; /* > 0: the fake send sends this much through send() */

static ssize_t fake_send(int fd, const void *b, size_t len, int flags)
{
	if (reenter_len > 0) {
		/* Like a second interposer whose send() writes through ours. */
		size_t inner = reenter_len;
		reenter_len = 0;
		assert_dec_equal(send(fd, b, inner, flags), (ssize_t)inner);
	}
	return fake_result(len);
}

static ssize_t fake_write(int fd, const void *b, size_t len)
{
	(void)fd, (void)b;
	return fake_result(len);
}

static int last_flags;                 /* of the last fake recv */
static const struct sl_real *real_fns; /* the real table, for other fds */

/* The shim reads files of its own (through sl__real too): only sockets
 * get the fake receives. */
static bool is_socket(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

static ssize_t fake_recv(int fd, void *b, size_t len, int flags)
{
	if (!is_socket(fd))
		return real_fns->recv(fd, b, len, flags);
	last_flags = flags;
	return fake_result(len);
}

static ssize_t fake_read(int fd, void *b, size_t len)
{
	if (!is_socket(fd))
		return real_fns->read(fd, b, len);
	return fake_result(len);
}

struct fix {
	int sv[2]; /* a connected AF_UNIX stream pair (the rules say family=unix) */
	struct sl_real saved;
};

static int setup(void **state)
{
	static struct fix f;
	shim_setup(&f.saved, T0);
	n_real = 0;
	next_result = SSIZE_MAX;
	reenter_len = 0;
	assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, f.sv), 0);
	sl__real.send = fake_send;
	sl__real.write = fake_write;
	real_fns = &f.saved;
	sl__real.recv = fake_recv;
	sl__real.read = fake_read;
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

static uint64_t avail(unsigned rule)
{
	return sl_limiter_available(sl__st.rule_lim[rule], fake_now);
}

static void assert_stats(unsigned rule, uint64_t calls, uint64_t admitted, uint64_t delayed,
			 uint64_t refused, uint64_t bytes)
{
	const struct sl_rstats *s = test_stats(rule);
	assert_dec_equal(s->calls, calls);
	assert_dec_equal(s->admitted, admitted);
	assert_dec_equal(s->delayed, delayed);
	assert_dec_equal(s->refused, refused);
	assert_dec_equal(s->bytes, bytes);
}

/* Admitted at once: one clock reading, exactly the bytes charged, counted. */
static void test_fast_admitted(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,family=unix");
	assert_dec_equal(send(f->sv[0], buf, 300, 0), 300);
	assert_dec_equal(avail(0), 700);
	n_clock_reads = 0;
	assert_dec_equal(write(f->sv[0], buf, 200), 200);
	assert_dec_equal(n_clock_reads, 1);
	assert_dec_equal(avail(0), 500);
	assert_dec_equal(n_real, 2);
	assert_dec_equal(n_sleeps, 0);
	assert_stats(0, 2, 2, 0, 0, 500);
}

/* The kernel takes 120 of 300 bytes: 180 are given back; the call returns
 * 120 and counts 120 bytes. */
static void test_fast_partial_gives_back(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,family=unix");
	next_result = 120;
	assert_dec_equal(send(f->sv[0], buf, 300, 0), 120);
	assert_dec_equal(avail(0), 880);
	next_result = 0;
	assert_dec_equal(write(f->sv[0], buf, 300), 0);
	assert_dec_equal(avail(0), 880);
	assert_stats(0, 2, 2, 0, 0, 120);
}

/* The kernel fails: everything is given back, errno is the kernel's, the
 * call is seen but not admitted. */
static void test_fast_error_gives_back(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,family=unix");
	next_result = -1;
	next_errno = EPIPE;
	errno = 0;
	assert_dec_equal(send(f->sv[0], buf, 300, 0), -1);
	assert_dec_equal(errno, EPIPE);
	next_errno = EAGAIN;
	assert_dec_equal(write(f->sv[0], buf, 300), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(avail(0), 1000);
	assert_stats(0, 2, 0, 0, 0, 0);
}

/* errno is untouched by a call that succeeds (the kernel does not set it). */
static void test_fast_errno_kept(void **state)
{
	struct fix *f = *state;
	char b = 'x';
	use_policy("SLUICE_SEND", "1000B/s,family=unix");
	errno = ENOTTY;
	assert_dec_equal(send(f->sv[0], &b, 1, 0), 1);
	assert_dec_equal(errno, ENOTTY);
}

/* A send the fast path cannot admit is decided by the general path from
 * the same clock reading: one reading, then the two around the sleep. */
static void test_fast_fallback_one_reading(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,family=unix");
	assert_dec_equal(send(f->sv[0], buf, 1000, 0), 1000);
	n_clock_reads = 0;
	assert_dec_equal(send(f->sv[0], buf, 500, 0), 500);
	assert_dec_equal(n_sleeps, 1);
	assert_dec_equal(fake_now, T0 + 500 * MS);
	assert_dec_equal(n_clock_reads, 3);
}

/* Two rules: 100 B/s (burst 1000 B) and 2 messages/s (burst 1). The second
 * send finds no message token: the byte rule's fast charge is given back
 * and the general path waits 500 ms and charges each rule once. Bytes then:
 * 1000 - 200 + 50 refilled = 850 (a charge left behind would make it 750). */
static void test_fast_other_rule_waits(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_RULES",
		   "send:100B/s,burst=1000B,family=unix;send:2/s,burst=1,family=unix");
	assert_dec_equal(send(f->sv[0], buf, 100, 0), 100);
	assert_dec_equal(n_sleeps, 0);
	assert_dec_equal(send(f->sv[0], buf, 100, 0), 100);
	assert_dec_equal(n_sleeps, 1);
	assert_dec_equal(fake_now, T0 + 500 * MS);
	assert_dec_equal(avail(0), 850);
	assert_dec_equal(avail(1), 0);
	assert_stats(0, 2, 2, 0, 0, 200);
	assert_stats(1, 2, 2, 1, 0, 200);
}

/* The first rule is the one that waits: nothing of the second (a message
 * rule, burst 3) stays charged twice either. */
static void test_fast_first_rule_waits(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_RULES",
		   "send:1000B/s,burst=1000B,family=unix;send:1/s,burst=3,family=unix");
	assert_dec_equal(send(f->sv[0], buf, 1000, 0), 1000);
	assert_dec_equal(avail(1), 2);
	assert_dec_equal(send(f->sv[0], buf, 500, 0), 500);
	assert_dec_equal(n_sleeps, 1);
	assert_dec_equal(fake_now, T0 + 500 * MS);
	assert_dec_equal(avail(0), 0);
	assert_dec_equal(avail(1), 1);
	assert_stats(0, 2, 2, 1, 0, 1500);
	assert_stats(1, 2, 2, 0, 0, 1500);
}

/* A reject rule: what fits goes by the fast path, the rest by the general
 * path (a partial count, then a refusal with EAGAIN), each counted once. */
static void test_fast_reject_falls_back(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,action=reject,family=unix");
	assert_dec_equal(send(f->sv[0], buf, 600, 0), 600);
	assert_dec_equal(send(f->sv[0], buf, 600, 0), 400);
	assert_dec_equal(last_len, 400);
	errno = 0;
	assert_dec_equal(send(f->sv[0], buf, 600, 0), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(n_real, 2);
	assert_dec_equal(avail(0), 0);
	assert_stats(0, 3, 2, 0, 1, 1000);
}

/* A send the real call makes (another interposer, a signal handler) is not
 * throttled or counted again: 100 bytes charged and counted, not 150. */
static void test_fast_reentry_passes(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,family=unix");
	reenter_len = 50;
	assert_dec_equal(send(f->sv[0], buf, 100, 0), 100);
	assert_dec_equal(n_real, 2);
	assert_dec_equal(avail(0), 900);
	assert_stats(0, 1, 1, 0, 0, 100);
}

/* A failed send of SIZE_MAX bytes under a message rule gives its message
 * back (no byte rule: nothing is too large for the fast path). */
static void test_fast_size_max_failure(void **state)
{
	struct fix *f = *state;
	char b = 'x';
	use_policy("SLUICE_SEND", "1/s,burst=1,family=unix");
	next_result = -1;
	next_errno = EFAULT;
	errno = 0;
	assert_dec_equal(send(f->sv[0], &b, SIZE_MAX, 0), -1);
	assert_dec_equal(errno, EFAULT);
	assert_dec_equal(avail(0), 1);
	next_result = SSIZE_MAX;
	assert_dec_equal(send(f->sv[0], &b, 1, 0), 1);
	assert_dec_equal(n_sleeps, 0);
	assert_stats(0, 2, 1, 0, 0, 1);
}

/* `sluice set` lowers the burst from 1000 B to 100 B: a 500-byte send,
 * once never split, now goes in pieces of 100 B (one at once, four 100 ms
 * apart) instead of being refused as larger than any burst. */
static void test_fast_retuned_burst_splits(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,family=unix");
	struct sl_params p = {.kind = SL_KIND_TOKEN,
			      .amount = 1000,
			      .period_ns = 1000 * MS,
			      .burst = 100};
	assert_dec_equal(sl_tunable_retune((struct sl_tunable *)(void *)sl__st.rule_lim[0], &p,
					   fake_now),
			 SL_OK);
	assert_dec_equal(send(f->sv[0], buf, 500, 0), 500);
	assert_dec_equal(n_real, 5);
	assert_dec_equal(last_len, 100);
	assert_dec_equal(n_sleeps, 4);
	assert_dec_equal(fake_now, T0 + 400 * MS);
	assert_stats(0, 1, 1, 1, 0, 500);
}

/* ---- issue 13: every scope and kind on the fast paths ---- */

static char big[4096];

/* fd's record (classified now if it was not), asserted to exist. */
static struct sl_fdrec *rec_of(int fd)
{
	const struct sl_fdrec *r = sl__fd_rec(fd);
	assert_non_null(r);
	return (struct sl_fdrec *)(uintptr_t)r;
}

/* The A/B switch: when set, xsend and xrecv clear the fd record's fast
 * bits before the call, so that the general path decides it. */
static bool general;

static ssize_t xsend(int fd, size_t len)
{
	struct sl_fdrec *r = rec_of(fd);
	if (general)
		r->fast = 0;
	else
		assert_true(r->fast & SL_FDR_FAST(SL_K_SEND));
	return send(fd, big, len, 0);
}

static ssize_t xrecv(int fd, size_t len, int flags)
{
	struct sl_fdrec *r = rec_of(fd);
	if (general)
		r->fast = 0;
	else
		assert_true(r->fast & SL_FDR_FAST(SL_K_RECV));
	return recv(fd, big, len, flags);
}

/* Availability of per=fd rule i's limiter of fd, as sl__st lays them out. */
static uint64_t fd_avail(int fd, unsigned i)
{
	return sl_limiter_available(&sl__st.fd_lims[(size_t)fd * sl__st.n_fd_rules +
						    sl__st.scope_slot[i]],
				    fake_now);
}

/* The state word(s) of a limiter (a tunable head: its current slot). */
static void lim_words(const struct sl_limiter *l, uint64_t w[2])
{
	w[0] = w[1] = 0;
	if (l == NULL)
		return;
	if (l->kind == SL_KIND_TUNABLE)
		l = sl_tunable_current((const struct sl_tunable *)(const void *)l);
	struct sl_limiter *m = (struct sl_limiter *)(uintptr_t)l;
	switch (m->kind) {
	case SL_KIND_TOKEN:
	case SL_KIND_LEAKY:
		w[0] = atomic_load(&m->u.gcra.tat);
		break;
	case SL_KIND_FIXED:
		w[0] = atomic_load(&m->u.fixed.used);
		break;
	case SL_KIND_SLIDING:
		w[0] = atomic_load(&m->u.sliding.state);
		break;
	case SL_KIND_WARMUP:
		w[0] = atomic_load(&m->u.warm.sched_ns);
		w[1] = atomic_load(&m->u.warm.stored_q);
		break;
	default:
		break;
	}
}

/* What an A/B run compares. */
#define AB_CALLS 16
struct snap {
	ssize_t ret[AB_CALLS];
	int err[AB_CALLS];
	unsigned n_calls;
	uint64_t stats[SL_MAX_RULES][6];
	uint64_t words[SL_MAX_RULES][2][2]; /* rule, fd (f->sv[0], f->sv[1]) */
	uint64_t now;
	int n_real, n_sleeps;
};

static void snap_call(struct snap *s, ssize_t r)
{
	assert_true(s->n_calls < AB_CALLS);
	s->err[s->n_calls] = r < 0 ? errno : 0;
	s->ret[s->n_calls++] = r;
}

static void snap_end(struct snap *s, const struct fix *f)
{
	for (unsigned i = 0; i < sl__st.policy.n_rules; i++) {
		const struct sl_rstats *st = test_stats(i);
		const uint64_t v[6] = {st->calls,   st->admitted, st->delayed,
				       st->refused, st->bytes,    st->delay_ns};
		memcpy(s->stats[i], v, sizeof(v));
		for (int k = 0; k < 2; k++) {
			const struct sl_limiter *l = NULL;
			if ((sl__st.proc_rules >> i) & 1)
				l = sl__st.rule_lim[i];
			else if ((sl__st.fd_rules >> i) & 1)
				l = sl__fd_lim(f->sv[k], i);
			else if ((sl__st.thread_rules >> i) & 1)
				l = sl__thread_lim(i);
			lim_words(l, s->words[i][k]);
		}
	}
	s->now = fake_now;
	s->n_real = n_real;
	s->n_sleeps = n_sleeps;
}

static void snap_equal(const struct snap *a, const struct snap *b)
{
	assert_dec_equal(a->n_calls, b->n_calls);
	for (unsigned k = 0; k < a->n_calls; k++) {
		if (a->ret[k] != b->ret[k] || a->err[k] != b->err[k])
			fail_msg("call %u: fast path %zd (errno %d), general path %zd (errno %d)",
				 k, a->ret[k], a->err[k], b->ret[k], b->err[k]);
	}
	static const char *const names[6] = {"calls",   "admitted", "delayed",
					     "refused", "bytes",    "delay_ns"};
	for (unsigned i = 0; i < sl__st.policy.n_rules; i++) {
		for (int k = 0; k < 6; k++)
			if (a->stats[i][k] != b->stats[i][k])
				fail_msg("rule %u %s: fast path %llu, general path %llu", i,
					 names[k], (unsigned long long)a->stats[i][k],
					 (unsigned long long)b->stats[i][k]);
		for (int fd = 0; fd < 2; fd++)
			for (int w = 0; w < 2; w++)
				if (a->words[i][fd][w] != b->words[i][fd][w])
					fail_msg("rule %u fd %d state word %d: fast path %llu, "
						 "general path %llu",
						 i, fd, w, (unsigned long long)a->words[i][fd][w],
						 (unsigned long long)b->words[i][fd][w]);
	}
	assert_dec_equal(a->now, b->now);
	assert_dec_equal(a->n_real, b->n_real);
	assert_dec_equal(a->n_sleeps, b->n_sleeps);
}

/* Run scenario fn under the policy var=value twice, fast then general,
 * each from a fresh state at T0, and compare; the fast run's snapshot in
 * *fast_out if not NULL. */
typedef void (*scenario_fn)(struct fix *f, struct snap *s);

static void ab_run(struct fix *f, const char *var, const char *value, scenario_fn fn,
		   struct snap *fast_out)
{
	static struct snap s[2];
	for (int g = 0; g < 2; g++) {
		memset(&s[g], 0, sizeof(s[g]));
		fake_now = T0;
		n_real = n_sleeps = n_clock_reads = 0;
		next_result = SSIZE_MAX;
		use_policy(var, value);
		general = g == 1;
		fn(f, &s[g]);
		snap_end(&s[g], f);
		general = false;
	}
	snap_equal(&s[0], &s[1]);
	if (fast_out != NULL)
		*fast_out = s[0];
}

/* per=fd: each fd its own bucket. A send on one takes nothing from the
 * other; the bytes a partial send did not move go back to its own fd's
 * limiter (not the rule's process limiter, not the other fd's); each call
 * is policed at one clock reading; the stats count every call. */
static void test_fast_per_fd_own_buckets(void **state)
{
	struct fix *f = *state;
	const int a = f->sv[0], b = f->sv[1];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,per=fd,family=unix");
	assert_dec_equal(sl__st.n_fd_rules, 1);
	assert_dec_equal(sl__st.fast[0].how, SL_FAST_FD_BUCKET);
	rec_of(a), rec_of(b);
	n_clock_reads = 0;
	assert_dec_equal(xsend(a, 300), 300);
	assert_dec_equal(n_clock_reads, 1);
	assert_dec_equal(fd_avail(a, 0), 700);
	assert_dec_equal(fd_avail(b, 0), 1000);
	assert_dec_equal(xsend(b, 200), 200);
	assert_dec_equal(fd_avail(a, 0), 700);
	assert_dec_equal(fd_avail(b, 0), 800);
	/* The kernel takes 50 of 400 on b: 350 back to b's bucket. */
	next_result = 50;
	assert_dec_equal(xsend(b, 400), 50);
	assert_dec_equal(fd_avail(b, 0), 750);
	assert_dec_equal(fd_avail(a, 0), 700);
	/* An error on a: all 100 back to a; errno the kernel's. */
	next_result = -1;
	next_errno = EPIPE;
	errno = 0;
	assert_dec_equal(xsend(a, 100), -1);
	assert_dec_equal(errno, EPIPE);
	assert_dec_equal(fd_avail(a, 0), 700);
	assert_dec_equal(fd_avail(b, 0), 750);
	/* The process limiter (the fallback of other scopes) is untouched. */
	assert_dec_equal(avail(0), 1000);
	assert_dec_equal(n_real, 4);
	assert_dec_equal(n_sleeps, 0);
	/* One reading per call, and one more for the partial send's
	 * non-blocking check (sl__fast_send_short, as sl__nb_end). */
	assert_dec_equal(n_clock_reads, 5);
	assert_stats(0, 4, 3, 0, 0, 550);
}

/* The same per=fd sequence, plus a call that must wait, through both
 * paths: the same figures. */
static void scen_per_fd(struct fix *f, struct snap *s)
{
	const int a = f->sv[0], b = f->sv[1];
	snap_call(s, xsend(a, 300));
	snap_call(s, xsend(b, 900));
	next_result = 50;
	snap_call(s, xsend(b, 100));
	next_result = -1;
	next_errno = EPIPE;
	snap_call(s, xsend(a, 100));
	next_result = SSIZE_MAX;
	snap_call(s, xsend(a, 700));
	snap_call(s, xsend(a, 200)); /* waits 200 ms */
	snap_call(s, xsend(b, 50));
}

static void test_fast_per_fd_ab(void **state)
{
	struct snap s;
	ab_run(*state, "SLUICE_SEND", "1000B/s,burst=1000B,per=fd,family=unix", scen_per_fd, &s);
	assert_dec_equal(s.n_sleeps, 1);
	assert_dec_equal(s.now, T0 + 200 * MS);
}

/* per=thread: the first call finds no thread slot (the fast path cannot
 * find its limiter) and the general path takes one; later calls find it
 * at once. Each call charges the thread's limiter once; another thread
 * has its own. */
static uint64_t thread_avail_seen;
static ssize_t thread_sent;

static void *other_thread(void *arg)
{
	const struct fix *f = arg;
	thread_sent = send(f->sv[0], big, 500, 0);
	struct sl_limiter *l = sl__thread_lim(0);
	thread_avail_seen = l != NULL ? sl_limiter_available(l, fake_now) : UINT64_MAX;
	return NULL;
}

static void test_fast_per_thread(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,per=thread,family=unix");
	assert_dec_equal(sl__st.fast[0].how, SL_FAST_THREAD_BUCKET);
	assert_null(sl__thread_lim(0)); /* no slot yet */
	rec_of(f->sv[0]);
	assert_dec_equal(xsend(f->sv[0], 100), 100);
	struct sl_limiter *mine = sl__thread_lim(0);
	assert_non_null(mine);
	assert_dec_equal(sl_limiter_available(mine, fake_now), 900);
	n_clock_reads = 0;
	assert_dec_equal(xsend(f->sv[0], 200), 200);
	assert_dec_equal(n_clock_reads, 1);
	assert_dec_equal(sl_limiter_available(mine, fake_now), 700);
	next_result = 10;
	assert_dec_equal(xsend(f->sv[0], 100), 10);
	assert_dec_equal(sl_limiter_available(mine, fake_now), 690);
	next_result = SSIZE_MAX;
	/* Another thread: its own slot and bucket; ours unchanged. */
	pthread_t t;
	assert_dec_equal(pthread_create(&t, NULL, other_thread, f), 0);
	assert_dec_equal(pthread_join(t, NULL), 0);
	assert_dec_equal(thread_sent, 500);
	assert_dec_equal(thread_avail_seen, 500);
	assert_dec_equal(sl_limiter_available(mine, fake_now), 690);
	assert_dec_equal(avail(0), 1000);
	assert_dec_equal(n_sleeps, 0);
	assert_stats(0, 4, 4, 0, 0, 810);
}

static void scen_per_thread(struct fix *f, struct snap *s)
{
	snap_call(s, xsend(f->sv[0], 100));
	snap_call(s, xsend(f->sv[0], 800));
	next_result = 30;
	snap_call(s, xsend(f->sv[0], 100));
	next_result = SSIZE_MAX;
	snap_call(s, xsend(f->sv[0], 300)); /* waits 230 ms */
	snap_call(s, xsend(f->sv[1], 1));
}

static void test_fast_per_thread_ab(void **state)
{
	struct snap s;
	ab_run(*state, "SLUICE_SEND", "1000B/s,burst=1000B,per=thread,family=unix", scen_per_thread,
	       &s);
	/* 70 B left before the 300: 230 ms; then the 1 B on the other fd
	 * (the same thread's bucket) 1 ms. */
	assert_dec_equal(s.n_sleeps, 2);
	assert_dec_equal(s.now, T0 + 231 * MS);
}

/* per=peer: peer_addr and available_to are test_shim.h's. */
#define FILL (4 * SL_PEER_SLOTS)

/* One call of a unit to each of FILL other peers, given back at once:
 * every entry not pinned may be evicted and made anew. */
static void churn(uint32_t first)
{
	for (uint32_t k = first; k < first + FILL; k++) {
		struct sl_addr a = peer_addr(k);
		struct sl_call c;
		struct sl_grant g;
		sl__call_begin(&c, -1, SL_OP_SEND, &a, 0);
		assert_dec_equal(sl__admit(&c, 1, 1, &g), 0);
		sl__grant_refund(&c, &g, 1);
		sl__call_end(&c, 1, true);
	}
}

/* per=peer: two sockets to the same peer share its bucket; the fd's first
 * fast call pins the entry, so FILL other peers cannot evict it (its bucket
 * stays as the sends left it, not a fresh full one); once both fds are
 * closed the pins are gone and the entry is evicted like any other. */
static void test_fast_per_peer_pins(void **state)
{
	(void)state;
	int lst, cli, srv, cli2, srv2;
	struct sockaddr_in addr;
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,per=peer,family=inet");
	assert_dec_equal(sl__st.fast[0].how, SL_FAST_PEER_BUCKET);
	loopback_pair(&lst, &cli, &srv, &addr);
	cli2 = socket(AF_INET, SOCK_STREAM, 0);
	assert_dec_equal(connect(cli2, (struct sockaddr *)&addr, sizeof(addr)), 0);
	srv2 = accept(lst, NULL, NULL);
	assert_true(srv2 >= 0);
	const struct sl_addr peer = rec_of(cli)->peer;
	assert_true(peer.family != 0);
	assert_dec_equal(xsend(cli, 300), 300);
	assert_dec_equal(available_to(&peer), 700);
	assert_dec_equal(xsend(cli2, 200), 200);
	assert_dec_equal(available_to(&peer), 500);
	/* Pinned, so the per-fd lookup is one load: one clock reading;
	 * errno untouched. */
	n_clock_reads = 0;
	errno = ENOTTY;
	assert_dec_equal(xsend(cli, 100), 100);
	assert_dec_equal(errno, ENOTTY);
	assert_dec_equal(n_clock_reads, 1);
	assert_dec_equal(available_to(&peer), 400);
	/* A partial send gives back to the peer's entry. */
	next_result = 25;
	errno = ENOTTY;
	assert_dec_equal(xsend(cli2, 100), 25);
	assert_dec_equal(errno, ENOTTY);
	assert_dec_equal(available_to(&peer), 375);
	/* A failure gives everything back, with the kernel's errno. */
	next_result = -1;
	next_errno = ECONNRESET;
	assert_dec_equal(xsend(cli2, 100), -1);
	assert_dec_equal(errno, ECONNRESET);
	next_result = SSIZE_MAX;
	assert_dec_equal(available_to(&peer), 375);
	churn(0);
	assert_dec_equal(available_to(&peer), 375);
	assert_dec_equal(xsend(cli, 75), 75);
	assert_dec_equal(available_to(&peer), 300);
	assert_dec_equal(avail(0), 1000);
	assert_dec_equal(n_sleeps, 0);
	/* The bytes of the five sends (the probes and the churn count calls
	 * of 0 bytes). */
	assert_dec_equal(test_stats(0)->bytes, 700);
	/* Closing one fd leaves the other's pin: still not evicted. */
	close(cli);
	churn(FILL);
	assert_dec_equal(available_to(&peer), 300);
	/* Closing the last one lets it go. */
	close(cli2);
	churn(2 * FILL);
	assert_dec_equal(available_to(&peer), 1000);
	close(srv);
	close(srv2);
	close(lst);
}

/* A short fast send on a non-blocking fd under a per=peer rule: holding
 * the fd back asks the peer's limiter (pinning its entry for the call),
 * and the call must end as the general path's does, unpinning it. Pins
 * left behind would keep the entry from ever being evicted: after the fd
 * is closed, other peers' calls must be able to take its place. */
static void test_fast_per_peer_short_nb_unpins(void **state)
{
	(void)state;
	int lst, cli, srv;
	struct sockaddr_in addr;
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,per=peer,family=inet");
	loopback_pair(&lst, &cli, &srv, &addr);
	assert_dec_equal(fcntl(cli, F_SETFL, fcntl(cli, F_GETFL) | O_NONBLOCK), 0);
	const struct sl_addr peer = rec_of(cli)->peer;
	for (int k = 0; k < 3; k++) {
		next_result = 25;
		assert_dec_equal(xsend(cli, 100), 25);
	}
	next_result = SSIZE_MAX;
	/* Counted as the general path counts it: 3 calls, 75 bytes. */
	assert_dec_equal(test_stats(0)->calls, 3);
	assert_dec_equal(test_stats(0)->bytes, 75);
	assert_dec_equal(available_to(&peer), 925);
	close(cli);
	churn(0);
	/* Evicted and made anew: a full bucket. */
	assert_dec_equal(available_to(&peer), 1000);
	close(srv);
	close(lst);
}

/* dry-run: a call every rule admits at once goes by the fast path and is
 * counted as the general path counts it (calls, admitted, bytes; delayed
 * 0); one the rule would delay is noted by the general path (delayed) and
 * sent anyway, whole, with no sleep. */
static void scen_dry_run(struct fix *f, struct snap *s)
{
	snap_call(s, xsend(f->sv[0], 300));
	snap_call(s, xsend(f->sv[0], 600));
	snap_call(s, xsend(f->sv[0], 500)); /* 100 left: would delay */
	snap_call(s, xsend(f->sv[0], 1));   /* admitted: the 500 took nothing */
	fake_now += 300 * MS;
	snap_call(s, xsend(f->sv[0], 200));
	next_result = 20;
	snap_call(s, xsend(f->sv[0], 100));
	next_result = SSIZE_MAX;
}

static void test_fast_dry_run(void **state)
{
	struct fix *f = *state;
	struct snap s;
	ab_run(f, "SLUICE_SEND", "1000B/s,burst=1000B,action=dry-run,family=unix", scen_dry_run,
	       &s);
	static const ssize_t want[] = {300, 600, 500, 1, 200, 20};
	assert_dec_equal(s.n_calls, 6);
	for (unsigned k = 0; k < 6; k++)
		assert_dec_equal(s.ret[k], want[k]);
	assert_dec_equal(s.n_sleeps, 0);
	assert_dec_equal(s.n_real, 6);
	/* calls, admitted, delayed, refused, bytes */
	assert_dec_equal(s.stats[0][0], 6);
	assert_dec_equal(s.stats[0][1], 6);
	/* Only the 500 would have waited: a dry-run police that does not
	 * admit takes nothing (act.c), so the 1 B after it found 100. */
	assert_dec_equal(s.stats[0][2], 1);
	assert_dec_equal(s.stats[0][3], 0);
	assert_dec_equal(s.stats[0][4], 1621);
	/* The admitted-at-once call alone: one clock reading, delayed 0. */
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,action=dry-run,family=unix");
	rec_of(f->sv[0]);
	n_clock_reads = 0;
	assert_dec_equal(xsend(f->sv[0], 300), 300);
	assert_dec_equal(n_clock_reads, 1);
	assert_dec_equal(avail(0), 700);
	assert_stats(0, 1, 1, 0, 0, 300);
}

/* A dry-run message rule beside a delay byte rule: the message rule's
 * would-be delay is only noted; the byte rule decides the wait. */
static void scen_dry_run_two(struct fix *f, struct snap *s)
{
	snap_call(s, xsend(f->sv[0], 400));
	snap_call(s, xsend(f->sv[0], 400)); /* message rule: would delay */
	snap_call(s, xsend(f->sv[0], 400)); /* byte rule waits 200 ms */
}

static void test_fast_dry_run_two(void **state)
{
	struct snap s;
	ab_run(*state, "SLUICE_RULES",
	       "send:1000B/s,burst=1000B,family=unix;send:1/s,burst=1,action=dry-run,family=unix",
	       scen_dry_run_two, &s);
	assert_dec_equal(s.n_sleeps, 1);
	assert_dec_equal(s.now, T0 + 200 * MS);
	assert_dec_equal(s.stats[1][2], 2); /* delayed (would have) */
	assert_dec_equal(s.stats[0][2], 1);
}

/* A sliding window (rule 0, N > 2^20 bytes per second: quanta of 2 bytes)
 * and a message token bucket (rule 1, 1/s, burst 1) on one send. The
 * second send finds no message token: the sliding window must not have
 * been policed first and given back (its refund rounds down: a quantum
 * would stay taken), so its count is what the general path leaves. */
static void scen_sliding_late(struct fix *f, struct snap *s)
{
	snap_call(s, xsend(f->sv[0], 1));
	snap_call(s, xsend(f->sv[0], 1)); /* the token bucket waits 1 s */
	snap_call(s, xsend(f->sv[0], 3)); /* and again */
}

/* A fake sleep that first records rule sleep_probe_rule's state words: what
 * the limiter holds while the general path waits for another rule. */
static unsigned sleep_probe_rule;
static bool sleep_probe_done;
static uint64_t sleep_probe_words[2];

static int probing_sleep(uint64_t deadline)
{
	if (!sleep_probe_done) {
		lim_words(sl__st.rule_lim[sleep_probe_rule], sleep_probe_words);
		sleep_probe_done = true;
	}
	return fake_sleep(deadline);
}

static void test_fast_sliding_late(void **state)
{
	struct fix *f = *state;
	const char *rules = "send:2000000B/s,algo=sliding,family=unix;send:1/s,burst=1,family=unix";
	struct snap s;
	ab_run(f, "SLUICE_RULES", rules, scen_sliding_late, &s);
	assert_dec_equal(s.n_sleeps, 2);
	assert_dec_equal(s.now, T0 + 2 * SEC);
	assert_true(sl_tunable_current((const struct sl_tunable *)(const void *)sl__st.rule_lim[0])
			    ->u.sliding.quantum > 1);
	/* And directly: the refused fast police leaves the window as it was. */
	use_policy("SLUICE_RULES", rules);
	assert_dec_equal(xsend(f->sv[0], 1), 1);
	uint64_t w1[2], w2[2];
	lim_words(sl__st.rule_lim[0], w1);
	/* No message token now: the general path waits for it (message
	 * rules first), and during that wait the window must hold what the
	 * first send left, not a quantum more. */
	sleep_probe_rule = 0;
	sleep_probe_done = false;
	sl__sleep_until = probing_sleep;
	assert_dec_equal(xsend(f->sv[0], 1), 1);
	sl__sleep_until = fake_sleep;
	assert_true(sleep_probe_done);
	memcpy(w2, sleep_probe_words, sizeof(w2));
	assert_dec_equal(w2[0], w1[0]);
}

/* Two sliding windows on one send (quanta of 2 bytes in rule 0; rule 1,
 * 10 bytes a second, full after the first send): the fast path polices at
 * most one window, so the general path decides, and rule 0's window holds
 * no quantum left over from a police given back. */
static void scen_two_sliding(struct fix *f, struct snap *s)
{
	snap_call(s, xsend(f->sv[0], 10));
	snap_call(s, xsend(f->sv[0], 1)); /* rule 1 full: waits */
	snap_call(s, xsend(f->sv[0], 1));
}

static void test_fast_two_sliding_general(void **state)
{
	struct fix *f = *state;
	const char *rules = "send:2000000B/s,algo=sliding,family=unix;"
			    "send:10B/s,algo=sliding,family=unix";
	struct snap s;
	ab_run(f, "SLUICE_RULES", rules, scen_two_sliding, &s);
	assert_true(s.n_sleeps >= 1);
	assert_dec_equal(s.ret[1], 1);
	assert_true(sl_tunable_current((const struct sl_tunable *)(const void *)sl__st.rule_lim[0])
			    ->u.sliding.quantum > 1);
}

/* per=process and per=fd on one send; one of them refuses at the fast
 * police: the other's tokens are given back exactly before the general
 * path decides (it waits, then charges each rule once). Both orders. */
static void test_fast_proc_and_fd(void **state)
{
	struct fix *f = *state;
	/* Rule 1 (per=fd, 500 B) refuses the second send: rule 0's 200 go
	 * back. After the 200 ms wait rule 0 has 600 + 200 refilled = 800,
	 * less 200: 600 (a charge left behind: 400). */
	use_policy("SLUICE_RULES",
		   "send:1000B/s,burst=1000B,family=unix;send:500B/s,burst=500B,per=fd,family=unix");
	rec_of(f->sv[1]);
	assert_dec_equal(xsend(f->sv[0], 400), 400);
	assert_dec_equal(avail(0), 600);
	assert_dec_equal(fd_avail(f->sv[0], 1), 100);
	assert_dec_equal(fd_avail(f->sv[1], 1), 500);
	assert_dec_equal(xsend(f->sv[0], 200), 200);
	assert_dec_equal(n_sleeps, 1);
	assert_dec_equal(fake_now, T0 + 200 * MS);
	assert_dec_equal(avail(0), 600);
	assert_dec_equal(fd_avail(f->sv[0], 1), 0);
	assert_dec_equal(fd_avail(f->sv[1], 1), 500);
	assert_stats(0, 2, 2, 0, 0, 600);
	assert_stats(1, 2, 2, 1, 0, 600);
	/* Rule 0 (per=fd) admits, rule 1 (per=process, 500 B) refuses: the
	 * fd's 200 go back. */
	fake_now = T0;
	n_sleeps = 0;
	use_policy("SLUICE_RULES",
		   "send:1000B/s,burst=1000B,per=fd,family=unix;send:500B/s,burst=500B,family=unix");
	assert_dec_equal(xsend(f->sv[0], 400), 400);
	assert_dec_equal(fd_avail(f->sv[0], 0), 600);
	assert_dec_equal(avail(1), 100);
	assert_dec_equal(xsend(f->sv[0], 200), 200);
	assert_dec_equal(n_sleeps, 1);
	assert_dec_equal(fake_now, T0 + 200 * MS);
	assert_dec_equal(fd_avail(f->sv[0], 0), 600);
	assert_dec_equal(avail(1), 0);
	assert_stats(0, 2, 2, 0, 0, 600);
	assert_stats(1, 2, 2, 1, 0, 600);
}

static void scen_proc_fd(struct fix *f, struct snap *s)
{
	snap_call(s, xsend(f->sv[0], 400));
	snap_call(s, xsend(f->sv[1], 300));
	snap_call(s, xsend(f->sv[0], 200)); /* per=fd refuses */
	next_result = 70;
	snap_call(s, xsend(f->sv[1], 150));
	next_result = -1;
	next_errno = ECONNRESET;
	snap_call(s, xsend(f->sv[1], 10));
	next_result = SSIZE_MAX;
	snap_call(s, xsend(f->sv[1], 400)); /* per=process refuses */
}

static void test_fast_proc_and_fd_ab(void **state)
{
	ab_run(*state, "SLUICE_RULES",
	       "send:1000B/s,burst=1000B,family=unix;send:500B/s,burst=500B,per=fd,family=unix",
	       scen_proc_fd, NULL);
	ab_run(*state, "SLUICE_RULES",
	       "send:500B/s,burst=500B,per=fd,family=unix;send:1000B/s,burst=1000B,family=unix;"
	       "send:5/s,burst=2,per=fd,family=unix",
	       scen_proc_fd, NULL);
}

/* The receive fast path: a never-limited recv is made as it is and charges
 * exactly the bytes received, at a second clock reading; an EOF or an
 * error charges nothing; errno is the kernel's. */
static void test_fast_recv_charges_received(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_RECV", "1000B/s,burst=1000B,family=unix");
	rec_of(f->sv[0]);
	n_clock_reads = 0;
	next_result = 100;
	assert_dec_equal(xrecv(f->sv[0], 300, 0), 100);
	assert_dec_equal(n_clock_reads, 2);
	assert_dec_equal(last_len, 300);
	assert_dec_equal(avail(0), 900);
	next_result = 0;
	assert_dec_equal(xrecv(f->sv[0], 300, 0), 0);
	assert_dec_equal(avail(0), 900);
	next_result = -1;
	next_errno = ECONNRESET;
	errno = 0;
	assert_dec_equal(xrecv(f->sv[0], 300, 0), -1);
	assert_dec_equal(errno, ECONNRESET);
	assert_dec_equal(avail(0), 900);
	/* read() the same. */
	next_result = 50;
	assert_dec_equal(read(f->sv[0], big, 300), 50);
	assert_dec_equal(avail(0), 850);
	assert_dec_equal(n_real, 4);
	assert_dec_equal(n_sleeps, 0);
	assert_stats(0, 4, 3, 0, 0, 150);
}

/* A message rule: the unit of a recv that brought nothing (EOF, error) is
 * given back; one that brought bytes keeps it. */
static void test_fast_recv_message_unit_back(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_RECV", "10/s,burst=10,family=unix");
	next_result = 0;
	assert_dec_equal(xrecv(f->sv[0], 100, 0), 0);
	assert_dec_equal(avail(0), 10);
	next_result = -1;
	next_errno = EAGAIN;
	errno = 0;
	assert_dec_equal(xrecv(f->sv[0], 100, 0), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(avail(0), 10);
	next_result = 5;
	assert_dec_equal(xrecv(f->sv[0], 100, 0), 5);
	assert_dec_equal(avail(0), 9);
	assert_dec_equal(n_sleeps, 0);
	assert_stats(0, 3, 2, 0, 0, 5);
}

/* The same receives, and a byte rule with a message rule, through both
 * paths. */
static void scen_recv(struct fix *f, struct snap *s)
{
	next_result = 100;
	snap_call(s, xrecv(f->sv[0], 300, 0));
	next_result = 0;
	snap_call(s, xrecv(f->sv[0], 300, 0));
	next_result = -1;
	next_errno = ECONNRESET;
	snap_call(s, xrecv(f->sv[0], 300, 0));
	next_result = SSIZE_MAX;
	snap_call(s, xrecv(f->sv[1], 700, 0));
	snap_call(s, xrecv(f->sv[0], 300, 0)); /* cut to what is left */
	snap_call(s, xrecv(f->sv[1], 1, 0));
}

static void test_fast_recv_ab(void **state)
{
	ab_run(*state, "SLUICE_RECV", "1000B/s,burst=1000B,family=unix", scen_recv, NULL);
	ab_run(*state, "SLUICE_RECV", "10/s,burst=2,family=unix", scen_recv, NULL);
	ab_run(*state, "SLUICE_RULES",
	       "recv:1000B/s,burst=1000B,family=unix;recv:10/s,burst=3,family=unix", scen_recv,
	       NULL);
	ab_run(*state, "SLUICE_RECV", "1000B/s,burst=1000B,per=fd,family=unix", scen_recv, NULL);
}

/* MSG_PEEK passes through (nothing charged, no clock); MSG_WAITALL takes
 * the general path, which fills the buffer with several real calls. */
static void test_fast_recv_peek_waitall(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_RECV", "1000B/s,burst=1000B,family=unix");
	rec_of(f->sv[0]);
	n_clock_reads = 0;
	next_result = 100;
	assert_dec_equal(recv(f->sv[0], big, 300, MSG_PEEK), 100);
	assert_dec_equal(n_clock_reads, 0);
	assert_dec_equal(avail(0), 1000);
	assert_stats(0, 0, 0, 0, 0, 0);
	assert_dec_equal(recv(f->sv[0], big, 300, MSG_WAITALL), 300);
	assert_dec_equal(n_real, 4);
	assert_dec_equal(last_flags, MSG_WAITALL);
	assert_dec_equal(avail(0), 700);
	assert_stats(0, 1, 1, 0, 0, 300);
}

/* A buffer larger than what the bucket has goes to the general path,
 * which cuts the call to what is available (as before the fast path). */
static void test_fast_recv_cut(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_RECV", "1000B/s,burst=1000B,family=unix");
	assert_dec_equal(xrecv(f->sv[0], 800, 0), 800);
	assert_dec_equal(avail(0), 200);
	assert_dec_equal(xrecv(f->sv[0], 500, 0), 200);
	assert_dec_equal(last_len, 200);
	assert_dec_equal(avail(0), 0);
	assert_dec_equal(n_sleeps, 0);
	assert_stats(0, 2, 2, 0, 0, 1000);
}

/* errno on every fast path: untouched by a call that succeeds, the
 * kernel's after one that fails. */
static void test_fast_errno_every_path(void **state)
{
	struct fix *f = *state;
	static const char *const pol[][2] = {
		{"SLUICE_SEND", "1000B/s,burst=1000B,family=unix"},
		{"SLUICE_SEND", "1000B/s,burst=1000B,per=fd,family=unix"},
		{"SLUICE_SEND", "1000B/s,burst=1000B,per=thread,family=unix"},
		{"SLUICE_SEND", "1000B/s,burst=1000B,action=dry-run,family=unix"},
		{"SLUICE_SEND", "1000B/s,algo=fixed,family=unix"},
		{"SLUICE_SEND", "1000B/s,algo=sliding,family=unix"},
		{"SLUICE_SEND", "100000B/s,algo=leaky,family=unix"},
		{"SLUICE_RULES",
		 "send:1000B/s,burst=1000B,family=unix;send:10/s,per=fd,family=unix"},
		{"SLUICE_RECV", "1000B/s,burst=1000B,family=unix"},
		{"SLUICE_RECV", "10/s,per=fd,family=unix"},
		{"SLUICE_RULES",
		 "recv:1000B/s,burst=1000B,per=fd,family=unix;recv:10/s,family=unix"},
	};
	for (size_t k = 0; k < sizeof(pol) / sizeof(pol[0]); k++) {
		use_policy(pol[k][0], pol[k][1]);
		const bool rx = strcmp(pol[k][0], "SLUICE_RECV") == 0 ||
				strncmp(pol[k][1], "recv:", 5) == 0;
		for (int round = 0; round < 3; round++) { /* per=thread: a slot first */
			next_result = SSIZE_MAX;
			errno = ENOTTY;
			const ssize_t r = rx ? xrecv(f->sv[0], 10, 0) : xsend(f->sv[0], 10);
			if (r != 10 || errno != ENOTTY)
				fail_msg("%s=%s: %zd, errno %d", pol[k][0], pol[k][1], r, errno);
			next_result = 3; /* partial */
			errno = ENOTTY;
			const ssize_t r3 = rx ? xrecv(f->sv[0], 10, 0) : xsend(f->sv[0], 10);
			if (r3 != 3 || errno != ENOTTY)
				fail_msg("%s=%s partial: %zd, errno %d", pol[k][0], pol[k][1], r3,
					 errno);
			next_result = -1;
			next_errno = round == 0 ? EPIPE : EINTR;
			errno = ENOTTY;
			const ssize_t e = rx ? xrecv(f->sv[0], 10, 0) : xsend(f->sv[0], 10);
			if (e != -1 || errno != next_errno)
				fail_msg("%s=%s failing: %zd, errno %d (want %d)", pol[k][0],
					 pol[k][1], e, errno, next_errno);
		}
	}
	next_result = SSIZE_MAX;
}

/* One send scenario and one receive scenario through every algorithm and
 * action in every scope the fast paths serve (per=process, per=fd,
 * per=thread), A/B: calls admitted at once, partial and failed calls,
 * calls that wait or are refused, the clock still and moving. */
static void scen_any_send(struct fix *f, struct snap *s)
{
	static const ssize_t sizes[] = {1, 300, 299, 400, 1, 0, 250, 600, 2, 1000, 7, 64};
	for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		next_result = k == 3 ? 100 : k == 6 ? -1 : k == 8 ? 0 : SSIZE_MAX;
		next_errno = EPIPE;
		errno = 0;
		snap_call(s, xsend(f->sv[k % 3 == 2], (size_t)sizes[k]));
		if (k % 4 == 3)
			fake_now += 37 * MS;
	}
	next_result = SSIZE_MAX;
}

static void scen_any_recv(struct fix *f, struct snap *s)
{
	static const ssize_t sizes[] = {1, 300, 299, 400, 1, 0, 250, 600, 2, 1000, 7, 64};
	for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		next_result = k == 3 ? 100 : k == 6 ? -1 : k == 8 ? 0 : k == 9 ? 333 : SSIZE_MAX;
		next_errno = ECONNRESET;
		errno = 0;
		snap_call(s, xrecv(f->sv[k % 3 == 2], (size_t)sizes[k], 0));
		if (k % 4 == 3)
			fake_now += 37 * MS;
	}
	next_result = SSIZE_MAX;
}

static void test_fast_every_kind_ab(void **state)
{
	static const char *const kinds[] = {
		"1000B/s,burst=1000B",
		"1000B/s,burst=1000B,action=reject",
		"1000B/s,burst=1000B,action=dry-run",
		"1000B/s,algo=leaky",
		"1000B/s,algo=fixed",
		"1000B/s,algo=fixed,action=reject",
		"1000B/s,algo=sliding",
		"2000000B/s,algo=sliding",
		"800B/s,algo=sliding,action=reject",
		"1000B/s,burst=500B,warmup=1s",
		"10/s,burst=3",
		"10/s,burst=3,action=reject",
		"5/s,algo=sliding",
	};
	static const char *const scopes[] = {"", ",per=fd", ",per=thread"};
	char rule[160];
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		for (size_t sc = 0; sc < sizeof(scopes) / sizeof(scopes[0]); sc++) {
			snprintf(rule, sizeof(rule), "%s%s,family=unix", kinds[k], scopes[sc]);
			print_message("send %s\n", rule);
			ab_run(*state, "SLUICE_SEND", rule, scen_any_send, NULL);
			print_message("recv %s\n", rule);
			ab_run(*state, "SLUICE_RECV", rule, scen_any_recv, NULL);
		}
}

/* Two rules of different scopes and kinds on one call, A/B. */
static void test_fast_two_rules_ab(void **state)
{
	static const char *const pairs[] = {
		"%s:1000B/s,burst=1000B,family=unix;%s:500B/s,burst=500B,per=fd,family=unix",
		"%s:1000B/s,burst=1000B,per=thread,family=unix;%s:5/s,burst=2,per=fd,family=unix",
		"%s:1000B/s,algo=fixed,per=fd,family=unix;%s:3/s,burst=3,family=unix",
		"%s:2000000B/s,algo=sliding,family=unix;%s:700B/s,burst=700B,per=fd,family=unix",
		"%s:1000B/s,burst=1000B,action=dry-run,family=unix;%s:600B/s,burst=600B,per=fd,"
		"family=unix",
		"%s:1000B/s,burst=1000B,action=reject,per=fd,family=unix;%s:4/s,algo=sliding,"
		"family=unix",
	};
	char rule[256];
	for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
		snprintf(rule, sizeof(rule), pairs[k], "send", "send");
		print_message("%s\n", rule);
		ab_run(*state, "SLUICE_RULES", rule, scen_any_send, NULL);
		snprintf(rule, sizeof(rule), pairs[k], "recv", "recv");
		print_message("%s\n", rule);
		ab_run(*state, "SLUICE_RULES", rule, scen_any_recv, NULL);
	}
}

/* per=peer: a datagram socket connected to one peer, then to another
 * (its record is rewritten), then closed and its number reused by a
 * socket to the first peer again: each send charges the entry of the peer
 * the fd has now, never the one it pinned before. */
static struct sl_addr inet_addr_of(uint32_t host, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(host)};
	struct sl_addr a;
	assert_true(sl_addr_from(&a, (const struct sockaddr *)&sa, sizeof(sa)));
	return a;
}

static void udp_connect(int fd, uint32_t host, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(host)};
	assert_dec_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
}

static void test_fast_per_peer_repinned(void **state)
{
	(void)state;
	const uint32_t one = 0x7f000001u, two = 0x7f000002u; /* 127.0.0.1, .2 */
	const uint16_t port = 9; /* discard: nothing is sent (fake send) */
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,per=peer,family=inet");
	const struct sl_addr a1 = inet_addr_of(one, port), a2 = inet_addr_of(two, port);
	int u = socket(AF_INET, SOCK_DGRAM, 0);
	assert_true(u >= 0);
	udp_connect(u, one, port);
	assert_dec_equal(xsend(u, 300), 300);
	assert_dec_equal(available_to(&a1), 700);
	assert_dec_equal(available_to(&a2), 1000);
	/* Another peer: the record is rewritten and the old pin let go. */
	udp_connect(u, two, port);
	assert_dec_equal(xsend(u, 200), 200);
	assert_dec_equal(available_to(&a1), 700);
	assert_dec_equal(available_to(&a2), 800);
	next_result = 50;
	assert_dec_equal(xsend(u, 100), 50);
	next_result = SSIZE_MAX;
	assert_dec_equal(available_to(&a1), 700);
	assert_dec_equal(available_to(&a2), 750);
	/* Nothing pins peer one now: churn evicts it (a full bucket again);
	 * peer two stays pinned by u. */
	churn(0);
	assert_dec_equal(available_to(&a1), 1000);
	assert_dec_equal(available_to(&a2), 750);
	/* Closed, and the number reused for a socket to peer one. */
	const int old = u;
	close(u);
	u = socket(AF_INET, SOCK_DGRAM, 0);
	assert_dec_equal(u, old);
	udp_connect(u, one, port);
	assert_dec_equal(xsend(u, 100), 100);
	assert_dec_equal(available_to(&a1), 900);
	assert_dec_equal(available_to(&a2), 750);
	churn(FILL);
	assert_dec_equal(available_to(&a1), 900); /* pinned by the new socket */
	assert_dec_equal(available_to(&a2), 1000);
	assert_dec_equal(n_sleeps, 0);
	close(u);
}

/* per=fd: a closed fd's number reused by a new socket starts with a full
 * bucket of its own. */
static void test_fast_per_fd_reused_number(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,per=fd,family=unix");
	const int a = f->sv[0];
	assert_dec_equal(xsend(a, 900), 900);
	assert_dec_equal(fd_avail(a, 0), 100);
	close(f->sv[0]);
	close(f->sv[1]);
	assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, f->sv), 0);
	assert_dec_equal(f->sv[0], a);
	assert_dec_equal(xsend(f->sv[0], 900), 900);
	assert_dec_equal(n_sleeps, 0);
	assert_dec_equal(fd_avail(f->sv[0], 0), 100);
	assert_stats(0, 2, 2, 0, 0, 1800);
}

/* per=peer: at most SL_PEER_SLOTS / 2 distinct entries are pinned by fds
 * (scope.c); fds past that take the general path (their sends are still
 * counted, on an entry pinned for the call only). Closing the fds gives the
 * room back: a second round of as many new peers pins again (a count of
 * pinned entries that leaked would leave that round none). */
#define PIN_FDS (SL_PEER_SLOTS / 2 + 8)

static int pin_round(int *fds, uint32_t base)
{
	for (int k = 0; k < PIN_FDS; k++) {
		fds[k] = socket(AF_INET, SOCK_DGRAM, 0);
		assert_true(fds[k] >= 0);
		udp_connect(fds[k], base + (uint32_t)k, 9);
		assert_dec_equal(xsend(fds[k], 10), 10);
	}
	churn(0);
	int pinned = 0;
	for (int k = 0; k < PIN_FDS; k++) {
		const struct sl_addr a = inet_addr_of(base + (uint32_t)k, 9);
		const uint64_t n = available_to(&a);
		assert_true(n == 990 || n == 1000);
		pinned += n == 990;
	}
	return pinned;
}

static void test_fast_per_peer_pin_cap(void **state)
{
	(void)state;
	static int fds[PIN_FDS];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,per=peer,family=inet");
	const int first = pin_round(fds, 0x7f010000u); /* 127.1.0.0 on */
	print_message("pinned by fds: %d of %d\n", first, PIN_FDS);
	assert_true(first <= SL_PEER_SLOTS / 2);
	assert_true(first > SL_PEER_SLOTS / 4);
	for (int k = 0; k < PIN_FDS; k++)
		close(fds[k]);
	churn(FILL);
	const int second = pin_round(fds, 0x7f020000u); /* 127.2.0.0 on */
	print_message("pinned by fds after the close: %d of %d\n", second, PIN_FDS);
	assert_true(second <= SL_PEER_SLOTS / 2);
	assert_true(second > SL_PEER_SLOTS / 4);
	for (int k = 0; k < PIN_FDS; k++)
		close(fds[k]);
	/* Every send counted, pinned or not. */
	assert_dec_equal(test_stats(0)->bytes, 2 * PIN_FDS * 10);
	assert_dec_equal(n_sleeps, 0);
}

int main(void)
{
	/* Link the wrappers even when ASan's interceptors define the names. */
	assert_dec_equal(sl__wrap_send_anchor, 1);
	assert_dec_equal(sl__wrap_recv_anchor, 1);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fast_admitted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_partial_gives_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_error_gives_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_errno_kept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_other_rule_waits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_first_rule_waits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_reject_falls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_reentry_passes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_size_max_failure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_retuned_burst_splits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_fallback_one_reading, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_per_fd_own_buckets, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_per_fd_ab, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_per_thread, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_per_thread_ab, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_per_peer_pins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_per_peer_short_nb_unpins, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fast_per_peer_repinned, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_per_fd_reused_number, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_per_peer_pin_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_dry_run, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_dry_run_two, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_sliding_late, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_two_sliding_general, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_proc_and_fd, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_proc_and_fd_ab, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_recv_charges_received, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_recv_message_unit_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_recv_ab, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_recv_peek_waitall, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_recv_cut, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_errno_every_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_every_kind_ab, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_two_rules_ab, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
