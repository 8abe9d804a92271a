/* SPDX-License-Identifier: MIT */
/*
 * lex.c - numbers, units and durations of the rule language.
 *
 *   NUMBER   := DIGITS [ '.' DIGITS ]              no sign, no exponent
 *   AMOUNT   := NUMBER [ B | KB | MB | GB | KiB | MiB | GiB ]
 *   DURATION := NUMBER ( us | ms | s | min | h )
 *
 * Numbers are read digit by digit into an integer mantissa and a count of
 * decimal places, with an overflow check at every digit: no strtod, no
 * locale, no rounding. A decimal must name a whole number of the base unit
 * (bytes, calls, nanoseconds): 2.5MB is 2500000 bytes, 1.5B is refused. The
 * product mantissa * unit / 10^places is computed exactly by first dividing
 * out the common factor of unit and 10^places, so it never overflows unless
 * the result itself does.
 */
#include <string.h>

#include "internal.h"

struct unit {
	const char *name;
	uint64_t factor;
};

static const struct unit byte_units[] = {
	{"B", 1},
	{"KB", 1000ull},
	{"KiB", 1024ull},
	{"MB", 1000000ull},
	{"MiB", 1024ull * 1024},
	{"GB", 1000000000ull},
	{"GiB", 1024ull * 1024 * 1024},
};
#define BYTE_UNITS_EXPECTED "B, KB, KiB, MB, MiB, GB, GiB"

static const struct unit period_units[] = {
	{"us", SL__NS_PER_US},      {"ms", SL__NS_PER_MS},      {"s", SL__NS_PER_S},
	{"min", 60 * SL__NS_PER_S}, {"h", 3600 * SL__NS_PER_S},
};
#define PERIOD_UNITS_EXPECTED "us, ms, s, min, h"

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static bool is_letter(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static const struct unit *unit_lookup(const struct unit *t, size_t n, const char *s, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(t[i].name) == len && memcmp(t[i].name, s, len) == 0)
			return &t[i];
	return NULL;
}

/* End of the run of digits and dots starting at pos (for quoting). */
static size_t number_text_end(const char *s, size_t pos, size_t end)
{
	while (pos < end && (is_digit(s[pos]) || s[pos] == '.'))
		pos++;
	return pos;
}

static bool add_digit(uint64_t *m, char ch)
{
	uint64_t d = (uint64_t)(ch - '0');
	if (*m > (UINT64_MAX - d) / 10)
		return false;
	*m = *m * 10 + d;
	return true;
}

/*
 * Parse NUMBER at s[pos, end) into *n. Errors: a sign, no digit, a point
 * without digits on both sides, more than 64 bits of digits, more than 19
 * significant decimal places. Returns 0 or -1 (message in c->err).
 */
int sl__num_parse(const struct sl__ctx *c, size_t pos, size_t end, struct sl__num *n)
{
	const char *s = c->value;
	size_t i = pos;

	n->mant = 0;
	n->frac = 0;
	n->pos = pos;
	if (i < end && s[i] == '-')
		return sl__fail(c, pos,
				"negative number '%.*s' (only positive numbers are allowed)",
				SL__TOK(c, pos, number_text_end(s, pos + 1, end)));
	if (i < end && s[i] == '.')
		return sl__fail(c, pos, "expected a digit before '.' (write 0.5, not .5)");
	if (i >= end)
		return sl__fail(c, pos, "expected a number");
	if (!is_digit(s[i]))
		return sl__fail(c, pos, "expected a number, found '%.*s'", SL__TOK(c, pos, end));
	for (; i < end && is_digit(s[i]); i++)
		if (!add_digit(&n->mant, s[i]))
			return sl__fail(c, pos, "number '%.*s' is too large",
					SL__TOK(c, pos, number_text_end(s, pos, end)));
	if (i < end && s[i] == '.') {
		i++;
		if (i >= end || !is_digit(s[i]))
			return sl__fail(c, i, "expected a digit after '.'");
		for (; i < end && is_digit(s[i]); i++) {
			if (!add_digit(&n->mant, s[i]))
				return sl__fail(c, pos, "number '%.*s' has too many digits",
						SL__TOK(c, pos, number_text_end(s, pos, end)));
			n->frac++;
		}
	}
	if (i < end && s[i] == '.')
		return sl__fail(c, i, "unexpected second '.' in '%.*s'",
				SL__TOK(c, pos, number_text_end(s, pos, end)));
	while (n->frac > 0 && n->mant % 10 == 0) {
		n->mant /= 10;
		n->frac--;
	}
	if (n->frac > 19)
		return sl__fail(c, pos, "number '%.*s' has too many decimal places",
				SL__TOK(c, pos, i));
	n->end = i;
	return 0;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
	while (b != 0) {
		uint64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

int sl__num_scale(const struct sl__ctx *c, const struct sl__num *n, uint64_t scale, size_t end,
		  const char *what, uint64_t *out)
{
	uint64_t den = 1;

	for (uint32_t i = 0; i < n->frac; i++)
		den *= 10; /* frac <= 19: fits */
	uint64_t g = gcd(scale, den);
	uint64_t num_f = scale / g, den_f = den / g;
	if (n->mant % den_f != 0)
		return sl__fail(c, n->pos, "'%.*s' is not a whole number of %s",
				SL__TOK(c, n->pos, end), what);
	uint64_t q = n->mant / den_f;
	if (num_f != 0 && q > UINT64_MAX / num_f)
		return sl__fail(c, n->pos, "'%.*s' is too large (more than 2^64 %s)",
				SL__TOK(c, n->pos, end), what);
	*out = q * num_f;
	return 0;
}

int sl__amount_parse(const struct sl__ctx *c, size_t pos, size_t end, uint64_t *amount,
		     enum sl_unit *unit, size_t *next)
{
	const char *s = c->value;
	struct sl__num n;

	if (sl__num_parse(c, pos, end, &n) < 0)
		return -1;
	size_t u = n.end, ue = u;
	while (ue < end && is_letter(s[ue]))
		ue++;
	*next = ue;
	if (ue == u) {
		*unit = SL_UNIT_CALLS;
		return sl__num_scale(c, &n, 1, ue, "calls", amount);
	}
	const struct unit *bu = unit_lookup(byte_units, sizeof byte_units / sizeof byte_units[0],
					    s + u, ue - u);
	if (bu == NULL)
		return sl__fail(c, u, "unknown unit '%.*s' (expected " BYTE_UNITS_EXPECTED ")",
				SL__TOK(c, u, ue));
	*unit = SL_UNIT_BYTES;
	return sl__num_scale(c, &n, bu->factor, ue, "bytes", amount);
}

int sl__period_unit_parse(const struct sl__ctx *c, size_t pos, size_t end, uint64_t *unit_ns,
			  size_t *next)
{
	const char *s = c->value;
	size_t ue = pos;

	while (ue < end && is_letter(s[ue]))
		ue++;
	if (ue == pos) {
		if (pos < end)
			return sl__fail(c, pos,
					"expected a period unit (" PERIOD_UNITS_EXPECTED
					"), found '%.*s'",
					SL__TOK(c, pos, end));
		return sl__fail(c, pos, "expected a period unit (" PERIOD_UNITS_EXPECTED ")");
	}
	const struct unit *pu = unit_lookup(period_units,
					    sizeof period_units / sizeof period_units[0], s + pos,
					    ue - pos);
	if (pu == NULL)
		return sl__fail(c, pos,
				"unknown period '%.*s' (expected " PERIOD_UNITS_EXPECTED ")",
				SL__TOK(c, pos, ue));
	*unit_ns = pu->factor;
	*next = ue;
	return 0;
}

int sl__duration_parse(const struct sl__ctx *c, size_t pos, size_t end, uint64_t *ns)
{
	struct sl__num n;
	uint64_t unit_ns;
	size_t next;

	if (sl__num_parse(c, pos, end, &n) < 0)
		return -1;
	if (n.end == end)
		return sl__fail(c, n.end,
				"missing unit after '%.*s' (expected " PERIOD_UNITS_EXPECTED ")",
				SL__TOK(c, pos, end));
	if (sl__period_unit_parse(c, n.end, end, &unit_ns, &next) < 0)
		return -1;
	if (next != end)
		return sl__fail(c, next, "unexpected '%.*s' after the duration",
				SL__TOK(c, next, end));
	return sl__num_scale(c, &n, unit_ns, end, "nanoseconds", ns);
}

uint64_t sl__worth(uint64_t amount, uint64_t period_ns, uint64_t t_ns)
{
	/* 128-bit intermediate: amount * t_ns needs up to 128 bits. */
	__extension__ typedef unsigned __int128 u128;
	if (period_ns == 0)
		return UINT64_MAX;
	u128 x = ((u128)amount * t_ns + period_ns - 1) / period_ns;
	return x > UINT64_MAX ? UINT64_MAX : (uint64_t)x;
}
