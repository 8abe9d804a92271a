/* SPDX-License-Identifier: MIT */
/*
 * lease_share.c - what a process was granted of a fleet-wide rate lately,
 * kept so that on-error=local can fall back to that share rather than to
 * the whole rate (lease.c): with N processes, N whole rates would admit
 * N times the limit for as long as Redis is away (a failover, a reshard).
 *
 * A ring of SL_SHARE_BUCKETS counters, each covering bucket_ns: adding
 * rotates the ring past the buckets that ended (all of them after a long
 * silence) and counts into the current one. The sum over the ring is what
 * the server granted this process in the last (SL_SHARE_BUCKETS - 1) whole
 * buckets plus the current part, which is as much the process's share as
 * its demand: a process that asked for little gets little during an outage.
 * A process's first bucket is not counted while it is in the ring: its
 * first lease is an initial burst, not a rate, and processes that start a
 * little apart would otherwise count the first one's rate before the
 * others came (their shares would add up to more than the rate).
 */
#include <string.h>

#include "lease_share.h"

void sl__share_init(struct sl_share *s, uint64_t bucket_ns)
{
	memset(s, 0, sizeof(*s));
	s->bucket_ns = bucket_ns;
}

/* Move the ring to the bucket that holds now. */
static void share_rotate(struct sl_share *s, uint64_t now)
{
	if (now - s->head_ns >= (uint64_t)SL_SHARE_BUCKETS * s->bucket_ns) {
		memset(s->units, 0, sizeof(s->units));
		s->head_ns = now - (now - s->head_ns) % s->bucket_ns;
		return;
	}
	while (now - s->head_ns >= s->bucket_ns) {
		s->head = (s->head + 1) % SL_SHARE_BUCKETS;
		s->units[s->head] = 0;
		s->head_ns += s->bucket_ns;
	}
}

void sl__share_add(struct sl_share *s, uint64_t now, uint64_t units)
{
	if (s->first_ns == 0) {
		/* The first grant starts the window and is not counted: it is
		 * the process's initial burst, spent at once, not a rate. */
		s->first_ns = now;
		s->head_ns = now;
		return;
	}
	share_rotate(s, now);
	s->units[s->head] += units;
}

uint64_t sl__share_recent(struct sl_share *s, uint64_t now, uint64_t *window_ns)
{
	*window_ns = 0;
	if (s->first_ns == 0 || now <= s->first_ns)
		return 0;
	share_rotate(s, now);
	/* Buckets are aligned on the first grant: the bucket k back from the
	 * current one started it. */
	uint64_t k = (s->head_ns - s->first_ns) / s->bucket_ns;
	uint64_t sum = 0;
	for (unsigned i = 0; i < SL_SHARE_BUCKETS; i++)
		if (k == 0 || k >= SL_SHARE_BUCKETS ||
		    i != (s->head + SL_SHARE_BUCKETS - k) % SL_SHARE_BUCKETS)
			sum += s->units[i];
	if (k == 0)
		*window_ns = now - s->first_ns; /* younger than one bucket */
	else if (k < SL_SHARE_BUCKETS)
		*window_ns = now - s->first_ns - s->bucket_ns; /* all but the first bucket */
	else
		*window_ns = (uint64_t)(SL_SHARE_BUCKETS - 1) * s->bucket_ns + (now - s->head_ns);
	return sum;
}
