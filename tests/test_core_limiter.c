/* SPDX-License-Identifier: MIT */
/*
 * test_core_limiter.c - the generic limiter (core/limiter.c): init from
 * struct sl_params and its errors, dispatch to every kind, release/refund
 * rules, charge (debt) for every kind, names, and sl_limiter_validate() on
 * corrupt and random memory.
 */
#include "test_core.h"

/* One valid limiter of each kind, initialised at `now`. */
static const struct sl_params valid[] = {
	{.kind = SL_KIND_TOKEN, .amount = 4, .period_ns = MS, .burst = 2},
	{.kind = SL_KIND_LEAKY, .amount = 4, .period_ns = MS, .burst = 3},
	{.kind = SL_KIND_FIXED, .amount = 3, .period_ns = 1000},
	{.kind = SL_KIND_SLIDING, .amount = 10, .period_ns = 1000},
	{.kind = SL_KIND_CONC, .amount = 3},
	{.kind = SL_KIND_WARMUP,
	 .cold = 3,
	 .amount = 4,
	 .period_ns = MS,
	 .burst = 2,
	 .warmup_ns = 100 * MS},
};
#define NVALID (sizeof(valid) / sizeof(valid[0]))

static void test_core_limiter_dispatch(void **state)
{
	(void)state;
	struct sl_limiter l;
	struct sl_params p = params(SL_KIND_TOKEN, 4, MS, 2);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	assert_dec_equal(l.magic, SL_LIMITER_MAGIC);
	expect_decision(sl_limiter_acquire(&l, 2, 0, 0), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&l, 1, 0, 0), SL_REFUSE, 250000);
	expect_decision(sl_limiter_acquire(&l, 1, 0, UINT64_MAX), SL_ADMIT, 250000);
	assert_dec_equal(sl_limiter_refund(&l, 1, 0), SL_OK);
	assert_dec_equal(sl_limiter_available(&l, 250000), 1);
	assert_dec_equal(sl_limiter_release(&l, 1), SL_EINVAL);

	p = params(SL_KIND_LEAKY, 4, MS, 0);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	expect_decision(sl_limiter_acquire(&l, 1, 0, UINT64_MAX), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&l, 1, 0, UINT64_MAX), SL_ADMIT, 250000);
	assert_dec_equal(sl_limiter_available(&l, 0), 0);

	p = params(SL_KIND_FIXED, 3, 1000, 0);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	expect_decision(sl_limiter_acquire(&l, 3, 0, 0), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&l, 1, 10, UINT64_MAX), SL_ADMIT, 990);
	assert_dec_equal(sl_limiter_refund(&l, 1, 1000), SL_OK);
	assert_dec_equal(sl_limiter_available(&l, 1000), 3);

	/* Sliding windows police whatever max_wait_ns says. */
	p = params(SL_KIND_SLIDING, 10, 1000, 0);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	expect_decision(sl_limiter_acquire(&l, 10, 0, UINT64_MAX), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&l, 1, 0, UINT64_MAX), SL_REFUSE, 1100);
	assert_dec_equal(sl_limiter_refund(&l, 4, 0), SL_OK);
	assert_dec_equal(sl_limiter_available(&l, 0), 4);

	/* Concurrency: refund is release; period and burst are ignored. */
	p = params(SL_KIND_CONC, 2, 0, 0);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	expect_decision(sl_limiter_acquire(&l, 2, 0, UINT64_MAX), SL_ADMIT, 0);
	expect_decision(sl_limiter_acquire(&l, 1, 0, UINT64_MAX), SL_REFUSE, 0);
	assert_dec_equal(sl_limiter_available(&l, 0), 0);
	assert_dec_equal(sl_limiter_release(&l, 1), SL_OK);
	assert_dec_equal(sl_limiter_refund(&l, 1, 0), SL_OK);
	assert_dec_equal(sl_limiter_refund(&l, 1, 0), SL_EUNDERFLOW);
	assert_dec_equal(sl_limiter_available(&l, 0), 2);
}

/* Charge: units already used (bytes already received) are taken as debt,
 * whatever the limiter would have said. */
static void test_core_limiter_charge(void **state)
{
	(void)state;
	struct sl_limiter l;
	/* Token bucket, 1000 units/s, burst 1000: 3000 charged at t = 0 put the
	 * next slot 3 s ahead; the burst lets one unit act 1 s before it. */
	struct sl_params p = params(SL_KIND_TOKEN, 1000, SEC, 1000);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	assert_dec_equal(sl_limiter_charge(&l, 3000, 0), SL_OK);
	expect_decision(sl_limiter_acquire(&l, 1, 0, 0), SL_REFUSE, 2001 * MS);
	assert_dec_equal(sl_limiter_available(&l, 2001 * MS - 1), 0);
	expect_decision(sl_limiter_acquire(&l, 1, 2001 * MS, 0), SL_ADMIT, 0);
	assert_dec_equal(sl_limiter_available(&l, 3 * SEC), 999);
	/* Charged from now, not from an old slot: after idling, 500 units
	 * leave half the burst. n == 0 changes nothing. */
	assert_dec_equal(sl_limiter_charge(&l, 500, 10 * SEC), SL_OK);
	assert_dec_equal(sl_limiter_available(&l, 10 * SEC), 500);
	assert_dec_equal(sl_limiter_charge(&l, 0, 10 * SEC), SL_OK);
	assert_dec_equal(sl_limiter_available(&l, 10 * SEC), 500);
	/* Saturates at the horizon: everything after is never. */
	assert_dec_equal(sl_limiter_charge(&l, UINT64_MAX, 10 * SEC), SL_OK);
	assert_dec_equal(sl_limiter_charge(&l, 1, 10 * SEC), SL_OK);
	expect_decision(sl_limiter_acquire(&l, 1, 10 * SEC, UINT64_MAX), SL_NEVER, UINT64_MAX);
	assert_true(sl_limiter_validate(&l));

	/* Leaky bucket, 1000/s, capacity 10: the 3 s of debt keep even a
	 * reservation out until its slot is within the capacity. */
	p = params(SL_KIND_LEAKY, 1000, SEC, 10);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	assert_dec_equal(sl_limiter_charge(&l, 3000, 0), SL_OK);
	expect_decision(sl_limiter_acquire(&l, 1, 0, 0), SL_REFUSE, 3 * SEC);
	expect_decision(sl_limiter_acquire(&l, 1, 0, UINT64_MAX), SL_REFUSE, 2991 * MS);
	expect_decision(sl_limiter_acquire(&l, 1, 2991 * MS, UINT64_MAX), SL_ADMIT, 9 * MS);

	/* Fixed window, 3 per 1000 ns: 7 charged fill windows 0 and 1 and one
	 * unit of window 2. */
	p = params(SL_KIND_FIXED, 3, 1000, 0);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	assert_dec_equal(sl_limiter_charge(&l, 7, 0), SL_OK);
	expect_decision(sl_limiter_acquire(&l, 1, 0, UINT64_MAX), SL_ADMIT, 2000);
	assert_dec_equal(sl_limiter_available(&l, 2000), 1);

	/* Sliding window, 10 per 1000 ns: the count saturates at a full
	 * window. */
	p = params(SL_KIND_SLIDING, 10, 1000, 0);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	assert_dec_equal(sl_limiter_charge(&l, 25, 0), SL_OK);
	expect_decision(sl_limiter_acquire(&l, 1, 0, UINT64_MAX), SL_REFUSE, 1100);
	assert_dec_equal(sl_limiter_available(&l, 2000), 10);
	assert_true(sl_limiter_validate(&l));

	/* Concurrency holds units rather than spending them: no debt. */
	p = params(SL_KIND_CONC, 2, 0, 0);
	assert_dec_equal(sl_limiter_init(&l, &p, 0), SL_OK);
	assert_dec_equal(sl_limiter_charge(&l, 1, 0), SL_EINVAL);
	assert_dec_equal(sl_limiter_available(&l, 0), 2);
	memset(&l, 0, sizeof(l));
	assert_dec_equal(sl_limiter_charge(&l, 1, 0), SL_EINVAL);
}

static void test_core_limiter_init_errors(void **state)
{
	(void)state;
	struct sl_limiter l;
	const struct {
		struct sl_params p;
		enum sl_status want;
	} cases[] = {
		{{.kind = SL_KIND_NONE, .amount = 1, .period_ns = 1, .burst = 1}, SL_EINVAL},
		{{.kind = 6, .amount = 1, .period_ns = 1, .burst = 1}, SL_EINVAL},
		{{.kind = UINT32_MAX, .amount = 1, .period_ns = 1, .burst = 1}, SL_EINVAL},
		{{.kind = SL_KIND_TOKEN, .amount = 0, .period_ns = 1, .burst = 1}, SL_EINVAL},
		{{.kind = SL_KIND_TOKEN, .amount = 1, .period_ns = 0, .burst = 1}, SL_EINVAL},
		{{.kind = SL_KIND_TOKEN, .amount = 1, .period_ns = 1, .burst = 0}, SL_EINVAL},
		{{.kind = SL_KIND_TOKEN, .amount = 1, .period_ns = UINT64_MAX, .burst = 1},
		 SL_ERANGE},
		{{.kind = SL_KIND_TOKEN, .amount = 1, .period_ns = SEC, .burst = UINT64_MAX},
		 SL_ERANGE},
		{{.kind = SL_KIND_LEAKY, .amount = 0, .period_ns = 1, .burst = 0}, SL_EINVAL},
		{{.kind = SL_KIND_LEAKY, .amount = 1, .period_ns = SEC, .burst = UINT64_MAX},
		 SL_ERANGE},
		{{.kind = SL_KIND_FIXED, .amount = 0, .period_ns = 1}, SL_EINVAL},
		{{.kind = SL_KIND_FIXED, .amount = 1, .period_ns = 0}, SL_EINVAL},
		{{.kind = SL_KIND_FIXED, .amount = UINT64_MAX, .period_ns = 1}, SL_ERANGE},
		{{.kind = SL_KIND_SLIDING, .amount = 0, .period_ns = 1}, SL_EINVAL},
		{{.kind = SL_KIND_SLIDING, .amount = 1, .period_ns = 0}, SL_EINVAL},
		{{.kind = SL_KIND_CONC, .amount = 0}, SL_EINVAL},
		{{.kind = SL_KIND_TOKEN, .amount = 1, .period_ns = 3600 * SEC, .burst = 1}, SL_OK},
		{{.kind = SL_KIND_TOKEN, .amount = 10000000000ull, .period_ns = SEC, .burst = 1},
		 SL_OK},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&l, 0xa5, sizeof(l));
		enum sl_status st = sl_limiter_init(&l, &cases[i].p, 0);
		if (st != cases[i].want)
			fail_msg("case %zu: init gave %s, want %s", i, sl_status_name(st),
				 sl_status_name(cases[i].want));
		/* A failed init leaves no magic: the limiter is never valid. */
		assert_dec_equal(l.magic == SL_LIMITER_MAGIC, st == SL_OK);
		assert_dec_equal(sl_limiter_validate(&l), st == SL_OK);
	}
}

static void test_core_limiter_names(void **state)
{
	(void)state;
	assert_string_equal(sl_status_name(SL_OK), "ok");
	assert_string_equal(sl_status_name(SL_EINVAL), "invalid argument");
	assert_string_equal(sl_status_name(SL_ERANGE), "out of range");
	assert_string_equal(sl_status_name(SL_EUNDERFLOW), "underflow");
	assert_string_equal(sl_status_name((enum sl_status)99), "unknown status");
	assert_string_equal(sl_kind_name(SL_KIND_NONE), "none");
	assert_string_equal(sl_kind_name(SL_KIND_TOKEN), "token");
	assert_string_equal(sl_kind_name(SL_KIND_LEAKY), "leaky");
	assert_string_equal(sl_kind_name(SL_KIND_FIXED), "fixed");
	assert_string_equal(sl_kind_name(SL_KIND_SLIDING), "sliding");
	assert_string_equal(sl_kind_name(SL_KIND_CONC), "concurrency");
	assert_string_equal(sl_kind_name((enum sl_kind)99), "unknown");
}

/* Every parameter word of every kind, overwritten, makes validate fail. */
static void test_core_limiter_validate_corrupt(void **state)
{
	(void)state;
	for (size_t k = 0; k < NVALID; k++) {
		struct sl_limiter good;
		assert_dec_equal(sl_limiter_init(&good, &valid[k], 12345), SL_OK);
		assert_true(sl_limiter_validate(&good));
		/* Corrupt each 32-bit word of the header and the parameter
		 * block (the first 64 bytes of the union) in turn. */
		for (size_t off = 0; off < 128; off += 4) {
			if (off >= 64 + 24 && off < 64 + 32 && k < 2)
				continue; /* sl_gcra.epoch_ns: any value is valid */
			if (off >= 64 + 16 && off < 64 + 24 && (k == 2 || k == 3))
				continue; /* sl_fixed/sl_sliding.epoch_ns */
			if (off >= 8 + 40 && off < 64)
				continue; /* header padding */
			if (off >= 64 + 32 && off < 64 + 40 && k == 5)
				continue; /* sl_warm.epoch_ns */
			if (off >= 64 + 60 && k == 5)
				continue; /* sl_warm.reserved */
			if (off >= 64 + 52 && off < 64 + 56 && k < 2)
				continue; /* sl_gcra.reserved */
			if (off >= 64 + 40 && k == 3)
				continue; /* sl_sliding.reserved */
			if (off >= 64 + 24 && k == 2)
				continue; /* sl_fixed.reserved */
			if (off >= 64 + 8 && k == 4)
				continue; /* sl_conc.reserved */
			if (off == 12)
				continue; /* sl_params.reserved */
			if (off >= 16 + 24 - 8 && off < 40 && k >= 2)
				continue; /* params.burst is unused by windows and conc */
			if (off >= 24 && off < 32 && k == 4)
				continue; /* params.period_ns is unused by conc */
			struct sl_limiter bad = good;
			uint32_t word;
			memcpy(&word, (unsigned char *)&bad + off, 4);
			word ^= 0x00010001u;
			memcpy((unsigned char *)&bad + off, &word, 4);
			if (sl_limiter_validate(&bad))
				fail_msg("kind %s: corrupt word at offset %zu still valid",
					 sl_kind_name(valid[k].kind), off);
		}
	}
	/* Corrupt state words that operations can never produce. */
	struct sl_limiter l;
	assert_dec_equal(sl_limiter_init(&l, &valid[4], 0), SL_OK);
	atomic_store(&l.u.conc.held, 4);
	assert_false(sl_limiter_validate(&l));
	assert_dec_equal(sl_limiter_available(&l, 0), 0);
	assert_dec_equal(sl_limiter_init(&l, &valid[3], 0), SL_OK);
	atomic_store(&l.u.sliding.state, 11);
	assert_false(sl_limiter_validate(&l));
	atomic_store(&l.u.sliding.state, 11ull << 20);
	assert_false(sl_limiter_validate(&l));
	atomic_store(&l.u.sliding.state, (5ull << 40) | (10ull << 20) | 10);
	assert_true(sl_limiter_validate(&l));
}

/* A reproducible stream of garbage (64-bit LCG, high bits folded in). */
static uint64_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s ^ (*s >> 29);
}

/* Random memory, with the magic and kind forced half of the time, never
 * validates by accident; and whatever does validate (a valid limiter with a
 * random state word) can be used without crashing (ASan/UBSan check that
 * there is no division by zero, bad shift or overflow). */
static void test_core_limiter_validate_garbage(void **state)
{
	(void)state;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 20000; i++) {
		struct sl_limiter l;
		uint64_t *w = (uint64_t *)(void *)&l;
		for (size_t j = 0; j < sizeof(l) / 8; j++)
			w[j] = rnd(&seed);
		if (i & 1) {
			l.magic = SL_LIMITER_MAGIC;
			l.kind = l.params.kind = 1 + (uint32_t)(rnd(&seed) % 5);
		}
		assert_false(sl_limiter_validate(&l));
		/* The generic calls on garbage must not crash either, as long
		 * as the kind is unknown (dispatch is the only check). */
		l.kind = SL_KIND_WARMUP + 1 + (uint32_t)(rnd(&seed) % 1000);
		expect_decision(sl_limiter_acquire(&l, 1, 0, 0), SL_NEVER, UINT64_MAX);
		assert_dec_equal(sl_limiter_available(&l, 0), 0);
		assert_dec_equal(sl_limiter_refund(&l, 1, 0), SL_EINVAL);
	}
	for (int i = 0; i < 20000; i++) {
		struct sl_limiter l;
		assert_dec_equal(sl_limiter_init(&l, &valid[i % NVALID], rnd(&seed)), SL_OK);
		atomic_store(&l.u.gcra.tat, rnd(&seed));
		if (!sl_limiter_validate(&l))
			continue;
		const uint64_t now = rnd(&seed), n = rnd(&seed) >> (rnd(&seed) % 64);
		struct sl_decision d = sl_limiter_acquire(&l, n, now,
							  rnd(&seed) >> (rnd(&seed) % 64));
		assert_true(d.verdict <= SL_NEVER);
		(void)sl_limiter_available(&l, now);
		(void)sl_limiter_refund(&l, n, now);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_core_limiter_dispatch),
		cmocka_unit_test(test_core_limiter_charge),
		cmocka_unit_test(test_core_limiter_init_errors),
		cmocka_unit_test(test_core_limiter_names),
		cmocka_unit_test(test_core_limiter_validate_corrupt),
		cmocka_unit_test(test_core_limiter_validate_garbage),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
