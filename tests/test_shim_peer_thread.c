/* SPDX-License-Identifier: MIT */
/*
 * test_shim_peer_thread.c - per=peer limiters stay with the calls that use
 * them: an entry of the peer table that a call holds a grant on is not
 * evicted and re-initialised under it however many other peers come by, its
 * refund lands in its own peer's limiter, and once the call ends the entry
 * can be evicted again (no pin is leaked). Then the same under threads: the
 * calls of several threads sleep on peer limiters while the others churn
 * through twice the table's size of peers (clean under TSan, which `make
 * sanitize` runs on this file).
 *
 * The calls go through the shim's decision functions (sl__call_begin,
 * sl__admit, sl__grant_refund, sl__call_end) with the peer address given
 * directly: no socket is needed. The first tests use a fake clock that never
 * moves, so a bucket refills only by being evicted and created anew.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_shim.h"

#define SEC 1000000000ull
#define FILL (4 * SL_PEER_SLOTS) /* peers that churn through the table */

static uint64_t (*real_clock)(void);
static int (*real_sleep)(uint64_t);

/* test_shim.h's fake clock and sleep without their counters: threads call
 * these, and the counters are plain ints. */
static uint64_t frozen_clock(void)
{
	return fake_now;
}

static int frozen_sleep(uint64_t deadline)
{
	if (deadline > fake_now)
		fake_now = deadline;
	return 0;
}

/* peer_addr and available_to are test_shim.h's. */
static const struct sl_limiter *watch; /* a limiter churn looks out for */
static int watch_hits;                 /* churn's calls that were given it */

/* One call of 1 unit to each of FILL other peers (from `first` on), given
 * back and ended at once. Returns how many were served by a per-peer
 * limiter (not the process limiter a full neighbourhood falls back to). */
static int churn(uint32_t first)
{
	int peer_served = 0;
	watch_hits = 0;
	for (uint32_t k = first; k < first + FILL; k++) {
		struct sl_addr a = peer_addr(k);
		struct sl_call c;
		struct sl_grant g;
		sl__call_begin(&c, -1, SL_OP_SEND, &a, 0);
		assert_dec_equal(sl__admit(&c, 1, 1, &g), 0);
		peer_served += g.lim[0] != sl__st.rule_lim[0];
		watch_hits += g.lim[0] == watch;
		sl__grant_refund(&c, &g, 1);
		sl__call_end(&c, 1, true);
	}
	return peer_served;
}

static int setup(void **state)
{
	(void)state;
	fake_now = 5 * SEC;
	sl__clock_ns = frozen_clock;
	sl__sleep_until = frozen_sleep;
	use_policy("SLUICE_SEND", "1000B/s,burst=1000B,per=peer");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	sl__clock_ns = real_clock;
	sl__sleep_until = real_sleep;
	use_policy(NULL, NULL);
	return 0;
}

/* A call holds a grant of peer A's whole bucket while FILL other peers go
 * through the table: A's entry stays (its bucket is still empty, not a
 * fresh full one), the call's refund of 400 lands in A's limiter, and once
 * the call has ended A's entry is evicted like any other. */
static void test_peer_grant_survives_eviction(void **state)
{
	(void)state;
	struct sl_addr a = peer_addr(0xffffff);
	struct sl_call c;
	struct sl_grant g;
	sl__call_begin(&c, -1, SL_OP_SEND, &a, 0);
	assert_dec_equal(sl__admit(&c, 1, 1000, &g), 0);
	assert_true(g.lim[0] != sl__st.rule_lim[0]);
	watch = g.lim[0];
	/* The others are served by peer entries, evicting one another. */
	assert_true(churn(0) > FILL / 2);
	assert_dec_equal(watch_hits, 0);
	assert_dec_equal(available_to(&a), 0);
	sl__grant_refund(&c, &g, 400);
	sl__call_end(&c, 1, false);
	assert_dec_equal(available_to(&a), 400);
	/* No pin left: A's entry goes the way of the others. */
	assert_true(churn(FILL) > FILL / 2);
	assert_true(watch_hits > 0);
	assert_dec_equal(available_to(&a), 1000);
}

/* A connection's conns slot keeps its peer's entry until the fd is
 * forgotten (closed), then the entry is evicted like any other. */
static void test_peer_conns_slot_pins(void **state)
{
	(void)state;
	int p[2];
	assert_dec_equal(pipe(p), 0);
	use_policy("SLUICE_CONNS", "1,per=peer");
	struct sl_addr a = peer_addr(0xfffffd);
	struct sl_call c;
	struct sl_grant g;
	sl__call_begin(&c, p[0], SL_OP_CONNECT, &a, 0);
	assert_dec_equal(sl__admit(&c, 1, 1, &g), 0);
	struct sl_limiter *lims[1] = {g.lim[0]};
	assert_true(lims[0] != sl__st.rule_lim[0]);
	sl__fd_set_conn(p[0], lims, 1);
	sl__call_end(&c, 1, true);
	watch = lims[0];
	assert_true(churn(0) > FILL / 2);
	assert_dec_equal(watch_hits, 0);
	assert_dec_equal(available_to(&a), 0);
	sl__fd_forget(p[0]);
	assert_dec_equal(available_to(&a), 1);
	assert_true(churn(FILL) > FILL / 2);
	assert_true(watch_hits > 0);
	close(p[0]);
	close(p[1]);
}

/* A call that sleeps for a second piece keeps the entry of its first: the
 * second piece of 1000 waits a second, and the peer's bucket is empty after
 * it although FILL peers came by during the wait. */
static int sleeps_churning;

static int churning_sleep(uint64_t deadline)
{
	if (sleeps_churning++ == 0)
		churn(0);
	return frozen_sleep(deadline);
}

static void test_peer_sleep_survives_eviction(void **state)
{
	(void)state;
	struct sl_addr a = peer_addr(0xfffffe);
	struct sl_call c;
	struct sl_grant g1, g2;
	sleeps_churning = 0;
	sl__sleep_until = churning_sleep;
	uint64_t t0 = fake_now;
	sl__call_begin(&c, -1, SL_OP_SEND, &a, 0);
	assert_dec_equal(sl__admit(&c, 1, 1000, &g1), 0);
	assert_dec_equal(sl__admit(&c, 1, 1000, &g2), 0);
	assert_dec_equal(sleeps_churning, 1);
	assert_dec_equal(fake_now, t0 + SEC);
	assert_ptr_equal(g1.lim[0], g2.lim[0]);
	sl__call_end(&c, 1, true);
	assert_dec_equal(available_to(&a), 0);
}

/* ---- threads ---------------------------------------------------------------- */

#define THREADS 4
#define ITERS 1500
#define PEERS (2 * SL_PEER_SLOTS)

struct worker {
	pthread_t t;
	uint32_t seed;
	int ok, failed;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	uint64_t stop = real_clock() + 20 * SEC;
	for (int n = 0; n < ITERS && real_clock() < stop; n++) {
		w->seed ^= w->seed << 13;
		w->seed ^= w->seed >> 17;
		w->seed ^= w->seed << 5;
		struct sl_addr a = peer_addr(w->seed % PEERS);
		struct sl_call c;
		struct sl_grant g1, g2;
		/* Two bursts in one call: the second waits ~100 us for its
		 * tokens, holding the first's grant, then gives half back. */
		sl__call_begin(&c, -1, SL_OP_SEND, &a, 0);
		int err = sl__admit(&c, 1, 1000, &g1);
		if (err == 0 && (err = sl__admit(&c, 1, 1000, &g2)) == 0)
			sl__grant_refund(&c, &g2, 500);
		if (err == 0 && g1.lim[0] != g2.lim[0])
			err = -1; /* one call, one limiter per rule */
		sl__call_end(&c, 1, err == 0);
		if (err == 0)
			w->ok++;
		else
			w->failed++;
	}
	return NULL;
}

/* Threads churn through PEERS peers, each call sleeping on its peer's
 * limiter with a grant held. Afterwards no entry is left pinned: every new
 * peer gets an entry of its own within two calls (the first may find its
 * neighbourhood all recently used, and ages it). */
static void test_peer_threads(void **state)
{
	(void)state;
	sl__clock_ns = real_clock;
	sl__sleep_until = real_sleep;
	use_policy("SLUICE_SEND", "10000000B/s,burst=1000B,per=peer");
	struct worker w[THREADS];
	for (int i = 0; i < THREADS; i++) {
		w[i] = (struct worker){.seed = 2654435761u * (uint32_t)(i + 1)};
		assert_dec_equal(pthread_create(&w[i].t, NULL, work, &w[i]), 0);
	}
	int ok = 0, failed = 0, joined = 0;
	for (int i = 0; i < THREADS; i++) { /* all joined before any assert */
		joined += pthread_join(w[i].t, NULL) == 0;
		ok += w[i].ok;
		failed += w[i].failed;
	}
	assert_dec_equal(joined, THREADS);
	assert_dec_equal(failed, 0);
	assert_true(ok >= THREADS); /* each thread got at least one call in */
	for (uint32_t k = PEERS; k < PEERS + SL_PEER_SLOTS; k++) {
		struct sl_addr a = peer_addr(k);
		bool own = false;
		for (int attempt = 0; attempt < 2 && !own; attempt++) {
			struct sl_call c;
			sl__call_begin(&c, -1, SL_OP_SEND, &a, 0);
			own = sl__limiter(&c, 0) != sl__st.rule_lim[0];
			sl__call_end(&c, 0, true);
		}
		assert_true(own);
	}
}

int main(void)
{
	real_clock = sl__clock_ns;
	real_sleep = sl__sleep_until;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_peer_grant_survives_eviction, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_sleep_survives_eviction, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_conns_slot_pins, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_threads, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
