/* SPDX-License-Identifier: MIT */
/*
 * test_engine.c - engine/: what both front ends decide, with an injected
 * clock: an address as rules see it (IPv4-mapped IPv6 as IPv4), which
 * rules match, a rule's piece size, one rule's answer (go at T, retry at
 * T, refuse with an errno, dry-run), the retry backoff, the counters.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "test_core.h"
#include "test_policy.h"

#include "../engine/addr.h"
#include "../engine/count.h"
#include "../engine/decide.h"
#include "../engine/match.h"
#include "../engine/params.h"
#include "../engine/peers.h"

#define T0 (1000 * SEC)

static struct sockaddr_in6 in6_of(const char *text, uint16_t port)
{
	struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
	assert_dec_equal(inet_pton(AF_INET6, text, &a.sin6_addr), 1);
	return a;
}

static void test_engine_addr(void **state)
{
	(void)state;
	struct sl_addr a;
	struct sockaddr_in6 m = in6_of("::ffff:127.0.0.1", 8080);
	assert_true(sl_addr_from(&a, (const struct sockaddr *)&m, sizeof(m)));
	assert_dec_equal(a.family, 4); /* mapped: IPv4 */
	assert_dec_equal(a.port, 8080);
	assert_memory_equal(a.addr, ((const uint8_t[4]){127, 0, 0, 1}), 4);
	struct sockaddr_in6 six = in6_of("::1", 443);
	assert_true(sl_addr_from(&a, (const struct sockaddr *)&six, sizeof(six)));
	assert_dec_equal(a.family, 6);
	assert_dec_equal(a.addr[15], 1);
	struct sockaddr_in in4 = {.sin_family = AF_INET, .sin_port = htons(53)};
	in4.sin_addr.s_addr = htonl(0x0a000001);
	assert_true(sl_addr_from(&a, (const struct sockaddr *)&in4, sizeof(in4)));
	assert_dec_equal(a.family, 4);
	assert_dec_equal(a.port, 53);
	assert_dec_equal(a.addr[0], 10);
	/* Too short, unknown family, NULL: family 0. */
	assert_false(sl_addr_from(&a, (const struct sockaddr *)&in4, sizeof(in4) - 1));
	assert_dec_equal(a.family, 0);
	assert_false(sl_addr_from(&a, NULL, 0));
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	assert_true(sl_addr_from(&a, (const struct sockaddr *)&un, sizeof(un)));
	assert_dec_equal(a.family, 1);
	assert_dec_equal(sl_addr_fam_bit(AF_INET6), SL_FAM_INET6);
	assert_dec_equal(sl_addr_fam_bit(AF_PACKET), 0);
	assert_dec_equal(sl_addr_type_bit(SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC),
			 SL_TYPE_STREAM);
	assert_dec_equal(sl_addr_type_bit(SOCK_RAW), 0);
}

static void test_engine_match(void **state)
{
	(void)state;
	struct sl_policy p = policy_of("connect:5/s,to=127.0.0.0/8;send:1MiB/s,port=443;"
				       "recv:1MiB/s,family=inet6;conns:4");
	struct sl_addr a;
	struct sockaddr_in6 m = in6_of("::ffff:127.0.0.1", 443);
	sl_addr_from(&a, (const struct sockaddr *)&m, sizeof(m));
	uint32_t connect = sl_match_op(&p, SL_OP_CONNECT);
	assert_dec_equal(connect, 0x1);
	/* The mapped address fits to=127.0.0.0/8 on an AF_INET6 socket. */
	assert_dec_equal(sl_match(&p, connect, SL_FAM_INET6, SL_TYPE_STREAM, &a), 0x1);
	struct sockaddr_in6 six = in6_of("::1", 443);
	sl_addr_from(&a, (const struct sockaddr *)&six, sizeof(six));
	assert_dec_equal(sl_match(&p, connect, SL_FAM_INET6, SL_TYPE_STREAM, &a), 0);
	assert_dec_equal(sl_match(&p, 0xf, SL_FAM_INET6, SL_TYPE_STREAM, &a), 0x2 | 0x4 | 0x8);
	assert_dec_equal(sl_match(&p, 0xf, SL_FAM_INET, SL_TYPE_STREAM, NULL), 0x8);
	/* connect and conns rules fit streams unless type= says otherwise. */
	assert_dec_equal(sl_match_socket(&p, SL_FAM_INET, SL_TYPE_DGRAM), 0x2);
	assert_dec_equal(sl_match_socket(&p, SL_FAM_INET, SL_TYPE_STREAM), 0x1 | 0x2 | 0x8);
	assert_true(sl_match_needs_addr(&p, SL_OP_CONNECT));
	assert_true(sl_match_needs_addr(&p, SL_OP_SEND));
	assert_false(sl_match_needs_addr(&p, SL_OP_RECV));
	p = policy_of("recv:1MiB/s,per=peer");
	assert_true(sl_match_needs_addr(&p, SL_OP_RECV));
}

static uint64_t piece_of(const char *rule)
{
	struct sl_policy p = policy_of(rule);
	struct sl_params prm = sl_params_now(&p.rules[0], NULL);
	return sl_piece_max(&p.rules[0], &prm);
}

static void test_engine_piece(void **state)
{
	(void)state;
	assert_dec_equal(piece_of("send:1MiB/s,burst=64KiB"), 65536);
	/* Leaky: its capacity, or 10 ms of the rate without one. */
	assert_dec_equal(piece_of("send:1MiB/s,algo=leaky"), 10485);
	/* Sliding: 10 ms of the rate, at most N/32 (1 MiB/s: 10485 < 32768). */
	assert_dec_equal(piece_of("send:1MiB/s,algo=sliding"), 10485);
	assert_dec_equal(piece_of("send:1MiB/10s,algo=sliding"), 1048);
	assert_dec_equal(piece_of("send:3200B/s,algo=sliding"), 32);
	assert_dec_equal(piece_of("send:1MiB/s,algo=fixed"), 1048576);
	assert_dec_equal(piece_of("send:10B/s,algo=sliding"), 1); /* at least 1 */
	/* A tunable limiter retuned by `sluice set`: its parameters now. */
	struct sl_policy p = policy_of("send:1MiB/s,burst=64KiB");
	struct sl_tunable *t = aligned_alloc(SL_CACHELINE, sizeof(*t));
	struct sl_params prm;
	sl_params_of(&p.rules[0], &prm);
	assert_dec_equal(sl_tunable_init(t, &prm, T0), SL_OK);
	prm.burst = 4096;
	assert_dec_equal(sl_tunable_retune(t, &prm, T0 + SEC), SL_OK);
	struct sl_params now = sl_params_now(&p.rules[0], &t->head);
	assert_dec_equal(sl_piece_max(&p.rules[0], &now), 4096);
	free(t);
	/* The kinds: conns a concurrency limit, warmup= the warm-up bucket. */
	p = policy_of("conns:4;send:1MiB/s,warmup=10s");
	sl_params_of(&p.rules[0], &prm);
	assert_dec_equal(prm.kind, SL_KIND_CONC);
	sl_params_of(&p.rules[1], &prm);
	assert_dec_equal(prm.kind, SL_KIND_WARMUP);
}

static struct sl_params rule_now(void *ctx, unsigned i)
{
	return sl_params_now(&((const struct sl_policy *)ctx)->rules[i], NULL);
}

/* A transfer's piece: the smallest of its byte rules' but dry-run ones. */
static void test_engine_piece_of(void **state)
{
	(void)state;
	struct sl_policy p = policy_of("send:1MiB/s,burst=64KiB;send:1MiB/s,algo=sliding;"
				       "send:10B/s,action=dry-run;send:5/s");
	assert_dec_equal(sl_piece_of(&p, 0xf, rule_now, &p), 10485);
	assert_dec_equal(sl_piece_of(&p, 0x1, rule_now, &p), 65536);
	assert_dec_equal(sl_piece_of(&p, 0xc, rule_now, &p), UINT64_MAX); /* dry-run, calls */
	assert_dec_equal(sl_piece_of(&p, 0, rule_now, &p), UINT64_MAX);
}

/* Police, then the engine's answer, as both front ends ask. */
static struct sl_answer ask(const struct sl_rule *r, struct sl_limiter *l, uint64_t n, uint64_t now,
			    uint64_t start)
{
	struct sl_decision d = sl_limiter_acquire(l, n, now, 0);
	if (d.verdict == SL_ADMIT && d.wait_ns == 0)
		return (struct sl_answer){.step = SL_STEP_GO, .at_ns = now};
	return sl_decide_rule(r, l, n, now, sl_decide_limit(r, start, UINT64_MAX), d);
}

static struct sl_limiter *lim_of(const struct sl_rule *r)
{
	struct sl_limiter *l = aligned_alloc(SL_CACHELINE, sizeof(*l));
	struct sl_params prm;
	sl_params_of(r, &prm);
	assert_dec_equal(sl_limiter_init(l, &prm, T0), SL_OK);
	return l;
}

static void test_engine_decide_delay(void **state)
{
	(void)state;
	/* 1000 B/s, burst 100: 1 ms a byte; max-delay 50 ms. */
	struct sl_policy p = policy_of("send:1000B/s,burst=100B,max-delay=50ms,errno=ETIMEDOUT");
	const struct sl_rule *r = &p.rules[0];
	struct sl_limiter *l = lim_of(r);
	struct sl_answer a = ask(r, l, 100, T0, T0);
	assert_dec_equal(a.step, SL_STEP_GO);
	assert_dec_equal(a.at_ns, T0);
	a = ask(r, l, 40, T0, T0);
	assert_dec_equal(a.step, SL_STEP_GO);
	assert_dec_equal(a.at_ns, T0 + 40 * MS);
	a = ask(r, l, 20, T0 + 10 * MS, T0); /* would wait until T0 + 60 ms */
	assert_dec_equal(a.step, SL_STEP_REFUSE);
	assert_false(a.never);
	assert_dec_equal(sl_decide_errno(r, SL_OP_SEND, T0, UINT64_MAX, a.never), ETIMEDOUT);
	/* The socket's timeout came first: EAGAIN, as the kernel's. */
	assert_dec_equal(sl_decide_errno(r, SL_OP_SEND, T0, T0 + 20 * MS, false), EAGAIN);
	assert_dec_equal(sl_decide_limit(r, T0, T0 + 20 * MS), T0 + 20 * MS);
	assert_dec_equal(sl_decide_limit(r, T0, UINT64_MAX), T0 + 50 * MS);
	free(l);
	/* reject: no wait at all; more than its burst at once: never. */
	p = policy_of("connect:1/s,action=reject");
	l = lim_of(&p.rules[0]);
	assert_dec_equal(ask(&p.rules[0], l, 1, T0, T0).step, SL_STEP_GO);
	a = ask(&p.rules[0], l, 1, T0, T0);
	assert_dec_equal(a.step, SL_STEP_REFUSE);
	assert_false(a.never);
	assert_dec_equal(sl_decide_errno(&p.rules[0], SL_OP_CONNECT, T0, UINT64_MAX, a.never),
			 ECONNREFUSED);
	a = ask(&p.rules[0], l, 2, T0 + 10 * SEC, T0 + 10 * SEC);
	assert_dec_equal(a.step, SL_STEP_REFUSE);
	assert_true(a.never);
	free(l);
}

static void test_engine_decide_retry(void **state)
{
	(void)state;
	/* A sliding window cannot reserve: retry at its hint. */
	struct sl_policy p = policy_of("send:2/s,algo=sliding");
	const struct sl_rule *r = &p.rules[0];
	struct sl_limiter *l = lim_of(r);
	assert_dec_equal(ask(r, l, 1, T0, T0).step, SL_STEP_GO);
	assert_dec_equal(ask(r, l, 1, T0, T0).step, SL_STEP_GO);
	struct sl_answer a = ask(r, l, 1, T0, T0);
	assert_dec_equal(a.step, SL_STEP_RETRY);
	assert_true(a.at_ns > SEC && a.at_ns <= 3 * SEC / 2);
	uint64_t backoff = SL_DECIDE_BACKOFF_NS;
	assert_dec_equal(sl_decide_retry_at(T0, a.at_ns, UINT64_MAX, &backoff), T0 + a.at_ns);
	assert_dec_equal(backoff, SL_DECIDE_BACKOFF_NS); /* a hint: no backoff */
	free(l);
	/* A full conns limit gives no hint: 1, 2, 4 ... 50, 50 ms, then
	 * refuse when the next would pass max-delay. */
	p = policy_of("conns:1,max-delay=200ms");
	r = &p.rules[0];
	l = lim_of(r);
	assert_dec_equal(ask(r, l, 1, T0, T0).step, SL_STEP_GO);
	a = ask(r, l, 1, T0, T0);
	assert_dec_equal(a.step, SL_STEP_RETRY);
	assert_dec_equal(a.at_ns, 0);
	uint64_t limit = sl_decide_limit(r, T0, UINT64_MAX), now = T0;
	const uint64_t want[] = {1, 2, 4, 8, 16, 32, 50, 50};
	for (unsigned k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		uint64_t at = sl_decide_retry_at(now, 0, limit, &backoff);
		if (k == 0)
			assert_dec_equal(at, T0 + 1 * MS);
		else
			assert_dec_equal(at - now, want[k] * MS);
		now = at;
	}
	/* now = T0 + 163 ms: 50 ms more is past T0 + 200 ms. */
	assert_dec_equal(sl_decide_retry_at(now, 0, limit, &backoff), UINT64_MAX);
	sl_limiter_release(l, 1);
	assert_dec_equal(ask(r, l, 1, now, T0).step, SL_STEP_GO);
	free(l);
}

static void test_engine_decide_dry(void **state)
{
	(void)state;
	struct sl_policy p = policy_of("send:1000B/s,burst=100B,action=dry-run");
	const struct sl_rule *r = &p.rules[0];
	struct sl_limiter *l = lim_of(r);
	assert_dec_equal(ask(r, l, 100, T0, T0).step, SL_STEP_GO);
	struct sl_answer a = ask(r, l, 10, T0, T0); /* would wait 10 ms */
	assert_dec_equal(a.step, SL_STEP_DRY);
	assert_false(a.would_refuse);
	a = ask(r, l, 101, T0, T0); /* more than a burst: would refuse */
	assert_dec_equal(a.step, SL_STEP_DRY);
	assert_true(a.would_refuse);
	/* Nothing was taken: 10 ms on, 10 bytes go at once. */
	assert_dec_equal(ask(r, l, 10, T0 + 10 * MS, T0).step, SL_STEP_GO);
	free(l);
}

static void test_engine_count(void **state)
{
	(void)state;
	struct sl_rstats st;
	memset(&st, 0, sizeof(st));
	sl_count_end(&st, true, 100);
	sl_count_end(&st, false, 0);
	sl_count_refused(&st);
	sl_count_delayed(&st, 5 * MS);
	sl_count_delayed(&st, 2 * MS);
	assert_dec_equal(atomic_load(&st.calls), 2);
	assert_dec_equal(atomic_load(&st.admitted), 1);
	assert_dec_equal(atomic_load(&st.refused), 1);
	assert_dec_equal(atomic_load(&st.bytes), 100);
	assert_dec_equal(atomic_load(&st.delayed), 2);
	assert_dec_equal(atomic_load(&st.delay_ns), 7 * MS);
	assert_dec_equal(atomic_load(&st.max_delay_ns), 5 * MS);
	/* The histogram: each wait in the first band whose bound holds it,
	 * bounds included; over 10 s in none (the rest of delayed). */
	const uint64_t waits[] = {0,         MS,         MS + 1,         10 * MS,   100 * MS + 1,
				  1000 * MS, 10000 * MS, 10000 * MS + 1, 60000 * MS};
	struct sl_rstats h;
	memset(&h, 0, sizeof(h));
	for (size_t i = 0; i < sizeof(waits) / sizeof(waits[0]); i++)
		sl_count_delayed(&h, waits[i]);
	const uint64_t want[SL_WAIT_BUCKETS] = {2, 2, 0, 2, 1};
	for (unsigned k = 0; k < SL_WAIT_BUCKETS; k++)
		assert_dec_equal(atomic_load(&h.wait_le[k]), want[k]);
	assert_dec_equal(atomic_load(&h.delayed), 9);
	assert_dec_equal(sl_wait_bound_ns(0), MS);
	assert_dec_equal(sl_wait_bound_ns(4), 10000 * MS);
}

/* ---- the per=peer table ------------------------------------------------ */

struct peer_entry {
	int busy;
	struct sl_peer_slot slot;
};

static bool entry_busy(const void *e, void *ctx)
{
	(void)ctx;
	return ((const struct peer_entry *)e)->busy != 0;
}

static struct sl_addr peer_v4(uint8_t last, uint16_t port)
{
	struct sl_addr a = {.family = 4, .port = port};
	a.addr[0] = 10;
	a.addr[3] = last;
	return a;
}

static long peer_find(const struct sl_peer_table *t, unsigned rule, uint32_t owner, uint8_t last,
		      bool *fresh)
{
	struct sl_addr a = peer_v4(last, 4000 + last);
	return sl_peer_find(t, rule, owner, &a, fresh);
}

/* Keys: rule, owner and the address without its port. */
static void test_engine_peers_keys(void **state)
{
	(void)state;
	struct peer_entry e[64] = {0};
	const struct sl_peer_table t =
		{e, 64, sizeof(e[0]), offsetof(struct peer_entry, slot), entry_busy, NULL};
	bool fresh;
	struct sl_addr a80 = peer_v4(1, 80), a443 = peer_v4(1, 443);
	long k = sl_peer_find(&t, 0, 0, &a80, &fresh);
	assert_true(k >= 0 && fresh);
	assert_dec_equal(e[k].slot.key.port, 0);
	assert_dec_equal(sl_peer_find(&t, 0, 0, &a443, &fresh), k); /* another port */
	assert_false(fresh);
	long other_owner = sl_peer_find(&t, 0, 7, &a80, &fresh);
	assert_true(fresh && other_owner != k);
	long other_rule = sl_peer_find(&t, 1, 0, &a80, &fresh);
	assert_true(fresh && other_rule != k && other_rule != other_owner);
	assert_dec_equal(sl_peer_find(&t, 1, 0, &a443, &fresh), other_rule);
	assert_false(fresh);
}

/* A full neighbourhood: the clock hand takes an entry not used since it
 * passed, never a busy one; with every one busy there is none. */
static void test_engine_peers_evict(void **state)
{
	(void)state;
	struct peer_entry e[SL_PEER_PROBES] = {0}; /* the probes cover the table */
	const struct sl_peer_table t = {e,
					SL_PEER_PROBES,
					sizeof(e[0]),
					offsetof(struct peer_entry, slot),
					entry_busy,
					NULL};
	bool fresh;
	bool taken[SL_PEER_PROBES] = {false};
	for (uint8_t i = 1; i <= SL_PEER_PROBES; i++) { /* fills the table */
		long k = peer_find(&t, 0, 0, i, &fresh);
		assert_true(k >= 0 && fresh && !taken[k]);
		taken[k] = true;
	}
	/* A ninth: every entry used, so the hand clears them all and takes
	 * the first it passed; a tenth then takes one the hand cleared, not
	 * the ninth's, which was used since. */
	long k9 = peer_find(&t, 0, 0, 9, &fresh);
	assert_true(k9 >= 0 && fresh);
	long k10 = peer_find(&t, 0, 0, 10, &fresh);
	assert_true(k10 >= 0 && fresh && k10 != k9);
	assert_dec_equal(peer_find(&t, 0, 0, 9, &fresh), k9);
	assert_false(fresh);
	/* Busy entries are never taken over. */
	for (unsigned i = 0; i < SL_PEER_PROBES; i++)
		e[i].busy = (long)i != k9;
	long k11 = peer_find(&t, 0, 0, 11, &fresh);
	assert_dec_equal(k11, k9);
	assert_true(fresh);
	e[k9].busy = 1;
	assert_dec_equal(peer_find(&t, 0, 0, 12, &fresh), -1);
	assert_false(fresh);
	/* A busy entry is still found by its own key. */
	assert_dec_equal(peer_find(&t, 0, 0, 11, &fresh), k11);
	assert_false(fresh);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_engine_addr),
		cmocka_unit_test(test_engine_match),
		cmocka_unit_test(test_engine_piece),
		cmocka_unit_test(test_engine_piece_of),
		cmocka_unit_test(test_engine_decide_delay),
		cmocka_unit_test(test_engine_decide_retry),
		cmocka_unit_test(test_engine_decide_dry),
		cmocka_unit_test(test_engine_count),
		cmocka_unit_test(test_engine_peers_keys),
		cmocka_unit_test(test_engine_peers_evict),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
