/* SPDX-License-Identifier: MIT */
/*
 * lease_share.h - a process's recent share of a fleet-wide rate: the units
 * Redis granted it over the last few seconds (lease_share.c).
 *
 * API and thread-safety: a struct sl_share belongs to the lease thread;
 * nothing here is atomic. Times are CLOCK_MONOTONIC ns.
 */
#ifndef SLUICE_SHIM_LEASE_SHARE_H
#define SLUICE_SHIM_LEASE_SHARE_H

#include <stdint.h>

#define SL_SHARE_BUCKETS 8

struct sl_share {
	uint64_t bucket_ns; /* one bucket's span; the window is SL_SHARE_BUCKETS of them */
	uint64_t first_ns;  /* the first grant (0: none yet) */
	uint64_t head_ns;   /* start of the current bucket */
	uint64_t units[SL_SHARE_BUCKETS];
	unsigned head;
};

/* Empty, with buckets of bucket_ns (> 0). */
void sl__share_init(struct sl_share *s, uint64_t bucket_ns);
/* Units granted at now (now never goes back); the first grant only starts
 * the window. */
void sl__share_add(struct sl_share *s, uint64_t now, uint64_t units);
/* Units granted in the window that ends at now, and its length in
 * *window_ns: SL_SHARE_BUCKETS - 1 whole buckets and the current one's
 * part, less the bucket of the first grant while it is one of them (the
 * age itself while the first bucket is the current one). *window_ns is 0
 * when there is no grant to go by. */
uint64_t sl__share_recent(struct sl_share *s, uint64_t now, uint64_t *window_ns);

#endif /* SLUICE_SHIM_LEASE_SHARE_H */
