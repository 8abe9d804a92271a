/* SPDX-License-Identifier: MIT */
/*
 * mcredit.h - the two-rule spend of thread-local credit (credit.h, "two
 * or more rules"), inlined into the wrappers' two-rule hot paths
 * (xfer_hot.h) and into mcredit.c's spend.
 *
 * API: the calling thread's credit only; sl__busy set by the caller.
 */
#ifndef SLUICE_SHIM_MCREDIT_H
#define SLUICE_SHIM_MCREDIT_H

#include "credit.h"

/* Whether credit c of rule i holds u units for key k at the TSC reading
 * tsc (sl__credit_has, the TSC read once for all rules). */
static inline __attribute__((always_inline)) bool
sl__mcredit_ok(const struct sl_credit *c, unsigned i, uint64_t u, uint64_t k, uint64_t tsc)
{
	return sl__credit_holds(c, &sl__st.fast[i], u, k) && (int64_t)(tsc - c->until) < 0;
}

/* Spend from this thread's credit of rules i and j what a call of n bytes
 * takes of each (send: a send's units, else a receive's, n), the TSC read
 * once: true if both had it; false, neither touched (both are tested
 * before either is spent: no give-back). */
static inline __attribute__((always_inline)) bool
sl__mcredit_spend2(unsigned i, unsigned j, uint64_t key, size_t n, bool send)
{
	struct sl_credit *const base = sl__credit;
	const uint64_t tsc = sl__credit_tsc();
	const uint32_t bytes = send ? sl__st.byte_rules : ~0u, keyed = sl__st.keyed_rules;
	const uint64_t ui = (bytes >> i & 1) ? n : 1, uj = (bytes >> j & 1) ? n : 1;
	if (!sl__mcredit_ok(&base[i], i, ui, (keyed >> i & 1) ? key : 0, tsc) ||
	    !sl__mcredit_ok(&base[j], j, uj, (keyed >> j & 1) ? key : 0, tsc))
		return false;
	base[i].units -= ui;
	base[j].units -= uj;
	return true;
}

#endif /* SLUICE_SHIM_MCREDIT_H */
