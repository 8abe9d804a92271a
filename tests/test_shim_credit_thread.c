/* SPDX-License-Identifier: MIT */
/*
 * test_shim_credit_thread.c - thread-local credit (shim/credit.h): a send
 * under one per=process bucket rule takes a slice of min(burst/8, 1 ms of
 * the rate) and spends it on later calls without reading the clock.
 *
 * One thread, exact sequences at a frozen fake clock: the slice, the calls
 * it pays, the next slice, what goes back (a short send, a call that finds
 * its credit expired), what does not (a retune voids it), calls too large
 * for credit. A per=thread rule's credit from the thread's own bucket; a
 * per=fd rule's keyed to its fd and socket.
 * Then 8 threads: never more than the burst at a frozen clock, a retune
 * mid-run, and every thread's credit back at its exit; under per=thread,
 * each thread exactly its own burst.
 *
 * The TSC is the real one; the fake span says how long a slice is good
 * for (0 ticks: expired at the next call; 2^62: for the whole test).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "anchors.h"
#include "credit.h"
#include "sandbox.h"
#include "test_assert.h"
#include "test_shim.h"

#define MS 1000000ull
#define T0 (5 * 1000000000ull)
#define THREADS 8

static _Atomic uint64_t sent;   /* bytes the fake send was given */
static _Atomic int short_next;  /* the next fake send returns 0 */
static _Atomic int clock_reads; /* the frozen clock's readings */
static uint64_t span_ticks;

static uint64_t frozen_clock(void)
{
	atomic_fetch_add_explicit(&clock_reads, 1, memory_order_relaxed);
	return T0;
}

static int frozen_sleep(uint64_t deadline)
{
	(void)deadline;
	return 0;
}

static int fake_span(uint64_t ns, uint64_t *ticks)
{
	(void)ns;
	*ticks = span_ticks;
	return 1;
}

static ssize_t fake_send(int fd, const void *b, size_t len, int flags)
{
	(void)fd, (void)b, (void)flags;
	if (atomic_exchange_explicit(&short_next, 0, memory_order_relaxed))
		return 0;
	atomic_fetch_add_explicit(&sent, len, memory_order_relaxed);
	return (ssize_t)len;
}

static _Atomic long recv_give = 1; /* the fake recv returns min(len, this); < 0: EAGAIN */

static ssize_t fake_recv(int fd, void *b, size_t len, int flags)
{
	(void)fd, (void)b, (void)flags;
	const long g = atomic_load_explicit(&recv_give, memory_order_relaxed);
	if (g < 0) {
		errno = EAGAIN;
		return -1;
	}
	return (size_t)g < len ? (ssize_t)g : (ssize_t)len;
}

struct fix {
	int sv[2];
	struct sl_real saved;
};
static struct fix fx;

static int setup(void **state)
{
	shim_setup(&fx.saved, T0);
	sl__clock_ns = frozen_clock;
	sl__sleep_until = frozen_sleep;
	sl__credit_span = fake_span;
	span_ticks = (uint64_t)1 << 62;
	atomic_store(&sent, 0);
	atomic_store(&short_next, 0);
	atomic_store(&clock_reads, 0);
	assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fx.sv), 0);
	sl__real.send = fake_send;
	sl__real.recv = fake_recv;
	atomic_store(&recv_give, 1);
	*state = &fx;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	shim_teardown(&f->saved);
	sl__credit_span = sl__clock_tsc_span;
	close(f->sv[0]);
	close(f->sv[1]);
	return 0;
}

static uint64_t avail(void)
{
	return sl_limiter_available(sl__st.rule_lim[0], T0);
}

static void send1(int fd, ssize_t want)
{
	static const char b = 'x';
	assert_dec_equal(send(fd, &b, 1, 0), want);
}

/* 1 MB/s, burst 80000 B: a slice is min(10000, 1000) = 1000 B. The first
 * 1-byte send takes it (999 left as credit); the next 999 read no clock
 * and leave the limiter alone; the 1001st takes the next slice. Counted
 * call by call. */
static void test_slice_pays_calls(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,family=unix");
	send1(f->sv[0], 1);
	assert_dec_equal(avail(), 79000);
	assert_dec_equal(sl__credit[0].units, 999);
	atomic_store(&clock_reads, 0);
	for (int k = 0; k < 999; k++)
		send1(f->sv[0], 1);
	assert_dec_equal(atomic_load(&clock_reads), 0);
	assert_dec_equal(avail(), 79000);
	assert_dec_equal(sl__credit[0].units, 0);
	send1(f->sv[0], 1);
	assert_dec_equal(atomic_load(&clock_reads), 1);
	assert_dec_equal(avail(), 78000);
	assert_dec_equal(sl__credit[0].units, 999);
	assert_dec_equal(atomic_load(&sent), 1001);
	const struct sl_rstats *s = test_stats(0);
	assert_dec_equal(s->calls, 1001);
	assert_dec_equal(s->admitted, 1001);
	assert_dec_equal(s->bytes, 1001);
	/* The two takes counted in the rule's counters, the 999 calls the
	 * credit paid for in this thread's slot (the first: slot 0). */
	assert_dec_equal(atomic_load(&sl__st.stats[0].calls), 2);
	assert_dec_equal(sl_shm_stat_tcount(sl__st.rec, 0, 0)->calls, 999);
	assert_dec_equal(sl_shm_stat_tcount(sl__st.rec, 0, 0)->bytes, 999);
}

/* A short send (the socket full): the unsent byte and the credit go back,
 * so the limiter is down by exactly what left. */
static void test_short_send_returns(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,family=unix");
	send1(f->sv[0], 1);
	send1(f->sv[0], 1);
	atomic_store(&short_next, 1);
	send1(f->sv[0], 0);
	assert_dec_equal(sl__credit[0].units, 0);
	assert_dec_equal(avail(), 80000 - 2);
	assert_dec_equal(test_stats(0)->bytes, 2);
	assert_dec_equal(test_stats(0)->calls, 3);
}

/* A slice good for 0 ticks: each call finds the last one's credit expired,
 * gives it back and takes a fresh slice; the limiter is down by what left
 * plus one outstanding slice. */
static void test_expired_credit_returns(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,family=unix");
	span_ticks = 0;
	atomic_store(&clock_reads, 0);
	for (int k = 1; k <= 5; k++) {
		send1(f->sv[0], 1);
		assert_dec_equal(avail(), 80000 - (uint64_t)k - 999);
	}
	assert_dec_equal(atomic_load(&clock_reads), 5);
}

/* `sluice set` (a retune) voids the credit: not spent, not given back
 * (the retune carried the slice over as debt), and the next call takes a
 * slice of the new parameters. */
static void test_retune_voids(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,family=unix");
	send1(f->sv[0], 1);
	assert_dec_equal(avail(), 79000);
	struct sl_params p = {.kind = SL_KIND_TOKEN,
			      .amount = 2000000,
			      .period_ns = 1000 * MS,
			      .burst = 40000};
	assert_dec_equal(sl_tunable_retune((struct sl_tunable *)(void *)sl__st.rule_lim[0], &p, T0),
			 SL_OK);
	const uint64_t after = avail();
	atomic_store(&clock_reads, 0);
	send1(f->sv[0], 1);
	assert_dec_equal(atomic_load(&clock_reads), 1);
	/* The new slice: min(40000/8, 2000) = 2000. */
	assert_dec_equal(avail(), after - 2000);
	assert_dec_equal(sl__credit[0].units, 1999);
}

/* Calls as large as the slice take their own units, no credit; so does a
 * rule whose 1 ms of rate is less than 2 units. */
static void test_no_credit_cases(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,family=unix");
	assert_dec_equal(send(f->sv[0], buf, 1000, 0), 1000);
	assert_dec_equal(avail(), 79000);
	assert_dec_equal(sl__credit[0].units, 0);
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,family=unix");
	send1(f->sv[0], 1);
	assert_dec_equal(avail(), 999);
	assert_dec_equal(sl__credit[0].units, 0);
}

static void *sandboxed_send(void *arg)
{
	send1(*(int *)arg, 1);
	return (void *)(uintptr_t)sl__credit[0].units; /* this thread's */
}

/* A thread of a sandboxed process that has no credit yet takes none: its
 * exit handler's key may need an allocation, a system call the filter did
 * not plan (sandbox.h). Its call is taken plain, exactly its unit. */
static void test_sandboxed_thread_takes_none(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,family=unix");
	send1(f->sv[0], 1); /* classified before the filter, as sandbox.h has it */
	assert_dec_equal(avail(), 79000);
	sl__sandbox_enter("test");
	assert_true(sl__sandboxed());
	pthread_t t;
	void *units;
	assert_int_equal(pthread_create(&t, NULL, sandboxed_send, &f->sv[0]), 0);
	pthread_join(t, &units);
	sl__sandbox_reset_unsync();
	assert_dec_equal((uintptr_t)units, 0);
	assert_dec_equal(avail(), 78999);
	assert_dec_equal(test_stats(0)->calls, 2);
}

/* A message rule: the slice counts calls (min(8000/8, 1000 per ms)). */
static void test_message_rule(void **state)
{
	struct fix *f = *state;
	static char buf[100];
	use_policy("SLUICE_SEND", "1000000/s,burst=8000,family=unix");
	assert_dec_equal(send(f->sv[0], buf, 100, 0), 100);
	assert_dec_equal(avail(), 7000);
	assert_dec_equal(sl__credit[0].units, 999);
	assert_dec_equal(send(f->sv[0], buf, 100, 0), 100);
	assert_dec_equal(sl__credit[0].units, 998);
}

/* A receive: credit must hold the whole buffer before the call, and what
 * came is spent from it after; EAGAIN gives it all back to the limiter
 * (the thread will wait). */
static void test_recv_credit(void **state)
{
	struct fix *f = *state;
	char buf[10];
	/* Names the receive wrappers' anchor: built with TSan, the runtime's
	 * recv would satisfy the test's otherwise, and it went to the kernel
	 * (an empty socketpair: it waited for ever). */
	assert_dec_equal(sl__wrap_recv_anchor + sl__wrap_send_anchor, 2);
	use_policy("SLUICE_RECV", "1000000B/s,burst=80000B,family=unix");
	assert_dec_equal(recv(f->sv[0], buf, 10, 0), 1);
	assert_dec_equal(avail(), 79000);
	assert_dec_equal(sl__credit[0].units, 999);
	atomic_store(&clock_reads, 0);
	atomic_store(&recv_give, 4);
	assert_dec_equal(recv(f->sv[0], buf, 10, 0), 4);
	assert_dec_equal(sl__credit[0].units, 995);
	assert_dec_equal(atomic_load(&clock_reads), 0);
	atomic_store(&recv_give, -1);
	errno = 0;
	assert_dec_equal(recv(f->sv[0], buf, 10, 0), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(sl__credit[0].units, 0);
	assert_dec_equal(avail(), 80000 - 5);
	const struct sl_rstats *st = test_stats(0);
	assert_dec_equal(st->calls, 3);
	assert_dec_equal(st->admitted, 2);
	assert_dec_equal(st->bytes, 5);
}

/* Under SLUICE_RECV=spec, with slices that expire as soon as taken (span
 * 0), a receive of 10 bytes to which 3 come. */
static void recv_expired_3(struct fix *f, const char *spec)
{
	char buf[10];
	use_policy("SLUICE_RECV", spec);
	span_ticks = 0;
	atomic_store(&recv_give, 3);
	assert_dec_equal(recv(f->sv[0], buf, 10, 0), 3);
}

/* A receive whose credit expired while it waited for data (span 0: it
 * expires as soon as taken): under a bucket the credit, which held the
 * whole buffer before the call, pays for what came, and the next call
 * gives the expired rest back and takes a slice anew. */
static void test_recv_expired(void **state)
{
	struct fix *f = *state;
	char buf[10];
	recv_expired_3(f, "1000000B/s,burst=80000B,family=unix");
	assert_dec_equal(sl__credit[0].units, 997);
	assert_dec_equal(avail(), 79000);
	atomic_store(&recv_give, 2);
	assert_dec_equal(recv(f->sv[0], buf, 10, 0), 2);
	assert_dec_equal(sl__credit[0].units, 998);
	assert_dec_equal(avail(), 80000 - 3 - 1000);
	assert_dec_equal(test_stats(0)->bytes, 5);
	/* Nothing came: the credit goes back whole. */
	atomic_store(&recv_give, -1);
	assert_dec_equal(recv(f->sv[0], buf, 10, 0), -1);
	assert_dec_equal(sl__credit[0].units, 0);
	assert_dec_equal(avail(), 80000 - 5);
	assert_dec_equal(test_stats(0)->bytes, 5);
}

/* The same under a fixed window: its credit is spent only in the window it
 * was taken in, so the bytes are charged when they came, and the credit
 * goes back. */
static void test_recv_expired_window(void **state)
{
	recv_expired_3(*state, "80000B/80ms,algo=fixed,family=unix");
	assert_dec_equal(sl__credit[0].units, 0);
	assert_dec_equal(avail(), 80000 - 3);
	assert_dec_equal(test_stats(0)->bytes, 3);
}

/* ---- per=thread ---- */

/* This thread's per=thread bucket of rule 0 (it has its slot). */
static uint64_t avail_own(void)
{
	struct sl_limiter *l = sl__thread_lim(0);
	assert_non_null(l);
	return sl_limiter_available(l, T0);
}

/* A per=thread bucket: the thread's first call takes its slot and its one
 * unit (the general path); the second takes a slice of its own bucket,
 * which pays the next 999 calls with no clock reading; a short send gives
 * the credit back to that bucket. The per=process fallback head is never
 * touched. */
static void test_thread_rule_slice(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,per=thread,family=unix");
	send1(f->sv[0], 1);
	assert_dec_equal(avail_own(), 79999);
	assert_dec_equal(sl__credit[0].units, 0);
	send1(f->sv[0], 1);
	assert_dec_equal(avail_own(), 78999);
	assert_dec_equal(sl__credit[0].units, 999);
	atomic_store(&clock_reads, 0);
	for (int k = 0; k < 999; k++)
		send1(f->sv[0], 1);
	assert_dec_equal(atomic_load(&clock_reads), 0);
	assert_dec_equal(sl__credit[0].units, 0);
	send1(f->sv[0], 1);
	assert_dec_equal(avail_own(), 77999);
	assert_dec_equal(sl__credit[0].units, 999);
	atomic_store(&short_next, 1);
	send1(f->sv[0], 0);
	assert_dec_equal(sl__credit[0].units, 0);
	assert_dec_equal(avail_own(), 80000 - 1002);
	assert_dec_equal(avail(), 80000);
	assert_dec_equal(atomic_load(&sent), 1002);
	assert_dec_equal(test_stats(0)->calls, 1003);
	assert_dec_equal(test_stats(0)->bytes, 1002);
}

/* Worker: 1-byte sends until one is refused (at most 200000); the count
 * sent. */
static void *drain_own(void *v)
{
	static const char b = 'x';
	const int fd = *(const int *)v;
	uintptr_t n = 0;
	while (n < 200000 && send(fd, &b, 1, MSG_DONTWAIT) == 1)
		n++;
	return (void *)n;
}

/* THREADS threads drain fd (drain_own): the bytes they sent in all. */
static uintptr_t drain_threads(int fd)
{
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		assert_dec_equal(pthread_create(&t[i], NULL, drain_own, &fd), 0);
	uintptr_t total = 0;
	for (int i = 0; i < THREADS; i++) {
		void *n;
		assert_dec_equal(pthread_join(t[i], &n), 0);
		total += (uintptr_t)n;
	}
	return total;
}

/* 8 threads under one per=thread rule at a frozen clock, each with credit:
 * each sends exactly its own burst, never a byte more, and none of it
 * comes from another thread's bucket. */
static void test_thread_rule_bound(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=8000B,per=thread,family=unix,action=reject");
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		assert_dec_equal(pthread_create(&t[i], NULL, drain_own, &f->sv[0]), 0);
	for (int i = 0; i < THREADS; i++) {
		void *n;
		assert_dec_equal(pthread_join(t[i], &n), 0);
		assert_dec_equal((uintptr_t)n, 8000);
	}
	assert_dec_equal(atomic_load(&sent), THREADS * 8000);
	assert_dec_equal(avail(), 8000);
}

/* ---- per=fd ---- */

/* fd's per=fd bucket of rule 0. */
static uint64_t avail_fd(int fd)
{
	return sl_limiter_available(sl__fd_lim(fd, 0), T0);
}

/* A per=fd bucket: credit is keyed to the fd it came from. fd a's first
 * call takes its unit alone (and the key), its second a slice of a's
 * bucket, which pays 999 calls with no clock reading. A call on fd b gives
 * a's credit back to a's bucket and takes its own unit alone; b's next
 * call takes a slice of b's bucket. */
static void test_fd_rule_keyed(void **state)
{
	struct fix *f = *state;
	const int a = f->sv[0], b = f->sv[1];
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,per=fd,family=unix");
	send1(a, 1);
	assert_dec_equal(avail_fd(a), 79999);
	assert_dec_equal(sl__credit[0].units, 0);
	send1(a, 1);
	assert_dec_equal(avail_fd(a), 78999);
	assert_dec_equal(sl__credit[0].units, 999);
	atomic_store(&clock_reads, 0);
	for (int k = 0; k < 500; k++)
		send1(a, 1);
	assert_dec_equal(atomic_load(&clock_reads), 0);
	assert_dec_equal(sl__credit[0].units, 499);
	send1(b, 1);
	assert_dec_equal(avail_fd(a), 80000 - 502);
	assert_dec_equal(avail_fd(b), 79999);
	assert_dec_equal(sl__credit[0].units, 0);
	send1(b, 1);
	assert_dec_equal(avail_fd(b), 78999);
	assert_dec_equal(sl__credit[0].units, 999);
	assert_dec_equal(avail_fd(a), 80000 - 502);
	assert_dec_equal(avail(), 80000);
	assert_dec_equal(atomic_load(&sent), 504);
}

/* Two rules, per=process (rule 0) and per=fd (rule 1): each lends its own
 * credit (fd.h: SL_FDR_MCREDIT). The first call takes rule 0's slice, finds
 * rule 1's credit keyed to no fd (it takes the key) and takes its units the
 * plain way; the second takes rule 1's slice; the next 500 read no clock;
 * a short send gives back both credits, so each bucket is down by exactly
 * what left. Counted in both rules. */
#define TWO_RULES(op)                                                                              \
	op ":1000000B/s,burst=80000B,family=unix;" op ":1000000B/s,burst=80000B,per=fd,family=unix"
static void test_two_rules_send(void **state)
{
	struct fix *f = *state;
	const int a = f->sv[0];
	use_policy("SLUICE_RULES", TWO_RULES("send"));
	send1(a, 1);
	assert_dec_equal(sl__credit[0].units, 1000);
	assert_dec_equal(sl__credit[1].units, 0);
	assert_dec_equal(avail(), 80000 - 1000 - 1);
	assert_dec_equal(sl_limiter_available(sl__fd_lim(a, 1), T0), 79999);
	send1(a, 1);
	assert_dec_equal(sl__credit[0].units, 999);
	assert_dec_equal(sl__credit[1].units, 999);
	assert_dec_equal(sl_limiter_available(sl__fd_lim(a, 1), T0), 80000 - 1 - 1000);
	atomic_store(&clock_reads, 0);
	for (int k = 0; k < 500; k++)
		send1(a, 1);
	assert_dec_equal(atomic_load(&clock_reads), 0);
	assert_dec_equal(sl__credit[0].units, 499);
	assert_dec_equal(sl__credit[1].units, 499);
	atomic_store(&short_next, 1);
	send1(a, 0);
	assert_dec_equal(sl__credit[0].units, 0);
	assert_dec_equal(sl__credit[1].units, 0);
	assert_dec_equal(avail(), 80000 - 502);
	assert_dec_equal(sl_limiter_available(sl__fd_lim(a, 1), T0), 80000 - 502);
	assert_dec_equal(atomic_load(&sent), 502);
	for (unsigned i = 0; i < 2; i++) {
		assert_dec_equal(test_stats(i)->calls, 503);
		assert_dec_equal(test_stats(i)->bytes, 502);
	}
}

/* The same rules for receives: each credit must hold the whole buffer
 * before the call and gets back what did not come; nothing came (EAGAIN):
 * both go back, each bucket down by exactly what came. */
static void test_two_rules_recv(void **state)
{
	struct fix *f = *state;
	const int a = f->sv[0];
	char buf[10];
	use_policy("SLUICE_RULES", TWO_RULES("recv"));
	assert_dec_equal(recv(a, buf, 10, 0), 1);
	assert_dec_equal(sl__credit[0].units, 1000);
	assert_dec_equal(avail(), 80000 - 1000 - 1);
	atomic_store(&recv_give, 4);
	atomic_store(&clock_reads, 0);
	assert_dec_equal(recv(a, buf, 10, 0), 4);
	assert_dec_equal(sl__credit[0].units, 996);
	assert_dec_equal(sl__credit[1].units, 996);
	assert_dec_equal(recv(a, buf, 10, 0), 4);
	assert_dec_equal(sl__credit[0].units, 992);
	assert_dec_equal(sl__credit[1].units, 992);
	assert_dec_equal(atomic_load(&clock_reads), 1); /* rule 1's take alone */
	atomic_store(&recv_give, -1);
	errno = 0;
	assert_dec_equal(recv(a, buf, 10, 0), -1);
	assert_dec_equal(errno, EAGAIN);
	assert_dec_equal(sl__credit[0].units, 0);
	assert_dec_equal(sl__credit[1].units, 0);
	assert_dec_equal(avail(), 80000 - 9);
	assert_dec_equal(sl_limiter_available(sl__fd_lim(a, 1), T0), 80000 - 9);
	for (unsigned i = 0; i < 2; i++) {
		assert_dec_equal(test_stats(i)->calls, 4);
		assert_dec_equal(test_stats(i)->bytes, 9);
	}
}

/* Every wrapper of the send and receive families spends two rules' credit
 * as send and recv do (hot2_NAME, wrap_send.c and wrap_recv.c): after the
 * two calls that take the slices, write, writev, sendto and sendmsg (read,
 * readv, recvfrom and recvmsg) on the real socket read no clock and take
 * their byte from both credits. */
static void test_two_rules_every_wrapper(void **state)
{
	struct fix *f = *state;
	const int a = f->sv[0];
	char b = 'x';
	struct iovec v = {.iov_base = &b, .iov_len = 1};
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
	use_policy("SLUICE_RULES", TWO_RULES("send"));
	send1(a, 1);
	send1(a, 1);
	atomic_store(&clock_reads, 0);
	for (int k = 0; k < 10; k++) {
		assert_dec_equal(write(a, &b, 1), 1);
		assert_dec_equal(writev(a, &v, 1), 1);
		assert_dec_equal(sendto(a, &b, 1, 0, NULL, 0), 1);
		assert_dec_equal(sendmsg(a, &m, 0), 1);
	}
	assert_dec_equal(atomic_load(&clock_reads), 0);
	assert_dec_equal(sl__credit[0].units, 999 - 40);
	assert_dec_equal(sl__credit[1].units, 999 - 40);
	use_policy("SLUICE_RULES", TWO_RULES("recv"));
	static char in[100];
	assert_dec_equal(write(f->sv[1], in, sizeof in), 100);
	assert_dec_equal(recv(a, &b, 1, 0), 1);
	assert_dec_equal(recv(a, &b, 1, 0), 1);
	atomic_store(&clock_reads, 0);
	for (int k = 0; k < 10; k++) {
		assert_dec_equal(read(a, &b, 1), 1);
		assert_dec_equal(readv(a, &v, 1), 1);
		assert_dec_equal(recvfrom(a, &b, 1, 0, NULL, NULL), 1);
		assert_dec_equal(recvmsg(a, &m, 0), 1);
	}
	assert_dec_equal(atomic_load(&clock_reads), 0);
	assert_dec_equal(sl__credit[0].units, 999 - 40);
	assert_dec_equal(sl__credit[1].units, 999 - 40);
}

/* Credit of a closed fd whose number comes back on another socket: not
 * spent there (the key holds the inode) and not given to the new socket's
 * bucket, which starts full. */
static void test_fd_rule_reused_number(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,per=fd,family=unix");
	send1(f->sv[0], 1);
	send1(f->sv[0], 1);
	assert_dec_equal(sl__credit[0].units, 999);
	const int old = f->sv[0];
	close(old);
	int sv[2];
	assert_dec_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_dec_equal(sv[0], old);
	f->sv[0] = sv[0];
	send1(sv[0], 1);
	assert_dec_equal(sl__credit[0].units, 0);
	assert_dec_equal(avail_fd(sv[0]), 79999);
	send1(sv[0], 1);
	assert_dec_equal(avail_fd(sv[0]), 78999);
	assert_dec_equal(sl__credit[0].units, 999);
	close(sv[1]);
}

/* 8 threads on one fd under per=fd at a frozen clock, each taking slices
 * of that fd's bucket: together exactly the burst, never a byte more; the
 * other fd's bucket untouched by it. */
static void test_fd_rule_threads_bound(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=8000B,per=fd,family=unix,action=reject");
	assert_dec_equal(drain_threads(f->sv[0]), 8000);
	assert_dec_equal(atomic_load(&sent), 8000);
	assert_dec_equal(avail_fd(f->sv[0]), 0);
	send1(f->sv[1], 1); /* classified now: its own full bucket */
	assert_dec_equal(avail_fd(f->sv[1]), 7999);
}

/* 8 threads on one fd under two reject rules at a frozen clock, each
 * thread taking slices of both: never a byte past the smaller burst (rule
 * 1's), and once they have exited (their credit given back) each bucket
 * is down by exactly what left. Credit one thread holds of rule 0 may
 * leave another without (each slice is 1000 of rule 0's 8000), so fewer
 * may leave than rule 1's burst, never more. */
static void test_two_rules_threads_bound(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_RULES", "send:1000000B/s,burst=8000B,family=unix,action=reject;"
				   "send:1000000B/s,burst=5000B,per=fd,family=unix,action=reject");
	const uintptr_t n = drain_threads(f->sv[0]);
	print_message("measured: 8 threads under two rules sent %llu bytes (at most 5000)\n",
		      (unsigned long long)n);
	assert_true(n > 0 && n <= 5000);
	assert_dec_equal(atomic_load(&sent), n);
	assert_dec_equal(avail(), 8000 - n);
	assert_dec_equal(sl_limiter_available(sl__fd_lim(f->sv[0], 1), T0), 5000 - n);
}

/* ---- a fixed window ---- */

static uint64_t clock_at = T0; /* the settable clock's reading */

static uint64_t settable_clock(void)
{
	atomic_fetch_add_explicit(&clock_reads, 1, memory_order_relaxed);
	return clock_at;
}

/* ns -> ticks one for one, but a slice's own span (1 ms and more) as the
 * fixture's: so the window's end is what cuts a slice. */
static int window_fake_span(uint64_t ns, uint64_t *ticks)
{
	*ticks = ns >= MS ? span_ticks : ns;
	return 1;
}

static uint64_t avail_at(uint64_t now)
{
	return sl_limiter_available(sl__st.rule_lim[0], now);
}

/* A window rule (policy) at the settable clock, at T0: the first send
 * takes a slice (returned; *limit: the window's), the second is paid by
 * it with no clock reading. */
static uint64_t window_slice(struct fix *f, const char *policy, uint64_t *limit)
{
	clock_at = T0;
	sl__clock_ns = settable_clock;
	sl__credit_span = window_fake_span;
	use_policy("SLUICE_SEND", policy);
	assert_true(sl__st.credit_rules & 1);
	*limit = avail_at(T0);
	print_message("window limit %llu\n", (unsigned long long)*limit);
	send1(f->sv[0], 1);
	const uint64_t slice = sl__credit[0].units + 1;
	assert_true(slice > 1);
	assert_dec_equal(avail_at(T0), *limit - slice);
	atomic_store(&clock_reads, 0);
	send1(f->sv[0], 1);
	assert_dec_equal(atomic_load(&clock_reads), 0);
	assert_dec_equal(sl__credit[0].units, slice - 2);
	return slice;
}

/* A short send at the settable clock: the credit goes back whole, and the
 * window then shows `avail`. */
static void short_send_returns(struct fix *f, uint64_t avail)
{
	atomic_store(&short_next, 1);
	send1(f->sv[0], 0);
	assert_dec_equal(sl__credit[0].units, 0);
	assert_dec_equal(avail_at(clock_at), avail);
}

/* A 1-byte send at `at` that takes no slice (its unit alone); the window
 * then shows `avail`. */
static void send_no_slice(struct fix *f, uint64_t at, uint64_t avail)
{
	clock_at = at;
	send1(f->sv[0], 1);
	assert_dec_equal(sl__credit[0].units, 0);
	assert_dec_equal(avail_at(at), avail);
}

/* A per=process fixed window of 1000000 B a second: a slice is taken in a
 * window and pays later calls there with no clock reading; taken 5 us
 * before the window's end (under the 10 us guard) there is none, the call
 * takes its own unit; credit given back after the window ended goes to
 * the window it came from (which takes nothing back), never to the new
 * one. */
static void test_fixed_window_credit(void **state)
{
	struct fix *f = *state;
	uint64_t limit;
	(void)window_slice(f, "1000000B/s,algo=fixed,family=unix", &limit);
	/* The next window, where another user took 500: a short send (paid
	 * by the old window's credit, which the frozen clock leaves good)
	 * gives its unit and the credit back to the old window, named by the
	 * take's clock: the new window is down by its 500 alone. */
	clock_at = T0 + 1000 * MS;
	assert_true(sl_fast_take_tunable_fixed(sl__st.rule_lim[0], 500, clock_at));
	short_send_returns(f, limit - 500);
	/* 5 us before this window's end: no slice, the call's unit alone
	 * (the window: 500, then this 1). */
	send_no_slice(f, T0 + 2000 * MS - 5000, limit - 501);
	assert_dec_equal(atomic_load(&sent), 3);
	assert_dec_equal(test_stats(0)->calls, 4);
	sl__credit_span = fake_span;
}

/* A per=process sliding window of 1000000 B a second, as a fixed one: a
 * slice is counted in the current window when taken and pays later calls
 * there with no clock reading, so the estimate counts every unit before it
 * leaves; given back in the same window it comes off that window's count;
 * 5 us before the window's end there is none; credit given back after the
 * window ended goes to the window it came from, never to the new one (the
 * old one, now the previous window, keeps the whole slice at full weight). */
static void test_sliding_window_credit(void **state)
{
	struct fix *f = *state;
	uint64_t limit;
	const uint64_t slice = window_slice(f, "1000000B/s,algo=sliding,family=unix", &limit);
	assert_dec_equal(sl__st.fast[0].how, SL_FAST_PROC_SLIDING);
	assert_dec_equal(limit, 1000000);
	/* A short send in the same window: the unsent byte and the credit go
	 * back to it; the window holds the 2 bytes that left. */
	short_send_returns(f, limit - 2);
	/* 5 us before the window's end: no slice, the call's byte alone. */
	send_no_slice(f, T0 + 1000 * MS - 5000, limit - 3);
	/* The next window: a slice there (the previous window's 3 at full
	 * weight at its start). */
	clock_at = T0 + 1000 * MS;
	send1(f->sv[0], 1);
	assert_dec_equal(sl__credit[0].units, slice - 1);
	assert_dec_equal(avail_at(clock_at), limit - 3 - slice);
	/* The window after it, where another user took 500: a short send paid
	 * by the old credit gives it back to its own window, which is over
	 * and takes nothing back: the new window shows the old one's whole
	 * slice (full weight at its start) and the 500, no more, no less. */
	clock_at = T0 + 2000 * MS;
	assert_true(sl_fast_take_tunable(sl__st.rule_lim[0], 500, clock_at));
	short_send_returns(f, limit - slice - 500);
	assert_dec_equal(atomic_load(&sent), 4);
	assert_dec_equal(test_stats(0)->calls, 6);
	assert_dec_equal(test_stats(0)->bytes, 4);
	sl__credit_span = fake_span;
}

/* 8 threads drain one sliding window of 8000 B (a slice each, given back
 * at the refusal that ends each thread): exactly 8000 leave, never more. */
static void test_sliding_threads_bound(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "8000B/s,algo=sliding,family=unix,action=reject");
	assert_dec_equal(drain_threads(f->sv[0]), 8000);
	assert_dec_equal(atomic_load(&sent), 8000);
	assert_dec_equal(avail(), 0);
	assert_dec_equal(test_stats(0)->bytes, 8000);
	/* Credit paid for most of them (slices of 8 B: 1 ms of the rate). */
	assert_true(sl_shm_stat_tsum(sl__st.rec, 0).calls >= 8000 - 8000 / 8);
}

/* ---- 8 threads ---- */

static pthread_barrier_t bar;
static _Atomic uint64_t sent_after;

struct worker {
	int fd;
	int first;  /* 1-byte sends before the barrier */
	bool drain; /* then send until one is refused */
};

/* Every worker reaches both barriers whatever its sends return (a worker
 * that left early would keep the main thread waiting for ever): what went
 * wrong is its return value. */
static void *worker_main(void *v)
{
	const struct worker *w = v;
	static const char b = 'x';
	void *rv = NULL;
	for (int k = 0; k < w->first && rv == NULL; k++)
		if (send(w->fd, &b, 1, MSG_DONTWAIT) != 1)
			rv = (void *)1; /* refused before the limit was reached */
	if (!w->drain)
		return rv;
	pthread_barrier_wait(&bar);
	pthread_barrier_wait(&bar); /* the retune is made between the two */
	if (rv != NULL)
		return rv;
	for (int k = 0; k < 200000; k++) {
		if (send(w->fd, &b, 1, MSG_DONTWAIT) != 1)
			return NULL;
		atomic_fetch_add_explicit(&sent_after, 1, memory_order_relaxed);
	}
	return (void *)2; /* never refused: the limit did not hold */
}

/* Join threads t[0..n-1]; each must return NULL (nothing went wrong). */
static void join_all(const pthread_t *t, int n)
{
	for (int i = 0; i < n; i++) {
		void *rv;
		assert_dec_equal(pthread_join(t[i], &rv), 0);
		assert_ptr_equal(rv, NULL);
	}
}

static void run_workers(int fd, int first, bool drain, void (*between)(void))
{
	pthread_t t[THREADS];
	struct worker w = {.fd = fd, .first = first, .drain = drain};
	if (drain)
		assert_dec_equal(pthread_barrier_init(&bar, NULL, THREADS + 1), 0);
	for (int i = 0; i < THREADS; i++)
		assert_dec_equal(pthread_create(&t[i], NULL, worker_main, &w), 0);
	if (drain) {
		pthread_barrier_wait(&bar);
		between();
		pthread_barrier_wait(&bar);
	}
	join_all(t, THREADS);
	if (drain)
		pthread_barrier_destroy(&bar);
}

/* 8 threads send 10 bytes each and exit: each took a slice of 1000 and
 * gave 990 back at its exit, so the limiter is down by exactly 80. */
static void test_threads_return_at_exit(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,family=unix");
	run_workers(f->sv[0], 10, false, NULL);
	assert_dec_equal(atomic_load(&sent), 80);
	assert_dec_equal(avail(), 80000 - 80);
}

/* Threads that send `calls` 1-byte calls each, all alive until every one
 * has sent (a barrier), or one after another. */
struct counted {
	int fd, calls;
	pthread_barrier_t *bar;
};

static void *counted_main(void *v)
{
	const struct counted *c = v;
	static const char b = 'x';
	void *rv = NULL;
	for (int k = 0; k < c->calls; k++)
		if (send(c->fd, &b, 1, 0) != 1)
			rv = (void *)1;
	if (c->bar != NULL)
		pthread_barrier_wait(c->bar);
	return rv;
}

static void run_counted(int fd, int n, int calls, bool together)
{
	pthread_t t[SL_SHM_TSLOTS + 8];
	pthread_barrier_t b;
	struct counted c = {.fd = fd, .calls = calls, .bar = together ? &b : NULL};
	assert_true(n <= (int)(sizeof(t) / sizeof(t[0])));
	if (together)
		assert_dec_equal(pthread_barrier_init(&b, NULL, (unsigned)n), 0);
	for (int i = 0; i < n; i++) {
		assert_dec_equal(pthread_create(&t[i], NULL, counted_main, &c), 0);
		if (!together)
			join_all(&t[i], 1);
	}
	if (together) {
		join_all(t, n);
		pthread_barrier_destroy(&b);
	}
}

/* Calls the credit paid for count in their thread's slot, which an exited
 * thread leaves to the next with its counts: 3 threads one after another
 * count 9 calls each in slot 0 (their first, a take, in the rule's
 * counters), and `sluice stat`'s sum is every call. */
static void test_counts_thread_slots(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,family=unix");
	run_counted(f->sv[0], 3, 10, false);
	assert_dec_equal(sl_shm_stat_tcount(sl__st.rec, 0, 0)->calls, 27);
	assert_dec_equal(sl_shm_stat_tcount(sl__st.rec, 0, 0)->bytes, 27);
	assert_dec_equal(sl_shm_stat_tcount(sl__st.rec, 1, 0)->calls, 0);
	assert_dec_equal(atomic_load(&sl__st.stats[0].calls), 3);
	assert_dec_equal(test_stats(0)->calls, 30);
	assert_dec_equal(test_stats(0)->admitted, 30);
	assert_dec_equal(test_stats(0)->bytes, 30);
	assert_dec_equal(avail(), 80000 - 30);
}

/* More threads at once than slots: the first SL_SHM_TSLOTS to take credit
 * count 2 of their 3 calls in their slots, the others take none and count
 * all 3 in the rule's counters; the sum is every call. */
static void test_counts_past_slots(void **state)
{
	struct fix *f = *state;
	const int extra = 6;
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,family=unix");
	run_counted(f->sv[0], (int)SL_SHM_TSLOTS + extra, 3, true);
	uint64_t own = 0;
	for (uint32_t s = 0; s < SL_SHM_TSLOTS; s++) {
		assert_dec_equal(sl_shm_stat_tcount(sl__st.rec, s, 0)->calls, 2);
		own += sl_shm_stat_tcount(sl__st.rec, s, 0)->calls;
	}
	assert_dec_equal(own, 2 * SL_SHM_TSLOTS);
	assert_dec_equal(atomic_load(&sl__st.stats[0].calls), SL_SHM_TSLOTS + 3 * extra);
	assert_dec_equal(test_stats(0)->calls, 3 * (SL_SHM_TSLOTS + extra));
	assert_dec_equal(test_stats(0)->bytes, 3 * (SL_SHM_TSLOTS + extra));
	assert_dec_equal(avail(), 80000 - 3 * (SL_SHM_TSLOTS + extra));
}

static uint64_t avail_retuned;

static void retune_half(void)
{
	struct sl_params p = {.kind = SL_KIND_TOKEN,
			      .amount = 500000,
			      .period_ns = 1000 * MS,
			      .burst = 40000};
	assert_dec_equal(sl_tunable_retune((struct sl_tunable *)(void *)sl__st.rule_lim[0], &p, T0),
			 SL_OK);
	avail_retuned = avail();
}

/* At a frozen clock, 8 threads (each holding credit) and a retune between
 * two phases: the second phase sends exactly what the new slot had (no
 * old credit spent after the retune, none lost between threads that take
 * and give back), and nothing ever passes the burst. */
static void test_threads_retune_bound(void **state)
{
	struct fix *f = *state;
	use_policy("SLUICE_SEND", "1000000B/s,burst=80000B,family=unix,action=reject");
	atomic_store(&sent_after, 0);
	run_workers(f->sv[0], 100, true, retune_half);
	const uint64_t before = THREADS * 100;
	/* 8 slices of 1000 taken, 800 bytes sent: 7200 voided (debt in the new
	 * slot: 40000 - (8000 carried over) = 32000). */
	assert_dec_equal(avail_retuned, 40000 - THREADS * 1000);
	print_message("measured: %llu bytes before the retune, %llu after (the new slot had %llu)\n",
		      (unsigned long long)before, (unsigned long long)atomic_load(&sent_after),
		      (unsigned long long)avail_retuned);
	assert_dec_equal(atomic_load(&sent_after), avail_retuned);
	assert_dec_equal(atomic_load(&sent), before + avail_retuned);
	assert_true(atomic_load(&sent) <= 80000);
	assert_dec_equal(avail(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_slice_pays_calls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_short_send_returns, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expired_credit_returns, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retune_voids, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_credit_cases, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sandboxed_thread_takes_none, setup, teardown),
		cmocka_unit_test_setup_teardown(test_message_rule, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recv_credit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recv_expired, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recv_expired_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_thread_rule_slice, setup, teardown),
		cmocka_unit_test_setup_teardown(test_thread_rule_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fd_rule_keyed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fd_rule_reused_number, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_rules_send, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_rules_recv, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_rules_every_wrapper, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_rules_threads_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fd_rule_threads_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fixed_window_credit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sliding_window_credit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sliding_threads_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_threads_return_at_exit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_counts_thread_slots, setup, teardown),
		cmocka_unit_test_setup_teardown(test_counts_past_slots, setup, teardown),
		cmocka_unit_test_setup_teardown(test_threads_retune_bound, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
