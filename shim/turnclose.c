/* SPDX-License-Identifier: MIT */
/*
 * turnclose.c - the end of a connection with turns (turn.c): its entry is
 * freed, and a running turn ended, at the socket's last close. In the
 * process that accepted it, with no fork since (the same epoch), that is
 * its close; else the kernel is asked, after the real close, whether another process holds the socket
 * (sockalive.h): if one does, that process's send or close ends the turn
 * (a fork child), or a sweep finds the socket gone when a limit is full (a
 * program a child exec'd, a child that exited without closing).
 */
#include <errno.h>

#include "clock.h"
#include "fd.h"
#include "sandboxed.h"
#include "sockalive.h"
#include "turn.h"
#include "turn_tab.h"

#define TURN_SWEEP_NS 100000000ull /* sweeps of orphans at most this often */
#define TURN_SWEEP_MAX 32u         /* sockets asked about per sweep */

/* This process's epoch (turn_tab.h), 0 before init. */
static _Atomic uint64_t epoch;

/* Closes whose last-holder question waits for the real close. */
#define TURN_PEND 8
static __thread struct {
	uint32_t ent; /* index + 1 */
	uint64_t key;
	struct sl_sockid id;
	bool have_id;
} pend[TURN_PEND];
static __thread unsigned n_pend;

static void epoch_new(void)
{
	if (sl__turn_fam != NULL)
		atomic_store_explicit(&epoch,
				      atomic_fetch_add_explicit(&sl__turn_fam->epochs, 1,
								memory_order_relaxed) +
					      1,
				      memory_order_relaxed);
}

uint64_t sl__turn_epoch(void)
{
	return atomic_load_explicit(&epoch, memory_order_relaxed);
}

void sl__turn_forking(void)
{
	epoch_new();
}

void sl__turn_fork_child(void)
{
	epoch_new();
}

void sl__turn_forked_reset_unsync(void)
{
	epoch_new();
}

/* e's connection is closed by its last holder: its turn ends, the entry
 * is free. */
static void ent_close(struct turn_ent *e, uint64_t key)
{
	if (atomic_load_explicit(&e->key, memory_order_acquire) != key)
		return;
	sl__turn_end(e, sl__clock_ns());
	if (atomic_exchange_explicit(&e->orphan, 0, memory_order_relaxed) != 0)
		atomic_fetch_sub_explicit(&sl__turn_fam->orphans, 1, memory_order_relaxed);
	uint64_t k = key;
	atomic_compare_exchange_strong_explicit(&e->key, &k, 0, memory_order_release,
						memory_order_relaxed);
}

/* The forget hook: fd is about to be closed or replaced. */
void sl__turn_forget(int fd)
{
	if ((unsigned)fd >= sl__fd_cap || sl__fdrecs == NULL || sl__sandboxed() ||
	    !(atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire) & SL_FDB_READY))
		return;
	const struct sl_fdrec *rec = &sl__fdrecs[fd];
	if (rec->turn == 0)
		return;
	struct turn_ent *e = sl__turn_find(rec->ino);
	if (e == NULL)
		return;
	const int saved = errno;
	const uint64_t key = rec->ino + 1;
	if (atomic_load_explicit(&e->epoch, memory_order_relaxed) == sl__turn_epoch()) {
		/* The process that accepted it, no fork since: the last. */
		ent_close(e, key);
	} else if (n_pend < TURN_PEND) {
		/* Another process may hold the socket: asked after the close. */
		pend[n_pend].ent = (uint32_t)(e - sl__turn_fam->ent) + 1;
		pend[n_pend].key = key;
		pend[n_pend].have_id = sl__sockid_of(fd, &pend[n_pend].id);
		n_pend++;
	}
	errno = saved;
}

void sl__turn_after_close(void)
{
	if (n_pend == 0)
		return;
	const int saved = errno;
	for (unsigned k = 0; k < n_pend; k++) {
		struct turn_ent *e = &sl__turn_fam->ent[pend[k].ent - 1];
		/* Alive: another process holds it, and closes it in turn
		 * (one of ours), or a sweep finds it gone (a program it
		 * exec'd, a child that exited without closing). A kernel that
		 * cannot tell: as without a fork. */
		if (pend[k].have_id && sl__sock_alive(&pend[k].id) == 1) {
			/* The id first, then the mark (release: a sweeper that
			 * sees the mark reads the id whole); every writer of
			 * the id writes the same socket's. */
			if (atomic_load_explicit(&e->key, memory_order_relaxed) == pend[k].key &&
			    atomic_load_explicit(&e->orphan, memory_order_acquire) == 0) {
				e->id = pend[k].id;
				if (atomic_exchange_explicit(&e->orphan, 1, memory_order_acq_rel) ==
				    0)
					atomic_fetch_add_explicit(&sl__turn_fam->orphans, 1,
								  memory_order_release);
			}
			continue;
		}
		ent_close(e, pend[k].key);
	}
	n_pend = 0;
	errno = saved;
}

bool sl__turn_sweep(uint64_t now_ns)
{
	if (sl__turn_fam == NULL || sl__sandboxed() ||
	    atomic_load_explicit(&sl__turn_fam->orphans, memory_order_acquire) == 0)
		return false;
	uint64_t last = atomic_load_explicit(&sl__turn_fam->swept_ns, memory_order_relaxed);
	if (now_ns - last < TURN_SWEEP_NS ||
	    !atomic_compare_exchange_strong_explicit(&sl__turn_fam->swept_ns, &last, now_ns,
						     memory_order_relaxed, memory_order_relaxed))
		return false;
	const int saved = errno;
	bool freed = false;
	unsigned asked = 0;
	for (uint32_t n = 0; n < TURN_ENTS && asked < TURN_SWEEP_MAX; n++) {
		struct turn_ent *e = &sl__turn_fam->ent[n];
		const uint64_t key = atomic_load_explicit(&e->key, memory_order_acquire);
		if (key == 0 || atomic_load_explicit(&e->orphan, memory_order_acquire) == 0)
			continue;
		const struct sl_sockid id = e->id;
		asked++;
		if (sl__sock_alive(&id) == 1)
			continue;
		/* Gone unseen: its slots back, no sample (its end is not known). */
		atomic_store_explicit(&e->start_ns, 0, memory_order_relaxed);
		freed = freed ||
			(atomic_load_explicit(&e->state, memory_order_relaxed) & 0xff) == TS_TURN;
		ent_close(e, key);
	}
	errno = saved;
	return freed;
}

/* Client turns left unanswered for sl_adapt_stale_ns (their connections
 * only send) give their slots back, without a sample, and those
 * connections are followed no more (client 2): true if any did. Looked for
 * when a client's limit is full, at most every TURN_SWEEP_NS per process. */
bool sl__turn_expire(uint64_t now)
{
	static _Atomic uint64_t last;
	uint64_t l = atomic_load_explicit(&last, memory_order_relaxed);
	if (sl__turn_fam == NULL || now - l < TURN_SWEEP_NS ||
	    !atomic_compare_exchange_strong_explicit(&last, &l, now, memory_order_relaxed,
						     memory_order_relaxed))
		return false;
	bool freed = false;
	for (uint32_t n = 0; n < TURN_ENTS; n++) {
		struct turn_ent *e = &sl__turn_fam->ent[n];
		if (atomic_load_explicit(&e->key, memory_order_acquire) == 0 ||
		    atomic_load_explicit(&e->client, memory_order_relaxed) != 1 ||
		    (atomic_load_explicit(&e->state, memory_order_acquire) & 0xff) != TS_TURN)
			continue;
		const uint64_t start = atomic_load_explicit(&e->start_ns, memory_order_relaxed);
		uint64_t stale = SL_ADAPT_STALE_MIN_NS;
		const uint64_t rules = atomic_load_explicit(&e->rules, memory_order_relaxed);
		for (uint64_t rest = rules; rest != 0; rest &= rest - 1) {
			const uint64_t t = sl_adapt_stale_ns(
				sl__turn_adapt[TURN_CLIENT + __builtin_ctzll(rest)]);
			stale = t > stale ? t : stale;
		}
		if (start == 0 || now < start || now - start < stale)
			continue;
		atomic_store_explicit(&e->client, 2, memory_order_relaxed);   /* no more turns */
		atomic_store_explicit(&e->start_ns, 0, memory_order_relaxed); /* no sample */
		sl__turn_end(e, now);
		freed = true;
	}
	return freed;
}
