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
 * end. If the segment cannot be made, the process's limiters live in the
 * supervisor's private memory and it is not shown.
 */
#include "stat.h"
#include "kernel.h"
#include "state.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "segment.h"
#include "shm_format.h"

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

void sl_sup_stat_close(struct sl_sup_proc *p)
{
	if (p->rec == NULL)
		return;
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
