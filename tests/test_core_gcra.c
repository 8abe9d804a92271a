/* SPDX-License-Identifier: MIT */
/*
 * test_core_gcra.c - token and leaky buckets (core/gcra.c) with an injected
 * clock: exact admission sequences, extreme and fractional rates, time going
 * backwards, 64-bit overflow points, reserve, refund and available.
 */
#include "test_core.h"

static uint64_t sl__min_test(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* 4 units per ms (one per 250000 ns), burst 2, epoch t0. */
static void token_4_per_ms(struct sl_gcra *g, uint64_t t0)
{
	assert_dec_equal(sl_token_init(g, 4, MS, 2, t0), SL_OK);
}

static void test_core_gcra_token_sequence(void **state)
{
	(void)state;
	struct sl_gcra g;
	token_4_per_ms(&g, 1000);
	expect_decision(sl_gcra_acquire(&g, 1, 1000, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 1000, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 1000, POLICE), SL_REFUSE, 250000);
	expect_decision(sl_gcra_acquire(&g, 1, 1000 + 249999, POLICE), SL_REFUSE, 1);
	expect_decision(sl_gcra_acquire(&g, 1, 1000 + 250000, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 1000 + 250000, POLICE), SL_REFUSE, 250000);
	/* A long pause refills only up to the burst. */
	expect_decision(sl_gcra_acquire(&g, 2, 1000 + 10 * MS, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 1000 + 10 * MS, POLICE), SL_REFUSE, 250000);
	/* n == 0 is always admitted and takes nothing. */
	expect_decision(sl_gcra_acquire(&g, 0, 1000 + 10 * MS, POLICE), SL_ADMIT, 0);
	assert_dec_equal(sl_gcra_available(&g, 1000 + 10 * MS + 250000), 1);
}

static void test_core_gcra_token_more_than_burst(void **state)
{
	(void)state;
	struct sl_gcra g;
	token_4_per_ms(&g, 0);
	/* Police cannot ever admit 3 > burst at once. */
	expect_decision(sl_gcra_acquire(&g, 3, 0, POLICE), SL_NEVER, UINT64_MAX);
	/* Reserve takes 5: 2 from the burst, 3 more after 750 us. */
	expect_decision(sl_gcra_acquire(&g, 5, 0, RESERVE), SL_ADMIT, 750000);
	/* The next unit is due 250 us after those. */
	expect_decision(sl_gcra_acquire(&g, 1, 0, POLICE), SL_REFUSE, 1000000);
	expect_decision(sl_gcra_acquire(&g, 1, 1000000, POLICE), SL_ADMIT, 0);
	/* With a timeout, 4 > burst needs 500 us from a full bucket: a timeout
	 * of 499999 can never be enough. */
	expect_decision(sl_gcra_acquire(&g, 4, 10 * MS, 499999), SL_NEVER, UINT64_MAX);
}

static void test_core_gcra_reserve_timeout(void **state)
{
	(void)state;
	struct sl_gcra g;
	token_4_per_ms(&g, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 0, RESERVE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 0, RESERVE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 0, RESERVE), SL_ADMIT, 250000);
	expect_decision(sl_gcra_acquire(&g, 1, 0, 500000), SL_ADMIT, 500000);
	/* 750 us is beyond 500 us: refused, and a retry with the same timeout
	 * succeeds 250 us later. */
	expect_decision(sl_gcra_acquire(&g, 1, 0, 500000), SL_REFUSE, 250000);
	expect_decision(sl_gcra_acquire(&g, 1, 250000, 500000), SL_ADMIT, 500000);
	expect_decision(sl_gcra_acquire(&g, 1, 250000, 750000), SL_ADMIT, 750000);
	/* A timeout exactly equal to the wait is enough. */
	expect_decision(sl_gcra_acquire(&g, 2, 250000, 1250000), SL_ADMIT, 1250000);
}

static void test_core_gcra_leaky_spacing(void **state)
{
	(void)state;
	struct sl_gcra g;
	/* 4 per ms, at most 3 units queued (including the one that leaves). */
	assert_dec_equal(sl_leaky_init(&g, 4, MS, 3, 0), SL_OK);
	expect_decision(sl_gcra_acquire(&g, 1, 0, POLICE), SL_ADMIT, 0);
	/* No burst: the next unit leaves exactly 250 us later. */
	expect_decision(sl_gcra_acquire(&g, 1, 0, POLICE), SL_REFUSE, 250000);
	expect_decision(sl_gcra_acquire(&g, 1, 0, RESERVE), SL_ADMIT, 250000);
	expect_decision(sl_gcra_acquire(&g, 1, 0, RESERVE), SL_ADMIT, 500000);
	/* Capacity: 3 units are now scheduled; a fourth must wait 250 us. */
	expect_decision(sl_gcra_acquire(&g, 1, 0, RESERVE), SL_REFUSE, 250000);
	assert_dec_equal(sl_gcra_available(&g, 0), 0);
	expect_decision(sl_gcra_acquire(&g, 1, 250000, RESERVE), SL_ADMIT, 500000);
	/* A 2-unit request costs 500 us and leaves after the queue. */
	expect_decision(sl_gcra_acquire(&g, 2, 1000000, RESERVE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 1000000, RESERVE), SL_ADMIT, 500000);
	/* More than the capacity can never be queued. */
	expect_decision(sl_gcra_acquire(&g, 4, 10 * MS, RESERVE), SL_NEVER, UINT64_MAX);
	assert_dec_equal(sl_gcra_available(&g, 10 * MS), 3);
}

static void test_core_gcra_leaky_unbounded(void **state)
{
	(void)state;
	struct sl_gcra g;
	assert_dec_equal(sl_leaky_init(&g, 1, MS, 0, 0), SL_OK);
	assert_dec_equal(sl_gcra_available(&g, 0), UINT64_MAX);
	for (uint64_t i = 0; i < 1000; i++)
		expect_decision(sl_gcra_acquire(&g, 1, 0, RESERVE), SL_ADMIT, i * MS);
	/* Timeout still bounds the queue. */
	expect_decision(sl_gcra_acquire(&g, 1, 0, 5 * MS), SL_REFUSE, 995 * MS);
	expect_decision(sl_gcra_acquire(&g, 1000, 0, RESERVE), SL_ADMIT, 1000 * MS);
}

static void test_core_gcra_fractional_rate(void **state)
{
	(void)state;
	struct sl_gcra g;
	/* 3 per 7 s: one unit per 2333333333.33 ns, rounded up to ...334. */
	assert_dec_equal(sl_token_init(&g, 3, 7 * SEC, 1, 0), SL_OK);
	expect_decision(sl_gcra_acquire(&g, 1, 0, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 0, POLICE), SL_REFUSE, 2333333334);
	expect_decision(sl_gcra_acquire(&g, 1, 2333333334, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 4666666667, POLICE), SL_REFUSE, 1);
	expect_decision(sl_gcra_acquire(&g, 1, 4666666668, POLICE), SL_ADMIT, 0);
	/* The 4th unit (3 per 7 s plus the burst of 1) is not due before 7 s. */
	expect_decision(sl_gcra_acquire(&g, 1, 7 * SEC, POLICE), SL_REFUSE, 2);
	expect_decision(sl_gcra_acquire(&g, 1, 7 * SEC + 2, POLICE), SL_ADMIT, 0);
	/* Cost of 3 units is rounded up once: 7 s + 1 ns. */
	expect_decision(sl_gcra_acquire(&g, 3, 7 * SEC + 2, RESERVE), SL_ADMIT, 7 * SEC + 1);
}

static void test_core_gcra_one_per_hour(void **state)
{
	(void)state;
	struct sl_gcra g;
	assert_dec_equal(sl_token_init(&g, 1, HOUR, 1, 5), SL_OK);
	expect_decision(sl_gcra_acquire(&g, 1, 5, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 5, POLICE), SL_REFUSE, HOUR);
	expect_decision(sl_gcra_acquire(&g, 1, 5 + HOUR - 1, POLICE), SL_REFUSE, 1);
	expect_decision(sl_gcra_acquire(&g, 1, 5 + HOUR, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 24, 5 + HOUR, RESERVE), SL_ADMIT, 24 * HOUR);
	assert_dec_equal(sl_gcra_available(&g, 5 + 26 * HOUR - 1), 0);
	assert_dec_equal(sl_gcra_available(&g, 5 + 26 * HOUR), 1);
}

static void test_core_gcra_ten_giga_per_second(void **state)
{
	(void)state;
	struct sl_gcra g;
	/* 10^10 units/s (0.1 ns each), burst of one second's worth. */
	assert_dec_equal(sl_token_init(&g, 10000000000ull, SEC, 10000000000ull, 0), SL_OK);
	assert_dec_equal(g.tick_shift, 8);
	expect_decision(sl_gcra_acquire(&g, 10000000000ull, 0, POLICE), SL_ADMIT, 0);
	/* 0.1 ns is reported as a whole ns, rounded up. */
	expect_decision(sl_gcra_acquire(&g, 1, 0, POLICE), SL_REFUSE, 1);
	expect_decision(sl_gcra_acquire(&g, 1500, 0, POLICE), SL_REFUSE, 151);
	/* After 1 ms, 10^7 units are back, minus one for rounding up costs. */
	assert_dec_equal(sl_gcra_available(&g, MS), 9999999);
	expect_decision(sl_gcra_acquire(&g, 9999999, MS, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, MS, POLICE), SL_REFUSE, 1);
	/* 10^10 + 9999999 units were taken: at 1 s the total stays within
	 * rate * 1 s + burst = 2 * 10^10. */
	assert_true(sl_gcra_available(&g, SEC) <= 10000000000ull - 9999999ull);
}

static void test_core_gcra_time_backwards(void **state)
{
	(void)state;
	struct sl_gcra g;
	token_4_per_ms(&g, 10 * MS);
	/* A clock read from before the epoch counts as the epoch. */
	expect_decision(sl_gcra_acquire(&g, 2, 0, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 10 * MS, POLICE), SL_REFUSE, 250000);
	expect_decision(sl_gcra_acquire(&g, 1, 11 * MS, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 11 * MS, POLICE), SL_ADMIT, 0);
	/* A stale time sees an emptier bucket, never a fuller one. */
	expect_decision(sl_gcra_acquire(&g, 1, 10 * MS + 500000, POLICE), SL_REFUSE, 750000);
	assert_dec_equal(sl_gcra_available(&g, 10 * MS), 0);
	expect_decision(sl_gcra_acquire(&g, 1, 11 * MS + 250000, POLICE), SL_ADMIT, 0);
	/* Refund with a stale time cannot overfill either. */
	assert_dec_equal(sl_gcra_refund(&g, 100, 10 * MS), SL_OK);
	assert_dec_equal(sl_gcra_available(&g, 11 * MS + 250000), 2);
}

static void test_core_gcra_overflow(void **state)
{
	(void)state;
	struct sl_gcra g;
	token_4_per_ms(&g, 0);
	/* A cost beyond 2^64 ticks: never, neither police nor reserve. */
	expect_decision(sl_gcra_acquire(&g, UINT64_MAX, 0, POLICE), SL_NEVER, UINT64_MAX);
	expect_decision(sl_gcra_acquire(&g, UINT64_MAX, 0, RESERVE), SL_NEVER, UINT64_MAX);
	/* Nothing was taken by those. */
	assert_dec_equal(sl_gcra_available(&g, 0), 2);
	/* Reserve up to just below the horizon, then the horizon refuses. */
	const uint64_t big = (UINT64_MAX - 2 * 250000) / 250000;
	expect_decision(sl_gcra_acquire(&g, big, 0, RESERVE), SL_ADMIT, (big - 2) * 250000);
	expect_decision(sl_gcra_acquire(&g, 3, 0, RESERVE), SL_NEVER, UINT64_MAX);
	expect_decision(sl_gcra_acquire(&g, 1, 0, POLICE), SL_REFUSE, (big - 1) * 250000);
	/* max_wait near UINT64_MAX saturates rather than wrapping. */
	struct sl_gcra f;
	assert_dec_equal(sl_token_init(&f, 10000000000ull, SEC, 1, 0), SL_OK);
	expect_decision(sl_gcra_acquire(&f, 1000, 0, UINT64_MAX - 1), SL_ADMIT, 100);

	/* Epoch at 0, now near UINT64_MAX: exact until the tick horizon, then
	 * every request is refused as never rather than wrapping around. */
	token_4_per_ms(&g, 0);
	expect_decision(sl_gcra_acquire(&g, 2, UINT64_MAX - 600000, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, UINT64_MAX - 600000, POLICE), SL_NEVER, UINT64_MAX);
	assert_dec_equal(sl_gcra_available(&g, UINT64_MAX), 0);

	/* Epoch at 2^63: the full range after it works. */
	token_4_per_ms(&g, 1ull << 63);
	expect_decision(sl_gcra_acquire(&g, 2, UINT64_MAX - 10 * MS, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, UINT64_MAX - 10 * MS, POLICE), SL_REFUSE, 250000);
	expect_decision(sl_gcra_acquire(&g, 1, UINT64_MAX - 10 * MS + 250000, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 0, POLICE), SL_REFUSE,
			(1ull << 63) - 1 - 10 * MS + 500000);
}

static void test_core_gcra_refund_available(void **state)
{
	(void)state;
	struct sl_gcra g;
	token_4_per_ms(&g, 0);
	assert_dec_equal(sl_gcra_available(&g, 0), 2);
	expect_decision(sl_gcra_acquire(&g, 2, 0, POLICE), SL_ADMIT, 0);
	assert_dec_equal(sl_gcra_available(&g, 0), 0);
	assert_dec_equal(sl_gcra_available(&g, 249999), 0);
	assert_dec_equal(sl_gcra_available(&g, 250000), 1);
	assert_dec_equal(sl_gcra_refund(&g, 1, 0), SL_OK);
	assert_dec_equal(sl_gcra_available(&g, 0), 1);
	expect_decision(sl_gcra_acquire(&g, 1, 0, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, 0, POLICE), SL_REFUSE, 250000);
	/* Refunding more than was taken fills the bucket, never beyond. */
	assert_dec_equal(sl_gcra_refund(&g, 1000, 0), SL_OK);
	assert_dec_equal(sl_gcra_available(&g, 0), 2);
	assert_dec_equal(sl_gcra_refund(&g, 1, 5 * MS), SL_OK);
	assert_dec_equal(sl_gcra_available(&g, 5 * MS), 2);
	/* A refunded reservation frees its slot for the next caller. */
	expect_decision(sl_gcra_acquire(&g, 6, 5 * MS, RESERVE), SL_ADMIT, MS);
	assert_dec_equal(sl_gcra_refund(&g, 4, 5 * MS), SL_OK);
	expect_decision(sl_gcra_acquire(&g, 1, 5 * MS, RESERVE), SL_ADMIT, 250000);
}

static void test_core_gcra_init_errors(void **state)
{
	(void)state;
	struct sl_gcra g;
	assert_dec_equal(sl_token_init(&g, 0, SEC, 1, 0), SL_EINVAL);
	assert_dec_equal(sl_token_init(&g, 1, 0, 1, 0), SL_EINVAL);
	assert_dec_equal(sl_token_init(&g, 1, SEC, 0, 0), SL_EINVAL);
	assert_dec_equal(sl_leaky_init(&g, 1, SEC, 0, 0), SL_OK);
	/* One unit per 2^63 ns and more is beyond the fixed-point range. */
	assert_dec_equal(sl_token_init(&g, 1, UINT64_MAX, 1, 0), SL_ERANGE);
	assert_dec_equal(sl_token_init(&g, 1, 1ull << 62, 1, 0), SL_OK);
	/* A burst whose refill outlasts 2^64 ticks. */
	assert_dec_equal(sl_token_init(&g, 1, HOUR, UINT64_MAX / HOUR + 1, 0), SL_ERANGE);
	assert_dec_equal(sl_leaky_init(&g, 1, HOUR, UINT64_MAX / HOUR + 1, 0), SL_ERANGE);
	/* Extreme but valid rates. */
	assert_dec_equal(sl_token_init(&g, UINT64_MAX, 1, UINT64_MAX, 0), SL_OK);
	expect_decision(sl_gcra_acquire(&g, 1000, 0, POLICE), SL_ADMIT, 0);
}

/*
 * An independent model of the GCRA decision in exact 128-bit arithmetic
 * (no fast path, no saturation), to check sl_gcra_acquire's short path
 * against on random parameters and call sequences.
 */
__extension__ typedef unsigned __int128 u128;

static struct sl_decision model_acquire(const struct sl_gcra *g, uint64_t *tat, uint64_t n,
					uint64_t now_ns, uint64_t max_wait_ns)
{
	const u128 max64 = UINT64_MAX;
	if (n == 0)
		return (struct sl_decision){.verdict = SL_ADMIT};
	const u128 now = (u128)(now_ns > g->epoch_ns ? now_ns - g->epoch_ns : 0) << g->tick_shift;
	const u128 prod = (u128)n * g->mult;
	const u128 cost = (prod >> g->shift) + ((prod & (((u128)1 << g->shift) - 1)) != 0);
	const u128 limit = g->limit_ticks == UINT64_MAX ? ~(u128)0 : g->limit_ticks;
	const u128 tol = g->leaky ? cost : g->tau_ticks;
	const u128 max_wait = (u128)max_wait_ns << g->tick_shift;
	const struct sl_decision never = {.wait_ns = UINT64_MAX, .verdict = SL_NEVER};
	if (cost > limit || (cost > tol && cost - tol > max_wait))
		return never;
	const u128 start = *tat > now ? *tat : now;
	const u128 end = start + cost;
	if (end >= max64 || now >= max64)
		return never;
	const u128 ahead = end - now, wait = ahead > tol ? ahead - tol : 0;
	const u128 unit = (u128)1 << g->tick_shift;
	if (ahead > limit || wait > max_wait) {
		u128 t = ahead > limit ? ahead - limit : 0;
		if (wait > max_wait && wait - max_wait > t)
			t = wait - max_wait;
		return (struct sl_decision){.wait_ns = (uint64_t)((t + unit - 1) / unit),
					    .verdict = SL_REFUSE};
	}
	*tat = (uint64_t)end;
	return (struct sl_decision){.wait_ns = (uint64_t)((wait + unit - 1) / unit),
				    .verdict = SL_ADMIT};
}

/* A reproducible stream of garbage (64-bit LCG, high bits folded in). */
static uint64_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s ^ (*s >> 29);
}

static void test_core_gcra_matches_model(void **state)
{
	(void)state;
	uint64_t seed = 0x1234567887654321ull;
	for (int round = 0; round < 300; round++) {
		struct sl_gcra g;
		const uint64_t amount = 1 + rnd(&seed) % 10000000000ull;
		const uint64_t period = 1 + rnd(&seed) % 10000000000000ull;
		const uint64_t burst = rnd(&seed) % 1000;
		const bool leaky = round & 1;
		const uint64_t epoch = (round % 3 == 0) ? (1ull << 63) : rnd(&seed) % 1000000;
		enum sl_status st = leaky ? sl_leaky_init(&g, amount, period, burst, epoch)
					  : sl_token_init(&g, amount, period, burst, epoch);
		if (st != SL_OK) {
			assert_true(!leaky && burst == 0);
			continue;
		}
		uint64_t tat = 0, now = epoch;
		const uint64_t unit_ns = period / amount + 1;
		for (int i = 0; i < 200; i++) {
			/* Mostly forward in steps around one unit's time,
			 * sometimes backwards, sometimes far ahead. */
			const uint64_t r = rnd(&seed);
			if (r % 16 == 0)
				now -= sl__min_test(now, rnd(&seed) % (4 * unit_ns));
			else if (r % 64 == 1)
				now = UINT64_MAX - rnd(&seed) % (4 * unit_ns);
			else
				now += rnd(&seed) % (2 * unit_ns);
			const uint64_t n = rnd(&seed) % (2 * burst + 3);
			const uint64_t mw = (r >> 8) % 3 == 0   ? 0
					    : (r >> 8) % 3 == 1 ? UINT64_MAX
								: rnd(&seed) % (8 * unit_ns);
			struct sl_decision want = model_acquire(&g, &tat, n, now, mw);
			struct sl_decision got = sl_gcra_acquire(&g, n, now, mw);
			if (got.verdict != want.verdict || got.wait_ns != want.wait_ns ||
			    atomic_load(&g.tat) != tat)
				fail_msg("round %d step %d (%s %llu/%llu burst %llu, n %llu, now %llu, "
					 "max_wait %llu): got %u/%llu tat %llu, want %u/%llu tat %llu",
					 round, i, leaky ? "leaky" : "token",
					 (unsigned long long)amount, (unsigned long long)period,
					 (unsigned long long)burst, (unsigned long long)n,
					 (unsigned long long)now, (unsigned long long)mw,
					 got.verdict, (unsigned long long)got.wait_ns,
					 (unsigned long long)atomic_load(&g.tat), want.verdict,
					 (unsigned long long)want.wait_ns, (unsigned long long)tat);
		}
	}
}

/* One acquire against the model: the same decision and the same tat, or a
 * failure naming the step and the limiter's derived parameters. */
static void expect_model_step(struct sl_gcra *g, uint64_t *tat, uint64_t n, uint64_t now,
			      uint64_t max_wait, int step)
{
	const struct sl_decision want = model_acquire(g, tat, n, now, max_wait);
	const struct sl_decision got = sl_gcra_acquire(g, n, now, max_wait);
	const uint64_t got_tat = atomic_load(&g->tat);
	if (got.verdict == want.verdict && got.wait_ns == want.wait_ns && got_tat == *tat)
		return;
	fail_msg("step %d: %s mult %llu >> %u, tau %llu, limit %llu, epoch %llu; n %llu at %llu, "
		 "max_wait %llu: got %u/%llu tat %llu, want %u/%llu tat %llu",
		 step, g->leaky ? "leaky" : "token", (unsigned long long)g->mult, g->shift,
		 (unsigned long long)g->tau_ticks, (unsigned long long)g->limit_ticks,
		 (unsigned long long)g->epoch_ns, (unsigned long long)n, (unsigned long long)now,
		 (unsigned long long)max_wait, got.verdict, (unsigned long long)got.wait_ns,
		 (unsigned long long)got_tat, want.verdict, (unsigned long long)want.wait_ns,
		 (unsigned long long)*tat);
}

/*
 * The edges of sl_gcra_acquire's short path against the same model: epochs
 * near 2^64 with clock reads before them (which count as the epoch, not as
 * a time 2^64 later), bursts whose refill takes close to 2^64 ticks, leaky
 * capacities, and tat words anywhere in the 64-bit range (as a reserve far
 * ahead, or a foreign process, may leave them). Mostly n == 1.
 */
static void test_core_gcra_matches_model_edges(void **state)
{
	(void)state;
	uint64_t seed = 0x0123456789abcdefull;
	for (int round = 0; round < 400; round++) {
		struct sl_gcra g;
		const uint64_t amount = 1 + rnd(&seed) % (round % 4 == 0 ? 10000000000ull : 1000);
		const uint64_t period = 1 + rnd(&seed) % 10000000000ull;
		const bool leaky = round % 3 == 0;
		/* Half the rounds: a burst refilling in 2^41 to 2^64 ns. */
		uint64_t burst = 1 + rnd(&seed) % 8;
		if (round & 1)
			burst = (UINT64_MAX >> (rnd(&seed) % 24)) / (period / amount + 1);
		const uint64_t epoch = (round % 5 == 0)
					       ? rnd(&seed) % 1000000
					       : UINT64_MAX - rnd(&seed) % (UINT64_MAX >>
									    (rnd(&seed) % 64));
		if (round % 4 == 1) {
			/* A burst whose refill takes all but a few units' time
			 * of the 2^64-tick range. */
			assert_dec_equal(sl_token_init(&g, amount, period, 1, epoch), SL_OK);
			const u128 room = UINT64_MAX - 1 - rnd(&seed) % (4 * g.cost1_ticks);
			burst = (uint64_t)((room << g.shift) / g.mult);
		}
		enum sl_status st = leaky ? sl_leaky_init(&g, amount, period, burst, epoch)
					  : sl_token_init(&g, amount, period, burst, epoch);
		if (st != SL_OK)
			continue; /* a burst beyond the horizon */
		uint64_t tat = 0, now = epoch;
		const uint64_t unit_ns = period / amount + 1;
		for (int i = 0; i < 200; i++) {
			const uint64_t r = rnd(&seed);
			if (r % 8 == 0) {
				/* Any tat, mostly near the ends of its range. */
				tat = rnd(&seed) >> (rnd(&seed) % 64);
				if (r & 8)
					tat = ~tat - 1;
				atomic_store(&g.tat, tat);
			}
			if (r % 16 == 1)
				now = rnd(&seed); /* anywhere, before the epoch too */
			else if (r % 16 == 2)
				now = epoch - rnd(&seed) % (4 * unit_ns);
			else
				now += rnd(&seed) % (2 * unit_ns);
			const uint64_t n = r % 4 != 3 ? 1 : rnd(&seed) % 5;
			const uint64_t mw = (r >> 8) % 3 == 0   ? 0
					    : (r >> 8) % 3 == 1 ? UINT64_MAX
								: rnd(&seed) % (8 * unit_ns);
			expect_model_step(&g, &tat, n, now, mw, round * 1000 + i);
		}
	}
}

/* Costs of 2^63 ticks and more (one unit per 1.5 * 2^62 ns, n = 2), with
 * tat around 2^63: a slot there ends at or beyond 2^64 - 1, never. */
static void test_core_gcra_cost_beyond_2_63(void **state)
{
	(void)state;
	struct sl_gcra g;
	assert_dec_equal(sl_token_init(&g, 1, 3ull << 61, 2, 0), SL_OK);
	assert_dec_equal(g.tick_shift, 0);
	for (uint64_t d = 0; d < 8; d++) {
		uint64_t tat = (1ull << 63) - 4 + d;
		atomic_store(&g.tat, tat);
		expect_model_step(&g, &tat, 2, 0, RESERVE, (int)d);
		expect_model_step(&g, &tat, 2, 0, POLICE, (int)d);
		expect_model_step(&g, &tat, 1, 0, RESERVE, (int)d);
	}
}

/* A clock read from before an epoch near 2^64 counts as the epoch: the
 * difference wraps to a small number, which must not pass for elapsed
 * time. */
static void test_core_gcra_epoch_near_wrap(void **state)
{
	(void)state;
	struct sl_gcra g;
	const uint64_t epoch = UINT64_MAX - MS;
	token_4_per_ms(&g, epoch);
	expect_decision(sl_gcra_acquire(&g, 2, epoch, POLICE), SL_ADMIT, 0);
	/* 0 - epoch wraps to MS + 1: still the epoch, so still empty. */
	expect_decision(sl_gcra_acquire(&g, 1, 0, POLICE), SL_REFUSE, 250000);
	expect_decision(sl_gcra_acquire(&g, 1, 0, RESERVE), SL_ADMIT, 250000);
	expect_decision(sl_gcra_acquire(&g, 1, epoch + 500000, POLICE), SL_ADMIT, 0);
	expect_decision(sl_gcra_acquire(&g, 1, epoch + 500000, POLICE), SL_REFUSE, 250000);
}

/* The short path trusts fast_shift and capped: validate must reject a
 * (foreign) limiter whose copies of them differ from what init derives. */
static void test_core_gcra_validate_fast_fields(void **state)
{
	(void)state;
	struct sl_limiter l;
	const struct sl_params token = {.kind = SL_KIND_TOKEN,
					.amount = 4,
					.period_ns = MS,
					.burst = 2};
	assert_dec_equal(sl_limiter_init(&l, &token, 0), SL_OK);
	assert_true(sl_limiter_validate(&l));
	assert_dec_equal(l.u.gcra.fast_shift, 63);
	assert_dec_equal(l.u.gcra.capped, 0);
	l.u.gcra.fast_shift = 62;
	assert_false(sl_limiter_validate(&l));
	l.u.gcra.fast_shift = 63;
	l.u.gcra.capped = 1;
	assert_false(sl_limiter_validate(&l));
	const struct sl_params leaky = {.kind = SL_KIND_LEAKY,
					.amount = 4,
					.period_ns = MS,
					.burst = 3};
	assert_dec_equal(sl_limiter_init(&l, &leaky, 0), SL_OK);
	assert_true(sl_limiter_validate(&l));
	assert_dec_equal(l.u.gcra.capped, 1);
	l.u.gcra.capped = 0;
	assert_false(sl_limiter_validate(&l));
	/* A burst refilling in nearly 2^64 ticks narrows the short path. */
	const struct sl_params huge = {.kind = SL_KIND_TOKEN,
				       .amount = 1,
				       .period_ns = 1024,
				       .burst = (UINT64_MAX - 1) / 1024};
	assert_dec_equal(sl_limiter_init(&l, &huge, 0), SL_OK);
	assert_dec_equal(l.u.gcra.tick_shift, 0);
	assert_true(l.u.gcra.fast_shift < 11);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_gcra_token_sequence),
		cmocka_unit_test(test_core_gcra_token_more_than_burst),
		cmocka_unit_test(test_core_gcra_reserve_timeout),
		cmocka_unit_test(test_core_gcra_leaky_spacing),
		cmocka_unit_test(test_core_gcra_leaky_unbounded),
		cmocka_unit_test(test_core_gcra_fractional_rate),
		cmocka_unit_test(test_core_gcra_one_per_hour),
		cmocka_unit_test(test_core_gcra_ten_giga_per_second),
		cmocka_unit_test(test_core_gcra_time_backwards),
		cmocka_unit_test(test_core_gcra_overflow),
		cmocka_unit_test(test_core_gcra_refund_available),
		cmocka_unit_test(test_core_gcra_init_errors),
		cmocka_unit_test(test_core_gcra_matches_model),
		cmocka_unit_test(test_core_gcra_matches_model_edges),
		cmocka_unit_test(test_core_gcra_epoch_near_wrap),
		cmocka_unit_test(test_core_gcra_cost_beyond_2_63),
		cmocka_unit_test(test_core_gcra_validate_fast_fields),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
