/* SPDX-License-Identifier: MIT */
/*
 * stats_json.c - SLUICE_STATS lines (stats_json.h).
 */
#include "stats_json.h"

#include <stdarg.h>
#include <stdio.h>

/* Append s to buf[*len..cap) as a JSON string body (quotes not included). */
static void json_str(char *buf, size_t *len, size_t cap, const char *s)
{
	for (; *s != '\0' && *len + 7 < cap; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\') {
			buf[(*len)++] = '\\';
			buf[(*len)++] = (char)ch;
		} else if (ch < 0x20) {
			*len += (size_t)snprintf(buf + *len, cap - *len, "\\u%04x", ch);
		} else {
			buf[(*len)++] = (char)ch;
		}
	}
}

/* Append formatted text, never past cap. */
__attribute__((format(printf, 4, 5))) static void json_fmt(char *buf, size_t *len, size_t cap,
							   const char *fmt, ...)
{
	if (*len >= cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
	va_end(ap);
	if (n > 0)
		*len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

void sl_stats_path(const char *src, int pid, char *out, size_t cap)
{
	size_t o = 0;
	for (const char *s = src; *s != '\0' && o + 24 < cap; s++) {
		if (s[0] == '%' && s[1] == 'p') {
			o += (size_t)snprintf(out + o, cap - o, "%d", pid);
			s++;
		} else {
			out[o++] = *s;
		}
	}
	out[o] = '\0';
}

static unsigned long long counter(const struct sl_rstats *st, uint32_t n, uint32_t i, size_t field)
{
	if (i >= n)
		return 0;
	/* Relaxed: statistics, read once at a process's end. */
	const _Atomic uint64_t *v = (const _Atomic uint64_t *)((const char *)&st[i] + field);
	return (unsigned long long)atomic_load_explicit(v, memory_order_relaxed);
}

size_t sl_stats_json(char *buf, size_t cap, int pid, const char *program, const struct sl_policy *p,
		     const struct sl_rstats *stats, uint32_t n)
{
	size_t len = 0;
	json_fmt(buf, &len, cap, "{\"pid\":%d,\"program\":\"", pid);
	json_str(buf, &len, cap, program);
	json_fmt(buf, &len, cap, "\",\"rules\":[");
	for (uint32_t i = 0; i < p->n_rules; i++) {
		const struct sl_rule *r = &p->rules[i];
		char txt[SL_RULE_TEXT_MAX];
		sl_rule_format(r, txt, sizeof(txt));
		json_fmt(buf, &len, cap, "%s{\"index\":%u,\"rule\":\"", i ? "," : "", i + 1);
		json_str(buf, &len, cap, txt);
		json_fmt(buf, &len, cap, "\",\"op\":\"%s\",\"action\":\"%s\",\"scope\":\"%s\"",
			 sl_op_name((enum sl_op)r->op), sl_action_name((enum sl_action)r->action),
			 sl_scope_name((enum sl_scope)r->scope));
		json_fmt(buf, &len, cap,
			 ",\"calls\":%llu,\"admitted\":%llu,\"delayed\":%llu,\"refused\":%llu",
			 counter(stats, n, i, offsetof(struct sl_rstats, calls)),
			 counter(stats, n, i, offsetof(struct sl_rstats, admitted)),
			 counter(stats, n, i, offsetof(struct sl_rstats, delayed)),
			 counter(stats, n, i, offsetof(struct sl_rstats, refused)));
		json_fmt(buf, &len, cap,
			 ",\"delay_ns_total\":%llu,\"delay_ns_max\":%llu,\"bytes\":%llu}",
			 counter(stats, n, i, offsetof(struct sl_rstats, delay_ns)),
			 counter(stats, n, i, offsetof(struct sl_rstats, max_delay_ns)),
			 counter(stats, n, i, offsetof(struct sl_rstats, bytes)));
	}
	buf[len++] = ']'; /* len < cap before: room for it */
	return len;
}
