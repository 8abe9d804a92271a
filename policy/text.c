/* SPDX-License-Identifier: MIT */
/*
 * text.c - small text helpers of the parser: blanks, name tables, lists for
 * messages and "did you mean" suggestions.
 *
 * Suggestions use the optimal-string-alignment distance (Levenshtein plus
 * transposition of two neighbours, so "SNED" is one edit from "SEND"),
 * compared without case. Only names of at most SL__SUGGEST_LEN bytes are
 * compared; the distance matrix lives on the stack.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define SL__SUGGEST_LEN 32

bool sl__is_blank(char ch)
{
	return ch == ' ' || ch == '\t';
}

void sl__trim(const char *s, size_t *pos, size_t *end)
{
	while (*pos < *end && sl__is_blank(s[*pos]))
		(*pos)++;
	while (*end > *pos && sl__is_blank(s[*end - 1]))
		(*end)--;
}

size_t sl__find(const char *s, size_t pos, size_t end, char ch)
{
	while (pos < end && s[pos] != ch)
		pos++;
	return pos;
}

int sl__lookup(const char *const *names, size_t n, const char *s, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0)
			return (int)i;
	return -1;
}

static char lower(char ch)
{
	return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch;
}

static size_t min3(size_t a, size_t b, size_t c)
{
	size_t m = a < b ? a : b;
	return m < c ? m : c;
}

/* Optimal string alignment distance without case; both at most
 * SL__SUGGEST_LEN bytes. */
static size_t distance(const char *a, size_t la, const char *b, size_t lb)
{
	size_t d[SL__SUGGEST_LEN + 1][SL__SUGGEST_LEN + 1];

	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			size_t cost = lower(a[i - 1]) != lower(b[j - 1]);
			d[i][j] = min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
			if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
			    lower(a[i - 2]) == lower(b[j - 1]) && d[i - 2][j - 2] + 1 < d[i][j])
				d[i][j] = d[i - 2][j - 2] + 1;
		}
	}
	return d[la][lb];
}

const char *sl__suggest(const char *const *names, size_t n, const char *s, size_t len)
{
	const char *best = NULL;
	size_t best_d = 3; /* suggest only within two edits */

	if (len == 0 || len > SL__SUGGEST_LEN)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		size_t ln = strlen(names[i]);
		if (ln > SL__SUGGEST_LEN)
			continue;
		size_t d = distance(s, len, names[i], ln);
		/* A short name is "close" to anything: require most of it to match. */
		if (d < best_d && 2 * d < ln) {
			best = names[i];
			best_d = d;
		}
	}
	return best;
}

const char *sl_policy_suggest(const char *const *names, size_t n, const char *s, size_t len)
{
	return sl__suggest(names, n, s, len);
}

const char *sl__did_you_mean(char *buf, size_t size, const char *suggestion)
{
	if (suggestion == NULL)
		snprintf(buf, size, "%s", "");
	else
		snprintf(buf, size, " (did you mean %s?)", suggestion);
	return buf;
}

const char *sl__join(char *buf, size_t size, const char *const *names, size_t n, const char *sep)
{
	struct sl__out o;

	sl__out_init(&o, buf, size);
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			sl__out_str(&o, sep);
		sl__out_str(&o, names[i]);
	}
	return buf;
}

int sl__choice_parse(const struct sl__ctx *c, size_t pos, size_t end, const char *what,
		     const char *const *names, size_t n)
{
	char expected[64];
	int k = sl__lookup(names, n, c->value + pos, end - pos);

	if (k < 0)
		return sl__fail(c, pos, "unknown %s '%.*s' (expected %s)", what,
				SL__TOK(c, pos, end),
				sl__join(expected, sizeof expected, names, n, ", "));
	return k;
}
