/* SPDX-License-Identifier: MIT */
/*
 * lease_pool.c - the renewer election of a host pool (shared=NAME with
 * redis=KEY): among the processes that map the rule's shared segment, one
 * leases from Redis into the segment's bank for all of them, the others
 * only spend from it. This is what makes a host of P processes cost the
 * Redis round trips of one.
 *
 * The election is one 64-bit word, renewer = (heartbeat ms << 32) | pid:
 * the renewer's lease thread rewrites it with a fresh heartbeat on every
 * pass (at least once per poll, a quarter of a lease's worth of time), and
 * every other process's lease thread reads it on every pass. When the
 * heartbeat is older than stale_ns (lease.c: one lease's worth of time,
 * 20 ms at least), or the word is 0 (nobody, or the renewer resigned), the
 * first process to compare-and-swap its own pid in becomes the renewer. A
 * renewer that was only slow, not dead, finds its CAS failing and becomes
 * a spender: two renewers can overlap for at most one pass, and then both
 * deposit into the same bank, which never holds more than its capacity.
 *
 * Heartbeats are CLOCK_MONOTONIC milliseconds, which every process of a
 * host shares, kept in 32 bits: ages are computed modulo 2^32 ms (49 days),
 * far beyond any stale_ns.
 */
#include "lease_pool.h"

static uint64_t pool_word(uint64_t now_ns, uint32_t pid)
{
	return ((uint64_t)(uint32_t)(now_ns / 1000000u) << 32) | pid;
}

bool sl__pool_renew_role(struct sl_shm_shared *s, uint32_t pid, uint64_t now_ns, uint64_t stale_ns,
			 bool *took)
{
	*took = false;
	/* Acquire: pairs with the release CAS of the process that wrote it,
	 * so a takeover sees the bank as the old renewer left it. */
	uint64_t w = atomic_load_explicit(&s->renewer, memory_order_acquire);
	for (;;) {
		uint32_t who = (uint32_t)w;
		uint32_t age_ms = (uint32_t)(now_ns / 1000000u) - (uint32_t)(w >> 32);
		bool mine = who == pid && w != 0;
		/* A heartbeat "from the future" (another process read the clock
		 * later than we did) is fresh, not 4 billion ms old. */
		bool stale = w == 0 ||
			     (age_ms < 0x80000000u && (uint64_t)age_ms * 1000000u > stale_ns);
		if (!mine && !stale)
			return false;
		/* Release: publishes what this process did to the bank before
		 * (pairs with the acquire above in the next renewer). */
		if (atomic_compare_exchange_weak_explicit(&s->renewer, &w, pool_word(now_ns, pid),
							  memory_order_acq_rel,
							  memory_order_acquire)) {
			if (!mine) {
				*took = true;
				if (who != 0)
					/* Relaxed: a counter for logs and tests. */
					atomic_fetch_add_explicit(&s->takeovers, 1,
								  memory_order_relaxed);
			}
			return true;
		}
		/* w was reloaded by the failed CAS: decide again. */
	}
}

void sl__pool_resign(struct sl_shm_shared *s, uint32_t pid)
{
	uint64_t w = atomic_load_explicit(&s->renewer, memory_order_acquire);
	while ((uint32_t)w == pid && w != 0 &&
	       !atomic_compare_exchange_weak_explicit(&s->renewer, &w, 0, memory_order_acq_rel,
						      memory_order_acquire))
		;
}

uint32_t sl__pool_renewer(const struct sl_shm_shared *s)
{
	/* Relaxed: a snapshot for logs. */
	return (uint32_t)atomic_load_explicit(&s->renewer, memory_order_relaxed);
}
