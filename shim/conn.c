/* SPDX-License-Identifier: MIT */
/*
 * conn.c - connection records: the conns slots one connection holds, shared
 * by every fd that refers to it (a dup, a fork child's copy), given back
 * when the last of them forgets it. fd.c keeps which record an fd refers to
 * (sl_fdrec.conn, index + 1); the deferred connects of connwait.c learn of
 * closes and releases through the hooks they register here.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "conn.h"
#include "connfam.h"
#include "fd.h"
#include "scope.h"
#include "shm.h"
#include "state.h"

struct conn {
	_Atomic uint32_t refs; /* fds referring to the connection; 0 = free */
	/* The family entry (connfam.c, index + 1) that decides when the
	 * slots of per=process and shared= rules (fam_rules) go back since a
	 * fork, or 0. Written only by a holder of a reference, while it
	 * holds one. */
	_Atomic uint32_t fam;
	_Atomic uint32_t fam_rules;
	uint32_t n;
	struct sl_limiter *lims[SL_CONN_RULES];
};

static struct conn *conn_table; /* [sl__fd_cap] */
/* The deferred connects' hooks (connwait.c), or NULL (init only). */
static const struct sl_conn_hooks *conn_hooks;

bool sl__conn_mapped(void)
{
	return conn_table != NULL;
}

int sl__conn_init_unsync(bool clear)
{
	if (conn_table == NULL)
		conn_table = sl__map(sizeof(struct conn) * sl__fd_cap);
	else if (clear)
		memset(conn_table, 0, sizeof(struct conn) * sl__fd_cap);
	return conn_table == NULL ? -1 : 0;
}

/* Give back one slot of conns limiter l (and uncount it if l is shared). */
void sl__conn_release(struct sl_limiter *l)
{
	sl_limiter_release(l, 1);
	sl__shm_hold(l, -1);
	sl__peer_unpin(l); /* last: l may be re-used once unpinned */
}

/* The rule among `rules` whose limiter is l, as a bit, or 0. */
static uint32_t rule_of(const struct sl_limiter *l, uint32_t rules)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1)
		if (sl__st.rule_lim[__builtin_ctz(rest)] == l)
			return rest & -rest;
	return 0;
}

/* Drop one reference to connection record c (index + 1); the last one
 * gives back every slot it holds. */
void sl__conn_put(uint32_t c)
{
	struct conn *cn = &conn_table[c - 1];
	/* Copied before the reference is dropped: once refs is 0 another
	 * thread's sl__fd_set_conn may claim and rewrite the record. The
	 * creator wrote them before publishing c (release in fd_attach),
	 * and we hold a reference, so they are stable until the fetch_sub.
	 * fam is read while refs is 1 and ours: sl__conn_share sets it
	 * holding a reference of its own (released before we see 1). */
	struct sl_limiter *lims[SL_CONN_RULES];
	uint32_t n = cn->n, fam = 0, fam_rules = 0;
	memcpy(lims, cn->lims, sizeof(lims));
	/* The last reference asks the hook whether the slots were taken (a
	 * deferred connect takes them when it starts): asked while refs is
	 * still 1, so that the record cannot be claimed again meanwhile. */
	bool held = true, asked = false;
	uint32_t r = atomic_load_explicit(&cn->refs, memory_order_acquire);
	for (;;) {
		if (r == 1) {
			fam = atomic_load_explicit(&cn->fam, memory_order_relaxed);
			fam_rules = atomic_load_explicit(&cn->fam_rules, memory_order_relaxed);
			if (!asked && conn_hooks != NULL) {
				held = conn_hooks->last(c);
				asked = true;
			}
		}
		/* acq_rel: release, so that this dropper's reads of the record
		 * happen before a later claimer rewrites it (the acquire CAS of
		 * refs in sl__fd_set_conn); acquire, so that the last dropper's
		 * reads come after every other holder's writes. */
		if (atomic_compare_exchange_weak_explicit(&cn->refs, &r, r - 1,
							  memory_order_acq_rel,
							  memory_order_acquire))
			break;
	}
	if (r != 1)
		return;
	/* Slots a fork shares: the ones the family entry decides on here
	 * (connfam.c) go back once the real close is done, when no process
	 * holds the connection any more; the rest now, as without a fork. */
	const uint32_t by_fam = fam != 0 ? sl__fam_decides(fam, fam_rules) : 0;
	for (uint32_t i = 0; held && i < n; i++)
		if (rule_of(lims[i], by_fam) == 0)
			sl__conn_release(lims[i]);
	if (held && fam != 0)
		sl__fam_defer(fam);
	if (held && n != 0 && conn_hooks != NULL)
		conn_hooks->released();
}

bool sl__conn_ref_live(uint32_t c)
{
	struct conn *cn = &conn_table[c - 1];
	uint32_t r = atomic_load_explicit(&cn->refs, memory_order_acquire);
	do
		if (r == 0)
			return false;
	while (!atomic_compare_exchange_weak_explicit(&cn->refs, &r, r + 1, memory_order_acquire,
						      memory_order_acquire));
	return true;
}

void sl__conn_share(int fd, uint32_t c)
{
	struct conn *cn = &conn_table[c - 1];
	/* A reference of our own while the record changes, taken only if it
	 * is still some fd's. */
	if (!sl__conn_ref_live(c))
		return;
	uint32_t rules = 0;
	if (atomic_load_explicit(&cn->fam, memory_order_relaxed) == 0 &&
	    (conn_hooks == NULL || conn_hooks->holds(c))) {
		for (uint32_t j = 0; j < cn->n; j++)
			rules |= rule_of(cn->lims[j], sl__fam_rules() & ~rules);
		uint32_t e = rules != 0 ? sl__fam_share(fd, rules) : 0;
		if (e != 0) {
			atomic_store_explicit(&cn->fam_rules, rules, memory_order_relaxed);
			atomic_store_explicit(&cn->fam, e, memory_order_relaxed);
		}
	}
	sl__conn_put(c);
}

uint32_t sl__conn_dup_begin(int oldfd)
{
	if ((unsigned)oldfd >= sl__fd_cap || sl__fdrecs == NULL)
		return 0;
	uint32_t c = atomic_load_explicit(&sl__fdrecs[oldfd].conn, memory_order_acquire);
	if (c == 0 || !sl__conn_ref_live(c))
		return 0;
	/* seq_cst, as the closer's exchange: a close of oldfd between the
	 * load and the reference may have let c go to another connection. */
	if (atomic_load(&sl__fdrecs[oldfd].conn) != c) {
		sl__conn_put(c);
		return 0;
	}
	return c;
}

void sl__conn_dup(int oldfd, int newfd, uint32_t c, long r)
{
	const int saved = errno;
	if (r < 0) {
		if (c != 0)
			sl__conn_put(c);
		errno = saved;
		return;
	}
	sl__fd_forget(newfd);
	if ((unsigned)oldfd >= sl__fd_cap || (unsigned)newfd >= sl__fd_cap || sl__fdrecs == NULL) {
		if (c != 0)
			sl__conn_put(c);
		errno = saved;
		return;
	}
	if (sl__st.ready)
		sl__fd_dup_class(oldfd, newfd);
	if (c != 0) {
		sl__fd_conn_attach(newfd, c); /* the reference sl__conn_dup_begin took */
		if (conn_hooks != NULL && conn_hooks->duped != NULL)
			conn_hooks->duped(newfd, c);
	}
	errno = saved;
}

void sl__conn_closing(int fd, uint32_t c)
{
	if (conn_hooks != NULL)
		conn_hooks->closing(fd, c);
	sl__conn_put(c);
}

/* Claim a free connection record for fd's slots of lims (at most
 * SL_CONN_RULES): index + 1 with one reference, or 0 if none is free. */
uint32_t sl__conn_claim(int fd, struct sl_limiter *const *lims, unsigned n)
{
	for (uint32_t probe = 0; probe < sl__fd_cap; probe++) {
		uint32_t i = ((uint32_t)fd + probe) % sl__fd_cap;
		uint32_t expect = 0;
		/* Acquire: the previous owner's last writes are done. */
		if (!atomic_compare_exchange_strong_explicit(&conn_table[i].refs, &expect, 1,
							     memory_order_acquire,
							     memory_order_relaxed))
			continue;
		struct conn *cn = &conn_table[i];
		cn->n = n > SL_CONN_RULES ? SL_CONN_RULES : n;
		for (unsigned j = 0; j < cn->n; j++)
			cn->lims[j] = lims[j];
		atomic_store_explicit(&cn->fam, 0, memory_order_relaxed);
		atomic_store_explicit(&cn->fam_rules, 0, memory_order_relaxed);
		return i + 1;
	}
	return 0;
}

void sl__fd_on_conn_unsync(const struct sl_conn_hooks *hooks)
{
	conn_hooks = hooks;
}
