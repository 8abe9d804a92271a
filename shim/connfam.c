/* SPDX-License-Identifier: MIT */
/*
 * connfam.c - conns slots of connections a fork shares.
 *
 * A fork-per-connection server (Python's ForkingTCPServer, inetd-style
 * daemons, postgres) accepts, forks, and closes its own copy at once; the
 * child serves the connection. The slot must stay taken until the child is
 * done. So before fork (sl__fam_share, from the prepare handler) each
 * connection that holds a slot of a per=process or shared= conns rule gets
 * an entry in this table, shared memory that every fork child inherits,
 * naming the socket (sockalive.h), the rules and the process that took the
 * slots (the owner). From then on, when a process drops its last fd of the
 * connection (conn.c), it asks the kernel, once the real close is done,
 * whether any process still holds the socket, and the one that finds it
 * gone gives the slots back (one CAS decides who).
 *
 * Whose limiter: a shared= limiter is the same in every process, and
 * whoever finds the connection gone gives its slot back. A per=process
 * limiter is the owner's own (a fork child counts in its private copy, and
 * gives its copy's slot back when its own last fd closes, as before):
 * another process that finds the connection gone marks the entry GONE, and
 * the owner gives the slot back when it next needs one (sl__fam_sweep, no
 * system call). A last holder that never tells (it exited without closing,
 * crashed, or exec'd a program) is found by a call waiting for a slot: it
 * asks the kernel about the entries still HELD, at most every
 * SL_FAM_SWEEP_NS.
 *
 * In a process that installed a seccomp filter (sandbox.h) none of this
 * asks the kernel: a connection it closes last gives back its own slots at
 * once and leaves a shared= one to another process's sweep.
 *
 * Trade-offs: only TCP and unix stream connections (the kernel is asked by
 * four-tuple or inode); others keep their slot in the process that closes
 * first, as before. A process image started by exec has a table of its
 * own. The kernel's socket diagnostics must answer (checked on the first
 * connection: else one warning, and slots free at the first close as
 * before). SL_FAM_ENTRIES connections shared at once at most (one warning
 * past it).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "connfam.h"
#include "log.h"
#include "sandboxed.h"
#include "shm.h"
#include "sockalive.h"
#include "state.h"

/* An entry's state word: its state in the low bits, and above them a
 * generation that each filling raises, so that a process that read the
 * fields of one connection never frees the next one's slot (ABA). */
enum { FE_FREE, FE_FILLING, FE_HELD, FE_RELEASING, FE_GONE };
#define FE_STATE(w) ((w)&7u)
#define FE_GEN 8u

struct fam_ent {
	_Atomic uint32_t state;
	uint32_t rules; /* one slot of each */
	uint32_t owner; /* the pid that took them */
	uint32_t pad;
	struct sl_sockid id;
};

struct fam_tab {
	_Atomic uint32_t hi;   /* 1 + the highest entry ever filled */
	_Atomic uint32_t gone; /* entries GONE: their owners have slots to give back */
	struct fam_ent e[SL_FAM_ENTRIES];
};

static struct fam_tab *fam;   /* MAP_SHARED: the fork family's */
static uint32_t shared_rules; /* of sl__fam_rules: shared=NAME ones */
static _Atomic uint64_t swept_ns;
static _Atomic uint32_t sweep_at;
static _Atomic int warned_diag, warned_full;

uint32_t sl__fam_rules(void)
{
	return sl__st.conns_rules & sl__st.proc_rules;
}

int sl__fam_init_unsync(void)
{
	shared_rules = 0;
	for (uint32_t rest = sl__fam_rules(); rest != 0; rest &= rest - 1)
		if (sl__st.policy.rules[__builtin_ctz(rest)].shared[0] != '\0')
			shared_rules |= rest & -rest;
	if (fam != NULL || sl__fam_rules() == 0)
		return 0;
	void *m = mmap(NULL, sizeof(*fam), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
		       0);
	if (m == MAP_FAILED)
		return -1;
	fam = m;
	return 0;
}

uint32_t sl__fam_share(int fd, uint32_t rules)
{
	if (fam == NULL || (rules &= sl__fam_rules()) == 0)
		return 0;
	int saved = errno;
	struct sl_sockid id;
	if (!sl__sockid_of(fd, &id)) {
		errno = saved;
		return 0;
	}
	/* We hold it: the kernel must say so, or it cannot be asked later. */
	if (sl__sock_alive(&id) != 1) {
		if (!atomic_exchange_explicit(&warned_diag, 1, memory_order_relaxed))
			sl_log(SL_LOG_WARN,
			       "conns: the kernel's socket diagnostics (NETLINK_SOCK_DIAG) do not "
			       "answer (%s): a connection a fork shares gives its slot back when "
			       "the first process closes it",
			       strerror(errno));
		errno = saved;
		return 0;
	}
	for (uint32_t k = 0; k < SL_FAM_ENTRIES; k++) {
		struct fam_ent *e = &fam->e[((uint32_t)fd + k) % SL_FAM_ENTRIES];
		uint32_t w = atomic_load_explicit(&e->state, memory_order_relaxed);
		const uint32_t gen = (w & ~7u) + FE_GEN;
		/* Acquire: the last releaser's reads of the entry are done. */
		if (FE_STATE(w) != FE_FREE ||
		    !atomic_compare_exchange_strong_explicit(&e->state, &w, gen | FE_FILLING,
							     memory_order_acquire,
							     memory_order_relaxed))
			continue;
		e->rules = rules;
		e->owner = (uint32_t)getpid();
		e->id = id;
		uint32_t idx = (uint32_t)(e - fam->e), hi = atomic_load(&fam->hi);
		while (hi <= idx && !atomic_compare_exchange_weak(&fam->hi, &hi, idx + 1))
			;
		/* A shared= slot is the family's now, no longer this pid's
		 * (shm.c's dead-holder count). */
		for (uint32_t rest = rules & shared_rules; rest != 0; rest &= rest - 1)
			sl__shm_hold(sl__st.rule_lim[__builtin_ctz(rest)], -1);
		/* Release: a process that sees HELD sees the fields. */
		atomic_store_explicit(&e->state, gen | FE_HELD, memory_order_release);
		errno = saved;
		return idx + 1;
	}
	if (!atomic_exchange_explicit(&warned_full, 1, memory_order_relaxed))
		sl_log(SL_LOG_WARN,
		       "conns: more than %u connections shared by fork at once; the rest give "
		       "their slot back when the first process closes them",
		       SL_FAM_ENTRIES);
	errno = saved;
	return 0;
}

uint32_t sl__fam_decides(uint32_t k, uint32_t rules)
{
	const struct fam_ent *e = &fam->e[k - 1];
	/* In a seccomp sandbox no getpid (sandbox.h): its own slots go back
	 * now, as without a fork; a shared= one waits for a sweep elsewhere.
	 * The owner never changes while we hold the connection. */
	if (sl__sandboxed())
		return rules & shared_rules;
	return rules & (shared_rules | (e->owner == (uint32_t)getpid() ? ~0u : 0u));
}

static void give_back(uint32_t rules)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1)
		sl_limiter_release(sl__st.rule_lim[__builtin_ctz(rest)], 1);
}

static bool gone_pid(uint32_t pid)
{
	return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Ask the kernel about entry e, seen HELD as state word w, and if its
 * connection has ended (and nobody else is at it) give back the slots this
 * process may give: the shared= ones, and the per=process ones if it is
 * their owner (else the entry becomes GONE for the owner, unless it died).
 * The rules whose slots went back, or 0. */
static uint32_t release_if_gone(struct fam_ent *e, uint32_t w, uint32_t me)
{
	/* Copies, then the word again: fields of w's filling, not a later
	 * one's (a torn copy fails the CAS below). */
	struct sl_sockid id;
	memcpy(&id, &e->id, sizeof(id));
	const uint32_t rules = e->rules, owner = e->owner;
	/* Unknown (no fd left for the query, say): kept for a sweep. */
	if (sl__sock_alive(&id) != 0)
		return 0;
	if (!atomic_compare_exchange_strong_explicit(&e->state, &w, (w & ~7u) | FE_RELEASING,
						     memory_order_acquire, memory_order_relaxed))
		return 0;
	const uint32_t mine = owner == me ? rules : rules & shared_rules;
	give_back(mine);
	const bool later = (rules & ~mine) != 0 && !gone_pid(owner);
	if (later)
		atomic_fetch_add_explicit(&fam->gone, 1, memory_order_relaxed);
	atomic_store_explicit(&e->state, (w & ~7u) | (later ? FE_GONE : FE_FREE),
			      memory_order_release);
	return mine;
}

bool sl__fam_drop(uint32_t k)
{
	struct fam_ent *e = &fam->e[k - 1];
	uint32_t w = atomic_load_explicit(&e->state, memory_order_acquire);
	if (FE_STATE(w) != FE_HELD || sl__sandboxed()) /* no query of ours there */
		return false;
	int saved = errno;
	uint32_t rules = release_if_gone(e, w, (uint32_t)getpid());
	errno = saved;
	return rules != 0;
}

/* The owner's half: give back the per=process slots of the GONE entries
 * this process owns (and free those of owners that died). The rules whose
 * slots went back. */
static uint32_t pick_up(uint32_t me)
{
	uint32_t got = 0;
	const uint32_t hi = atomic_load(&fam->hi);
	for (uint32_t k = 0; k < hi && atomic_load_explicit(&fam->gone, memory_order_relaxed);
	     k++) {
		struct fam_ent *e = &fam->e[k];
		uint32_t w = atomic_load_explicit(&e->state, memory_order_acquire);
		if (FE_STATE(w) != FE_GONE)
			continue;
		const uint32_t rules = e->rules & ~shared_rules, owner = e->owner;
		if (owner != me && !gone_pid(owner))
			continue;
		if (!atomic_compare_exchange_strong_explicit(&e->state, &w,
							     (w & ~7u) | FE_RELEASING,
							     memory_order_acquire,
							     memory_order_relaxed))
			continue;
		if (owner == me) {
			give_back(rules);
			got |= rules;
		}
		atomic_fetch_sub_explicit(&fam->gone, 1, memory_order_relaxed);
		atomic_store_explicit(&e->state, (w & ~7u) | FE_FREE, memory_order_release);
	}
	return got;
}

/* Entries one sweep asks the kernel about at most. */
#define SL_FAM_SWEEP_MAX 256u

bool sl__fam_sweep(unsigned i, uint64_t now_ns)
{
	if (fam == NULL || !((sl__fam_rules() >> i) & 1) || sl__sandboxed())
		return false;
	int saved = errno;
	const uint32_t me = (uint32_t)getpid();
	uint32_t got = atomic_load_explicit(&fam->gone, memory_order_relaxed) ? pick_up(me) : 0;
	uint64_t last = atomic_load_explicit(&swept_ns, memory_order_relaxed);
	if (((got >> i) & 1) || now_ns - last < SL_FAM_SWEEP_NS ||
	    !atomic_compare_exchange_strong_explicit(&swept_ns, &last, now_ns, memory_order_relaxed,
						     memory_order_relaxed)) {
		errno = saved;
		return (got >> i) & 1;
	}
	const uint32_t hi = atomic_load(&fam->hi);
	uint32_t at = atomic_load_explicit(&sweep_at, memory_order_relaxed), asked = 0;
	for (uint32_t n = 0; n < hi && asked < SL_FAM_SWEEP_MAX; n++, at++) {
		struct fam_ent *e = &fam->e[at % hi];
		uint32_t w = atomic_load_explicit(&e->state, memory_order_acquire);
		if (FE_STATE(w) != FE_HELD)
			continue;
		asked++;
		got |= release_if_gone(e, w, me);
	}
	atomic_store_explicit(&sweep_at, at, memory_order_relaxed);
	errno = saved;
	return (got >> i) & 1;
}

/* Entries whose last fd this thread is closing, asked about after the real
 * close (a longer list is left for a sweep). */
#define SL_FAM_DUE 16
static __thread uint32_t fam_due[SL_FAM_DUE] __attribute__((tls_model("initial-exec")));
static __thread unsigned fam_ndue __attribute__((tls_model("initial-exec")));

void sl__fam_defer(uint32_t e)
{
	extern __thread bool sl__cw_handoff_due __attribute__((tls_model("initial-exec")));
	if (fam_ndue < SL_FAM_DUE)
		fam_due[fam_ndue++] = e;
	sl__cw_handoff_due = true; /* the close wrappers' hook (connwait.h) */
}

bool sl__fam_after_close(void)
{
	bool any = false;
	while (fam_ndue > 0)
		any = sl__fam_drop(fam_due[--fam_ndue]) || any;
	return any;
}
