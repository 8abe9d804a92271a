/* SPDX-License-Identifier: MIT */
/*
 * test_shim.h - what the shim's unit tests share: installing a policy from
 * one SLUICE_* variable, and a connected loopback TCP pair with its
 * listener, and a fake clock with a fake sleep (the shim's sl__clock_ns and
 * sl__sleep_until). Each test file keeps its own fakes of libc (they count
 * different things).
 */
#ifndef SLUICE_TEST_SHIM_H
#define SLUICE_TEST_SHIM_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "test_assert.h"

#include "../shim/anchors.h"
#include "../shim/rule_lim.h"
#include "../shim/act.h"
#include "../shim/clock.h"
#include "../shim/fd.h"
#include "../shim/fdscan.h"
#include "../shim/init.h"
#include "../shim/nb.h"
#include "../shim/ready.h"
#include "../shim/real.h"
#include "../shim/scope.h"
#include "../shim/state.h"
#include "../shim/stats.h"
#include "../shim/xfer.h"
#include "../shim/xfer_recv.h"

/* Rule i's counters as `sluice stat` sums them, now (sl_shm_stat_counts:
 * with the per-thread counts of calls credit paid for); valid until the
 * next call for the same rule in this thread. */
static inline struct sl_rstats *test_stats(unsigned i)
{
	static __thread struct sl_rstats snap[SL_MAX_RULES];
	sl_shm_stat_counts(sl__st.rec, i, &snap[i]);
	return &snap[i];
}

/* The fake clock: time stands still unless a test or a fake sleep moves
 * it. Point sl__clock_ns at fake_clock and sl__sleep_until at fake_sleep;
 * reset the counters in the test's setup. */
static uint64_t fake_now __attribute__((unused));
static int n_clock_reads __attribute__((unused));
static int n_sleeps __attribute__((unused));
/* The sleep (0-based) that a signal interrupts 1 ms in (EINTR); -1: none. */
static int fake_sleep_eintr_at __attribute__((unused)) = -1;

static inline uint64_t fake_clock(void)
{
	n_clock_reads++;
	return fake_now;
}

static inline int fake_sleep(uint64_t deadline)
{
	if (n_sleeps++ == fake_sleep_eintr_at) {
		fake_now += 1000000u;
		return EINTR;
	}
	if (deadline > fake_now)
		fake_now = deadline;
	return 0;
}

/* The part of a shim test's setup that every file shares: the fake clock
 * and sleep at t0 with their counters cleared, no rules, and the table of
 * real functions resolved and saved in *saved (the test then installs its
 * own fakes in sl__real). */
static inline void use_policy(const char *var, const char *value);
static inline void shim_setup(struct sl_real *saved, uint64_t t0)
{
	fake_now = t0;
	sl__clock_ns = fake_clock;
	sl__sleep_until = fake_sleep;
	n_clock_reads = n_sleeps = 0;
	fake_sleep_eintr_at = -1;
	use_policy(NULL, NULL);
	sl_real_resolve_all();
	*saved = sl__real;
}

/* The teardown's shared part: the real functions back, no rules. */
static inline void shim_teardown(const struct sl_real *saved)
{
	sl__real = *saved;
	use_policy(NULL, NULL);
}

/* Make the shim's state what two variables say (either may be NULL). */
static inline void use_policy2(const char *var1, const char *v1, const char *var2, const char *v2)
{
	struct sl_policy p;
	char err[SL_ERR_MAX];
	sl_policy_init(&p);
	if ((var1 != NULL && sl_policy_parse_var(&p, var1, v1, err, sizeof(err)) != 0) ||
	    (var2 != NULL && sl_policy_parse_var(&p, var2, v2, err, sizeof(err)) != 0))
		fail_msg("%s", err);
	assert_int_equal(sl__state_init_unsync(&p), 0);
}

/* Make the shim's state what one variable (or none, var == NULL) says. */
static inline void use_policy(const char *var, const char *value)
{
	use_policy2(var, value, NULL, NULL);
}

/* A listener on 127.0.0.1 (port chosen by the kernel, written to *addr),
 * a client connected to it and the accepted server side. */
static inline void loopback_pair(int *lst, int *cli, int *srv, struct sockaddr_in *addr)
{
	*addr = (struct sockaddr_in){.sin_family = AF_INET,
				     .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(*addr);
	*lst = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(bind(*lst, (struct sockaddr *)addr, sizeof(*addr)), 0);
	assert_int_equal(listen(*lst, 8), 0);
	assert_int_equal(getsockname(*lst, (struct sockaddr *)addr, &l), 0);
	*cli = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(*cli, (struct sockaddr *)addr, sizeof(*addr)), 0);
	*srv = accept(*lst, NULL, NULL);
	assert_true(*srv >= 0);
}

/* Peer number k as rules see it: 10.x.y.z, port k (per=peer keys leave the
 * port out). */
static inline struct sl_addr peer_addr(uint32_t k)
{
	struct sl_addr a;
	memset(&a, 0, sizeof(a));
	a.family = 4;
	a.port = (uint16_t)k;
	a.addr[0] = 10;
	a.addr[1] = (uint8_t)(k >> 16);
	a.addr[2] = (uint8_t)(k >> 8);
	a.addr[3] = (uint8_t)k;
	return a;
}

/* Bytes rule 0 admits to peer a now, asked in a call of its own. */
static inline uint64_t available_to(const struct sl_addr *a)
{
	struct sl_call c;
	int err;
	sl__call_begin(&c, -1, SL_OP_SEND, a, 0);
	uint64_t n = sl__available(&c, 1, false, &err);
	sl__call_end(&c, 1, err == 0);
	return n;
}

#endif /* SLUICE_TEST_SHIM_H */
