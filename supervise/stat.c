/* SPDX-License-Identifier: MIT */
/*
 * stat.c - the live record of each supervised process, so that `sluice stat`
 * shows it and `sluice set PID` retunes it exactly as for a process running
 * the preloaded library.
 *
 * The supervisor creates the segment stat-TGID in the user's private
 * directory (common/segment.h; the layout of common/shm_format.h: built whole
 * with its magic, then renamed over any stale record of that pid), keeps
 * the process's per=process limiters in it (tunable, so `sluice set`
 * changes them in place) and counts every matched call in it. The record is
 * removed when the supervisor forgets the process (it exited) and at the
 * end; then, with SLUICE_STATS, the process's line is appended as the
 * preload appends it (common/stats_json.h), from the record's counters. If the segment cannot be made, the process's limiters live in the
 * supervisor's private memory and it is not shown.
 */
#include "stat.h"
#include "kernel.h"
#include "notif.h"
#include "state.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "privfile.h"
#include "segment.h"
#include "shm_format.h"
#include "stats_json.h"

static void rec_name(char *out, size_t cap, pid_t tgid)
{
	snprintf(out, cap, SL_SHM_STAT_NAME, (int)tgid);
}

static uint64_t start_ticks(pid_t tgid)
{
	char buf[1024];
	return sl_sup_proc_text(tgid, "stat", buf, sizeof(buf)) ? sl_shm_start_ticks(buf) : 0;
}

struct rec_new {
	const struct sl_sup *s;
	const struct sl_sup_proc *p;
	uint64_t now_ns;
};

/* Fill a new record (sl_seg_open's init): header, rule texts, limiters,
 * then the magic. */
static int rec_init(void *map, size_t size, void *arg)
{
	const struct rec_new *a = arg;
	const struct sl_policy *pol = &a->s->policy;
	struct sl_shm_stat *r = map;
	r->version = SL_SHM_VERSION;
	r->size = size;
	r->pid = (uint32_t)a->p->tgid;
	r->uid = (uint32_t)geteuid();
	r->start_ticks = start_ticks(a->p->tgid);
	r->n_rules = pol->n_rules < SL_MAX_RULES ? pol->n_rules : SL_MAX_RULES;
	r->active = !a->p->pass; /* SLUICE_ONLY / SLUICE_SKIP */
	snprintf(r->program, sizeof(r->program), "%s", a->p->comm);
	for (uint32_t i = 0; i < r->n_rules; i++) {
		struct sl_params prm;
		sl_rule_format(&pol->rules[i], sl_shm_stat_rule(r, i), SL_RULE_TEXT_MAX);
		sl_params_of(&pol->rules[i], &prm);
		sl_tunable_init(&sl_shm_stat_lims(r)[i], &prm, a->now_ns);
	}
	/* Release: a reader that sees the magic sees the fields above (cli/shm.c
	 * reads it with an acquire fence). */
	atomic_thread_fence(memory_order_release);
	r->magic = SL_SHM_MAGIC_STAT;
	return 0;
}

void sl_sup_stat_open(const struct sl_sup *s, struct sl_sup_proc *p, uint64_t now_ns)
{
	char name[32], err[SL_ERR_MAX];
	struct rec_new arg = {s, p, now_ns};
	struct sl_seg seg;
	uint32_t n = s->policy.n_rules < SL_MAX_RULES ? s->policy.n_rules : SL_MAX_RULES;
	rec_name(name, sizeof(name), p->tgid);
	if (sl_seg_open(name, SL_SEG_WRITE | SL_SEG_REPLACE, sl_shm_stat_size(n), rec_init, &arg,
			&seg, err, sizeof(err)) < 0)
		return;
	p->rec = seg.map;
	p->rec_size = seg.size;
}

/* SLUICE_STATS: p's line, appended when the supervisor forgets it (the
 * process ended), from its record's counters; warned of once if the file
 * is refused. */
static void stats_write(const struct sl_sup *s, const struct sl_sup_proc *p)
{
	static char buf[32768];
	static bool warned;
	const char *file = s->policy.stats_file;
	if (file[0] == '\0' || p->pass)
		return;
	size_t len = sl_stats_json(buf, sizeof(buf) - 3, (int)p->tgid, p->comm, &s->policy,
				   sl_shm_stat_stats(p->rec), p->rec->n_rules);
	buf[len++] = '}';
	buf[len++] = '\n';
	char path[SL_PATH_MAX + 32], why[128];
	sl_stats_path(file, (int)p->tgid, path, sizeof(path));
	int fd = sl_file_open_private(path, why, sizeof(why));
	if (fd < 0 || write(fd, buf, len) != (ssize_t)len) {
		if (!warned)
			sl_sup_warn("SLUICE_STATS=%s: cannot write %s: %s", file, path,
				    fd < 0 ? why : "short write");
		warned = true;
	}
	if (fd >= 0)
		close(fd);
}

void sl_sup_stat_close(const struct sl_sup *s, struct sl_sup_proc *p)
{
	if (p->rec == NULL)
		return;
	stats_write(s, p);
	char name[32];
	rec_name(name, sizeof(name), p->tgid);
	sl_seg_unlink(name);
	munmap(p->rec, p->rec_size);
	p->rec = NULL;
}

struct sl_limiter *sl_sup_stat_lim(struct sl_sup_proc *p, unsigned i)
{
	return p->rec != NULL ? &sl_shm_stat_lims(p->rec)[i].head : NULL;
}

void sl_sup_stat_refused(struct sl_sup_proc *p, unsigned i)
{
	if (p->rec != NULL)
		sl_count_refused(&sl_shm_stat_stats(p->rec)[i]);
}

void sl_sup_stat_bytes(struct sl_sup_proc *p, uint32_t rules, uint64_t n)
{
	if (p->rec == NULL || n == 0)
		return;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1)
		sl_count_add(&sl_shm_stat_stats(p->rec)[__builtin_ctz(rest)].bytes, n);
}

void sl_sup_stat_end(struct sl_sup_proc *p, uint32_t rules, bool ok, uint32_t delayed,
		     uint64_t waited_ns)
{
	if (p->rec == NULL)
		return;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		struct sl_rstats *st = &sl_shm_stat_stats(p->rec)[i];
		sl_count_end(st, ok, 0);
		if ((delayed >> i) & 1)
			sl_count_delayed(st, waited_ns);
	}
}

void sl_sup_stat_adapt(const struct sl_sup *s, unsigned x, const struct sl_adapt *a,
		       uint64_t in_flight)
{
	struct sl_adapt_view w;
	sl_adapt_view(a, &w);
	for (size_t k = 0; k < s->procs_cap; k++)
		for (struct sl_sup_proc *p = s->procs[k]; p != NULL; p = p->next)
			if (p->rec != NULL && x % SL_MAX_RULES < p->rec->n_rules)
				sl_shm_adapt_put(sl_shm_stat_slot(p->rec, x), &w, in_flight);
}
