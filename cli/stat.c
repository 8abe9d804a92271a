/* SPDX-License-Identifier: MIT */
/*
 * stat.c - `sluice stat [--json | --prometheus] [--watch[=SECONDS]] [PID]`:
 * the processes of this user that run the shim, their rules and counters.
 *
 * It reads each process's record (shm.c) without locks: the
 * counters are independent relaxed atomics, so a line may mix values a few
 * calls apart, never torn ones. Records of dead processes are removed as
 * they are found. "available" is what the rule's limiter would admit right
 * now (tokens for a bucket, room for a window, free slots for conns),
 * read from the process's limiter or from the shared one; a warm-up rule
 * also shows its stored permits and the rate its next unit gets.
 *
 * Output formats: text (one block per process); --json, one object
 * {"processes":[...]} with the fields of SLUICE_STATS plus "available",
 * "configured" (the rule as started) and "rule" (as now, after `sluice set`);
 * --prometheus, the text exposition format 0.0.4 (counters *_total, gauges),
 * one sample per process and rule, labelled pid, program, rule, spec.
 * --listen ADDR:PORT serves the --prometheus text over HTTP (metrics_http.c),
 * the live page (dashboard.c, with FMT_HTML's tables) and its data
 * (sl__cli_stat_api: FMT_LIST's processes and each shared limiter).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "segment.h"
#include <unistd.h>

#include "internal.h"

/* FMT_LIST: the --json processes, without the object around them (the
 * page's /api/stat); FMT_HTML: a table per process (the page without
 * JavaScript). */
enum fmt { FMT_TEXT, FMT_JSON, FMT_PROM, FMT_LIST, FMT_HTML };

/* One rule's view, copied out of the mappings. */
struct rule_view {
	char configured[SL_RULE_TEXT_MAX];
	char now[SL_RULE_TEXT_MAX];
	char shared[SL_SHARED_NAME_MAX];
	const char *op, *scope, *action;
	uint64_t c[7]; /* calls admitted delayed refused delay_ns max_delay_ns bytes */
	uint64_t wait_le[SL_WAIT_BUCKETS]; /* delayed calls that waited at most 10^k ms */
	bool redis;                        /* a redis=KEY rule: */
	uint64_t redis_fallback, redis_fallbacks;
	uint64_t available;
	bool avail_known;
	/* A warm-up rule's limiter: stored permits (coldness) and the rate
	 * the next unit gets (1 / its interval), units per second. */
	bool warm;
	uint64_t stored;
	double rate;
	/* A conns:adaptive rule with a window closed: its limit, turns in
	 * flight, no-load and last latency (shm_format.h, sl_shm_adapt). */
	struct adapt_fig {
		bool on, probing;
		uint64_t limit, in_flight, noload_ns, latency_ns, probes;
	} ad, cl; /* cl: the client limit (the requests of connections it opens) */
	/* System protection (load1=, cpu=, rt=) with a window closed: the
	 * same figures (sl_shm_stat_sys), which thresholds were exceeded
	 * (SL_ADAPT_OVER_*) and the peak completion rate. */
	struct sys_view {
		bool on, probing;
		uint32_t over;
		uint64_t limit, in_flight, noload_ns, latency_ns, rate;
	} sys;
};

static const char *const counter_names[7] = {
	"calls", "admitted", "delayed", "refused", "delay_ns_total", "delay_ns_max", "bytes",
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t ld(const _Atomic uint64_t *v)
{
	/* Relaxed: independent counters; no data hangs on them. */
	return atomic_load_explicit((_Atomic uint64_t *)v, memory_order_relaxed);
}

static void fig_of(const struct sl_shm_adapt *a, struct adapt_fig *f);

/* Rule i's conns:adaptive figures: a shared= rule's from its segment's
 * controller, a process's from the copy in its record. */
static void view_adapt(const struct sl_shm_stat *r, uint32_t i, const struct sl_shm_shared *seg,
		       struct rule_view *v)
{
	if (seg != NULL) {
		struct sl_adapt_view w;
		if (!sl_adapt_valid(&seg->adapt))
			return;
		sl_adapt_view(&seg->adapt, &w);
		v->ad.on = w.updates > 0;
		v->ad.limit = w.limit;
		v->ad.in_flight = ld(&seg->lim.head.u.tun.held);
		v->ad.noload_ns = w.noload_ns;
		v->ad.latency_ns = w.latency_ns;
		v->ad.probes = w.probes;
		v->ad.probing = w.probing;
		return;
	}
	fig_of(sl_shm_stat_adapt(r, i), &v->ad);
}

/* A record's copy of a controller's figures into *f (none: f->on false). */
static void fig_of(const struct sl_shm_adapt *a, struct adapt_fig *f)
{
	if (atomic_load_explicit(&a->valid, memory_order_relaxed) == 0)
		return;
	f->on = true;
	f->limit = ld(&a->limit);
	f->in_flight = ld(&a->in_flight);
	f->noload_ns = ld(&a->noload_ns);
	f->latency_ns = ld(&a->latency_ns);
	f->probes = ld(&a->probes);
	f->probing = atomic_load_explicit(&a->probing, memory_order_relaxed) != 0;
}

/* Rule i's system protection figures, from the copy in its record. */
static void view_sys(const struct sl_shm_stat *r, uint32_t i, struct rule_view *v)
{
	const struct sl_shm_adapt *a = sl_shm_stat_sys(r, i);
	if (atomic_load_explicit(&a->valid, memory_order_relaxed) == 0)
		return;
	v->sys.on = true;
	v->sys.limit = ld(&a->limit);
	v->sys.in_flight = ld(&a->in_flight);
	v->sys.noload_ns = ld(&a->noload_ns);
	v->sys.latency_ns = ld(&a->latency_ns);
	v->sys.probing = atomic_load_explicit(&a->probing, memory_order_relaxed) != 0;
	v->sys.over = atomic_load_explicit(&a->over, memory_order_relaxed);
	v->sys.rate = atomic_load_explicit(&a->rate, memory_order_relaxed);
}

/* Fill v from rule i of record r. */
static void view_rule(const struct sl_shm_stat *r, uint32_t i, struct rule_view *v)
{
	memset(v, 0, sizeof(*v));
	const char *text = sl_shm_stat_rule(r, i);
	snprintf(v->configured, sizeof(v->configured), "%s", text);
	snprintf(v->now, sizeof(v->now), "%s", text);
	/* The rule's counters with its threads' own (shm_format.h). */
	struct sl_rstats snap;
	sl_shm_stat_counts(r, i, &snap);
	const struct sl_rstats *s = &snap;
	const _Atomic uint64_t *f[7] = {&s->calls,    &s->admitted,     &s->delayed, &s->refused,
					&s->delay_ns, &s->max_delay_ns, &s->bytes};
	for (int k = 0; k < 7; k++)
		v->c[k] = ld(f[k]);
	for (unsigned k = 0; k < SL_WAIT_BUCKETS; k++)
		v->wait_le[k] = ld(&s->wait_le[k]);
	v->redis_fallback = ld(&s->redis_fallback);
	v->redis_fallbacks = ld(&s->redis_fallbacks);
	struct sl_rule rule;
	v->op = v->scope = v->action = "?";
	if (sl__cli_rule_of(text, &rule) != 0)
		return;
	v->op = sl_op_name((enum sl_op)rule.op);
	v->scope = sl_scope_name((enum sl_scope)rule.scope);
	v->action = sl_action_name((enum sl_action)rule.action);
	snprintf(v->shared, sizeof(v->shared), "%s", rule.shared);
	v->redis = rule.redis_key[0] != '\0';
	const struct sl_tunable *t = NULL;
	struct sl_shm_shared *seg = NULL;
	const char *why;
	if (rule.shared[0] != '\0') {
		seg = sl__cli_shared_open(rule.shared, false, NULL, &why);
		t = seg != NULL ? &seg->lim : NULL;
	} else if (rule.adaptive) {
		/* Its limiter is the fork family's (shim/turn.c), not the
		 * record's: what is free is the view's limit less its turns. */
		view_adapt(r, i, NULL, v);
		v->available = v->ad.limit > v->ad.in_flight ? v->ad.limit - v->ad.in_flight : 0;
		v->avail_known = v->ad.on;
	} else if (rule.scope == SL_SCOPE_PROCESS && sl_tunable_validate(&sl_shm_stat_lims(r)[i])) {
		t = &sl_shm_stat_lims(r)[i];
	}
	if (rule.adaptive && seg != NULL)
		view_adapt(r, i, seg, v);
	if (sl_rule_system(&rule))
		view_sys(r, i, v);
	if (rule.adaptive) /* the client limit (turns of the connections it opens) */
		fig_of(sl_shm_stat_client(r, i), &v->cl);
	if (t != NULL) {
		/* An adaptive rule's limit is the library's: its text stays. */
		if (!rule.adaptive)
			sl__cli_current_text(text, &sl_tunable_current(t)->params, v->now,
					     sizeof(v->now));
		const uint64_t now = now_ns();
		v->available = sl_limiter_available(&t->head, now);
		v->avail_known = true;
		const struct sl_limiter *cur = sl_tunable_current(t);
		if (cur->kind == SL_KIND_WARMUP) {
			const uint64_t iv = sl_warmup_interval_ns(&cur->u.warm, now);
			v->warm = true;
			v->stored = sl_warmup_stored(&cur->u.warm, now);
			v->rate = iv > 0 ? 1e9 / (double)iv : 0;
		}
	}
	if (seg != NULL)
		munmap(seg, sizeof(*seg));
}

static void json_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(out, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(out, "\\u%04x", ch);
		else
			fputc(ch, out);
	}
	fputc('"', out);
}

/* A Prometheus label value: backslash, double quote and newline escaped. */
static void prom_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s != '\0'; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(out, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", out);
		else
			fputc(*s, out);
	}
	fputc('"', out);
}

/* A conns:adaptive limit's figures (name: "adaptive", or "adaptive
 * (client)") after `lead`, in text (sep between them) or as the JSON
 * member `name` (null when there are none). */
static void adapt_text(FILE *out, const char *lead, const char *name, const struct adapt_fig *f,
		       const char *sep)
{
	fprintf(out,
		"%s%s: limit %llu%sin flight %llu%sno-load %.1f ms%slatency %.1f ms%sprobes %llu%s",
		lead, name, (unsigned long long)f->limit, sep, (unsigned long long)f->in_flight,
		sep, (double)f->noload_ns / 1e6, sep, (double)f->latency_ns / 1e6, sep,
		(unsigned long long)f->probes, f->probing ? " (probing)" : "");
}

/* Which thresholds are exceeded, as "load1+cpu+rt" or "none". */
static const char *over_names(uint32_t over, char *buf, size_t cap)
{
	static const char *const names[3] = {"load1", "cpu", "rt"};
	size_t n = 0;
	buf[0] = '\0';
	for (unsigned k = 0; k < 3; k++)
		if (over & (1u << k))
			n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? "+" : "",
					      names[k]);
	return n != 0 ? buf : "none";
}

/* A system protection's figures after `lead`, in text (sep between them)
 * or as the JSON member "system" (null when there are none). */
static void sys_text(FILE *out, const char *lead, const struct rule_view *x, const char *sep)
{
	char over[32], lim[32];
	if (x->sys.limit >= SL_ADAPT_LIMIT_MAX)
		snprintf(lim, sizeof(lim), "none");
	else
		snprintf(lim, sizeof(lim), "%llu", (unsigned long long)x->sys.limit);
	fprintf(out,
		"%ssystem: over %s%slimit %s%sin flight %llu%speak %llu/s%sno-load %.1f ms%s"
		"latency %.1f ms%s",
		lead, over_names(x->sys.over, over, sizeof(over)), sep, lim, sep,
		(unsigned long long)x->sys.in_flight, sep, (unsigned long long)x->sys.rate, sep,
		(double)x->sys.noload_ns / 1e6, sep, (double)x->sys.latency_ns / 1e6,
		x->sys.probing ? " (probing)" : "");
}

static void sys_json(FILE *out, const struct rule_view *x)
{
	if (!x->sys.on) {
		fputs(",\"system\":null", out);
		return;
	}
	char over[32];
	fprintf(out, ",\"system\":{\"over\":\"%s\",\"limit\":",
		over_names(x->sys.over, over, sizeof(over)));
	if (x->sys.limit >= SL_ADAPT_LIMIT_MAX)
		fputs("null", out);
	else
		fprintf(out, "%llu", (unsigned long long)x->sys.limit);
	fprintf(out,
		",\"in_flight\":%llu,\"peak_rate\":%llu,\"noload_seconds\":%.9f,"
		"\"latency_seconds\":%.9f,\"probing\":%s}",
		(unsigned long long)x->sys.in_flight, (unsigned long long)x->sys.rate,
		(double)x->sys.noload_ns / 1e9, (double)x->sys.latency_ns / 1e9,
		x->sys.probing ? "true" : "false");
}

static void adapt_json(FILE *out, const char *name, const struct adapt_fig *f)
{
	if (!f->on) {
		fprintf(out, ",\"%s\":null", name);
		return;
	}
	fprintf(out,
		",\"%s\":{\"limit\":%llu,\"in_flight\":%llu,\"noload_seconds\":%.9f,"
		"\"latency_seconds\":%.9f,\"probes\":%llu,\"probing\":%s}",
		name, (unsigned long long)f->limit, (unsigned long long)f->in_flight,
		(double)f->noload_ns / 1e9, (double)f->latency_ns / 1e9,
		(unsigned long long)f->probes, f->probing ? "true" : "false");
}

static void print_text(FILE *out, const struct sl_shm_stat *r, const struct rule_view *v,
		       const struct sl_shm_break *brk)
{
	fprintf(out, "pid %u  %s%s", r->pid, r->program, r->active ? "" : "  (inactive)");
	if (atomic_load_explicit(&r->sandboxed, memory_order_relaxed))
		fprintf(out, "  (seccomp sandbox: %llu fds unclassified, passed through)",
			(unsigned long long)atomic_load_explicit(&r->unclassified,
								 memory_order_relaxed));
	fputc('\n', out);
	for (uint32_t i = 0; i < r->n_rules; i++) {
		const struct rule_view *x = &v[i];
		fprintf(out, "  rule %u  %s", i + 1, x->now);
		if (strcmp(x->now, x->configured) != 0)
			fprintf(out, "  (started as %s)", x->configured);
		fputc('\n', out);
		fprintf(out,
			"    calls %llu  admitted %llu  delayed %llu  refused %llu  bytes %llu\n",
			(unsigned long long)x->c[0], (unsigned long long)x->c[1],
			(unsigned long long)x->c[2], (unsigned long long)x->c[3],
			(unsigned long long)x->c[6]);
		fprintf(out, "    delay total %.3f s  max %.3f s", (double)x->c[4] / 1e9,
			(double)x->c[5] / 1e9);
		if (x->avail_known)
			fprintf(out, "  available %llu", (unsigned long long)x->available);
		fputc('\n', out);
		if (x->c[2] > 0) {
			/* The histogram, not cumulative: how many waited how long. */
			static const char *const band[SL_WAIT_BUCKETS + 1] = {"<=1ms",   "<=10ms",
									      "<=100ms", "<=1s",
									      "<=10s",   ">10s"};
			uint64_t below = 0;
			fputs("    waits", out);
			for (unsigned k = 0; k <= SL_WAIT_BUCKETS; k++) {
				uint64_t in = k < SL_WAIT_BUCKETS ? x->wait_le[k] : x->c[2] - below;
				below += k < SL_WAIT_BUCKETS ? in : 0;
				fprintf(out, "  %s %llu", band[k], (unsigned long long)in);
			}
			fputc('\n', out);
		}
		if (x->redis)
			fprintf(out, "    redis: %s, fell back %llu time%s\n",
				x->redis_fallback ? "on its on-error fallback" : "leasing",
				(unsigned long long)x->redis_fallbacks,
				x->redis_fallbacks == 1 ? "" : "s");
		if (x->warm)
			fprintf(out, "    warm-up: stored %llu  rate %.6g/s\n",
				(unsigned long long)x->stored, x->rate);
		for (int k = 0; k < 2; k++) {
			const struct adapt_fig *f = k == 0 ? &x->ad : &x->cl;
			if (!f->on)
				continue;
			adapt_text(out, "    ", k == 0 ? "adaptive" : "adaptive (client)", f, "  ");
			fputc('\n', out);
		}
		if (x->sys.on) {
			sys_text(out, "    ", x, "  ");
			fputc('\n', out);
		}
	}
	sl__cli_break_text(out, brk);
}

static void print_json(FILE *out, const struct sl_shm_stat *r, const struct rule_view *v,
		       const struct sl_shm_break *brk, bool first)
{
	fprintf(out, "%s{\"pid\":%u,\"program\":", first ? "" : ",", r->pid);
	json_str(out, r->program);
	fprintf(out, ",\"active\":%s,\"sandboxed\":%s,\"unclassified\":%llu,\"rules\":[",
		r->active ? "true" : "false",
		atomic_load_explicit(&r->sandboxed, memory_order_relaxed) ? "true" : "false",
		(unsigned long long)atomic_load_explicit(&r->unclassified, memory_order_relaxed));
	for (uint32_t i = 0; i < r->n_rules; i++) {
		const struct rule_view *x = &v[i];
		fprintf(out, "%s{\"index\":%u,\"rule\":", i ? "," : "", i + 1);
		json_str(out, x->now);
		fputs(",\"configured\":", out);
		json_str(out, x->configured);
		fprintf(out, ",\"op\":\"%s\",\"action\":\"%s\",\"scope\":\"%s\",\"shared\":", x->op,
			x->action, x->scope);
		if (x->shared[0] != '\0')
			json_str(out, x->shared);
		else
			fputs("null", out);
		for (int k = 0; k < 7; k++)
			fprintf(out, ",\"%s\":%llu", counter_names[k], (unsigned long long)x->c[k]);
		/* Delayed calls by wait, each in one band: "10" counts waits
		 * over 1 ms and at most 10 ms. */
		fputs(",\"waits_by_ms\":{", out);
		uint64_t below = 0;
		for (unsigned k = 0; k < SL_WAIT_BUCKETS; k++) {
			fprintf(out, "\"%llu\":%llu,",
				(unsigned long long)(sl_wait_bound_ns(k) / 1000000u),
				(unsigned long long)x->wait_le[k]);
			below += x->wait_le[k];
		}
		fprintf(out, "\"+Inf\":%llu}", (unsigned long long)(x->c[2] - below));
		if (x->redis)
			fprintf(out, ",\"redis\":{\"fallback\":%s,\"fallbacks\":%llu}",
				x->redis_fallback ? "true" : "false",
				(unsigned long long)x->redis_fallbacks);
		else
			fputs(",\"redis\":null", out);
		if (x->avail_known)
			fprintf(out, ",\"available\":%llu", (unsigned long long)x->available);
		else
			fputs(",\"available\":null", out);
		if (x->warm)
			fprintf(out, ",\"warmup\":{\"stored\":%llu,\"rate\":%.6g}",
				(unsigned long long)x->stored, x->rate);
		else
			fputs(",\"warmup\":null", out);
		adapt_json(out, "adaptive", &x->ad);
		adapt_json(out, "adaptive_client", &x->cl);
		sys_json(out, x);
		fputc('}', out);
	}
	fputc(']', out);
	sl__cli_break_json(out, brk);
	fputc('}', out);
}

/* s with &, <, >, " and ' as character references. */
static void html_str(FILE *out, const char *s)
{
	for (; *s != '\0'; s++) {
		switch (*s) {
		case '&':
			fputs("&amp;", out);
			break;
		case '<':
			fputs("&lt;", out);
			break;
		case '>':
			fputs("&gt;", out);
			break;
		case '"':
			fputs("&quot;", out);
			break;
		case '\'':
			fputs("&#39;", out);
			break;
		default:
			fputc(*s, out);
		}
	}
}

static void print_html(FILE *out, const struct sl_shm_stat *r, const struct rule_view *v,
		       const struct sl_shm_break *brk)
{
	fprintf(out, "<section class=\"proc\"><h2>pid %u <span class=\"prog\">", r->pid);
	html_str(out, r->program);
	fputs("</span></h2>\n<table><thead><tr><th>rule</th><th>calls</th><th>admitted</th>"
	      "<th>delayed</th><th>refused</th><th>bytes</th><th>waited s</th><th>max wait s</th>"
	      "<th>available</th></tr></thead><tbody>\n",
	      out);
	for (uint32_t i = 0; i < r->n_rules; i++) {
		const struct rule_view *x = &v[i];
		fputs("<tr><td class=\"spec\">", out);
		html_str(out, x->now);
		fprintf(out,
			"</td><td>%llu</td><td>%llu</td><td>%llu</td><td>%llu</td><td>%llu</td>"
			"<td>%.3f</td><td>%.3f</td><td>",
			(unsigned long long)x->c[0], (unsigned long long)x->c[1],
			(unsigned long long)x->c[2], (unsigned long long)x->c[3],
			(unsigned long long)x->c[6], (double)x->c[4] / 1e9, (double)x->c[5] / 1e9);
		if (x->avail_known)
			fprintf(out, "%llu", (unsigned long long)x->available);
		if (x->ad.on)
			adapt_text(out, "</td></tr>\n<tr class=\"cap\"><td colspan=\"9\">",
				   "adaptive", &x->ad, ", ");
		if (x->cl.on)
			adapt_text(out, "</td></tr>\n<tr class=\"cap\"><td colspan=\"9\">",
				   "adaptive (client)", &x->cl, ", ");
		if (x->sys.on)
			sys_text(out, "</td></tr>\n<tr class=\"cap\"><td colspan=\"9\">", x, ", ");
		fputs("</td></tr>\n", out);
	}
	fputs("</tbody></table>\n", out);
	char *text = NULL;
	size_t len = 0;
	FILE *m = brk != NULL ? open_memstream(&text, &len) : NULL;
	if (m != NULL) {
		sl__cli_break_text(m, brk);
		fclose(m);
		if (text != NULL && len > 0) {
			fputs("<pre class=\"breakers\">", out);
			html_str(out, text);
			fputs("</pre>\n", out);
		}
		free(text);
	}
	fputs("</section>\n", out);
}

/* Prometheus metric families: name, type, help, counter index (-1:
 * available; -2, -3: warm-up; -4 to -7: conns:adaptive; -8 to -11: system
 * protection; -12 to -15: conns:adaptive's client limit). */
static const struct {
	const char *name, *type, *help;
	int k;
} prom_metrics[] = {
	{"sluice_calls_total", "counter", "Calls the rule matched.", 0},
	{"sluice_admitted_total", "counter", "Matched calls that went through.", 1},
	{"sluice_delayed_total", "counter",
	 "Matched calls that waited (non-blocking: answered EAGAIN or cut short).", 2},
	{"sluice_refused_total", "counter", "Matched calls that were refused.", 3},
	{"sluice_delay_seconds_total", "counter",
	 "Time matched calls waited (non-blocking: their fds were held back).", 4},
	{"sluice_delay_max_seconds", "gauge", "Longest wait of one call.", 5},
	{"sluice_bytes_total", "counter", "Bytes moved by admitted calls.", 6},
	{"sluice_available", "gauge", "Units the limiter would admit now.", -1},
	{"sluice_warmup_stored", "gauge", "Stored permits of a warm-up rule (its coldness).", -2},
	{"sluice_warmup_rate", "gauge", "Units per second a warm-up rule admits now.", -3},
	{"sluice_adaptive_limit", "gauge", "The concurrency limit a conns:adaptive rule found.",
	 -4},
	{"sluice_adaptive_in_flight", "gauge", "Turns (requests) holding a conns:adaptive slot.",
	 -5},
	{"sluice_adaptive_noload_seconds", "gauge",
	 "The no-load latency of a conns:adaptive rule's turns (re-measured by probes).", -6},
	{"sluice_adaptive_latency_seconds", "gauge",
	 "The mean latency of a conns:adaptive rule's turns in its last window.", -7},
	{"sluice_system_over", "gauge",
	 "1 while a system protection's threshold (load1=, cpu=, rt=) is exceeded.", -8},
	{"sluice_system_limit", "gauge",
	 "Turns a system protection admits at once (1000000: no limit).", -9},
	{"sluice_system_in_flight", "gauge", "Turns (requests) holding a system protection's slot.",
	 -10},
	{"sluice_system_peak_rate", "gauge",
	 "The peak completion rate (turns/s) a system protection's limit is made of.", -11},
	{"sluice_adaptive_client_limit", "gauge",
	 "The limit a conns:adaptive rule found for the requests of the connections it opens.",
	 -12},
	{"sluice_adaptive_client_in_flight", "gauge",
	 "Requests sent and not yet answered holding a conns:adaptive client slot.", -13},
	{"sluice_adaptive_client_noload_seconds", "gauge",
	 "The no-load latency of a conns:adaptive rule's client turns.", -14},
	{"sluice_adaptive_client_latency_seconds", "gauge",
	 "The mean latency of a conns:adaptive rule's client turns in its last window.", -15},
};

/* The labels of rule i of process p's samples, after the metric name. */
static void prom_labels(FILE *out, const struct sl_shm_stat *r, uint32_t i,
			const struct rule_view *x)
{
	fprintf(out, "{pid=\"%u\",program=", r->pid);
	prom_str(out, r->program);
	fprintf(out, ",rule=\"%u\",spec=", i + 1);
	prom_str(out, x->now);
}

/* sluice_wait_seconds, a histogram of the waits of delayed calls (its
 * _sum and _count are sluice_delay_seconds_total and
 * sluice_delayed_total), and the Redis fallback of redis=KEY rules. */
static void print_prom_waits(FILE *out, int n, struct sl_shm_stat *const *recs,
			     struct rule_view *const *views)
{
	static const char *const le[SL_WAIT_BUCKETS] = {"0.001", "0.01", "0.1", "1", "10"};
	fputs("# HELP sluice_wait_seconds How long delayed calls waited.\n"
	      "# TYPE sluice_wait_seconds histogram\n",
	      out);
	for (int p = 0; p < n; p++)
		for (uint32_t i = 0; i < recs[p]->n_rules; i++) {
			const struct rule_view *x = &views[p][i];
			uint64_t cum = 0;
			for (unsigned k = 0; k <= SL_WAIT_BUCKETS; k++) {
				cum = k < SL_WAIT_BUCKETS ? cum + x->wait_le[k] : x->c[2];
				fputs("sluice_wait_seconds_bucket", out);
				prom_labels(out, recs[p], i, x);
				fprintf(out, ",le=\"%s\"} %llu\n",
					k < SL_WAIT_BUCKETS ? le[k] : "+Inf",
					(unsigned long long)cum);
			}
			fputs("sluice_wait_seconds_sum", out);
			prom_labels(out, recs[p], i, x);
			fprintf(out, "} %.9f\n", (double)x->c[4] / 1e9);
			fputs("sluice_wait_seconds_count", out);
			prom_labels(out, recs[p], i, x);
			fprintf(out, "} %llu\n", (unsigned long long)x->c[2]);
		}
	static const char *const fam[2][3] = {
		{"sluice_redis_fallback", "gauge",
		 "1 while a redis=KEY rule uses its on-error fallback (Redis does not answer)."},
		{"sluice_redis_fallbacks_total", "counter",
		 "Times a redis=KEY rule fell back to its on-error mode."},
	};
	for (int m = 0; m < 2; m++) {
		fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", fam[m][0], fam[m][2], fam[m][0],
			fam[m][1]);
		for (int p = 0; p < n; p++)
			for (uint32_t i = 0; i < recs[p]->n_rules; i++) {
				const struct rule_view *x = &views[p][i];
				if (!x->redis)
					continue;
				fputs(fam[m][0], out);
				prom_labels(out, recs[p], i, x);
				fprintf(out, "} %llu\n",
					(unsigned long long)(m == 0 ? x->redis_fallback
								    : x->redis_fallbacks));
			}
	}
}

static void print_prom(FILE *out, int n, struct sl_shm_stat *const *recs,
		       struct rule_view *const *views)
{
	for (size_t m = 0; m < sizeof(prom_metrics) / sizeof(prom_metrics[0]); m++) {
		fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", prom_metrics[m].name,
			prom_metrics[m].help, prom_metrics[m].name, prom_metrics[m].type);
		for (int p = 0; p < n; p++)
			for (uint32_t i = 0; i < recs[p]->n_rules; i++) {
				const struct rule_view *x = &views[p][i];
				int k = prom_metrics[m].k;
				if ((k == -1 && !x->avail_known) ||
				    ((k == -2 || k == -3) && !x->warm) ||
				    (k < -3 && k >= -7 && !x->ad.on) ||
				    (k <= -8 && k >= -11 && !x->sys.on) || (k <= -12 && !x->cl.on))
					continue;
				fputs(prom_metrics[m].name, out);
				prom_labels(out, recs[p], i, x);
				fputs("} ", out);
				if (k == 4 || k == 5)
					fprintf(out, "%.9f\n", (double)x->c[k] / 1e9);
				else if (k == -2)
					fprintf(out, "%llu\n", (unsigned long long)x->stored);
				else if (k == -3)
					fprintf(out, "%.6g\n", x->rate);
				else if (k == -4 || k == -5)
					fprintf(out, "%llu\n",
						(unsigned long long)(k == -4 ? x->ad.limit
									     : x->ad.in_flight));
				else if (k <= -12)
					fprintf(out, k >= -13 ? "%.0f\n" : "%.9f\n",
						k == -12   ? (double)x->cl.limit
						: k == -13 ? (double)x->cl.in_flight
						: k == -14 ? (double)x->cl.noload_ns / 1e9
							   : (double)x->cl.latency_ns / 1e9);
				else if (k <= -8)
					fprintf(out, "%llu\n",
						(unsigned long long)(k == -8    ? x->sys.over != 0
								     : k == -9  ? x->sys.limit
								     : k == -10 ? x->sys.in_flight
										: x->sys.rate));
				else if (k == -6 || k == -7)
					fprintf(out, "%.9f\n",
						(double)(k == -6 ? x->ad.noload_ns
								 : x->ad.latency_ns) /
							1e9);
				else
					fprintf(out, "%llu\n",
						(unsigned long long)(k < 0 ? x->available
									   : x->c[k]));
			}
	}
}

/* One report of every process (pid 0) or of one. Returns 0, or 1 if the
 * one pid asked for has no record. Memory is sized by what it finds. */
static int report(FILE *out, enum fmt fmt, int only_pid)
{
	int *pids = NULL, npids = 1, n = 0, rc = 0;
	char err[SL_ERR_MAX];
	int dfd = sl_seg_dir_open(false, err, sizeof(err));
	if (dfd < 0 && errno != ENOENT) {
		/* Say why, rather than "no process" (another user's directory). */
		fprintf(stderr, "sluice stat: %s\n", err);
		return 1;
	}
	if (dfd >= 0)
		close(dfd);
	if (only_pid) {
		pids = malloc(sizeof(int));
		if (pids != NULL)
			pids[0] = only_pid;
	} else {
		npids = sl__cli_record_pids(&pids);
	}
	sl__cli_break_sweep();
	struct sl_shm_stat **recs = calloc((size_t)npids + 1, sizeof(*recs));
	struct rule_view **views = calloc((size_t)npids + 1, sizeof(*views));
	const struct sl_shm_break **brks = calloc((size_t)npids + 1, sizeof(*brks));
	int *bpids = calloc((size_t)npids + 1, sizeof(*bpids));
	const char **progs = calloc((size_t)npids + 1, sizeof(*progs));
	if ((npids > 0 && pids == NULL) || recs == NULL || views == NULL || brks == NULL ||
	    bpids == NULL || progs == NULL) {
		fprintf(stderr, "sluice stat: out of memory\n");
		free(pids);
		free(recs);
		free(views);
		free(brks);
		free(bpids);
		free(progs);
		return 1;
	}
	for (int p = 0; p < npids; p++) {
		const char *why;
		struct sl_shm_stat *r = sl__cli_record_open(pids[p], false, NULL, &why);
		if (r == NULL) {
			if (only_pid) {
				fprintf(stderr, "sluice stat: process %d: %s\n", only_pid,
					strcmp(why, "gone") == 0 ? "not running sluice (no record)"
								 : why);
				rc = 1;
			}
			continue;
		}
		views[n] = calloc(r->n_rules + 1, sizeof(struct rule_view));
		if (views[n] == NULL) {
			sl__cli_record_close(r);
			continue;
		}
		for (uint32_t i = 0; i < r->n_rules; i++)
			view_rule(r, i, &views[n][i]);
		brks[n] = sl__cli_break_open(pids[p]);
		bpids[n] = pids[p];
		progs[n] = r->program;
		recs[n++] = r;
	}
	if (rc == 0 && (fmt == FMT_JSON || fmt == FMT_LIST)) {
		if (fmt == FMT_JSON)
			fputs("{\"processes\":[", out);
		for (int p = 0; p < n; p++)
			print_json(out, recs[p], views[p], brks[p], p == 0);
		if (fmt == FMT_JSON)
			fputs("]}\n", out);
	} else if (rc == 0 && fmt == FMT_HTML) {
		if (n == 0)
			fputs("<p>No process of this user is running sluice.</p>\n", out);
		for (int p = 0; p < n; p++)
			print_html(out, recs[p], views[p], brks[p]);
	} else if (rc == 0 && fmt == FMT_PROM) {
		print_prom(out, n, recs, views);
		print_prom_waits(out, n, recs, views);
		sl__cli_break_prom(out, n, bpids, progs, brks);
	} else if (rc == 0) {
		if (n == 0)
			fputs("no process of this user is running sluice\n", out);
		for (int p = 0; p < n; p++)
			print_text(out, recs[p], views[p], brks[p]);
	}
	for (int p = 0; p < n; p++) {
		sl__cli_break_close(brks[p]);
		sl__cli_record_close(recs[p]);
		free(views[p]);
	}
	free(pids);
	free(recs);
	free(views);
	free(brks);
	free(bpids);
	free(progs);
	fflush(out);
	return rc;
}

/* `sluice stat shared:NAME`: the limiter, the rule that created it, its
 * rule now, the last `sluice set`, what it would admit and who maps it. */
static int report_shared(FILE *out, enum fmt fmt, const char *name)
{
	const char *why;
	struct sl_shm_shared *s = sl__cli_shared_open(name, false, NULL, &why);
	if (s == NULL) {
		fprintf(stderr, "sluice stat: shared limiter '%s': %s\n", name,
			strcmp(why, strerror(ENOENT)) == 0 ? "no such shared limiter" : why);
		return 1;
	}
	char now_text[SL_RULE_TEXT_MAX], seg_name[64], path[SL_SEG_PATH_MAX], when[64] = "";
	struct rule_view av;
	memset(&av, 0, sizeof(av));
	view_adapt(NULL, 0, s, &av); /* a conns:adaptive rule's controller */
	if (s->adapt.magic != 0)     /* its limit is the library's: the text stays */
		snprintf(now_text, sizeof(now_text), "%s", s->rule);
	else
		sl__cli_current_text(s->rule, &sl_tunable_current(&s->lim)->params, now_text,
				     sizeof(now_text));
	snprintf(seg_name, sizeof(seg_name), SL_SHM_SHARED_NAME, name);
	sl_seg_path(seg_name, path, sizeof(path));
	uint64_t avail = sl_limiter_available(&s->lim.head, now_ns());
	/* Relaxed: a time for display. */
	uint64_t set_ns = atomic_load_explicit(&s->set_ns, memory_order_relaxed);
	time_t t = (time_t)(set_ns / 1000000000u);
	struct tm tm;
	if (set_ns != 0 && gmtime_r(&t, &tm) != NULL)
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	int *pids = NULL;
	int nh = sl__cli_shared_holders(name, &pids);
	if (fmt == FMT_JSON) {
		fputs("{\"shared\":", out);
		json_str(out, name);
		fputs(",\"path\":", out);
		json_str(out, path);
		fputs(",\"rule\":", out);
		json_str(out, now_text);
		fputs(",\"configured\":", out);
		json_str(out, s->rule);
		fputs(",\"set_at\":", out);
		if (set_ns != 0)
			json_str(out, when);
		else
			fputs("null", out);
		fprintf(out, ",\"available\":%llu,\"holders\":[", (unsigned long long)avail);
		for (int i = 0; i < nh; i++)
			fprintf(out, "%s%d", i ? "," : "", pids[i]);
		fputc(']', out);
		if (av.ad.on)
			adapt_json(out, "adaptive", &av.ad);
		fputs("}\n", out);
	} else {
		fprintf(out, "shared limiter %s  %s\n", name, path);
		fprintf(out, "  rule %s", now_text);
		if (strcmp(now_text, s->rule) != 0)
			fprintf(out, "  (created as %s)", s->rule);
		fputc('\n', out);
		if (set_ns != 0)
			fprintf(out, "  set by sluice set at %s\n", when);
		fprintf(out, "  available %llu\n", (unsigned long long)avail);
		if (av.ad.on) {
			adapt_text(out, "  ", "adaptive", &av.ad, "  ");
			fputc('\n', out);
		}
		fprintf(out, "  used by %d process%s", nh > 0 ? nh : 0, nh == 1 ? "" : "es");
		for (int i = 0; i < nh; i++)
			fprintf(out, "%s%d", i ? " " : ": ", pids[i]);
		fputc('\n', out);
	}
	free(pids);
	munmap(s, sizeof(*s));
	fflush(out);
	return 0;
}

static int each_shared(const char *name, void *arg)
{
	struct {
		FILE *out;
		int n;
	} *a = arg;
	const char *key = name + strlen("shared-");
	if (*key == '\0')
		return 0;
	if (a->n++ > 0)
		fputc(',', a->out);
	if (report_shared(a->out, FMT_JSON, key) != 0)
		fputs("null", a->out);
	return 0;
}

int sl__cli_stat_api(FILE *out)
{
	struct timespec ts;
	char host[256] = "";
	clock_gettime(CLOCK_REALTIME, &ts);
	gethostname(host, sizeof(host) - 1);
	fprintf(out, "{\"time_ms\":%llu,\"host\":",
		(unsigned long long)ts.tv_sec * 1000u + (unsigned long long)ts.tv_nsec / 1000000u);
	json_str(out, host);
	fputs(",\"processes\":[", out);
	int rc = report(out, FMT_LIST, 0);
	struct {
		FILE *out;
		int n;
	} a = {out, 0};
	fputs("],\"shared\":[", out);
	sl_seg_each("shared-", each_shared, &a);
	fputs("]}\n", out);
	return rc != 0 || ferror(out) ? -1 : 0;
}

int sl__cli_stat_html(FILE *out)
{
	int rc = report(out, FMT_HTML, 0);
	return rc != 0 || ferror(out) ? -1 : 0;
}

int sl__cli_stat_prometheus(FILE *out)
{
	/* 1: the private directory cannot be read (a 500, not an empty 200). */
	int rc = report(out, FMT_PROM, 0);
	return rc != 0 || ferror(out) ? -1 : 0;
}

static void stat_usage(FILE *out)
{
	fputs("Usage: sluice stat [--json | --prometheus] [--watch[=SECONDS]] [PID]\n"
	      "       sluice stat --listen [ADDR:]PORT [--listen-any] [--allow-user NAME]...\n"
	      "                   [--token-file FILE]\n"
	      "       sluice stat [--json] shared:NAME\n"
	      "List the processes of this user running sluice (or only PID): each rule as it\n"
	      "runs now (and as it started, if sluice set changed it), its counters (calls,\n"
	      "admitted, delayed, refused, bytes, total and longest delay) and what its\n"
	      "limiter would admit now (tokens, room in the window, free conns slots).\n"
	      "\n"
	      "  --json             one JSON object {\"processes\":[...]}: the SLUICE_STATS\n"
	      "                     fields and \"available\", \"configured\", \"shared\"\n"
	      "  --prometheus       Prometheus text exposition format 0.0.4\n"
	      "  --watch[=SECONDS]  report again every SECONDS (0.1 to 3600, default 1)\n"
	      "                     until interrupted\n"
	      "  --listen [ADDR:]PORT  serve the --prometheus text at http://ADDR:PORT/metrics\n"
	      "                     (every process, rendered per scrape) until SIGINT or\n"
	      "                     SIGTERM; ADDR is numeric, 127.0.0.1 if left out, [::1]\n"
	      "                     for IPv6; port 0 lets the kernel choose (printed);\n"
	      "                     http://ADDR:PORT/ is a live page, /api/stat its JSON\n"
	      "  --listen-any       allow a non-loopback ADDR (0.0.0.0, [::], a LAN address)\n"
	      "  --allow-user NAME  also serve this local user's scrapers (repeatable; by\n"
	      "                     default only this user's and root's: the kernel names\n"
	      "                     the owner of each loopback scraper's socket)\n"
	      "  --token-file FILE  serve scrapers on other hosts that send Authorization:\n"
	      "                     Bearer TOKEN, TOKEN the file's first line (the file\n"
	      "                     yours, mode 0600 or stricter); without it they get 401\n"
	      "  -h, --help         print this help\n"
	      "\n"
	      "shared:NAME shows the shared limiter NAME instead: its rule as it runs and as\n"
	      "it was created, the last sluice set, what it would admit now and the pids\n"
	      "that use it.\n"
	      "\n"
	      "It reads the status records (stat-PID) of the private directory\n"
	      "($XDG_RUNTIME_DIR/sluice, /run/sluice for root, else /dev/shm/sluice-UID)\n"
	      "that every process with rules keeps once it uses a matching socket, and\n"
	      "removes those of processes that died. Circuit breakers (SLUICE_BREAK) are\n"
	      "read from the break-PID segments there: their counters, and each\n"
	      "destination's state, failures in the window and time to the next probe.\n"
	      "Examples: sluice stat\n"
	      "          sluice stat --json 1234\n"
	      "          sluice stat --prometheus 1234\n"
	      "          sluice stat --watch=0.5\n"
	      "          sluice stat --listen 127.0.0.1:9464\n"
	      "          sluice stat --json shared:uploads\n"
	      "Exit status: 0; 1 if PID (or shared:NAME) runs no sluice or the --listen\n"
	      "socket cannot be set up; 2 on a usage error.\n",
	      out);
}

int sl__cli_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		{"json", no_argument, NULL, 'j'},
		{"prometheus", no_argument, NULL, 'p'},
		{"watch", optional_argument, NULL, 'w'},
		{"listen", required_argument, NULL, 'l'},
		{"listen-any", no_argument, NULL, 'a'},
		{"allow-user", required_argument, NULL, 'u'},
		{"token-file", required_argument, NULL, 't'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	enum fmt fmt = FMT_TEXT;
	double watch = 0;
	const char *listen_text = NULL;
	bool listen_any = false, fmt_given = false, access_given = false;
	static struct sl_metrics_access acc;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			fmt = FMT_JSON;
			fmt_given = true;
			break;
		case 'p':
			fmt = FMT_PROM;
			fmt_given = true;
			break;
		case 'l':
			listen_text = optarg;
			break;
		case 'a':
			listen_any = true;
			break;
		case 'u':
		case 't':
			access_given = true;
			if ((c == 'u' ? sl__cli_access_user(&acc, optarg)
				      : sl__cli_access_token(&acc, optarg)) != 0)
				return 2;
			break;
		case 'w': {
			char *end = NULL;
			watch = optarg ? strtod(optarg, &end) : 1.0;
			if ((optarg && (*end != '\0' || end == optarg)) ||
			    !(watch >= 0.1 && watch <= 3600)) {
				fprintf(stderr,
					"sluice stat: --watch=%s: expected seconds from 0.1 to 3600\n",
					optarg);
				return 2;
			}
			break;
		}
		case 'h':
			stat_usage(stdout);
			return 0;
		default:
			stat_usage(stderr);
			return 2;
		}
	}
	int pid = 0;
	const char *shared = NULL;
	if (optind < argc && strncmp(argv[optind], "shared:", 7) == 0) {
		shared = argv[optind] + 7;
		if (optind + 1 < argc || fmt == FMT_PROM || watch != 0) {
			stat_usage(stderr);
			return 2;
		}
		return report_shared(stdout, fmt, shared);
	}
	if (optind < argc) {
		char *end;
		long v = strtol(argv[optind], &end, 10);
		if (*end != '\0' || v <= 0 || v > 0x7fffffff || optind + 1 < argc) {
			stat_usage(stderr);
			return 2;
		}
		pid = (int)v;
	}
	if ((listen_any || access_given) && listen_text == NULL) {
		fprintf(stderr, "sluice stat: %s needs --listen ADDR:PORT\n",
			listen_any ? "--listen-any" : "--allow-user/--token-file");
		return 2;
	}
	if (listen_text != NULL) {
		if (pid != 0 || watch != 0 || (fmt_given && fmt != FMT_PROM)) {
			fputs("sluice stat: --listen serves every process in the --prometheus format: "
			      "it takes no PID, --json or --watch\n",
			      stderr);
			return 2;
		}
		return sl__cli_metrics_serve(listen_text, listen_any, &acc);
	}
	/* Only where a person reads the listing: not for usage errors, not for
	 * a --listen server. */
	sl__cli_old_note();
	if (watch == 0)
		return report(stdout, fmt, pid);
	for (;;) {
		/* Like top: clear the screen, report, sleep; until a signal. */
		if (fmt == FMT_TEXT)
			fputs("\033[H\033[2J", stdout);
		int rc = report(stdout, fmt, pid);
		if (rc != 0)
			return rc;
		struct timespec ts = {(time_t)watch, (long)((watch - (double)(time_t)watch) * 1e9)};
		nanosleep(&ts, NULL);
	}
}
