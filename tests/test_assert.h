/* SPDX-License-Identifier: MIT */
/*
 * test_assert.h - assert_dec_equal(a, b): cmocka's assert_int_equal, but a
 * failure prints both expressions and both values in decimal.
 *
 * cmocka 1.1.5 prints a failed assert_int_equal as "0x5f5e100 != 0x5f5e0ff":
 * nanosecond figures are unreadable that way. This one prints
 *   tests/test_x.c:42: d.wait_ns == 250 * MS: 250000001 != 250000000
 * (expression text, then the actual and expected values).
 *
 * The comparison and the printing follow the type of (a) + (b), the usual
 * arithmetic conversions: unsigned if either side is an unsigned type at
 * least as wide as int (so UINT64_MAX prints as 18446744073709551615),
 * signed otherwise (so -1 prints as -1). Include it after <cmocka.h>.
 */
#ifndef SLUICE_TEST_ASSERT_H
#define SLUICE_TEST_ASSERT_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Write "EXPR_A == EXPR_B: A != B" into buf (the message of a failure). */
static inline void sl_test_dec_message(char *buf, size_t len, const char *ea, const char *eb,
				       bool is_signed, uintmax_t a, uintmax_t b)
{
	if (is_signed)
		snprintf(buf, len, "%s == %s: %" PRIdMAX " != %" PRIdMAX, ea, eb, (intmax_t)a,
			 (intmax_t)b);
	else
		snprintf(buf, len, "%s == %s: %" PRIuMAX " != %" PRIuMAX, ea, eb, a, b);
}

static inline void sl_test_dec_equal(const char *ea, const char *eb, bool is_signed, uintmax_t a,
				     uintmax_t b, const char *file, int line)
{
	if (a == b)
		return;
	char msg[512];
	sl_test_dec_message(msg, sizeof(msg), ea, eb, is_signed, a, b);
	print_error("%s:%d: %s\n", file, line, msg);
	_fail(file, line);
}

/* clang-format 14 cannot lay out _Generic. */
/* clang-format off */
#define SL_TEST_IS_SIGNED(x) \
	_Generic((x), unsigned int: false, unsigned long: false, unsigned long long: false, \
		 default: true)
/* clang-format on */

#define assert_dec_equal(a, b)                                                                     \
	sl_test_dec_equal(#a, #b, SL_TEST_IS_SIGNED((a) + (b)), (uintmax_t)(a), (uintmax_t)(b),    \
			  __FILE__, __LINE__)

#endif /* SLUICE_TEST_ASSERT_H */
