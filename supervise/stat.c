/*
 * stat.c - the live record of each supervised process, so that `sluice stat`
 * shows it and `sluice set PID` retunes it exactly as for a process running
 * the preloaded library.
 *
 * The supervisor creates /dev/shm/sluice-UID-stat-TGID (the layout of
 * shim/shm_format.h: mode 0600, created with O_EXCL | O_NOFOLLOW after
 * removing a stale file of that name, sized, filled, then published with
 * its magic), keeps the process's per=process limiters in it (tunable, so
 * `sluice set` changes them in place) and counts every matched call in it.
 * The record is removed when the supervisor forgets the process (it exited)
 * and at the end. Without /dev/shm the limiters live in private memory and
 * the process is not shown.
 */
#include "internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm_format.h"

static void rec_path(char *out, size_t cap, pid_t tgid)
{
	snprintf(out, cap, SL_SHM_STAT_FMT, (unsigned)getuid(), (int)tgid);
}

static uint64_t start_ticks(pid_t tgid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)tgid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return sl_shm_start_ticks(buf);
}

void sl_sup_stat_open(const struct sl_sup *s, struct sl_sup_proc *p, uint64_t now_ns)
{
	char path[128];
	rec_path(path, sizeof(path), p->tgid);
	unlink(path);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	void *m = MAP_FAILED;
	if (ftruncate(fd, sizeof(struct sl_shm_stat)) == 0)
		m = mmap(NULL, sizeof(struct sl_shm_stat), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		unlink(path);
		return;
	}
	struct sl_shm_stat *r = m;
	const struct sl_policy *pol = &s->policy;
	r->version = SL_SHM_VERSION;
	r->size = sizeof(*r);
	r->pid = (uint32_t)p->tgid;
	r->uid = (uint32_t)getuid();
	r->start_ticks = start_ticks(p->tgid);
	r->n_rules = pol->n_rules;
	r->active = !p->pass; /* SLUICE_ONLY / SLUICE_SKIP */
	snprintf(r->program, sizeof(r->program), "%s", p->comm);
	for (uint32_t i = 0; i < pol->n_rules && i < SL_MAX_RULES; i++) {
		struct sl_params prm;
		sl_rule_format(&pol->rules[i], r->rules[i], sizeof(r->rules[i]));
		sl_shm_rule_params(&pol->rules[i], &prm);
		sl_tunable_init(&r->lims[i], &prm, now_ns);
	}
	/* Release: a reader that sees the magic sees the fields above (cli/shm.c
	 * reads it with an acquire fence). */
	atomic_thread_fence(memory_order_release);
	r->magic = SL_SHM_MAGIC_STAT;
	p->rec = r;
}

void sl_sup_stat_close(struct sl_sup_proc *p)
{
	if (p->rec == NULL)
		return;
	char path[128];
	rec_path(path, sizeof(path), p->tgid);
	unlink(path);
	munmap(p->rec, sizeof(struct sl_shm_stat));
	p->rec = NULL;
}

struct sl_limiter *sl_sup_stat_lim(struct sl_sup_proc *p, unsigned i)
{
	return p->rec != NULL ? &p->rec->lims[i].head : NULL;
}

/* Relaxed: counters carry no data that a reader orders against. */
static void add(_Atomic uint64_t *v, uint64_t n)
{
	atomic_fetch_add_explicit(v, n, memory_order_relaxed);
}

void sl_sup_stat_decision(struct sl_sup_proc *p, unsigned i, bool admitted, uint64_t wait_ns)
{
	if (p->rec == NULL)
		return;
	struct sl_rstats *st = &p->rec->stats[i];
	add(&st->calls, 1);
	add(admitted ? &st->admitted : &st->refused, 1);
	if (admitted && wait_ns > 0)
		add(&st->delayed, 1);
}

void sl_sup_stat_wait(struct sl_sup_proc *p, unsigned i, bool first, uint64_t wait_ns)
{
	if (p->rec == NULL)
		return;
	struct sl_rstats *st = &p->rec->stats[i];
	if (first)
		sl_sup_stat_decision(p, i, true, wait_ns);
	add(&st->delay_ns, wait_ns);
	uint64_t m = atomic_load_explicit(&st->max_delay_ns, memory_order_relaxed);
	if (wait_ns > m) /* the supervisor is the record's only writer */
		atomic_store_explicit(&st->max_delay_ns, wait_ns, memory_order_relaxed);
}

void sl_sup_stat_bytes(struct sl_sup_proc *p, uint32_t rules, uint64_t n)
{
	if (p->rec == NULL || n == 0)
		return;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1)
		add(&p->rec->stats[__builtin_ctz(rest)].bytes, n);
}
