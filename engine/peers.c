/* SPDX-License-Identifier: MIT */
/*
 * peers.c - the per=peer table's lookup and eviction (peers.h), one copy
 * for the preload (shim/scope.c) and the supervisor (supervise/admit.c).
 */
#include "peers.h"

#include <string.h>

/* FNV-1a over the address, the rule and the owner. */
static uint32_t home(unsigned rule, uint32_t owner, const struct sl_addr *k)
{
	uint32_t h = 2166136261u;
	const uint8_t *p = (const uint8_t *)k;
	for (size_t i = 0; i < sizeof(*k); i++)
		h = (h ^ p[i]) * 16777619u;
	h = (h ^ rule) * 16777619u;
	return (h ^ owner) * 16777619u;
}

long sl_peer_find(const struct sl_peer_table *t, unsigned rule, uint32_t owner,
		  const struct sl_addr *addr, bool *fresh)
{
	struct sl_addr key = *addr;
	key.port = 0;
	const uint32_t h = home(rule, owner, &key);
	const unsigned probes = t->n < SL_PEER_PROBES ? (unsigned)t->n : SL_PEER_PROBES;
	long v = -1;
	*fresh = false;
	for (unsigned p = 0; p < probes; p++) { /* the key, or an empty entry */
		const size_t i = (h + p) % t->n;
		struct sl_peer_slot *s = sl_peer_slot_at(t, i);
		if (s->rule_plus1 == rule + 1 && s->owner == owner &&
		    memcmp(&s->key, &key, sizeof(key)) == 0) {
			s->used = 1;
			return (long)i;
		}
		if (s->rule_plus1 == 0 && v < 0)
			v = (long)i;
	}
	long idle = -1;
	for (unsigned p = 0; p < probes && v < 0; p++) { /* the clock hand */
		const size_t i = (h + p) % t->n;
		struct sl_peer_slot *s = sl_peer_slot_at(t, i);
		if (t->busy != NULL && t->busy((const char *)t->base + i * t->stride, t->ctx))
			continue;
		if (s->used == 0)
			v = (long)i;
		else if (idle < 0)
			idle = (long)i;
		s->used = 0; /* passed: not used since */
	}
	v = v >= 0 ? v : idle;
	if (v < 0)
		return -1; /* every one busy */
	struct sl_peer_slot *s = sl_peer_slot_at(t, (size_t)v);
	s->key = key;
	s->rule_plus1 = rule + 1;
	s->owner = owner;
	s->used = 1;
	*fresh = true;
	return v;
}
