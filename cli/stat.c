/*
 * stat.c - `sluice stat [--json | --prometheus] [--watch[=SECONDS]] [PID]`:
 * the processes of this user that run the shim, their rules and counters.
 *
 * It reads each process's record in /dev/shm (shm.c) without locks: the
 * counters are independent relaxed atomics, so a line may mix values a few
 * calls apart, never torn ones. Records of dead processes are removed as
 * they are found. "available" is what the rule's limiter would admit right
 * now (tokens for a bucket, room for a window, free slots for conns),
 * read from the process's limiter or from the shared one.
 *
 * Output formats: text (one block per process); --json, one object
 * {"processes":[...]} with the fields of SLUICE_STATS plus "available",
 * "configured" (the rule as started) and "rule" (as now, after `sluice set`);
 * --prometheus, the text exposition format 0.0.4 (counters *_total, gauges),
 * one sample per process and rule, labelled pid, program, rule, spec.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

enum fmt { FMT_TEXT, FMT_JSON, FMT_PROM };

#define MAX_PROCS 4096

/* One rule's view, copied out of the mappings. */
struct rule_view {
	char configured[SL_RULE_TEXT_MAX];
	char now[SL_RULE_TEXT_MAX];
	char shared[SL_SHARED_NAME_MAX];
	const char *op, *scope, *action;
	uint64_t c[7]; /* calls admitted delayed refused delay_ns max_delay_ns bytes */
	uint64_t available;
	bool avail_known;
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

/* Fill v from rule i of record r. */
static void view_rule(const struct sl_shm_stat *r, uint32_t i, struct rule_view *v)
{
	memset(v, 0, sizeof(*v));
	snprintf(v->configured, sizeof(v->configured), "%s", r->rules[i]);
	snprintf(v->now, sizeof(v->now), "%s", r->rules[i]);
	const struct sl_rstats *s = &r->stats[i];
	const _Atomic uint64_t *f[7] = { &s->calls, &s->admitted, &s->delayed, &s->refused,
					 &s->delay_ns, &s->max_delay_ns, &s->bytes };
	for (int k = 0; k < 7; k++)
		v->c[k] = ld(f[k]);
	struct sl_rule rule;
	v->op = v->scope = v->action = "?";
	if (sl__cli_rule_of(r->rules[i], &rule) != 0)
		return;
	v->op = sl_op_name((enum sl_op)rule.op);
	v->scope = sl_scope_name((enum sl_scope)rule.scope);
	v->action = sl_action_name((enum sl_action)rule.action);
	snprintf(v->shared, sizeof(v->shared), "%s", rule.shared);
	const struct sl_tunable *t = NULL;
	struct sl_shm_shared *seg = NULL;
	const char *why;
	if (rule.shared[0] != '\0') {
		seg = sl__cli_shared_open(rule.shared, false, NULL, &why);
		t = seg != NULL ? &seg->lim : NULL;
	} else if (rule.scope == SL_SCOPE_PROCESS && sl_tunable_validate(&r->lims[i])) {
		t = &r->lims[i];
	}
	if (t != NULL) {
		sl__cli_current_text(r->rules[i], &sl_tunable_current(t)->params, v->now,
				     sizeof(v->now));
		v->available = sl_limiter_available(&t->head, now_ns());
		v->avail_known = true;
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

static void print_text(FILE *out, const struct sl_shm_stat *r, const struct rule_view *v)
{
	fprintf(out, "pid %u  %s%s\n", r->pid, r->program, r->active ? "" : "  (inactive)");
	for (uint32_t i = 0; i < r->n_rules; i++) {
		const struct rule_view *x = &v[i];
		fprintf(out, "  rule %u  %s", i + 1, x->now);
		if (strcmp(x->now, x->configured) != 0)
			fprintf(out, "  (started as %s)", x->configured);
		fputc('\n', out);
		fprintf(out, "    calls %llu  admitted %llu  delayed %llu  refused %llu  bytes %llu\n",
			(unsigned long long)x->c[0], (unsigned long long)x->c[1],
			(unsigned long long)x->c[2], (unsigned long long)x->c[3],
			(unsigned long long)x->c[6]);
		fprintf(out, "    delay total %.3f s  max %.3f s", (double)x->c[4] / 1e9,
			(double)x->c[5] / 1e9);
		if (x->avail_known)
			fprintf(out, "  available %llu", (unsigned long long)x->available);
		fputc('\n', out);
	}
}

static void print_json(FILE *out, const struct sl_shm_stat *r, const struct rule_view *v,
		       bool first)
{
	fprintf(out, "%s{\"pid\":%u,\"program\":", first ? "" : ",", r->pid);
	json_str(out, r->program);
	fprintf(out, ",\"active\":%s,\"rules\":[", r->active ? "true" : "false");
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
		if (x->avail_known)
			fprintf(out, ",\"available\":%llu}", (unsigned long long)x->available);
		else
			fputs(",\"available\":null}", out);
	}
	fputs("]}", out);
}

/* Prometheus metric families: name, type, help, counter index (-1: available). */
static const struct {
	const char *name, *type, *help;
	int k;
} prom_metrics[] = {
	{ "sluice_calls_total", "counter", "Calls the rule matched.", 0 },
	{ "sluice_admitted_total", "counter", "Matched calls that went through.", 1 },
	{ "sluice_delayed_total", "counter",
	  "Matched calls that waited (non-blocking: answered EAGAIN or cut short).", 2 },
	{ "sluice_refused_total", "counter", "Matched calls that were refused.", 3 },
	{ "sluice_delay_seconds_total", "counter",
	  "Time matched calls waited (non-blocking: their fds were held back).", 4 },
	{ "sluice_delay_max_seconds", "gauge", "Longest wait of one call.", 5 },
	{ "sluice_bytes_total", "counter", "Bytes moved by admitted calls.", 6 },
	{ "sluice_available", "gauge", "Units the limiter would admit now.", -1 },
};

static void print_prom(FILE *out, int n, struct sl_shm_stat *const *recs,
		       struct rule_view *const *views)
{
	for (size_t m = 0; m < sizeof(prom_metrics) / sizeof(prom_metrics[0]); m++) {
		fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", prom_metrics[m].name, prom_metrics[m].help,
			prom_metrics[m].name, prom_metrics[m].type);
		for (int p = 0; p < n; p++)
			for (uint32_t i = 0; i < recs[p]->n_rules; i++) {
				const struct rule_view *x = &views[p][i];
				int k = prom_metrics[m].k;
				if (k < 0 && !x->avail_known)
					continue;
				fprintf(out, "%s{pid=\"%u\",program=", prom_metrics[m].name, recs[p]->pid);
				prom_str(out, recs[p]->program);
				fprintf(out, ",rule=\"%u\",spec=", i + 1);
				prom_str(out, x->now);
				fputs("} ", out);
				if (k == 4 || k == 5)
					fprintf(out, "%.9f\n", (double)x->c[k] / 1e9);
				else
					fprintf(out, "%llu\n",
						(unsigned long long)(k < 0 ? x->available : x->c[k]));
			}
	}
}

/* One report of every process (pid 0) or of one. Returns 0, or 1 if the
 * one pid asked for has no record. */
static int report(FILE *out, enum fmt fmt, int only_pid)
{
	static int pids[MAX_PROCS];
	static struct sl_shm_stat *recs[MAX_PROCS];
	static struct rule_view views[MAX_PROCS][SL_MAX_RULES];
	static struct rule_view *vptr[MAX_PROCS];
	int n = 0, npids = only_pid ? 1 : sl__cli_record_pids(pids, MAX_PROCS);
	if (only_pid)
		pids[0] = only_pid;
	for (int p = 0; p < npids; p++) {
		const char *why;
		struct sl_shm_stat *r = sl__cli_record_open(pids[p], false, NULL, &why);
		if (r == NULL) {
			if (only_pid) {
				fprintf(stderr, "sluice stat: process %d: %s\n", only_pid,
					strcmp(why, "gone") == 0 || strcmp(why, strerror(ENOENT)) == 0
						? "not running sluice (no record)" : why);
				return 1;
			}
			continue;
		}
		for (uint32_t i = 0; i < r->n_rules; i++)
			view_rule(r, i, &views[n][i]);
		vptr[n] = views[n];
		recs[n++] = r;
	}
	if (fmt == FMT_JSON) {
		fputs("{\"processes\":[", out);
		for (int p = 0; p < n; p++)
			print_json(out, recs[p], views[p], p == 0);
		fputs("]}\n", out);
	} else if (fmt == FMT_PROM) {
		print_prom(out, n, recs, vptr);
	} else {
		if (n == 0)
			fputs("no process of this user is running sluice\n", out);
		for (int p = 0; p < n; p++)
			print_text(out, recs[p], views[p]);
	}
	for (int p = 0; p < n; p++)
		sl__cli_record_close(recs[p]);
	fflush(out);
	return 0;
}

static void stat_usage(FILE *out)
{
	fputs("Usage: sluice stat [--json | --prometheus] [--watch[=SECONDS]] [PID]\n"
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
	      "  -h, --help         print this help\n"
	      "\n"
	      "It reads /dev/shm/sluice-UID-stat-PID, which every process with rules keeps,\n"
	      "and removes those of processes that died.\n"
	      "Examples: sluice stat\n"
	      "          sluice stat --json 1234\n"
	      "          sluice stat --prometheus 1234\n"
	      "          sluice stat --watch=0.5\n"
	      "Exit status: 0; 1 if PID runs no sluice; 2 on a usage error.\n",
	      out);
}

int sl__cli_stat(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, 'p' },
		{ "watch", optional_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	enum fmt fmt = FMT_TEXT;
	double watch = 0;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			fmt = FMT_JSON;
			break;
		case 'p':
			fmt = FMT_PROM;
			break;
		case 'w': {
			char *end = NULL;
			watch = optarg ? strtod(optarg, &end) : 1.0;
			if ((optarg && (*end != '\0' || end == optarg)) || !(watch >= 0.1 && watch <= 3600)) {
				fprintf(stderr, "sluice stat: --watch=%s: expected seconds from 0.1 to 3600\n",
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
	if (optind < argc) {
		char *end;
		long v = strtol(argv[optind], &end, 10);
		if (*end != '\0' || v <= 0 || v > 0x7fffffff || optind + 1 < argc) {
			stat_usage(stderr);
			return 2;
		}
		pid = (int)v;
	}
	if (watch == 0)
		return report(stdout, fmt, pid);
	for (;;) {
		/* Like top: clear the screen, report, sleep; until a signal. */
		if (fmt == FMT_TEXT)
			fputs("\033[H\033[2J", stdout);
		int rc = report(stdout, fmt, pid);
		if (rc != 0)
			return rc;
		struct timespec ts = { (time_t)watch, (long)((watch - (double)(time_t)watch) * 1e9) };
		nanosleep(&ts, NULL);
	}
}
