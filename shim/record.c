/* SPDX-License-Identifier: MIT */
/*
 * record.c - this process's status record (layout in shm_format.h): its
 * rule texts, counters and per=process limiters, which `sluice stat` reads
 * and `sluice set` retunes in place.
 *
 * Lifetime. At init the record is private memory, sized by the rules
 * (sl_shm_stat_size). It becomes the file stat-PID of the private directory
 * (segment.h) only when first needed: when a socket is first classified as
 * one a rule may apply to (fdtab.c), or before a call first waits (act.c).
 * A process that never touches a matching socket leaves no file. Publishing
 * builds the file under a random name with a copy of the record, renames it
 * into place, copies the record again and maps the file over the private
 * memory at the same address (MAP_FIXED), so that every pointer into the
 * record (limiters, counters) stays valid. The file goes at exit (the
 * destructor), at _exit and _Exit (exit.c), and otherwise (SIGKILL, a
 * crash) by the next reclaim: every
 * process with rules that starts looks, at most every SL_REC_RECLAIM_S
 * seconds per user (a stamp file), for records of processes that no longer
 * exist (kill(pid, 0) fails with ESRCH) and removes them; `sluice stat`
 * does the same. A process with rules also removes, at start, a record left
 * under its own pid by the image before an exec; one exec'd into a program
 * without rules does not look, and `sluice stat` tells such a record by its
 * executable (exe_dev, exe_ino) and removes it.
 *
 * Fork. The child's record is a private copy (its own buckets, as before
 * fork) at the same address, published again on the child's own first
 * need: 1000 forked children that never open a matching socket create no
 * file at all.
 *
 * Trade-offs. While one thread publishes, the others that already hold
 * classified sockets (only possible in a fork child, whose sockets were
 * classified by its parent) may count a few calls into the private copy in
 * the microseconds between the last copy and the remap: those counts and
 * limiter updates are lost. A child that only uses sockets inherited from
 * its parent and never waits is not visible to `sluice stat`. Without a
 * usable private directory the record stays private (a warning at level
 * warn) and everything else works.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "real.h"
#include "record.h"
#include "sandboxed.h"
#include "segment.h"
#include "shm.h"
#include "state.h"

_Atomic int sl__rec_state = SL_REC_OFF;
static size_t rec_bytes; /* size of the mapping at sl__st.rec */

#define SL_REC_MAX_BYTES                                                                           \
	(sizeof(struct sl_shm_stat) +                                                              \
	 SL_MAX_RULES * (sizeof(struct sl_tunable) + sizeof(struct sl_rstats) + SL_RULE_TEXT_MAX + \
			 3 * sizeof(struct sl_shm_adapt)) +                                        \
	 SL_SHM_TSLOTS * SL_SHM_TRULES * sizeof(struct sl_tcount))

/* Field 22 of /proc/self/stat, the start time in clock ticks; 0 if unknown. */
static uint64_t start_ticks(void)
{
	char buf[1024];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = SL_REAL(read)(fd, buf, sizeof(buf) - 1);
	SL_REAL(close)(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return sl_shm_start_ticks(buf);
}

static void rec_name(char *out, size_t cap, int pid)
{
	snprintf(out, cap, SL_SHM_STAT_NAME, pid);
}

/* Map a private record for the policy's rules; a file is made later (if
 * `file`) on first need. */
int sl__shm_rec_open_unsync(bool file)
{
	uint32_t n = sl__st.policy.n_rules < SL_MAX_RULES ? sl__st.policy.n_rules : SL_MAX_RULES;
	if (sl__st.rec != NULL) {
		sl__shm_rec_remove();
		munmap(sl__st.rec, rec_bytes);
		sl__st.rec = NULL;
	}
	rec_bytes = sl_shm_stat_size(n);
	sl__st.rec = sl__map(rec_bytes);
	if (sl__st.rec == NULL)
		return -1;
	sl__st.rec->n_rules = n;
	atomic_store_explicit(&sl__rec_state, SL_REC_OFF, memory_order_relaxed);
	if (file) {
		char name[32];
		(void)sl_seg_dir(); /* chosen once per process (segment.h) */
		rec_name(name, sizeof(name), (int)getpid());
		sl_seg_unlink(name); /* left by the image before an exec */
		sl__rec_reclaim();
	}
	return 0;
}

/* Fill the record's header and rule texts (the limiters are initialised by
 * the caller), then publish it with the magic; from then on it may become
 * a file (if `active`). */
void sl__shm_rec_fill_unsync(const struct sl_policy *p, bool active)
{
	struct sl_shm_stat *r = sl__st.rec;
	r->version = SL_SHM_VERSION;
	r->size = sl_shm_stat_size(r->n_rules);
	r->pid = (uint32_t)getpid();
	r->uid = (uint32_t)geteuid();
	r->start_ticks = 0; /* read when the file is made */
	r->active = active;
	snprintf(r->program, sizeof(r->program), "%s", program_invocation_short_name);
	for (uint32_t i = 0; i < r->n_rules; i++)
		sl_rule_format(&p->rules[i], sl_shm_stat_rule(r, i), SL_RULE_TEXT_MAX);
	/* Release: a reader that sees the magic sees the fields above (readers
	 * in other processes use an acquire fence after reading it). */
	atomic_thread_fence(memory_order_release);
	r->magic = SL_SHM_MAGIC_STAT;
	/* Relaxed: init runs before any wrapper (single-threaded). */
	const bool wanted = active && (r->n_rules > 0 || p->n_breaks > 0);
	atomic_store_explicit(&sl__rec_state, wanted ? SL_REC_PRIVATE : SL_REC_OFF,
			      memory_order_relaxed);
}

/* Mark the record active or not (SLUICE_ONLY/SKIP decided after init). */
void sl__shm_rec_set_active_unsync(bool active)
{
	if (sl__st.rec != NULL)
		sl__st.rec->active = active;
}

static int rec_copy(void *map, size_t size, void *arg)
{
	memcpy(map, arg, size);
	return 0;
}

void sl__rec_publish_slow(void)
{
	/* In a seccomp sandbox the files and maps it takes are not ours to
	 * make: the record stays private (sluice stat does not see it). */
	if (sl__sandboxed())
		return;
	int expect = SL_REC_PRIVATE;
	/* Acquire/release: the winner owns the remap; losers wait below for
	 * its final store (release) before they count into the record. */
	if (!atomic_compare_exchange_strong_explicit(&sl__rec_state, &expect, SL_REC_PUBLISHING,
						     memory_order_acquire, memory_order_acquire)) {
		while (atomic_load_explicit(&sl__rec_state, memory_order_acquire) ==
		       SL_REC_PUBLISHING)
			sched_yield();
		return;
	}
	int saved = errno;
	int busy = sl__busy;
	sl__busy = 1;
	struct sl_shm_stat *rec = sl__st.rec;
	int state = SL_REC_OFF;
	if (rec == NULL || rec->pid != (uint32_t)getpid()) {
		/* A vfork child shares our memory: never remap it from there. */
		state = SL_REC_PRIVATE;
	} else {
		size_t size = sl_shm_stat_size(rec->n_rules);
		char name[32], err[SL_ERR_MAX];
		struct sl_seg seg;
		rec_name(name, sizeof(name), (int)getpid());
		struct stat exe;
		rec->start_ticks = start_ticks();
		rec->exe_dev = rec->exe_ino = 0;
		if (stat("/proc/self/exe", &exe) == 0) {
			rec->exe_dev = (uint64_t)exe.st_dev;
			rec->exe_ino = (uint64_t)exe.st_ino;
		}
		if (sl_seg_open(name, SL_SEG_WRITE | SL_SEG_REPLACE | SL_SEG_KEEPFD, size, rec_copy,
				rec, &seg, err, sizeof(err)) >= 0) {
			memcpy(seg.map, rec, size); /* what counted meanwhile */
			void *m = mmap(rec, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
				       seg.fd, 0);
			sl_seg_close(&seg);
			if (m == rec)
				state = SL_REC_FILE;
			else
				sl_seg_unlink(name);
		} else {
			sl_log(SL_LOG_WARN, "no status record for sluice stat and sluice set: %s",
			       err);
		}
	}
	expect = SL_REC_PUBLISHING;
	/* Release: pairs with the waiters' acquire above. If exit removed the
	 * record meanwhile (state OFF), the file just made goes too. */
	if (!atomic_compare_exchange_strong_explicit(&sl__rec_state, &expect, state,
						     memory_order_release, memory_order_relaxed) &&
	    state == SL_REC_FILE) {
		char name[32];
		rec_name(name, sizeof(name), (int)getpid());
		sl_seg_unlink(name);
	}
	sl__busy = busy;
	errno = saved;
}

/* The fork child: a private copy of the record at the same address (its
 * own buckets, as before fork), to be published on its own first need.
 * Counters are reset by the caller. */
void sl__shm_rec_fork_child(void)
{
	static char copy[SL_REC_MAX_BYTES];
	struct sl_shm_stat *rec = sl__st.rec;
	if (rec == NULL)
		return;
	/* Relaxed: the child has one thread. */
	int st = atomic_load_explicit(&sl__rec_state, memory_order_relaxed);
	size_t size = sl_shm_stat_size(rec->n_rules);
	if ((st == SL_REC_FILE || st == SL_REC_PUBLISHING) && size <= sizeof(copy)) {
		memcpy(copy, rec, size);
		void *m = mmap(rec, size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		if (m == rec)
			memcpy(rec, copy, size);
	}
	rec->pid = (uint32_t)getpid();
	rec->start_ticks = 0;
	atomic_store_explicit(&sl__rec_state, st == SL_REC_OFF ? SL_REC_OFF : SL_REC_PRIVATE,
			      memory_order_relaxed);
}

/* Remove this process's record file (exit, _exit), and make no other. */
void sl__shm_rec_remove(void)
{
	if (sl__sandboxed()) /* no getpid or unlink of ours there: stat removes it */
		return;
	/* pid 0: the record of a failed init, never filled in; another pid: a
	 * vfork child, which shares our memory. */
	if (sl__st.rec == NULL || (sl__st.rec->pid != 0 && sl__st.rec->pid != (uint32_t)getpid()))
		return;
	/* Acq_rel: after a publisher's final store (see sl__rec_publish_slow). */
	if (atomic_exchange_explicit(&sl__rec_state, SL_REC_OFF, memory_order_acq_rel) !=
	    SL_REC_FILE)
		return;
	char name[32];
	rec_name(name, sizeof(name), (int)getpid());
	sl_seg_unlink(name);
}

static int rec_reclaim_one(const char *name, void *arg)
{
	(void)arg;
	const char *digits = name + strlen(SL_SHM_STAT_PREFIX);
	char *end;
	long pid = strtol(digits, &end, 10);
	if (*end != '\0' || end == digits || pid <= 0 || pid > 0x7fffffff || pid == getpid())
		return 0;
	if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
		sl_seg_unlink(name);
	return 0;
}

void sl__rec_reclaim(void)
{
	int saved = errno;
	if (sl_seg_reclaim_due(SL_REC_RECLAIM_S)) {
		sl_seg_each(SL_SHM_STAT_PREFIX, rec_reclaim_one, NULL);
		sl_seg_sweep_tmp(60);
	}
	errno = saved;
}

static _Atomic uint64_t unclassified; /* when there is no stats record */

void sl__rec_unclassified(void)
{
	/* Relaxed: a statistic. */
	if (sl__st.rec != NULL)
		atomic_fetch_add_explicit(&sl__st.rec->unclassified, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&unclassified, 1, memory_order_relaxed);
}

uint64_t sl__rec_unclassified_count(void)
{
	if (sl__st.rec != NULL)
		return atomic_load_explicit(&sl__st.rec->unclassified, memory_order_relaxed);
	return atomic_load_explicit(&unclassified, memory_order_relaxed);
}

void sl__rec_unclassified_reset_unsync(void)
{
	atomic_store_explicit(&unclassified, 0, memory_order_relaxed);
}
