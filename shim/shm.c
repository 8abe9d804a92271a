/* SPDX-License-Identifier: MIT */
/*
 * shm.c - the shared limiters of shared=NAME rules: segments shared-NAME of
 * the user's private directory (segment.h; layout in shm_format.h). The
 * status record is record.c's.
 *
 * The first process to use NAME builds the whole segment under a random
 * temporary name and links it into place (sl_seg_open): the final name only
 * ever shows a complete file, and of several processes starting at the same
 * moment exactly one link succeeds; the others open the winner's. Opening
 * checks the directory (owner, mode 0700, not a link), the file (owner, mode
 * 0600, size, not a link), the magic, the version, the header and the
 * limiter (sl_tunable_validate), and that the rule that created it differs
 * from this one at most in the limit and the burst; anything else is a
 * configuration error that names the file, the reason and the remedy, never
 * a crash. Forked children keep the mapping; exec'd programs open the file
 * again. A segment stays until `sluice rm shared:NAME`.
 *
 * Shared conns limiters also count, per process (by pid), the slots each
 * holds. When a shared conns limiter refuses, the processes of the table that
 * no longer exist (kill(pid, 0) fails with ESRCH) get their slots given
 * back: a holder killed with SIGKILL leaks nothing for longer than the next
 * refusal. Trade-offs: a process killed between taking a slot and counting
 * it (a few instructions) leaks that slot; a dead holder whose pid was
 * reused by a live process is not reclaimed until that process exits; a
 * process beyond the table's SL_SHM_HOLDERS entries is not tracked.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "real.h"
#include "segment.h"
#include "shm.h"
#include "shm_shared.h"
#include "state.h"

static struct sl_shm_shared *shared_segs[SL_MAX_RULES]; /* by rule index */
static _Atomic int holders_full_logged;

/* ---- shared limiters ------------------------------------------------------ */

/* Say once (per rule, per process) that s runs at another limit than r. */
static void shared_note(const struct sl_rule *r, const struct sl_shm_shared *s, const char *text)
{
	const struct sl_params *cur = &sl_tunable_current(&s->lim)->params;
	struct sl_params want;
	sl_params_of(r, &want);
	if (cur->amount == want.amount && cur->period_ns == want.period_ns &&
	    cur->burst == want.burst)
		return;
	struct sl_rule live = *r;
	char live_text[SL_RULE_TEXT_MAX], when[96];
	live.amount = cur->amount;
	live.period_ns = cur->period_ns;
	live.burst = cur->burst;
	sl_rule_format(&live, live_text, sizeof(live_text));
	/* Relaxed: a time for the message only. */
	uint64_t set_ns = atomic_load_explicit(&((struct sl_shm_shared *)s)->set_ns,
					       memory_order_relaxed);
	time_t t = (time_t)(set_ns / 1000000000u);
	struct tm tm;
	if (set_ns != 0 && gmtime_r(&t, &tm) != NULL)
		snprintf(when, sizeof(when),
			 "set by sluice set at %04d-%02d-%02d %02d:%02d:%02d UTC",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec);
	else
		snprintf(when, sizeof(when), "as first created");
	sl__log_note("shared limiter %s runs as '%s' (%s), not the '%s' this rule asks for; "
		     "sluice set shared:%s '%s' makes it so, sluice stat shared:%s shows it",
		     r->shared, live_text, when, text, r->shared, text, r->shared);
}

/* Say once, at info level, that a segment of the flat layout before format
 * 2 (/dev/shm/sluice-UID-shared-NAME) is ignored. */
static void shared_old_note(const char *name)
{
	static _Atomic int said;
	char old[160];
	snprintf(old, sizeof(old), SL_SHM_DIR "/" SL_SHM_OLD_PREFIX "shared-%s",
		 (unsigned)geteuid(), name);
	struct stat st;
	/* Relaxed: a once-only flag for a message. */
	if (sl__log_level >= SL_LOG_INFO && lstat(old, &st) == 0 &&
	    !atomic_exchange_explicit(&said, 1, memory_order_relaxed))
		sl_log(SL_LOG_INFO,
		       "ignoring %s, left by an older sluice (shared limiters now live "
		       "in %s); remove it",
		       old, sl_seg_dir());
}

/*
 * The shared limiter of rule i (shared=NAME), created if it does not exist.
 * Returns its head, or NULL with a one-line error in err.
 *
 * A segment made by another rule text is used if the rules differ only in
 * the limit and the burst (what `sluice set` changes): the segment's live
 * limit applies, with a note on stderr when it differs from this rule's.
 * Any other difference (operation, algorithm, action, filters) is an error
 * whose message says how to resolve it.
 */
struct sl_limiter *sl__shm_shared_open_unsync(unsigned i, const struct sl_rule *r, uint64_t now_ns,
					      char *err, size_t errlen)
{
	char text[SL_RULE_TEXT_MAX];
	bool created;
	sl_rule_format(r, text, sizeof(text));
	struct sl_shm_shared *s = sl_shm_shared_open(r, now_ns, &created, err, errlen);
	if (s == NULL)
		return NULL;
	if (created)
		shared_old_note(r->shared);
	shared_note(r, s, text);
	if (shared_segs[i] != NULL)
		munmap(shared_segs[i], sizeof(*shared_segs[i]));
	shared_segs[i] = s;
	return &s->lim.head;
}

struct sl_shm_shared *sl__shm_shared_seg(unsigned i)
{
	return i < SL_MAX_RULES ? shared_segs[i] : NULL;
}

/* Unmap every shared limiter (before a re-init). */
void sl__shm_shared_close_all_unsync(void)
{
	for (unsigned i = 0; i < SL_MAX_RULES; i++) {
		if (shared_segs[i] != NULL)
			munmap(shared_segs[i], sizeof(*shared_segs[i]));
		shared_segs[i] = NULL;
	}
}

/* The shared segment whose conns limiter is l, or NULL. */
static struct sl_shm_shared *shared_conc(const struct sl_limiter *l)
{
	if (l->kind != SL_KIND_TUNABLE || l->params.kind != SL_KIND_CONC)
		return NULL;
	for (unsigned i = 0; i < sl__st.policy.n_rules; i++)
		if (shared_segs[i] != NULL && &shared_segs[i]->lim.head == l)
			return shared_segs[i];
	return NULL;
}

/* This process's holder entry in s, claimed if needed; NULL if full. */
static struct sl_shm_holder *holder_of(struct sl_shm_shared *s, bool claim)
{
	const uint32_t me = (uint32_t)getpid();
	struct sl_shm_holder *free_h = NULL;
	for (unsigned k = 0; k < SL_SHM_HOLDERS; k++) {
		/* Relaxed: the pid is an owner tag; the counts carry no data. */
		uint32_t pid = atomic_load_explicit(&s->holders[k].pid, memory_order_relaxed);
		if (pid == me)
			return &s->holders[k];
		if (pid == 0 && free_h == NULL)
			free_h = &s->holders[k];
	}
	for (unsigned k = 0; claim && k < SL_SHM_HOLDERS; k++) {
		uint32_t expect = 0;
		/* Relaxed: as above; the CAS alone decides the owner. */
		if (atomic_compare_exchange_strong_explicit(&s->holders[k].pid, &expect, me,
							    memory_order_relaxed,
							    memory_order_relaxed))
			return &s->holders[k];
	}
	(void)free_h;
	if (claim && !atomic_exchange_explicit(&holders_full_logged, 1, memory_order_relaxed))
		sl_log(SL_LOG_WARN,
		       "shared conns limiter '%s': more than %u processes hold slots; "
		       "the rest are not tracked for dead-holder recovery",
		       s->name, SL_SHM_HOLDERS);
	return NULL;
}

/* Count n slots taken (delta > 0) or given back (delta < 0) by this process
 * in l, if l is a shared conns limiter. */
void sl__shm_hold(const struct sl_limiter *l, int64_t delta)
{
	struct sl_shm_shared *s = shared_conc(l);
	if (s == NULL || delta == 0)
		return;
	struct sl_shm_holder *h = holder_of(s, delta > 0);
	if (h == NULL)
		return;
	/* Relaxed: a count; the limiter's own word orders the slots. */
	if (delta > 0) {
		atomic_fetch_add_explicit(&h->held, (uint32_t)delta, memory_order_relaxed);
		return;
	}
	uint32_t cur = atomic_load_explicit(&h->held, memory_order_relaxed);
	uint32_t sub = (uint32_t)-delta;
	while (!atomic_compare_exchange_weak_explicit(&h->held, &cur, cur > sub ? cur - sub : 0,
						      memory_order_relaxed, memory_order_relaxed))
		;
}

/*
 * Give back the slots of l (a shared conns limiter) held by processes that
 * no longer exist. Returns true if any were given back. Thread- and
 * process-safe: the CAS to SL_SHM_RECLAIMING lets one reclaimer take each.
 */
bool sl__shm_reclaim(struct sl_limiter *l)
{
	struct sl_shm_shared *s = shared_conc(l);
	if (s == NULL)
		return false;
	bool any = false;
	int saved = errno;
	for (unsigned k = 0; k < SL_SHM_HOLDERS; k++) {
		struct sl_shm_holder *h = &s->holders[k];
		/* Relaxed: see holder_of. */
		uint32_t pid = atomic_load_explicit(&h->pid, memory_order_relaxed);
		if (pid == 0 || pid == SL_SHM_RECLAIMING || pid == (uint32_t)getpid() ||
		    kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		if (!atomic_compare_exchange_strong_explicit(&h->pid, &pid, SL_SHM_RECLAIMING,
							     memory_order_relaxed,
							     memory_order_relaxed))
			continue;
		uint32_t held = atomic_exchange_explicit(&h->held, 0, memory_order_relaxed);
		/* One at a time: never more than the limiter holds. */
		for (uint32_t j = 0; j < held && sl_limiter_release(&s->lim.head, 1) == SL_OK; j++)
			;
		atomic_store_explicit(&h->pid, 0, memory_order_relaxed);
		sl_log(SL_LOG_INFO,
		       "shared conns limiter '%s': gave back %u slots of dead process %u", s->name,
		       held, pid);
		any = any || held > 0;
	}
	errno = saved;
	return any;
}
