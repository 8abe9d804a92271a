/* SPDX-License-Identifier: MIT */
/*
 * error.c - the one-line error messages of the rule language.
 *
 * Every error names the variable, quotes its value, gives the 1-based column
 * (a byte offset into the value) and says what was wrong and what was
 * expected:
 *
 *   SLUICE_SEND="1Mib/s": at column 2: unknown unit 'Mib' (expected B, KB, KiB, MB, MiB, GB, GiB)
 *
 * The message must stay one line whatever the value holds, so every byte
 * outside printable ASCII (newlines, tabs, UTF-8) is written as \xNN. The
 * output is therefore plain ASCII and can never be cut in the middle of a
 * character; sl__out writes an escape whole or not at all. A value longer than
 * SL__VALUE_SHOWN bytes is shown as a window around the column, with "..."
 * marking what was left out, so that the message still fits SL_ERR_MAX.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define SL__VALUE_SHOWN 120 /* longest value quoted whole */
#define SL__VALUE_SIDE 50   /* bytes shown either side of the column otherwise */
#define SL__MSG_MAX 320

/* Append s[0, n), escaping every byte outside printable ASCII as \xNN, and
 * also the double quote and the backslash when `quoted`. */
static void out_escaped(struct sl__out *o, const char *s, size_t n, bool quoted)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch >= 0x20 && ch < 0x7f && !(quoted && (ch == '"' || ch == '\\'))) {
			sl__out_mem(o, (const char *)&ch, 1);
			continue;
		}
		char esc[4] = {'\\', 'x', hex[ch >> 4], hex[ch & 0xf]};
		sl__out_mem(o, esc, sizeof esc); /* whole or not at all */
	}
}

/* VAR="value" (or a window of it around pos). */
static void out_var_value(struct sl__out *o, const struct sl__ctx *c, size_t pos)
{
	out_escaped(o, c->var, strlen(c->var), false);
	sl__out_str(o, "=\"");
	if (c->len <= SL__VALUE_SHOWN) {
		out_escaped(o, c->value, c->len, true);
	} else {
		size_t from = pos > SL__VALUE_SIDE ? pos - SL__VALUE_SIDE : 0;
		size_t to = pos + SL__VALUE_SIDE < c->len ? pos + SL__VALUE_SIDE : c->len;
		if (from > 0)
			sl__out_str(o, "...");
		out_escaped(o, c->value + from, to - from, true);
		if (to < c->len)
			sl__out_str(o, "...");
	}
	sl__out_str(o, "\"");
}

static int fail_v(const struct sl__ctx *c, bool column, size_t pos, const char *fmt, va_list ap)
{
	char msg[SL__MSG_MAX];
	struct sl__out o;

	if (c->err == NULL || c->errlen == 0)
		return -1;
	vsnprintf(msg, sizeof msg, fmt, ap);
	sl__out_init(&o, c->err, c->errlen);
	out_var_value(&o, c, pos);
	if (column) {
		sl__out_str(&o, ": at column ");
		sl__out_u64(&o, (uint64_t)pos + 1);
	}
	sl__out_str(&o, ": ");
	out_escaped(&o, msg, strlen(msg), false);
	return -1;
}

/*
 * Write the error "VAR="value": at column pos+1: message" into c->err.
 * Returns -1 so that callers can `return sl__fail(...)`.
 */
int sl__fail(const struct sl__ctx *c, size_t pos, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fail_v(c, true, pos, fmt, ap);
	va_end(ap);
	return -1;
}

/* Write "VAR="value": message": an error about the variable as a whole. */
int sl__fail_value(const struct sl__ctx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fail_v(c, false, 0, fmt, ap);
	va_end(ap);
	return -1;
}

/* Length argument for "%.*s" of the text [pos, end), at most SL__TOKEN_MAX. */
int sl__tok_len(size_t pos, size_t end)
{
	size_t n = end > pos ? end - pos : 0;
	return (int)(n < SL__TOKEN_MAX ? n : SL__TOKEN_MAX);
}
