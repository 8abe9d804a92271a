/* SPDX-License-Identifier: MIT */
/*
 * test_core.h - what the core's unit tests share: cmocka's headers in the
 * order it needs, time units, the police/reserve waits, limiter parameters,
 * and one assertion for a decision that prints both values, in decimal, on
 * failure.
 */
#ifndef SLUICE_TEST_CORE_H
#define SLUICE_TEST_CORE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_assert.h"

#include "sluice_core.h"

#define MS 1000000ull
#define SEC 1000000000ull
#define HOUR (3600ull * SEC)
#define POLICE 0ull
#define RESERVE UINT64_MAX

/* Limiter parameters of a kind, rate amount per period_ns, and burst. */
static inline struct sl_params params(uint32_t kind, uint64_t amount, uint64_t period_ns,
				      uint64_t burst)
{
	struct sl_params p = {.kind = kind,
			      .amount = amount,
			      .period_ns = period_ns,
			      .burst = burst};
	return p;
}

/* Expect a decision: verdict and wait; a failure prints both values and
 * the line of the call. */
#define expect_decision(d, want_verdict, want_wait_ns)                                             \
	do {                                                                                       \
		const struct sl_decision d_ = (d);                                                 \
		assert_dec_equal(d_.verdict, (want_verdict));                                      \
		assert_dec_equal(d_.wait_ns, (want_wait_ns));                                      \
	} while (0)

#endif /* SLUICE_TEST_CORE_H */
