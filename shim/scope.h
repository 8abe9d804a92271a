/* SPDX-License-Identifier: MIT */
/*
 * scope.h - the limiter of a rule for one call (scope.c): per=process,
 * per=thread slots, per=fd rows and the per=peer table with its pins.
 *
 * API: thread-safe, except the _unsync calls (init, fork child).
 */
#ifndef SLUICE_SHIM_SCOPE_H
#define SLUICE_SHIM_SCOPE_H

#include "addr.h"
#include "internal.h"
#include "state.h"

#define SL_PEER_SLOTS 1024 /* (rule, address) entries of per=peer limiters */

struct sl_call;

/* This thread's slot of the per=thread pool + 1; 0 until its first call
 * under a per=thread rule takes one (the general path, scope.c). */
extern __thread int sl__tslot __attribute__((tls_model("initial-exec")));

/* The per=thread limiters of rule i (in sl__st.thread_rules) for this
 * thread; NULL if it has no slot yet. */
static inline struct sl_limiter *sl__thread_lim(unsigned i)
{
	int s = sl__tslot;
	if (s == 0)
		return NULL;
	return &sl__st.thread_lims[(size_t)(s - 1) * sl__st.n_thread_rules + sl__st.scope_slot[i]];
}

/* The per=fd limiter of rule i (in sl__st.fd_rules) for fd, below
 * sl__fd_cap (every fd with a record is). */
static inline struct sl_limiter *sl__fd_lim(int fd, unsigned i)
{
	return &sl__st.fd_lims[(size_t)fd * sl__st.n_fd_rules + sl__st.scope_slot[i]];
}

/* The limiter of rule i for call c in the scopes other than process (not
 * redis=KEY rules either): sl__limiter (act.h) asks it. */
struct sl_limiter *sl__limiter_scoped(struct sl_call *c, unsigned i);
/* The per=peer entries fds keep pinned (scope.c): [sl__fd_cap][n_peer_rules],
 * entry index + 1 (0: none); entries are SL_PEER_ENT_BYTES from
 * sl__peer_base, the limiter first. */
#define SL_PEER_ENT_BYTES 256
extern _Atomic uint32_t *sl__fd_peer;
extern char *sl__peer_base;

/* The limiter fd keeps pinned for per=peer rule i, or NULL if none yet.
 * Acquire: pairs with the pinner's release (the entry as it made it). */
static inline struct sl_limiter *sl__peer_fd_cached(int fd, unsigned i)
{
	uint32_t e = atomic_load_explicit(&sl__fd_peer[(size_t)fd * sl__st.n_peer_rules +
						       sl__st.scope_slot[i]],
					  memory_order_acquire);
	return e != 0 ? (struct sl_limiter *)(void *)(sl__peer_base +
						      (size_t)(e - 1) * SL_PEER_ENT_BYTES)
		      : NULL;
}

/* The fast paths' limiter of per=peer rule i for fd, whose peer address
 * is `peer` (its record's): the entry the fd keeps pinned (one load), found
 * and pinned on the fd's first call; NULL (the general path decides) if fd
 * is not connected or too many entries are pinned by fds. */
struct sl_limiter *sl__peer_fd_lim(int fd, unsigned i, const struct sl_addr *peer);
/* fd's record is rewritten or fd closed: drop the entries it pinned. */
void sl__peer_fd_drop(int fd);
/* Unpin the peer table entries call c pinned (sl__call_end does). */
void sl__peer_unpin_call(struct sl_call *c);
/* If l is a per=peer limiter, pin its entry once more (the caller holds a
 * pin on it already) / drop one pin: a connection's conns slot (fd.c)
 * keeps its entry until the slot is given back. Others: nothing. */
void sl__peer_pin(struct sl_limiter *l);
void sl__peer_unpin(struct sl_limiter *l);
/* Allocate (once) and clear the peer table and thread pool. Init only. */
int sl__scope_init_unsync(void);
void sl__scope_reset_unsync(void);
/* The child after fork: free the thread slots of threads that are gone. */
void sl__scope_after_fork_unsync(void);

#endif /* SLUICE_SHIM_SCOPE_H */
