/* SPDX-License-Identifier: MIT */
/*
 * conn.c - connection records: the conns slots one connection holds, shared
 * by every fd that refers to it (a dup, a fork child's copy), given back
 * when the last of them forgets it. fd.c keeps which record an fd refers to
 * (sl_fdrec.conn, index + 1); the deferred connects of connwait.c learn of
 * closes and releases through the hooks they register here.
 */
#include <stdatomic.h>
#include <string.h>

#include "conn.h"
#include "scope.h"
#include "shm.h"
#include "state.h"

struct conn {
	_Atomic uint32_t refs; /* fds referring to the connection; 0 = free */
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

/* Drop one reference to connection record c (index + 1); the last one
 * gives back every slot it holds. */
void sl__conn_put(uint32_t c)
{
	struct conn *cn = &conn_table[c - 1];
	/* Copied before the reference is dropped: once refs is 0 another
	 * thread's sl__fd_set_conn may claim and rewrite the record. The
	 * creator wrote them before publishing c (release in fd_attach),
	 * and we hold a reference, so they are stable until the fetch_sub. */
	struct sl_limiter *lims[SL_CONN_RULES];
	uint32_t n = cn->n;
	memcpy(lims, cn->lims, sizeof(lims));
	/* The last reference asks the hook whether the slots were taken (a
	 * deferred connect takes them when it starts): asked while refs is
	 * still 1, so that the record cannot be claimed again meanwhile. */
	bool held = true, asked = false;
	uint32_t r = atomic_load_explicit(&cn->refs, memory_order_acquire);
	for (;;) {
		if (r == 1 && !asked && conn_hooks != NULL) {
			held = conn_hooks->last(c);
			asked = true;
		}
		/* acq_rel: release, so that this dropper's reads of the record
		 * happen before a later claimer rewrites it (the acquire CAS of
		 * refs in sl__fd_set_conn); acquire, so that the last dropper's
		 * releases come after every other dropper's reads. */
		if (atomic_compare_exchange_weak_explicit(&cn->refs, &r, r - 1,
							  memory_order_acq_rel,
							  memory_order_acquire))
			break;
	}
	if (r != 1)
		return;
	for (uint32_t i = 0; held && i < n; i++)
		sl__conn_release(lims[i]);
	if (held && n != 0 && conn_hooks != NULL)
		conn_hooks->released();
}

void sl__conn_ref(uint32_t c)
{
	/* Relaxed: taken while another fd holds one, so the record cannot be
	 * freed under us (unless the program races close and dup). */
	atomic_fetch_add_explicit(&conn_table[c - 1].refs, 1, memory_order_relaxed);
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
		return i + 1;
	}
	return 0;
}

void sl__fd_on_conn_unsync(const struct sl_conn_hooks *hooks)
{
	conn_hooks = hooks;
}
