/* SPDX-License-Identifier: MIT */
/*
 * lease.h - redis=KEY rules: units leased from Redis (lease.c).
 *
 * API: sl__lease_init_unsync at init; the others from any thread.
 */
#ifndef SLUICE_SHIM_LEASE_H
#define SLUICE_SHIM_LEASE_H

#include "internal.h"

/* Set up the redis=KEY rules of p (after the limiters): empty banks, every
 * rule dormant, hiredis loaded if any. Init only. Returns 0 or -1. */
int sl__lease_init_unsync(const struct sl_policy *p);
/* Stop the lease thread and give up any host pool it renews: before the
 * shared segments are unmapped (re-init). */
void sl__lease_stop_unsync(void);
/* The limiter redis=KEY rule i uses now: its bank of leased units, or its
 * on-error fallback while Redis fails. */
struct sl_limiter *sl__lease_limiter(unsigned i);
/* Rule i's bank refused a call: ask for units now; returns when to retry. */
uint64_t sl__lease_retry_ns(unsigned i);

#endif /* SLUICE_SHIM_LEASE_H */
