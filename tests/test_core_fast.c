/* SPDX-License-Identifier: MIT */
/*
 * test_core_fast.c - the inline hot path of the core (sluice_fast.h) is the
 * full API: for every limiter kind, plain and as a tunable head, two
 * identical limiters go through one long pseudo-random sequence (fixed
 * seed, injected times), one through sl_fast_take / sl_fast_peek /
 * sl_fast_charge and the other through sl_limiter_acquire(.., 0) /
 * sl_limiter_available / sl_limiter_charge. After each step both must have
 * given the same answer and hold the same state (their state words, and
 * sl_limiter_available at that instant).
 *
 * sl_fast_take may answer false for a case it leaves to the full API (its
 * caller then asks sl_limiter_acquire): the test does what the caller does,
 * and checks that such a false took nothing. For token and leaky buckets,
 * which the inline path decides itself, a false inside its documented range
 * (1 <= n within the burst or capacity, a time within 2^fast_shift ns after
 * the epoch) must be a refusal: there it must agree with the full API on
 * its own. The edge of that range is probed directly (gcra_edge cases).
 * sl_fast_take reaches every kind-specific form: sl_fast_take_gcra (plain
 * buckets), sl_fast_take_tunable and sl_fast_take_tunable_gcra (tunable
 * heads); sl_fast_peek and sl_fast_charge their _gcra forms.
 *
 * Single-threaded: the retune race branch of the tunable forms (a gen that
 * moves between the two loads) cannot be reached deterministically here;
 * test_core_tunable_thread.c races retunes against acquires. The retunes
 * below switch the current slot between steps, so the fast path's slot
 * lookup by gen is exercised.
 */
#include <stdio.h>
#include <stdlib.h>

#include "test_core.h"

#include "sluice_fast.h"

#define EPOCH (10 * SEC)
#define STEPS 40000

struct kcase {
	const char *name;
	struct sl_params p, p2; /* p2: what a retune switches to (and back) */
};

static uint64_t rng_state;

static uint64_t rnd(void)
{
	/* xorshift64*: a fixed seed gives one fixed sequence. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * UINT64_C(2685821657736338717);
}

static uint64_t below(uint64_t n)
{
	return n == 0 ? 0 : rnd() % n;
}

static bool is_bucket(const struct sl_limiter *l)
{
	return l->kind == SL_KIND_TOKEN || l->kind == SL_KIND_LEAKY;
}

/* The state words of a plain limiter (not a tunable head) into w. */
static unsigned plain_words(struct sl_limiter *l, uint64_t *w)
{
	switch (l->kind) {
	case SL_KIND_TOKEN:
	case SL_KIND_LEAKY:
		w[0] = atomic_load(&l->u.gcra.tat);
		return 1;
	case SL_KIND_FIXED:
		w[0] = atomic_load(&l->u.fixed.used);
		return 1;
	case SL_KIND_SLIDING:
		w[0] = atomic_load(&l->u.sliding.state);
		return 1;
	case SL_KIND_CONC:
		w[0] = atomic_load(&l->u.conc.held);
		return 1;
	case SL_KIND_WARMUP:
		w[0] = atomic_load(&l->u.warm.sched_ns);
		w[1] = atomic_load(&l->u.warm.stored_q);
		return 2;
	default:
		fail_msg("unexpected kind %u", l->kind);
		return 0;
	}
}

/* Every state word of l (a tunable head: its gen, count and both slots). */
static unsigned state_words(struct sl_limiter *l, uint64_t w[8])
{
	if (l->kind != SL_KIND_TUNABLE)
		return plain_words(l, w);
	struct sl_tunable *t = (struct sl_tunable *)(void *)l;
	unsigned k = 0;
	w[k++] = atomic_load(&t->head.u.tun.gen);
	w[k++] = atomic_load(&t->head.u.tun.held);
	k += plain_words(&t->slot[0], w + k);
	k += plain_words(&t->slot[1], w + k);
	return k;
}

static void assert_same_state(struct sl_limiter *a, struct sl_limiter *b, uint64_t now,
			      uint64_t step)
{
	uint64_t wa[8] = {0}, wb[8] = {0};
	unsigned na = state_words(a, wa), nb = state_words(b, wb);
	assert_dec_equal(na, nb);
	for (unsigned k = 0; k < na; k++)
		if (wa[k] != wb[k])
			fail_msg("step %llu: state word %u: %llu != %llu", (unsigned long long)step,
				 k, (unsigned long long)wa[k], (unsigned long long)wb[k]);
	assert_dec_equal(sl_limiter_available(a, now), sl_limiter_available(b, now));
}

/* The plain limiter whose inline police sl_fast_take uses (a tunable
 * head's current slot). */
static struct sl_limiter *policed(struct sl_limiter *l)
{
	if (l->kind != SL_KIND_TUNABLE)
		return l;
	return (struct sl_limiter *)(uintptr_t)sl_tunable_current((struct sl_tunable *)(void *)l);
}

/* True if the inline bucket path covers n at now_ns by its documented
 * range (sluice_fast.h, gcra.c): then its false is a refusal. */
static bool bucket_in_range(const struct sl_gcra *g, uint64_t n, uint64_t now_ns)
{
	if (n == 0 || now_ns < g->epoch_ns || g->fast_shift > 63 ||
	    ((now_ns - g->epoch_ns) >> g->fast_shift) != 0)
		return false;
	if (g->leaky)
		return g->capped ? n <= g->burst : n <= 1000000;
	return n <= g->burst;
}

/* A size for a call: 0, 1, small, around the burst, above it, huge. */
static uint64_t pick_n(const struct sl_params *p)
{
	const uint64_t b = p->kind == SL_KIND_FIXED || p->kind == SL_KIND_SLIDING ||
					   p->kind == SL_KIND_CONC || p->burst == 0
				   ? p->amount
				   : p->burst;
	switch (below(12)) {
	case 0:
		return 0;
	case 1:
	case 2:
		return 1;
	case 3:
	case 4:
		return 2 + below(9);
	case 5:
		return b - below(b < 3 ? b : 3);
	case 6:
		return b + 1 + below(3);
	case 7:
		return b * 2 + below(b);
	case 8:
		return (uint64_t)SIZE_MAX - below(3);
	case 9:
		return UINT64_C(1) << (62 + below(2));
	default:
		return 1 + below(b);
	}
}

/* A charge size: kept below a few bursts (a saturated limiter stays so),
 * except rarely (the limiters are then made anew). */
static uint64_t pick_charge(const struct sl_params *p, bool *huge)
{
	*huge = below(400) == 0;
	if (*huge)
		return (uint64_t)SIZE_MAX - below(2);
	const uint64_t b = p->burst != 0 && p->kind != SL_KIND_CONC ? p->burst : p->amount;
	return below(3 * b + 1);
}

static void init_pair(struct sl_tunable *ta, struct sl_tunable *tb, const struct sl_params *p,
		      bool tunable, uint64_t epoch)
{
	memset(ta, 0, sizeof(*ta));
	memset(tb, 0, sizeof(*tb));
	if (tunable) {
		assert_dec_equal(sl_tunable_init(ta, p, epoch), SL_OK);
		assert_dec_equal(sl_tunable_init(tb, p, epoch), SL_OK);
	} else {
		assert_dec_equal(sl_limiter_init(&ta->head, p, epoch), SL_OK);
		assert_dec_equal(sl_limiter_init(&tb->head, p, epoch), SL_OK);
	}
}

struct counts {
	uint64_t fast_admit, fast_false, fallback_admit, refused, peek_true, peek_false, charges,
		retunes, pre_epoch, rest_true, rest_false;
};

/* One kind (plain or tunable) through STEPS pseudo-random steps. */
static void run_case(const struct kcase *kc, bool tunable, uint64_t seed)
{
	static struct sl_tunable ta, tb;
	struct sl_limiter *a = &ta.head, *b = &tb.head;
	struct counts c = {0};
	uint64_t epoch = EPOCH;
	init_pair(&ta, &tb, &kc->p, tunable, epoch);
	const struct sl_params *cur = &kc->p;
	rng_state = seed;
	uint64_t t = epoch, last_retune = 0;
	const uint64_t per = kc->p.period_ns != 0 ? kc->p.period_ns : SEC;
	for (uint64_t step = 0; step < STEPS; step++) {
		/* The clock: still, a little, a fraction of the period, or
		 * several periods on; a call's time may be stale (older than
		 * the clock) or even before the epoch. */
		switch (below(12)) {
		case 0:
		case 1:
			break;
		case 2:
		case 3:
			t += 1 + below(1000);
			break;
		case 4:
		case 5:
		case 6:
			t += below(per / 10 + 1);
			break;
		case 7:
			t += below(per);
			break;
		case 8:
			t += per * (1 + below(3));
			break;
		case 9: {
			/* To the instant a refused unit (or a few) would be
			 * admitted, or just before it: the boundary of the
			 * police's compare, where an off-by-one shows. */
			static struct sl_tunable probe;
			memcpy(&probe, &tb, sizeof(probe));
			const struct sl_decision d = sl_limiter_acquire(&probe.head, 1 + below(3),
									t, POLICE);
			if (d.verdict == SL_REFUSE && d.wait_ns < 100 * per)
				t += d.wait_ns - below(2);
			break;
		}
		default:
			t += below(per / 100 + 1);
		}
		uint64_t now = t;
		const uint64_t skew = below(20);
		if (skew == 0)
			now = t - below(per / 4 + 1);
		else if (skew == 1)
			now = epoch - 1 - below(per);
		else if (skew == 2)
			now = 0;
		if (is_bucket(policed(a)) && now < policed(a)->u.gcra.epoch_ns)
			c.pre_epoch++;
		const unsigned op = (unsigned)below(20);
		if (tunable && op == 0 && t >= last_retune + 100 * MS) {
			/* A retune at the clock, spaced as tunable.c asks. */
			cur = cur == &kc->p ? &kc->p2 : &kc->p;
			assert_dec_equal(sl_tunable_retune(&ta, cur, t), SL_OK);
			assert_dec_equal(sl_tunable_retune(&tb, cur, t), SL_OK);
			last_retune = t;
			c.retunes++;
		} else if (op <= 12) {
			const uint64_t n = pick_n(cur);
			uint64_t before[8] = {0}, after[8] = {0};
			const unsigned nw = state_words(a, before);
			const bool in_range = is_bucket(policed(a)) &&
					      bucket_in_range(&policed(a)->u.gcra, n, now);
			const bool fast = sl_fast_take(a, n, now);
			const bool ref = sl_limiter_acquire(b, n, now, POLICE).verdict == SL_ADMIT;
			bool got = fast;
			if (fast) {
				c.fast_admit++;
			} else {
				/* Nothing taken; the caller asks the full API. */
				state_words(a, after);
				for (unsigned k = 0; k < nw; k++)
					if (before[k] != after[k])
						fail_msg("%s step %llu: a false sl_fast_take(%llu) "
							 "changed word %u",
							 kc->name, (unsigned long long)step,
							 (unsigned long long)n, k);
				c.fast_false++;
				got = sl_limiter_acquire(a, n, now, POLICE).verdict == SL_ADMIT;
				if (got)
					c.fallback_admit++;
				if (in_range && got)
					fail_msg("%s step %llu: sl_fast_take(%llu, %llu) left an "
						 "admission in its range to the full API",
						 kc->name, (unsigned long long)step,
						 (unsigned long long)n, (unsigned long long)now);
			}
			if (!ref)
				c.refused++;
			if (got != ref)
				fail_msg("%s step %llu: take(%llu) at %llu: fast path %d, full API %d",
					 kc->name, (unsigned long long)step, (unsigned long long)n,
					 (unsigned long long)now, got, ref);
		} else if (op <= 16) {
			const uint64_t n = pick_n(cur);
			const bool fast = sl_fast_peek(a, n, now);
			const bool ref = sl_limiter_available(b, now) >= n;
			if (fast != ref)
				fail_msg("%s step %llu: peek(%llu) at %llu: fast path %d, full API %d",
					 kc->name, (unsigned long long)step, (unsigned long long)n,
					 (unsigned long long)now, fast, ref);
			fast ? c.peek_true++ : c.peek_false++;
			/* At rest: a police of its whole burst (capacity) or
			 * of one unit admits now. */
			const bool rest = sl_fast_at_rest(a, now);
			if (a->kind == SL_KIND_TUNABLE && is_bucket(policed(a)))
				assert_dec_equal(sl_fast_at_rest_tunable_gcra(a, now), rest);
			const bool bucket = policed(a)->kind == SL_KIND_TOKEN ||
					    policed(a)->kind == SL_KIND_LEAKY;
			if (rest && (!bucket || sl_limiter_available(b, now) <
							(cur->burst != 0 ? cur->burst : 1)))
				fail_msg("%s step %llu: at rest at %llu, but %llu units available "
					 "of a burst of %llu",
					 kc->name, (unsigned long long)step,
					 (unsigned long long)now,
					 (unsigned long long)sl_limiter_available(b, now),
					 (unsigned long long)cur->burst);
			rest ? c.rest_true++ : c.rest_false++;
		} else if (op <= 18) {
			bool huge;
			const uint64_t n = pick_charge(cur, &huge);
			sl_fast_charge(a, n, now);
			(void)sl_limiter_charge(b, n, now);
			c.charges++;
			if (huge) {
				assert_same_state(a, b, now, step);
				/* A saturated limiter refuses for good: start
				 * again, at a new epoch. */
				epoch = t;
				init_pair(&ta, &tb, &kc->p, tunable, epoch);
				cur = &kc->p;
				last_retune = 0;
			}
		} else if (a->kind == SL_KIND_CONC || policed(a)->kind == SL_KIND_CONC) {
			const uint64_t n = 1 + below(3);
			assert_dec_equal(sl_limiter_release(a, n), sl_limiter_release(b, n));
		} else {
			const uint64_t n = below(cur->amount + 1);
			assert_dec_equal(sl_limiter_refund(a, n, now),
					 sl_limiter_refund(b, n, now));
		}
		assert_same_state(a, b, now, step);
		assert_same_state(a, b, t + per / 3, step);
	}
	print_message("%-22s %s: fast %llu, left to the full API %llu (admitted there %llu), "
		      "refused %llu, peek %llu/%llu, at rest %llu/%llu, charges %llu, retunes %llu, "
		      "pre-epoch %llu\n",
		      kc->name, tunable ? "tunable" : "plain  ", (unsigned long long)c.fast_admit,
		      (unsigned long long)c.fast_false, (unsigned long long)c.fallback_admit,
		      (unsigned long long)c.refused, (unsigned long long)c.peek_true,
		      (unsigned long long)c.peek_false, (unsigned long long)c.rest_true,
		      (unsigned long long)c.rest_false, (unsigned long long)c.charges,
		      (unsigned long long)c.retunes, (unsigned long long)c.pre_epoch);
	/* The sequence reached both answers of each call, and retunes. */
	assert_true(c.fast_admit > STEPS / 50);
	assert_true(c.refused > STEPS / 50);
	assert_true(c.fast_false > STEPS / 50);
	assert_true(c.peek_true > STEPS / 100);
	assert_true(c.peek_false > STEPS / 100);
	assert_true(c.charges > STEPS / 100);
	/* A bucket is found at rest (a full one) and not; no other kind is. */
	if (kc->p.kind == SL_KIND_TOKEN || kc->p.kind == SL_KIND_LEAKY)
		assert_true(c.rest_true > STEPS / 200 && c.rest_false > STEPS / 200);
	else
		assert_true(c.rest_true == 0);
	if (tunable)
		assert_true(c.retunes >= 5);
}

#define P(k, a, per, b)                                                                            \
	{                                                                                          \
		.kind = (k), .amount = (a), .period_ns = (per), .burst = (b)                       \
	}

static const struct kcase cases[] = {
	{"token", P(SL_KIND_TOKEN, 1000, SEC, 100), P(SL_KIND_TOKEN, 3000, SEC, 40)},
	/* 10^9 units/s: tick_shift 8, so costs and times in sub-ns ticks. */
	{"token fast rate", P(SL_KIND_TOKEN, 1000000000, SEC, 1000000),
	 P(SL_KIND_TOKEN, 500000000, SEC, 3000000)},
	{"token burst 1", P(SL_KIND_TOKEN, 7, 3 * SEC, 1), P(SL_KIND_TOKEN, 11, SEC, 2)},
	{"leaky unbounded", P(SL_KIND_LEAKY, 1000, SEC, 0), P(SL_KIND_LEAKY, 300, SEC, 0)},
	{"leaky capacity", P(SL_KIND_LEAKY, 1000, SEC, 50), P(SL_KIND_LEAKY, 2000, SEC, 20)},
	{"fixed", P(SL_KIND_FIXED, 100, 100 * MS, 0), P(SL_KIND_FIXED, 40, 100 * MS, 0)},
	{"fixed odd window", P(SL_KIND_FIXED, 7, 333333, 0), P(SL_KIND_FIXED, 13, 333333, 0)},
	{"sliding quantum 1", P(SL_KIND_SLIDING, 100, 100 * MS, 0),
	 P(SL_KIND_SLIDING, 250, 100 * MS, 0)},
	{"sliding quantum > 1", P(SL_KIND_SLIDING, 3000000, SEC, 0),
	 P(SL_KIND_SLIDING, 5000000, SEC, 0)},
	{"warmup",
	 {.kind = SL_KIND_WARMUP,
	  .amount = 1000,
	  .period_ns = SEC,
	  .burst = 100,
	  .cold = 3,
	  .warmup_ns = SEC},
	 {.kind = SL_KIND_WARMUP,
	  .amount = 2000,
	  .period_ns = SEC,
	  .burst = 50,
	  .cold = 4,
	  .warmup_ns = 2 * SEC}},
	{"concurrency", P(SL_KIND_CONC, 10, 0, 0), P(SL_KIND_CONC, 4, 0, 0)},
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

static void test_fast_plain(void **state)
{
	const struct kcase *kc = *state;
	run_case(kc, false, UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)(kc - cases));
}

static void test_fast_tunable(void **state)
{
	const struct kcase *kc = *state;
	run_case(kc, true, UINT64_C(0xd1b54a32d192ed03) ^ (uint64_t)(kc - cases));
}

/* The sliding case with N > 2^20 does use quanta of more than one unit. */
static void test_fast_sliding_quantum(void **state)
{
	(void)state;
	struct sl_limiter l;
	assert_dec_equal(sl_limiter_init(&l, &cases[8].p, EPOCH), SL_OK);
	assert_true(l.u.sliding.quantum > 1);
	assert_dec_equal(sl_limiter_init(&l, &cases[7].p, EPOCH), SL_OK);
	assert_dec_equal(l.u.sliding.quantum, 1);
}

/*
 * The edge of the inline range (fast_shift): the last instant inside it
 * and the first ones past it, for a slow rate (tick_shift 0, range 2^63
 * ns), a fast one (tick_shift 8, 2^55 ns) and a burst that takes almost
 * 2^63 ticks to refill (a range cut shorter). The epoch is chosen so that
 * the edge lies below 2^64 ns. At each instant, a short sequence of takes,
 * peeks and charges on two limiters (fast path / full API), both answers
 * and states compared; inside the range the inline path alone must decide.
 */
static void edge_case(const struct sl_params *p, uint64_t epoch, int want_shift)
{
	static struct sl_tunable ta, tb;
	struct sl_limiter *a = &ta.head, *b = &tb.head;
	init_pair(&ta, &tb, p, false, epoch);
	const unsigned fs = a->u.gcra.fast_shift;
	if (want_shift >= 0)
		assert_dec_equal(fs, want_shift);
	assert_true(fs < 64);
	const uint64_t end = epoch + (UINT64_C(1) << fs); /* first instant outside */
	assert_true(end > epoch);
	const uint64_t times[] = {end - 2, end - 1, end, end + 1, end + 1000, UINT64_MAX};
	const uint64_t sizes[] = {1, 2, p->burst, p->burst + 1, 0, 1, 1, p->burst / 2 + 1, 3};
	uint64_t admitted_inside = 0;
	for (size_t ti = 0; ti < sizeof(times) / sizeof(times[0]); ti++) {
		const uint64_t now = times[ti];
		if (now < end - 2)
			continue; /* wrapped */
		/* Start each instant from a limiter that is full at it. */
		init_pair(&ta, &tb, p, false, epoch);
		const bool inside = now < end;
		for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
			const uint64_t n = sizes[si];
			assert_dec_equal(sl_fast_peek(a, n, now),
					 sl_limiter_available(b, now) >= n);
			const bool fast = sl_fast_take(a, n, now);
			const bool ref = sl_limiter_acquire(b, n, now, POLICE).verdict == SL_ADMIT;
			bool got = fast;
			if (!fast) {
				got = sl_limiter_acquire(a, n, now, POLICE).verdict == SL_ADMIT;
				/* Inside, a cost below 2^63 ticks is the
				 * inline path's to decide. */
				if (inside && n >= 1 && n <= p->burst &&
				    (a->u.gcra.tau_ticks < INT64_MAX || n <= p->burst / 2 + 1))
					assert_false(got);
			} else {
				assert_true(inside); /* outside: left to the full API */
				admitted_inside++;
			}
			assert_dec_equal(got, ref);
			assert_same_state(a, b, now, si);
		}
		sl_fast_charge(a, 2, now);
		assert_dec_equal(sl_limiter_charge(b, 2, now), SL_OK);
		assert_same_state(a, b, now, 100);
		const bool got1 = sl_fast_take(a, 1, now) ||
				  sl_limiter_acquire(a, 1, now, POLICE).verdict == SL_ADMIT;
		assert_dec_equal(got1, sl_limiter_acquire(b, 1, now, POLICE).verdict == SL_ADMIT);
		assert_same_state(a, b, now, 101);
	}
	assert_true(admitted_inside >= 2);
}

static void test_fast_gcra_edge(void **state)
{
	(void)state;
	/* 1000/s: tick_shift 0, the range 2^63 ns. */
	const struct sl_params slow = P(SL_KIND_TOKEN, 1000, SEC, 10);
	edge_case(&slow, 1234567, 63);
	const struct sl_params slow_leaky = P(SL_KIND_LEAKY, 1000, SEC, 10);
	edge_case(&slow_leaky, 99, 63);
	/* 10^9/s: tick_shift 8, the range 2^55 ns. */
	const struct sl_params fast = P(SL_KIND_TOKEN, 1000000000, SEC, 1000);
	edge_case(&fast, UINT64_MAX - (UINT64_C(1) << 56), 55);
	/* One unit per 2^40 ns, burst 2^23 + 2^20: tau beyond 2^63 ticks, so
	 * the range is cut below 2^63 ns. */
	const struct sl_params deep = P(SL_KIND_TOKEN, 1, UINT64_C(1) << 40,
					(UINT64_C(1) << 23) + (UINT64_C(1) << 20));
	edge_case(&deep, 5 * SEC, -1);
	struct sl_limiter l;
	assert_dec_equal(sl_limiter_init(&l, &deep, 5 * SEC), SL_OK);
	assert_true(l.u.gcra.fast_shift < 63);
}

int main(void)
{
	struct CMUnitTest tests[2 * N_CASES + 2];
	char names[2 * N_CASES][64];
	size_t k = 0;
	for (size_t i = 0; i < N_CASES; i++) {
		snprintf(names[k], sizeof(names[k]), "test_fast_plain(%s)", cases[i].name);
		tests[k] = (struct CMUnitTest){.name = names[k],
					       .test_func = test_fast_plain,
					       .initial_state = (void *)(uintptr_t)&cases[i]};
		k++;
		snprintf(names[k], sizeof(names[k]), "test_fast_tunable(%s)", cases[i].name);
		tests[k] = (struct CMUnitTest){.name = names[k],
					       .test_func = test_fast_tunable,
					       .initial_state = (void *)(uintptr_t)&cases[i]};
		k++;
	}
	tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_fast_sliding_quantum);
	tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_fast_gcra_edge);
	return _cmocka_run_group_tests("test_core_fast", tests, k, NULL, NULL);
}
