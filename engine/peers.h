/* SPDX-License-Identifier: MIT */
/*
 * peers.h - the per=peer table both modes keep (peers.c): which entry a
 * (rule, owner, address) uses, and which entry a newcomer takes over.
 *
 * The table is the caller's memory: an array of entries of the caller's
 * type, each with a struct sl_peer_slot inside (the key and its clock
 * bit), next to the limiter the caller keeps there. This module only
 * decides; the preload calls it under its table lock, the supervisor from
 * its one thread.
 *
 * An entry is keyed by rule, owner (the supervised process; 0 in a
 * preloaded process, which keeps a table of its own) and the address with
 * its port left out. A lookup probes SL_PEER_PROBES entries from the key's
 * home. A miss takes, in this order: an empty entry of those; clock-style,
 * the first one not used since the hand last passed it and not busy (the
 * caller's test: in use outside the lock, holding conns slots), the hand
 * clearing the used bit of those it passes; else the first that is not
 * busy. Only when all of them are busy is there no entry (the caller then
 * falls back to the rule's process limiter). An entry taken over starts
 * again with a full bucket, so eviction can only loosen the limit, and only
 * for peers beyond the table's size.
 *
 * API: pure (no allocation, no lock, no system call), the caller's thread.
 */
#ifndef SLUICE_ENGINE_PEERS_H
#define SLUICE_ENGINE_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "addr.h"

#define SL_PEER_PROBES 8

struct sl_peer_slot {
	struct sl_addr key;  /* port 0 */
	uint32_t rule_plus1; /* 0: empty */
	uint32_t owner;
	uint32_t used; /* the clock bit */
};

/* n entries of `stride` bytes from base, each one's slot `slot_off` bytes
 * into it; busy(entry, ctx) says an entry must not be taken over (NULL:
 * none is ever busy). */
struct sl_peer_table {
	void *base;
	size_t n, stride, slot_off;
	bool (*busy)(const void *entry, void *ctx);
	void *ctx;
};

/* The index of the entry of (rule, owner, addr), marked used: found
 * (*fresh false), or taken over and keyed anew (*fresh true: the caller
 * re-initialises what it keeps there before anyone else can see it); -1
 * if every probed entry is busy. */
long sl_peer_find(const struct sl_peer_table *t, unsigned rule, uint32_t owner,
		  const struct sl_addr *addr, bool *fresh);

/* The slot of entry i. */
static inline struct sl_peer_slot *sl_peer_slot_at(const struct sl_peer_table *t, size_t i)
{
	return (struct sl_peer_slot *)((char *)t->base + i * t->stride + t->slot_off);
}

#endif /* SLUICE_ENGINE_PEERS_H */
