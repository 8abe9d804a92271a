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
 * The fake clock of test_shim.h, and a fake send/write in the shim's table
 * of real functions, returning what each test asks for.
 */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_shim.h"

#define MS 1000000ull
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
		assert_int_equal(send(fd, b, inner, flags), (ssize_t)inner);
	}
	return fake_result(len);
}

static ssize_t fake_write(int fd, const void *b, size_t len)
{
	(void)fd, (void)b;
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
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, f.sv), 0);
	sl__real.send = fake_send;
	sl__real.write = fake_write;
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
	const struct sl_rstats *s = &sl__st.stats[rule];
	assert_int_equal(s->calls, calls);
	assert_int_equal(s->admitted, admitted);
	assert_int_equal(s->delayed, delayed);
	assert_int_equal(s->refused, refused);
	assert_int_equal(s->bytes, bytes);
}

/* Admitted at once: one clock reading, exactly the bytes charged, counted. */
static void test_fast_admitted(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,family=unix");
	assert_int_equal(send(f->sv[0], buf, 300, 0), 300);
	assert_int_equal(avail(0), 700);
	n_clock_reads = 0;
	assert_int_equal(write(f->sv[0], buf, 200), 200);
	assert_int_equal(n_clock_reads, 1);
	assert_int_equal(avail(0), 500);
	assert_int_equal(n_real, 2);
	assert_int_equal(n_sleeps, 0);
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
	assert_int_equal(send(f->sv[0], buf, 300, 0), 120);
	assert_int_equal(avail(0), 880);
	next_result = 0;
	assert_int_equal(write(f->sv[0], buf, 300), 0);
	assert_int_equal(avail(0), 880);
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
	assert_int_equal(send(f->sv[0], buf, 300, 0), -1);
	assert_int_equal(errno, EPIPE);
	next_errno = EAGAIN;
	assert_int_equal(write(f->sv[0], buf, 300), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(avail(0), 1000);
	assert_stats(0, 2, 0, 0, 0, 0);
}

/* errno is untouched by a call that succeeds (the kernel does not set it). */
static void test_fast_errno_kept(void **state)
{
	struct fix *f = *state;
	char b = 'x';
	use_policy("SLUICE_SEND", "1000B/s,family=unix");
	errno = ENOTTY;
	assert_int_equal(send(f->sv[0], &b, 1, 0), 1);
	assert_int_equal(errno, ENOTTY);
}

/* A send the fast path cannot admit is decided by the general path from
 * the same clock reading: one reading, then the two around the sleep. */
static void test_fast_fallback_one_reading(void **state)
{
	struct fix *f = *state;
	static char buf[1000];
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,family=unix");
	assert_int_equal(send(f->sv[0], buf, 1000, 0), 1000);
	n_clock_reads = 0;
	assert_int_equal(send(f->sv[0], buf, 500, 0), 500);
	assert_int_equal(n_sleeps, 1);
	assert_int_equal(fake_now, T0 + 500 * MS);
	assert_int_equal(n_clock_reads, 3);
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
	assert_int_equal(send(f->sv[0], buf, 100, 0), 100);
	assert_int_equal(n_sleeps, 0);
	assert_int_equal(send(f->sv[0], buf, 100, 0), 100);
	assert_int_equal(n_sleeps, 1);
	assert_int_equal(fake_now, T0 + 500 * MS);
	assert_int_equal(avail(0), 850);
	assert_int_equal(avail(1), 0);
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
	assert_int_equal(send(f->sv[0], buf, 1000, 0), 1000);
	assert_int_equal(avail(1), 2);
	assert_int_equal(send(f->sv[0], buf, 500, 0), 500);
	assert_int_equal(n_sleeps, 1);
	assert_int_equal(fake_now, T0 + 500 * MS);
	assert_int_equal(avail(0), 0);
	assert_int_equal(avail(1), 1);
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
	assert_int_equal(send(f->sv[0], buf, 600, 0), 600);
	assert_int_equal(send(f->sv[0], buf, 600, 0), 400);
	assert_int_equal(last_len, 400);
	errno = 0;
	assert_int_equal(send(f->sv[0], buf, 600, 0), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(n_real, 2);
	assert_int_equal(avail(0), 0);
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
	assert_int_equal(send(f->sv[0], buf, 100, 0), 100);
	assert_int_equal(n_real, 2);
	assert_int_equal(avail(0), 900);
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
	assert_int_equal(send(f->sv[0], &b, SIZE_MAX, 0), -1);
	assert_int_equal(errno, EFAULT);
	assert_int_equal(avail(0), 1);
	next_result = SSIZE_MAX;
	assert_int_equal(send(f->sv[0], &b, 1, 0), 1);
	assert_int_equal(n_sleeps, 0);
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
	assert_int_equal(sl_tunable_retune((struct sl_tunable *)(void *)sl__st.rule_lim[0], &p,
					   fake_now),
			 SL_OK);
	assert_int_equal(send(f->sv[0], buf, 500, 0), 500);
	assert_int_equal(n_real, 5);
	assert_int_equal(last_len, 100);
	assert_int_equal(n_sleeps, 4);
	assert_int_equal(fake_now, T0 + 400 * MS);
	assert_stats(0, 1, 1, 1, 0, 500);
}

int main(void)
{
	/* Link the wrappers even when ASan's interceptors define the names. */
	assert_int_equal(sl__wrap_send_anchor, 1);
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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
