/* SPDX-License-Identifier: MIT */
/*
 * stats.c - SLUICE_STATS=PATH: what each rule did, written at exit.
 *
 * Format: each process appends exactly one line to PATH, a JSON object
 *   {"pid":1234,"program":"curl","rules":[{"index":1,"rule":"send:1MiB/s",
 *    "op":"send","action":"delay","scope":"process","calls":10,"admitted":10,
 *    "delayed":9,"refused":0,"delay_ns_total":8123456789,
 *    "delay_ns_max":1000123456,"bytes":10485760}, ...]}
 * with one entry per rule in the order the rules were given. Several
 * processes (a shell and its children) may share one PATH: the file is
 * opened with O_APPEND and the line is written with a single write(), so
 * lines never interleave. If PATH contains "%p", it is replaced by the pid
 * and every process gets its own file. The file is opened as log.c says
 * (no links followed, owner checked, created 0600). Processes to which SLUICE_ONLY or
 * SLUICE_SKIP do not apply write nothing; a process that ends with _exit or
 * a signal writes nothing either.
 *
 * Counters (struct sl_rstats), per rule, per process:
 *   calls     calls the rule matched;
 *   admitted  of those, calls that went through (after a wait or not);
 *   delayed   calls that waited (dry-run: would have waited);
 *   refused   calls refused (dry-run: would have been refused);
 *   delay_ns_total, delay_ns_max  time the delayed calls waited in the shim;
 *   bytes     bytes those calls transferred.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "real.h"
#include "state.h"
#include "stats.h"

void sl__stats_reset(void)
{
	/* The record holds the counters of its rules only (record.c). */
	uint32_t n = sl__st.rec != NULL ? sl__st.rec->n_rules : 0;
	for (unsigned i = 0; i < n; i++) {
		struct sl_rstats *s = &sl__st.stats[i];
		/* Relaxed: counters only; the reset runs single-threaded (init,
		 * or the child after fork). */
		atomic_store_explicit(&s->calls, 0, memory_order_relaxed);
		atomic_store_explicit(&s->admitted, 0, memory_order_relaxed);
		atomic_store_explicit(&s->delayed, 0, memory_order_relaxed);
		atomic_store_explicit(&s->refused, 0, memory_order_relaxed);
		atomic_store_explicit(&s->delay_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&s->max_delay_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&s->bytes, 0, memory_order_relaxed);
	}
}

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

/* PATH src with "%p" replaced by the pid. */
/* More members of the JSON object (sl__stats_on_write_unsync). */
static size_t (*stats_extra)(char *buf, size_t len);

void sl__stats_on_write_unsync(size_t (*extra)(char *buf, size_t len))
{
	stats_extra = extra;
}

void sl__stats_path(const char *src, char *out, size_t cap)
{
	size_t o = 0;
	for (const char *s = src; *s != '\0' && o + 24 < cap; s++) {
		if (s[0] == '%' && s[1] == 'p') {
			o += (size_t)snprintf(out + o, cap - o, "%d", (int)getpid());
			s++;
		} else {
			out[o++] = *s;
		}
	}
	out[o] = '\0';
}

static uint64_t load_counter(_Atomic uint64_t *v)
{
	/* Relaxed: statistics, read once at exit. */
	return atomic_load_explicit(v, memory_order_relaxed);
}

/*
 * Append this process's line to SLUICE_STATS (if set and the rules apply
 * here). Called by the destructor; safe to call again. Not thread-safe
 * (uses a static buffer): exit-time only.
 */
void sl__stats_write(void)
{
	static char buf[32768];
	if (!sl__st.ready || !sl__st.active || sl__st.policy.stats_file[0] == '\0')
		return;
	size_t len = 0, cap = sizeof(buf) - 3;
	json_fmt(buf, &len, cap, "{\"pid\":%d,\"program\":\"", (int)getpid());
	json_str(buf, &len, cap, program_invocation_short_name);
	json_fmt(buf, &len, cap, "\",\"rules\":[");
	for (uint32_t i = 0; i < sl__st.policy.n_rules; i++) {
		const struct sl_rule *r = &sl__st.policy.rules[i];
		struct sl_rstats *s = &sl__st.stats[i];
		char txt[SL_RULE_TEXT_MAX];
		sl_rule_format(r, txt, sizeof(txt));
		json_fmt(buf, &len, cap, "%s{\"index\":%u,\"rule\":\"", i ? "," : "", i + 1);
		json_str(buf, &len, cap, txt);
		json_fmt(buf, &len, cap, "\",\"op\":\"%s\",\"action\":\"%s\",\"scope\":\"%s\"",
			 sl_op_name((enum sl_op)r->op), sl_action_name((enum sl_action)r->action),
			 sl_scope_name((enum sl_scope)r->scope));
		json_fmt(buf, &len, cap,
			 ",\"calls\":%llu,\"admitted\":%llu,\"delayed\":%llu,\"refused\":%llu",
			 (unsigned long long)load_counter(&s->calls),
			 (unsigned long long)load_counter(&s->admitted),
			 (unsigned long long)load_counter(&s->delayed),
			 (unsigned long long)load_counter(&s->refused));
		json_fmt(buf, &len, cap,
			 ",\"delay_ns_total\":%llu,\"delay_ns_max\":%llu,\"bytes\":%llu}",
			 (unsigned long long)load_counter(&s->delay_ns),
			 (unsigned long long)load_counter(&s->max_delay_ns),
			 (unsigned long long)load_counter(&s->bytes));
	}
	buf[len++] = ']';
	if (stats_extra != NULL) /* ,"breakers":[...] (breaker.c, through init.c) */
		len += stats_extra(buf + len, sizeof(buf) - 2 - len);
	buf[len++] = '}';
	buf[len++] = '\n';
	char path[SL_PATH_MAX + 32];
	char why[128];
	sl__stats_path(sl__st.policy.stats_file, path, sizeof(path));
	int fd = sl__file_open_private(path, why, sizeof(why));
	if (fd < 0) {
		sl_log(SL_LOG_WARN, "SLUICE_STATS=%s: cannot write %s: %s",
		       sl__st.policy.stats_file, path, why);
		return;
	}
	if (SL_REAL(write)(fd, buf, len) != (ssize_t)len)
		sl_log(SL_LOG_WARN, "short write to SLUICE_STATS file '%s'", path);
	SL_REAL(close)(fd);
}
