/* SPDX-License-Identifier: MIT */
/*
 * stat_break.c - the circuit breakers in `sluice stat`: each process's
 * the segment break-PID (common/shm_break.h, common/segment.h), checked, then shown as
 * text, JSON or Prometheus samples: each breaker's counters, and the state,
 * failures in the window and time to the next probe of each destination
 * (per=peer) or of the process (per=process).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "segment.h"
#include "shm_break.h"

static uint64_t mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Why the mapped file of pid must not be used, or NULL. */
static const char *brk_check(const struct sl_shm_break *b, int pid)
{
	if (b->magic != SL_SHM_MAGIC_BREAK)
		return "not a sluice breaker file (bad magic)";
	if (b->version != SL_SHM_BREAK_VERSION || b->size != sizeof(*b))
		return "written by another version of sluice";
	if (b->uid != getuid() || b->pid != (uint32_t)pid || b->n > SL_MAX_BREAKS)
		return "corrupt header";
	for (uint32_t i = 0; i < b->n; i++) {
		const struct sl_shm_break_rule *r = &b->rules[i];
		if (memchr(r->text, 0, sizeof(r->text)) == NULL || !sl_breaker_validate(&r->proc))
			return "corrupt breaker";
		for (unsigned k = 0; k < SL_SHM_BREAK_PEERS; k++)
			if (!sl_breaker_validate(&r->peers[k].b))
				return "corrupt breaker";
	}
	return NULL;
}

const struct sl_shm_break *sl__cli_break_open(int pid)
{
	char name[32], err[SL_ERR_MAX];
	struct sl_seg seg;
	snprintf(name, sizeof(name), SL_SHM_BREAK_NAME, pid);
	if (kill(pid, 0) != 0 && errno == ESRCH) {
		sl_seg_unlink(name); /* left by a process that died without its destructor */
		return NULL;
	}
	if (sl_seg_open(name, 0, sizeof(struct sl_shm_break), NULL, NULL, &seg, err, sizeof(err)) <
	    0)
		return NULL;
	struct sl_shm_break *b = seg.map;
	/* Acquire: pairs with the release fence before the shim writes the
	 * magic (sl__break_init_unsync). */
	atomic_thread_fence(memory_order_acquire);
	if (brk_check(b, pid) != NULL) {
		munmap(b, sizeof(*b));
		return NULL;
	}
	return b;
}

/* Remove the breaker segment of name if its process is gone (one that exec'd
 * a program without the library, or was killed, leaves it). */
static int sweep_one(const char *name, void *arg)
{
	(void)arg;
	char *end;
	const long pid = strtol(name + strlen(SL_SHM_BREAK_PREFIX), &end, 10);
	if (*end == '\0' && pid > 0 && pid <= 0x7fffffff && kill((pid_t)pid, 0) != 0 &&
	    errno == ESRCH)
		sl_seg_unlink(name);
	return 0;
}

void sl__cli_break_sweep(void)
{
	sl_seg_each(SL_SHM_BREAK_PREFIX, sweep_one, NULL);
}

void sl__cli_break_close(const struct sl_shm_break *b)
{
	if (b != NULL)
		munmap((void *)b, sizeof(*b));
}

static uint64_t ld(const _Atomic uint64_t *v)
{
	/* Relaxed: independent counters for a report. */
	return atomic_load_explicit((_Atomic uint64_t *)v, memory_order_relaxed);
}

/* Sum of rule r's counters: attempts failures fast_fails probes trips. */
static void brk_sum(const struct sl_shm_break_rule *r, uint64_t c[5])
{
	memset(c, 0, 5 * sizeof(c[0]));
	const unsigned n = r->scope == SL_SCOPE_PEER ? SL_SHM_BREAK_PEERS : 1;
	for (unsigned k = 0; k < n; k++) {
		const struct sl_breaker *b = r->scope == SL_SCOPE_PEER ? &r->peers[k].b : &r->proc;
		c[0] += ld(&b->attempts);
		c[1] += ld(&b->failures);
		c[2] += ld(&b->fast_fails);
		c[3] += ld(&b->probes);
		c[4] += ld(&b->trips);
	}
}

/* The k-th breaker of rule r in use: its destination text ("" for
 * per=process) and view; false past the last. */
static bool brk_entry(const struct sl_shm_break_rule *r, unsigned *k, char *dst, size_t cap,
		      struct sl_brk_view *v, uint64_t now)
{
	if (r->scope != SL_SCOPE_PEER) {
		if (*k > 0)
			return false;
		(*k)++;
		dst[0] = '\0';
		sl_breaker_view(&r->proc, now, v);
		return true;
	}
	for (; *k < SL_SHM_BREAK_PEERS; (*k)++) {
		const struct sl_shm_break_peer *e = &r->peers[*k];
		/* Acquire: pairs with the claimer's release of `ready`. */
		if (atomic_load_explicit((_Atomic uint32_t *)&e->ready, memory_order_acquire) == 0)
			continue;
		char ip[INET6_ADDRSTRLEN] = "?";
		if (e->family == 4 || e->family == 6)
			inet_ntop(e->family == 4 ? AF_INET : AF_INET6, e->addr, ip, sizeof(ip));
		snprintf(dst, cap, e->family == 6 ? "[%s]:%u" : "%s:%u", ip, e->port);
		sl_breaker_view(&e->b, now, v);
		(*k)++;
		return true;
	}
	return false;
}

void sl__cli_break_text(FILE *out, const struct sl_shm_break *b)
{
	if (b == NULL)
		return;
	const uint64_t now = mono_now();
	for (uint32_t i = 0; i < b->n; i++) {
		const struct sl_shm_break_rule *r = &b->rules[i];
		uint64_t c[5];
		brk_sum(r, c);
		fprintf(out, "  breaker %u  %s\n", i + 1, r->text);
		fprintf(out,
			"    attempts %llu  failures %llu  fast-failed %llu  probes %llu  trips %llu\n",
			(unsigned long long)c[0], (unsigned long long)c[1],
			(unsigned long long)c[2], (unsigned long long)c[3],
			(unsigned long long)c[4]);
		char dst[INET6_ADDRSTRLEN + 16];
		struct sl_brk_view v;
		unsigned shown = 0;
		for (unsigned k = 0; brk_entry(r, &k, dst, sizeof(dst), &v, now);) {
			if (++shown > 32) {
				fputs("    ...\n", out);
				break;
			}
			fprintf(out, "    %s  %s  failures %llu of %llu in the window",
				dst[0] != '\0' ? dst : "(process)",
				sl_breaker_state_name((enum sl_brk_state)v.state),
				(unsigned long long)v.failures, (unsigned long long)v.attempts);
			if (v.state == SL_BRK_OPEN)
				fprintf(out, "  next probe in %.3f s", (double)v.probe_in_ns / 1e9);
			fputc('\n', out);
		}
	}
}

static void json_text(FILE *out, const char *s)
{
	/* Breaker texts and addresses hold no quotes, backslashes or controls
	 * (canonical form); escape anyway. */
	fputc('"', out);
	for (; *s != '\0'; s++)
		if (*s == '"' || *s == '\\')
			fprintf(out, "\\%c", *s);
		else if ((unsigned char)*s >= 0x20)
			fputc(*s, out);
	fputc('"', out);
}

void sl__cli_break_json(FILE *out, const struct sl_shm_break *b)
{
	fputs(",\"breakers\":[", out);
	const uint64_t now = mono_now();
	for (uint32_t i = 0; b != NULL && i < b->n; i++) {
		const struct sl_shm_break_rule *r = &b->rules[i];
		uint64_t c[5];
		brk_sum(r, c);
		fprintf(out, "%s{\"index\":%u,\"breaker\":", i ? "," : "", i + 1);
		json_text(out, r->text);
		fprintf(out,
			",\"attempts\":%llu,\"failures\":%llu,\"fast_fails\":%llu,\"probes\":%llu,"
			"\"trips\":%llu,\"states\":[",
			(unsigned long long)c[0], (unsigned long long)c[1],
			(unsigned long long)c[2], (unsigned long long)c[3],
			(unsigned long long)c[4]);
		char dst[INET6_ADDRSTRLEN + 16];
		struct sl_brk_view v;
		bool first = true;
		for (unsigned k = 0; brk_entry(r, &k, dst, sizeof(dst), &v, now); first = false) {
			fprintf(out, "%s{\"peer\":", first ? "" : ",");
			if (dst[0] != '\0')
				json_text(out, dst);
			else
				fputs("null", out);
			fprintf(out,
				",\"state\":\"%s\",\"failures\":%llu,\"attempts\":%llu,"
				"\"probe_in_ns\":%llu}",
				sl_breaker_state_name((enum sl_brk_state)v.state),
				(unsigned long long)v.failures, (unsigned long long)v.attempts,
				(unsigned long long)v.probe_in_ns);
		}
		fputs("]}", out);
	}
	fputc(']', out);
}

static void prom_label(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s != '\0'; s++)
		if (*s == '\\' || *s == '"')
			fprintf(out, "\\%c", *s);
		else if (*s != '\n')
			fputc(*s, out);
	fputc('"', out);
}

void sl__cli_break_prom(FILE *out, int n, const int *pids, const char *const *programs,
			const struct sl_shm_break *const *brks)
{
	static const struct {
		const char *name, *type, *help;
		int k;
	} fam[] = {
		{"sluice_breaker_attempts_total", "counter", "Connects a breaker let through.", 0},
		{"sluice_breaker_failures_total", "counter", "Connects that failed (counted).", 1},
		{"sluice_breaker_fast_fails_total", "counter",
		 "Connects refused while open, with no system call.", 2},
		{"sluice_breaker_probes_total", "counter", "Half-open probe connects.", 3},
		{"sluice_breaker_trips_total", "counter", "Times a breaker opened.", 4},
		{"sluice_breaker_state", "gauge", "0 closed, 1 open, 2 half-open.", -1},
		{"sluice_breaker_window_failures", "gauge", "Failed connects in the window.", -2},
	};
	const uint64_t now = mono_now();
	bool any = false;
	for (int p = 0; p < n; p++)
		any = any || (brks[p] != NULL && brks[p]->n > 0);
	if (!any)
		return;
	for (size_t m = 0; m < sizeof(fam) / sizeof(fam[0]); m++) {
		fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", fam[m].name, fam[m].help, fam[m].name,
			fam[m].type);
		for (int p = 0; p < n; p++)
			for (uint32_t i = 0; brks[p] != NULL && i < brks[p]->n; i++) {
				const struct sl_shm_break_rule *r = &brks[p]->rules[i];
				if (fam[m].k >= 0) {
					uint64_t c[5];
					brk_sum(r, c);
					fprintf(out, "%s{pid=\"%d\",program=", fam[m].name,
						pids[p]);
					prom_label(out, programs[p]);
					fprintf(out, ",breaker=\"%u\",spec=", i + 1);
					prom_label(out, r->text);
					fprintf(out, "} %llu\n", (unsigned long long)c[fam[m].k]);
					continue;
				}
				char dst[INET6_ADDRSTRLEN + 16];
				struct sl_brk_view v;
				for (unsigned k = 0; brk_entry(r, &k, dst, sizeof(dst), &v, now);) {
					fprintf(out, "%s{pid=\"%d\",program=", fam[m].name,
						pids[p]);
					prom_label(out, programs[p]);
					fprintf(out, ",breaker=\"%u\",peer=", i + 1);
					prom_label(out, dst[0] != '\0' ? dst : "process");
					fprintf(out, "} %llu\n",
						(unsigned long long)(fam[m].k == -1 ? v.state
										    : v.failures));
				}
			}
	}
}
