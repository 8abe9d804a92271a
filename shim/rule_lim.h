/* SPDX-License-Identifier: MIT */
/*
 * rule_lim.h - the limiter rule i uses for one call: the rule's per=process
 * limiter, the one its redis= lease says (lease.c), or the call's scope's
 * (scope.c). Apart from call.h, so that what only reads a call (scope.c)
 * does not reach the lease.
 *
 * API: the thread making the call.
 */
#ifndef SLUICE_SHIM_RULE_LIM_H
#define SLUICE_SHIM_RULE_LIM_H

#include "call.h"
#include "lease.h"
#include "scope.h"
#include "state.h"

/* The limiter of rule i for call c (its fd, its peer address). A per=peer
 * limiter stays the call's, and its entry pinned (never evicted), until
 * sl__call_end: the call may sleep on it, hold a grant on it, refund it. */
static inline struct sl_limiter *sl__limiter(struct sl_call *c, unsigned i)
{
	/* per=process, the default, is one test and one load away; a
	 * redis=KEY rule (per=process too) is not in proc_rules: lease.c
	 * says which limiter it uses now. */
	if ((sl__st.proc_rules >> i) & 1)
		return sl__st.rule_lim[i];
	if ((sl__st.lease_rules >> i) & 1)
		return sl__lease_limiter(i);
	return sl__limiter_scoped(c, i);
}

#endif /* SLUICE_SHIM_RULE_LIM_H */
