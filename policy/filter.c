/* SPDX-License-Identifier: MIT */
/*
 * filter.c - the filter options: to=CIDR[:PORT], port=N[-M], family= and
 * type= lists.
 *
 *   to=10.0.0.0/8          IPv4 network; to=127.0.0.1 is one host (/32)
 *   to=10.0.0.0/8:443      and a port
 *   to=::1, to=fe80::/10   IPv6 without a port
 *   to=[::1]:8080          IPv6 with a port needs brackets, or a prefix
 *   to=::1/128:8080        before the port; in brackets the prefix may sit
 *   to=[fe80::/10]:443     inside or after them: [fe80::]/10:443
 *
 * Addresses are parsed here rather than by inet_pton so that every mistake
 * gets its own message and column, and so that no libc call can touch errno.
 * IPv4 parts with a leading zero are refused (some tools read 010 as octal).
 * A network with bits set past its prefix (10.1.0.0/8) is refused with the
 * network it probably meant, rather than silently masked.
 */
#include <string.h>

#include "internal.h"

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

static int hex_value(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

static bool has_letter(const char *s, size_t pos, size_t end)
{
	for (; pos < end; pos++)
		if ((s[pos] >= 'a' && s[pos] <= 'z') || (s[pos] >= 'A' && s[pos] <= 'Z'))
			return true;
	return false;
}

enum v4_result { V4_OK, V4_BAD, V4_LEADING_ZERO };

/* Dotted quad filling s[pos, end). */
static enum v4_result parse_v4(const char *s, size_t pos, size_t end, uint8_t out[4])
{
	size_t i = pos;

	for (int k = 0; k < 4; k++) {
		if (k > 0) {
			if (i >= end || s[i] != '.')
				return V4_BAD;
			i++;
		}
		size_t start = i;
		unsigned v = 0;
		while (i < end && is_digit(s[i]) && i - start < 3)
			v = v * 10 + (unsigned)(s[i++] - '0');
		if (i == start || v > 255 || (i < end && is_digit(s[i])))
			return V4_BAD;
		if (i - start > 1 && s[start] == '0')
			return V4_LEADING_ZERO;
		out[k] = (uint8_t)v;
	}
	return i == end ? V4_OK : V4_BAD;
}

/* One group of 1-4 hex digits in s[i, seg_end), or -1. */
static long hex_group(const char *s, size_t i, size_t seg_end)
{
	long v = 0;

	if (seg_end == i || seg_end - i > 4)
		return -1;
	for (; i < seg_end; i++) {
		int h = hex_value(s[i]);
		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

/* RFC 4291 text form filling s[pos, end): groups, one "::", and an optional
 * dotted IPv4 tail. Returns false if malformed. */
static bool parse_v6(const char *s, size_t pos, size_t end, uint8_t out[16])
{
	uint16_t w[8] = {0};
	int n = 0, gap = -1;
	size_t i = pos;

	if (end - pos >= 2 && s[i] == ':' && s[i + 1] == ':') {
		gap = 0;
		i += 2;
	} else if (i < end && s[i] == ':') {
		return false;
	}
	while (i < end) {
		size_t seg_end = sl__find(s, i, end, ':');
		if (n == 8)
			return false;
		if (sl__find(s, i, seg_end, '.') < seg_end) {
			uint8_t v4[4];
			if (n > 6 || seg_end != end || parse_v4(s, i, end, v4) != V4_OK)
				return false;
			w[n++] = (uint16_t)(v4[0] << 8 | v4[1]);
			w[n++] = (uint16_t)(v4[2] << 8 | v4[3]);
			i = end;
			break;
		}
		long g = hex_group(s, i, seg_end);
		if (g < 0)
			return false;
		w[n++] = (uint16_t)g;
		i = seg_end;
		if (i == end)
			break;
		i++; /* ':' */
		if (i < end && s[i] == ':') {
			if (gap >= 0)
				return false;
			gap = n;
			i++;
		} else if (i == end) {
			return false;
		}
	}
	if ((gap < 0 && n != 8) || (gap >= 0 && n == 8))
		return false;
	uint16_t full[8] = {0};
	int tail = gap < 0 ? 0 : n - gap;
	for (int k = 0; k < n - tail; k++)
		full[k] = w[k];
	for (int k = 0; k < tail; k++)
		full[8 - tail + k] = w[gap + k];
	for (int k = 0; k < 8; k++) {
		out[2 * k] = (uint8_t)(full[k] >> 8);
		out[2 * k + 1] = (uint8_t)full[k];
	}
	return true;
}

/* Decimal s[pos, end) in [lo, hi], or -1. */
static long small_number(const char *s, size_t pos, size_t end, long lo, long hi)
{
	long v = 0;

	if (pos == end || end - pos > 5)
		return -1;
	for (size_t i = pos; i < end; i++) {
		if (!is_digit(s[i]))
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v >= lo && v <= hi ? v : -1;
}

static int parse_port(const struct sl__ctx *c, size_t pos, size_t end, uint16_t *port)
{
	long v = small_number(c->value, pos, end, 1, 65535);

	if (pos == end)
		return sl__fail(c, pos, "expected a port number (1-65535)");
	if (v < 0)
		return sl__fail(c, pos, "bad port '%.*s' (expected 1-65535)", SL__TOK(c, pos, end));
	*port = (uint16_t)v;
	return 0;
}

/* "/P" at s[slash, end): prefix length up to max bits. */
static int parse_prefix(const struct sl__ctx *c, size_t slash, size_t end, unsigned max,
			struct sl_cidr *to)
{
	long v = small_number(c->value, slash + 1, end, 0, (long)max);

	if (slash + 1 == end)
		return sl__fail(c, slash, "missing prefix length after '/'");
	if (v < 0)
		return sl__fail(c, slash, "bad prefix length '%.*s' (expected /0 to /%u for IPv%u)",
				SL__TOK(c, slash, end), max, to->family);
	to->prefix = (uint8_t)v;
	return 0;
}

static int fail_v4(const struct sl__ctx *c, size_t pos, size_t end, enum v4_result r)
{
	if (r == V4_LEADING_ZERO)
		return sl__fail(c, pos, "bad IPv4 address '%.*s': a part has a leading zero",
				SL__TOK(c, pos, end));
	return sl__fail(c, pos,
			"bad IPv4 address '%.*s' (expected four numbers 0-255 separated by dots)",
			SL__TOK(c, pos, end));
}

/* A network must not have host bits: 10.1.0.0/8 is refused, naming
 * 10.0.0.0/8. */
static int check_host_bits(const struct sl__ctx *c, size_t pos, size_t end, struct sl_cidr *to)
{
	struct sl_cidr net = *to;
	unsigned bytes = to->family == 4 ? 4 : 16;
	bool clean = true;

	for (unsigned b = 0; b < bytes; b++) {
		unsigned first_bit = b * 8;
		uint8_t mask = first_bit >= to->prefix ? 0
			       : to->prefix - first_bit >= 8
				       ? 0xff
				       : (uint8_t)(0xff << (8 - (to->prefix - first_bit)));
		net.addr[b] = to->addr[b] & mask;
		clean = clean && net.addr[b] == to->addr[b];
	}
	if (clean)
		return 0;
	char want[64];
	struct sl__out o;
	sl__out_init(&o, want, sizeof want);
	sl__out_cidr(&o, &net);
	return sl__fail(c, pos, "'%.*s' has bits set past the /%u prefix (did you mean %s?)",
			SL__TOK(c, pos, end), to->prefix, want);
}

static int parse_bracketed(const struct sl__ctx *c, size_t pos, size_t end, struct sl_cidr *to,
			   uint16_t *port)
{
	const char *s = c->value;
	size_t close = sl__find(s, pos, end, ']');

	if (close == end)
		return sl__fail(c, pos, "missing ']' after the IPv6 address");
	size_t slash = sl__find(s, pos + 1, close, '/');
	if (!parse_v6(s, pos + 1, slash, to->addr))
		return sl__fail(c, pos + 1, "bad IPv6 address '%.*s'", SL__TOK(c, pos + 1, slash));
	if (slash < close && parse_prefix(c, slash, close, 128, to) < 0)
		return -1;
	size_t i = close + 1;
	if (i < end && s[i] == '/' && slash == close) {
		size_t pend = sl__find(s, i, end, ':');
		if (parse_prefix(c, i, pend, 128, to) < 0)
			return -1;
		i = pend;
	}
	if (i < end && s[i] != ':')
		return sl__fail(c, i,
				"unexpected '%.*s' after the IPv6 address (expected ':' and a port)",
				SL__TOK(c, i, end));
	if (i < end && parse_port(c, i + 1, end, port) < 0)
		return -1;
	return 0;
}

int sl__cidr_parse(const struct sl__ctx *c, size_t pos, size_t end, struct sl_cidr *to,
		   uint16_t *port)
{
	const char *s = c->value;
	size_t colon = sl__find(s, pos, end, ':');

	memset(to, 0, sizeof *to);
	*port = 0;
	if (pos == end)
		return sl__fail(c, pos,
				"expected an address (e.g. to=10.0.0.0/8:443 or to=[::1]:8080)");
	if (s[pos] == '[') {
		to->family = 6;
		to->prefix = 128;
		if (parse_bracketed(c, pos, end, to, port) < 0)
			return -1;
	} else if (colon == end || sl__find(s, pos, colon, '.') < colon) {
		to->family = 4;
		to->prefix = 32;
		size_t slash = sl__find(s, pos, colon, '/');
		enum v4_result r = parse_v4(s, pos, slash, to->addr);
		if (r != V4_OK && has_letter(s, pos, colon))
			return sl__fail(c, pos,
					"'%.*s' is not an IP address (host names are not resolved: "
					"write e.g. to=127.0.0.1)",
					SL__TOK(c, pos, colon));
		if (r != V4_OK)
			return fail_v4(c, pos, slash, r);
		if (slash < colon && parse_prefix(c, slash, colon, 32, to) < 0)
			return -1;
		if (colon < end && parse_port(c, colon + 1, end, port) < 0)
			return -1;
	} else {
		to->family = 6;
		to->prefix = 128;
		size_t slash = sl__find(s, pos, end, '/');
		if (!parse_v6(s, pos, slash, to->addr))
			return sl__fail(
				c, pos,
				"bad IPv6 address '%.*s' (with a port, write it in brackets: [::1]:8080)",
				SL__TOK(c, pos, slash));
		/* After a prefix a ':' can only start a port: ::1/128:8080. */
		size_t pcolon = sl__find(s, slash, end, ':');
		if (slash < end && parse_prefix(c, slash, pcolon, 128, to) < 0)
			return -1;
		if (pcolon < end && parse_port(c, pcolon + 1, end, port) < 0)
			return -1;
	}
	if (check_host_bits(c, pos, end, to) < 0)
		return -1;
	/* An IPv4-mapped network (::ffff:10.0.0.0/104) is the IPv4 one: the
	 * addresses rules are matched against count mapped ones as IPv4
	 * (engine/addr.h), so to=::ffff:127.0.0.1 fits a connect to it over
	 * AF_INET6 and to 127.0.0.1 over AF_INET alike. */
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	if (to->family == 6 && to->prefix >= 96 && memcmp(to->addr, mapped, 12) == 0) {
		to->family = 4;
		to->prefix = (uint8_t)(to->prefix - 96);
		memmove(to->addr, to->addr + 12, 4);
		memset(to->addr + 4, 0, 12);
	}
	return 0;
}

int sl__port_parse(const struct sl__ctx *c, size_t pos, size_t end, uint16_t *lo, uint16_t *hi)
{
	size_t dash = sl__find(c->value, pos, end, '-');

	if (parse_port(c, pos, dash, lo) < 0)
		return -1;
	*hi = *lo;
	if (dash == end)
		return 0;
	if (parse_port(c, dash + 1, end, hi) < 0)
		return -1;
	if (*hi < *lo)
		return sl__fail(c, pos,
				"empty port range '%.*s' (the first port is above the last)",
				SL__TOK(c, pos, end));
	return 0;
}

int sl__names_parse(const struct sl__ctx *c, size_t pos, size_t end, const char *const *names,
		    size_t n, const char *what, uint8_t *bits)
{
	char expected[64];

	sl__join(expected, sizeof expected, names, n, ", ");
	*bits = 0;
	for (size_t i = pos; i <= end;) {
		size_t e = sl__find(c->value, i, end, '+');
		if (e == i)
			return sl__fail(c, i, "expected a %s (%s)", what, expected);
		int k = sl__lookup(names, n, c->value + i, e - i);
		if (k < 0)
			return sl__fail(c, i, "unknown %s '%.*s' (expected %s)", what,
					SL__TOK(c, i, e), expected);
		if (*bits & (1u << k))
			return sl__fail(c, i, "%s '%s' is listed twice", what, names[k]);
		*bits |= (uint8_t)(1u << k);
		i = e + 1;
	}
	return 0;
}

static void out_hex16(struct sl__out *o, unsigned v)
{
	static const char hex[] = "0123456789abcdef";
	char tmp[4];
	size_t n = 0;

	for (int shift = 12; shift >= 0; shift -= 4)
		if ((v >> shift) != 0 || shift == 0)
			tmp[n++] = hex[(v >> shift) & 0xf];
	sl__out_mem(o, tmp, n);
}

/* RFC 5952: lowercase, no leading zeros, the longest run of two or more zero
 * groups (the first one on a tie) as "::". */
static void out_v6(struct sl__out *o, const uint8_t a[16])
{
	int best = -1, best_len = 1;

	for (int k = 0; k < 8;) {
		int len = 0;
		while (k + len < 8 && a[2 * (k + len)] == 0 && a[2 * (k + len) + 1] == 0)
			len++;
		if (len > best_len) {
			best = k;
			best_len = len;
		}
		k += len > 0 ? len : 1;
	}
	for (int k = 0; k < 8; k++) {
		if (k == best) {
			sl__out_str(o, "::");
			k += best_len - 1;
			continue;
		}
		if (k > 0 && k != best + best_len)
			sl__out_str(o, ":");
		out_hex16(o, (unsigned)(a[2 * k] << 8 | a[2 * k + 1]));
	}
}

void sl__out_cidr(struct sl__out *o, const struct sl_cidr *to)
{
	if (to->family == 4) {
		for (int k = 0; k < 4; k++) {
			if (k > 0)
				sl__out_str(o, ".");
			sl__out_u64(o, to->addr[k]);
		}
	} else {
		out_v6(o, to->addr);
	}
	if (to->prefix != (to->family == 4 ? 32 : 128)) {
		sl__out_str(o, "/");
		sl__out_u64(o, to->prefix);
	}
}
