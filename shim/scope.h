/* SPDX-License-Identifier: MIT */
/*
 * scope.h - the limiter of a rule for one call (scope.c): per=process,
 * per=thread slots, per=fd rows and the per=peer table with its pins.
 *
 * API: thread-safe, except the _unsync calls (init, fork child).
 */
#ifndef SLUICE_SHIM_SCOPE_H
#define SLUICE_SHIM_SCOPE_H

#include "internal.h"
#include "state.h"

#define SL_PEER_SLOTS 1024 /* (rule, address) entries of per=peer limiters */

struct sl_call;

/* The limiter of rule i for call c in the scopes other than process (not
 * redis=KEY rules either): sl__limiter (act.h) asks it. */
struct sl_limiter *sl__limiter_scoped(struct sl_call *c, unsigned i);
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
