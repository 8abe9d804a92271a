/* SPDX-License-Identifier: MIT */
/*
 * test_core_warmup.c - the warm-up token bucket (core/warmup.c) with an
 * injected clock: exact sequences from the formulas worked by hand, and a
 * long random sequence checked against a reference implementation written
 * the way Guava's SmoothWarmingUp is (resync, then storedPermitsToWaitTime
 * as a trapezoid over permitsToTime), in long double.
 *
 * Hand-worked case, 100/s, warmup 2 s, cold 3 (the README's example):
 *   S = 10 ms, C = 30 ms, T = 0.5 x 2 s / 10 ms = 100, M = 100 + 4 s / 40 ms
 *   = 200, slope (C - S)/(M - T) = 0.2 ms per unit. The k-th unit from cold
 *   (k = 0, 1, ...) costs the trapezoid from 200 - k to 199 - k:
 *   29.9 ms - 0.2 ms x k, so the first 100 cost 2990 - 990 = 2000 ms = w.
 */
#include "test_core.h"

/* floor, ceil and fabs of non-huge long doubles without libm (the tests
 * link no -lm; gcc inlines the builtins, clang calls libm). */
static long double lfloor(long double x)
{
	long double t = (long double)(int64_t)x;
	return t > x ? t - 1 : t;
}

static long double lceil(long double x)
{
	long double t = (long double)(int64_t)x;
	return t < x ? t + 1 : t;
}

static long double labs_ld(long double x)
{
	return x < 0 ? -x : x;
}

#define T0 (5 * SEC) /* the limiter's epoch */

static struct sl_params warm_params(uint64_t amount, uint64_t period_ns, uint64_t burst,
				    uint64_t warmup_ns, uint32_t cold)
{
	struct sl_params p = {.kind = SL_KIND_WARMUP,
			      .cold = cold,
			      .amount = amount,
			      .period_ns = period_ns,
			      .burst = burst,
			      .warmup_ns = warmup_ns};
	return p;
}

static void init_ok(struct sl_limiter *l, struct sl_params p, uint64_t now)
{
	assert_dec_equal(sl_limiter_init(l, &p, now), SL_OK);
	assert_true(sl_limiter_validate(l));
}

/* Reserving from cold: unit k acts at the sum of the costs before it. */
static void test_warmup_reserve_from_cold(void **state)
{
	(void)state;
	struct sl_limiter l;
	init_ok(&l, warm_params(100, SEC, 1, 2 * SEC, 3), T0);
	assert_dec_equal(sl_warmup_stored(&l.u.warm, T0), 200);
	assert_dec_equal(sl_warmup_interval_ns(&l.u.warm, T0), 30 * MS);
	uint64_t at = 0;
	for (uint64_t k = 0; k < 100; k++) {
		expect_decision(sl_limiter_acquire(&l, 1, T0, RESERVE), SL_ADMIT, at);
		at += 29900000u - 200000u * k;
	}
	/* The first 100 took exactly the warm-up period; T = 100 stored left. */
	assert_dec_equal(at, 2 * SEC);
	assert_dec_equal(sl_warmup_stored(&l.u.warm, T0), 100);
	assert_dec_equal(sl_warmup_interval_ns(&l.u.warm, T0), 10 * MS);
	/* Below T every unit costs S: 100/s. */
	for (uint64_t k = 0; k < 5; k++)
		expect_decision(sl_limiter_acquire(&l, 1, T0, RESERVE), SL_ADMIT,
				2 * SEC + k * 10 * MS);
}

/* Policing from cold: admit, refuse until the unit's cost has passed. */
static void test_warmup_police_from_cold(void **state)
{
	(void)state;
	struct sl_limiter l;
	init_ok(&l, warm_params(100, SEC, 1, 2 * SEC, 3), T0);
	expect_decision(sl_limiter_acquire(&l, 1, T0, POLICE), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&l, 1, T0, POLICE), SL_REFUSE, 29900000u);
	expect_decision(sl_limiter_acquire(&l, 1, T0 + 29899999u, POLICE), SL_REFUSE, 1);
	assert_dec_equal(sl_limiter_available(&l, T0 + 29899999u), 0);
	assert_dec_equal(sl_limiter_available(&l, T0 + 29900000u), 1);
	expect_decision(sl_limiter_acquire(&l, 1, T0 + 29900000u, POLICE), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&l, 1, T0 + 29900000u, POLICE), SL_REFUSE, 29700000u);
	/* Police never takes more than the burst at once. */
	expect_decision(sl_limiter_acquire(&l, 2, T0 + 10 * SEC, POLICE), SL_NEVER, UINT64_MAX);
	/* A reserve within max-delay, and one beyond it (refused with the rest). */
	expect_decision(sl_limiter_acquire(&l, 1, T0 + 29900000u, 30 * MS), SL_ADMIT, 29700000u);
	expect_decision(sl_limiter_acquire(&l, 1, T0 + 29900000u, 30 * MS), SL_REFUSE,
			29700000u + 29500000u - 30 * MS);
}

/* Idle after warming: stored permits come back at M / w = 100 per second;
 * after w of idleness from fully warm the limiter is cold again. */
static void test_warmup_cools_when_idle(void **state)
{
	(void)state;
	struct sl_limiter l;
	init_ok(&l, warm_params(100, SEC, 1, 2 * SEC, 3), T0);
	/* 200 units: 100 warm-up ones (2 s) and 100 at S (1 s): fully warm. */
	for (int k = 0; k < 200; k++)
		assert_dec_equal(sl_limiter_acquire(&l, 1, T0, RESERVE).verdict, SL_ADMIT);
	const uint64_t sched = T0 + 3 * SEC; /* the 201st unit's slot */
	assert_dec_equal(sl_warmup_stored(&l.u.warm, sched), 0);
	assert_dec_equal(sl_warmup_interval_ns(&l.u.warm, sched), 10 * MS);
	/* 0.5 s idle: 50 stored, still at S (below T). */
	assert_dec_equal(sl_warmup_stored(&l.u.warm, sched + SEC / 2), 50);
	/* 1.5 s idle: 150 stored, f(150) = 10 + 50 x 0.2 = 20 ms. */
	assert_dec_equal(sl_warmup_stored(&l.u.warm, sched + 3 * SEC / 2), 150);
	assert_dec_equal(sl_warmup_interval_ns(&l.u.warm, sched + 3 * SEC / 2), 20 * MS);
	/* 2 s idle and more: cold (M, capped). */
	assert_dec_equal(sl_warmup_stored(&l.u.warm, sched + 2 * SEC), 200);
	assert_dec_equal(sl_warmup_stored(&l.u.warm, sched + 4 * SEC), 200);
	const uint64_t t = sched + 4 * SEC;
	expect_decision(sl_limiter_acquire(&l, 1, t, POLICE), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&l, 1, t, POLICE), SL_REFUSE, 29900000u);
	/* A stale now (before the schedule) refills nothing. */
	assert_dec_equal(sl_warmup_stored(&l.u.warm, t - SEC), 199);
}

/* burst=b lets the schedule run (b - 1) S ahead of now: b units at once
 * in the stable regime, exactly as the token bucket with that burst does
 * (compared with SL_KIND_TOKEN); from cold, fewer (each costs up to C). */
static void test_warmup_burst(void **state)
{
	(void)state;
	struct sl_limiter l;
	init_ok(&l, warm_params(100, SEC, 4, 2 * SEC, 3), T0);
	/* A unit may act when the schedule is within 3 S = 30 ms of now: the
	 * first at 0 ahead, the second at 29.9 ms, not the third at 59.6. */
	expect_decision(sl_limiter_acquire(&l, 1, T0, POLICE), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&l, 1, T0, POLICE), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&l, 1, T0, POLICE), SL_REFUSE, 59600000u - 30 * MS);
	assert_dec_equal(sl_limiter_available(&l, T0), 0);
	assert_dec_equal(sl_limiter_available(&l, T0 + 29600000u), 1);
	/* Two at once need the schedule within 2 S. */
	expect_decision(sl_limiter_acquire(&l, 2, T0, POLICE), SL_REFUSE, 59600000u - 20 * MS);
	/* Warm: 400 reservations from cold take 2 s (the first 100), 1 s (the
	 * 100 stored below T, at S) and 2 s (200 fresh at S), so the next slot
	 * starts at T0 + 5 s with nothing stored. A token bucket of the same
	 * rate and burst after 500 reservations has its tat there too. */
	struct sl_limiter w2, t2;
	init_ok(&w2, warm_params(100, SEC, 4, 2 * SEC, 3), T0);
	for (int k = 0; k < 400; k++)
		assert_dec_equal(sl_limiter_acquire(&w2, 1, T0, RESERVE).verdict, SL_ADMIT);
	assert_dec_equal(sl_warmup_stored(&w2.u.warm, T0 + 5 * SEC), 0);
	struct sl_params tp = {.kind = SL_KIND_TOKEN, .amount = 100, .period_ns = SEC, .burst = 4};
	init_ok(&t2, tp, T0);
	for (int k = 0; k < 500; k++)
		assert_dec_equal(sl_limiter_acquire(&t2, 1, T0, RESERVE).verdict, SL_ADMIT);
	/* Both now have their next slot at T0 + 5 s; police both alike. */
	for (uint64_t v = T0 + 5 * SEC - 40 * MS; v < T0 + 5 * SEC + 200 * MS; v += 3 * MS) {
		const struct sl_decision a = sl_limiter_acquire(&w2, 1, v, POLICE);
		const struct sl_decision b = sl_limiter_acquire(&t2, 1, v, POLICE);
		assert_dec_equal(a.verdict, b.verdict);
		assert_dec_equal(a.wait_ns, b.wait_ns);
		assert_dec_equal(sl_limiter_available(&w2, v), sl_limiter_available(&t2, v));
	}
}

/* Bytes: 1 MiB/s, warmup 2 s, burst 5243 B (the default, 5 ms): the first
 * 2 s admit 0.5 x rate x w = 1 MiB (cold 3), the next second 1 MiB. */
static void test_warmup_bytes(void **state)
{
	(void)state;
	struct sl_limiter l;
	const uint64_t rate = 1048576, burst = 5243, piece = 4096;
	init_ok(&l, warm_params(rate, SEC, burst, 2 * SEC, 3), T0);
	uint64_t in_warmup = 0, in_next = 0;
	for (;;) {
		const struct sl_decision d = sl_limiter_acquire(&l, piece, T0, RESERVE);
		assert_dec_equal(d.verdict, SL_ADMIT);
		if (d.wait_ns < 2 * SEC)
			in_warmup += piece;
		else if (d.wait_ns < 3 * SEC)
			in_next += piece;
		else
			break;
	}
	/* Within a piece and a burst of the formulas. */
	assert_true(in_warmup >= rate - piece && in_warmup <= rate + burst + piece);
	assert_true(in_next >= rate - piece && in_next <= rate + burst + piece);
}

/* Charge pushes the schedule like an admission; refund gives back n S but
 * never before now, and leaves the stored permits. */
static void test_warmup_charge_refund(void **state)
{
	(void)state;
	struct sl_limiter l;
	init_ok(&l, warm_params(100, SEC, 1, 2 * SEC, 3), T0);
	assert_dec_equal(sl_limiter_charge(&l, 2, T0), SL_OK);
	/* 29.9 + 29.7 ms of debt. */
	expect_decision(sl_limiter_acquire(&l, 1, T0, POLICE), SL_REFUSE, 59600000u);
	assert_dec_equal(sl_warmup_stored(&l.u.warm, T0), 198);
	assert_dec_equal(sl_limiter_refund(&l, 1, T0), SL_OK);
	expect_decision(sl_limiter_acquire(&l, 1, T0, POLICE), SL_REFUSE, 49600000u);
	assert_dec_equal(sl_limiter_refund(&l, 10, T0), SL_OK);
	assert_dec_equal(sl_warmup_stored(&l.u.warm, T0), 198);
	expect_decision(sl_limiter_acquire(&l, 1, T0, POLICE), SL_ADMIT, 0);
	assert_dec_equal(sl_limiter_charge(&l, 0, T0), SL_OK);
	expect_decision(sl_limiter_acquire(&l, 0, T0, POLICE), SL_ADMIT, 0);
}

static void test_warmup_init_errors(void **state)
{
	(void)state;
	struct sl_limiter l;
	struct sl_params p = warm_params(100, SEC, 1, 2 * SEC, 1);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_EINVAL); /* cold < 2 */
	p = warm_params(100, SEC, 0, 2 * SEC, 3);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_EINVAL); /* burst 0 */
	p = warm_params(100, SEC, 1, 0, 3);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_EINVAL); /* no warm-up */
	/* w < (1 + cold) S / 2 = 20 ms: no unit between T and M. */
	p = warm_params(100, SEC, 1, 19 * MS, 3);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_EINVAL);
	p = warm_params(100, SEC, 1, 20 * MS, 3);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	p = warm_params(100, SEC, 1, HOUR + 1, 3);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_ERANGE);
	p = warm_params(100, SEC, 1, 2 * SEC, 1001);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_ERANGE);
	/* 10 GiB/s for an hour: M = 4.3e13 bytes, within range. */
	p = warm_params(10ull << 30, SEC, 1 << 20, HOUR, 3);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	/* Validate catches a corrupt derived field and stored permits > M. */
	init_ok(&l, warm_params(100, SEC, 1, 2 * SEC, 3), 0);
	l.u.warm.thresh_q++;
	assert_false(sl_limiter_validate(&l));
	init_ok(&l, warm_params(100, SEC, 1, 2 * SEC, 3), 0);
	atomic_store(&l.u.warm.stored_q, l.u.warm.max_q + 1);
	assert_false(sl_limiter_validate(&l));
	assert_string_equal(sl_kind_name(SL_KIND_WARMUP), "warmup");
}

/* The reference: Guava's SmoothWarmingUp structure, in long double ns and
 * permits, with sluice's admission rule (act at base - (burst - n) S). */
struct ref {
	long double S, C, T, M, w, slope, stored, next;
	uint64_t burst;
};

static void ref_init(struct ref *r, uint64_t amount, uint64_t period, uint64_t burst,
		     uint64_t warmup, uint32_t cold)
{
	r->S = (long double)period / amount;
	r->C = cold * r->S;
	r->w = (long double)warmup;
	r->T = 0.5L * r->w / r->S;
	r->M = r->T + 2.0L * r->w / (r->S + r->C);
	r->slope = (r->C - r->S) / (r->M - r->T);
	r->stored = r->M;
	r->next = 0;
	r->burst = burst;
}

static long double ref_permits_to_time(const struct ref *r, long double permits)
{
	return r->S + permits * r->slope;
}

/* Guava's storedPermitsToWaitTime for SmoothWarmingUp. */
static long double ref_stored_wait(const struct ref *r, long double stored, long double take)
{
	long double above_avail = stored - r->T, t = 0;
	if (above_avail > 0) {
		long double above = above_avail < take ? above_avail : take;
		t = above *
		    (ref_permits_to_time(r, above_avail) +
		     ref_permits_to_time(r, above_avail - above)) /
		    2.0L;
		take -= above;
	}
	return t + r->S * take;
}

/* Returns the wait (or -1 for a refusal); admits when wait <= max_wait. */
static long double ref_acquire(struct ref *r, uint64_t n, long double now, long double max_wait,
			       int force)
{
	if (now > r->next) {
		long double s = r->stored + (now - r->next) * r->M / r->w;
		r->stored = s < r->M ? s : r->M;
		r->next = now;
	}
	long double at = n <= r->burst ? r->next - lfloor((r->burst - n) * r->S)
				       : r->next + lceil((n - r->burst) * r->S);
	long double wait = at > now ? at - now : 0;
	if (force == 0 || (force < 0 && wait > max_wait))
		return -1 - wait;
	long double take = n < r->stored ? n : r->stored;
	r->next += ref_stored_wait(r, r->stored, take) + (n - take) * r->S;
	r->stored -= take;
	return wait;
}

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

/* A long random sequence of police / reserve / max-wait calls with idle
 * spells of every length, against the reference. Before each call the
 * reference takes the core's state (schedule, stored permits), so every
 * step is checked on its own, without drift: the same verdict, and a wait
 * within 2 ns plus what two 2^-16 units cost at C (the core rounds costs
 * up to whole ns and refills up to 2^-16 units, never down). Where the
 * reference's wait is within that of the limit, either verdict is right.
 * The multi-step sequences above check accumulation exactly. */
static void run_against_ref(uint64_t amount, uint64_t period, uint64_t burst, uint64_t warmup,
			    uint32_t cold, uint64_t max_n, uint64_t step_ns, uint64_t seed)
{
	struct sl_limiter l;
	struct ref r;
	init_ok(&l, warm_params(amount, period, burst, warmup, cold), T0);
	ref_init(&r, amount, period, burst, warmup, cold);
	const long double tol = 2 + 2 * r.C / 65536;
	uint64_t t = 0, admitted = 0;
	for (int i = 0; i < 20000; i++) {
		r.next = (long double)atomic_load(&l.u.warm.sched_ns);
		r.stored = (long double)atomic_load(&l.u.warm.stored_q) / 65536;
		const uint64_t kind = lcg(&seed) % 100;
		if (kind < 3)
			t += lcg(&seed) % (2 * warmup); /* an idle spell */
		else
			t += lcg(&seed) % step_ns;
		const uint64_t n = max_n == 1 ? 1 : 1 + lcg(&seed) % max_n;
		const uint64_t mw = kind < 50   ? POLICE
				    : kind < 80 ? lcg(&seed) % (20 * step_ns)
						: RESERVE;
		if (mw == POLICE && n > burst)
			continue;
		const struct sl_decision d = sl_limiter_acquire(&l, n, T0 + t, mw);
		struct ref probe = r;
		const long double rw = -1 - ref_acquire(&probe, n, t, 0, 0); /* wait only */
		const long double lim = mw == RESERVE ? 1e30L : (long double)mw;
		if (labs_ld(rw - lim) <= tol || (rw <= tol && mw == POLICE)) {
			/* At the boundary: follow the core. */
			if (d.verdict == SL_ADMIT)
				ref_acquire(&r, n, t, 0, 1);
			else
				assert_dec_equal(d.verdict, SL_REFUSE);
		} else if (rw > lim) {
			assert_dec_equal(d.verdict, SL_REFUSE);
			if (labs_ld((long double)(d.wait_ns + mw) - rw) > tol)
				fail_msg("op %d: refusal %llu + %llu, reference %.1Lf", i,
					 (unsigned long long)d.wait_ns, (unsigned long long)mw, rw);
		} else {
			assert_dec_equal(d.verdict, SL_ADMIT);
			if (labs_ld((long double)d.wait_ns - rw) > tol)
				fail_msg("op %d: wait %llu, reference %.1Lf", i,
					 (unsigned long long)d.wait_ns, rw);
			ref_acquire(&r, n, t, 0, 1);
		}
		if (d.verdict == SL_ADMIT)
			admitted++;
		/* The stored permits and the schedule agree within rounding. */
		const long double st = (long double)atomic_load(&l.u.warm.stored_q) / 65536;
		if (labs_ld(st - r.stored) > 2.0L / 65536)
			fail_msg("op %d: stored %.6Lf, reference %.6Lf", i, st, r.stored);
		const long double sc = (long double)atomic_load(&l.u.warm.sched_ns);
		if (labs_ld(sc - r.next) > tol)
			fail_msg("op %d: schedule %.1Lf, reference %.1Lf", i, sc, r.next);
	}
	assert_true(admitted > 1000);
}

static void test_warmup_against_reference(void **state)
{
	(void)state;
	/* connect-like: 100/s, w 2 s, cold 3, burst 1; steps up to 30 ms. */
	run_against_ref(100, SEC, 1, 2 * SEC, 3, 1, 30 * MS, 1);
	/* a burst of 5 and requests of 1..5, cold 4. */
	run_against_ref(250, SEC, 5, 3 * SEC, 4, 5, 10 * MS, 2);
	/* bytes: 1 MiB/s, w 2 s, burst 5243, pieces up to 4 KiB. */
	run_against_ref(1048576, SEC, 5243, 2 * SEC, 3, 4096, 4 * MS, 3);
	/* cold 2, an odd rate: 7 per 3 s, w 10 s. */
	run_against_ref(7, 3 * SEC, 1, 10 * SEC, 2, 1, 900 * MS, 4);
}

/* A retune (sluice set) keeps the state: the schedule's debt in units, and
 * the stored permits as the same fraction of the new M (Guava's setRate). */
static void test_warmup_retune(void **state)
{
	(void)state;
	struct sl_tunable t;
	struct sl_params p = warm_params(100, SEC, 1, 2 * SEC, 3);
	assert_dec_equal(sl_tunable_init(&t, &p, T0), SL_OK);
	/* 100 units from cold: stored 100 of 200, schedule 2 s ahead. */
	for (int k = 0; k < 100; k++)
		assert_dec_equal(sl_limiter_acquire(&t.head, 1, T0, RESERVE).verdict, SL_ADMIT);
	/* 200/s: T = 200, M = 400; half of M stored = 200 = T, so the next
	 * units cost the new S (5 ms), after a debt of 200 units x 5 ms = 1 s. */
	struct sl_params q = warm_params(200, SEC, 1, 2 * SEC, 3);
	assert_dec_equal(sl_tunable_retune(&t, &q, T0), SL_OK);
	assert_true(sl_tunable_validate(&t));
	const struct sl_limiter *cur = sl_tunable_current(&t);
	assert_dec_equal(cur->kind, SL_KIND_WARMUP);
	assert_dec_equal(sl_warmup_stored(&cur->u.warm, T0), 200);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0, RESERVE), SL_ADMIT, SEC);
	expect_decision(sl_limiter_acquire(&t.head, 1, T0, RESERVE), SL_ADMIT, SEC + 5 * MS);
	/* Another kind is refused. */
	struct sl_params tok = {.kind = SL_KIND_TOKEN, .amount = 100, .period_ns = SEC, .burst = 1};
	assert_dec_equal(sl_tunable_retune(&t, &tok, T0), SL_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_warmup_reserve_from_cold),
		cmocka_unit_test(test_warmup_police_from_cold),
		cmocka_unit_test(test_warmup_cools_when_idle),
		cmocka_unit_test(test_warmup_burst),
		cmocka_unit_test(test_warmup_bytes),
		cmocka_unit_test(test_warmup_charge_refund),
		cmocka_unit_test(test_warmup_init_errors),
		cmocka_unit_test(test_warmup_against_reference),
		cmocka_unit_test(test_warmup_retune),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
