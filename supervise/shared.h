/* SPDX-License-Identifier: MIT */
/*
 * shared.h - shared=NAME rules: the segments the supervisor maps (shared.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_SHARED_H
#define SLUICE_SUPERVISE_SHARED_H

#include <stddef.h>
#include <stdint.h>

struct sl_sup;
struct sl_shm_shared;
struct sl_limiter;

/* Map (create) the segment of every shared= rule; 0, or -1 with a reason. */
int sl_sup_shared_open_all(struct sl_sup *s, uint64_t now_ns, char *err, size_t errlen);
/* The shared limiter of rule i, or NULL if the rule is not shared=. */
struct sl_limiter *sl_sup_shared_lim(const struct sl_sup *s, unsigned i);
void sl_sup_shared_close_all(struct sl_sup *s);

#endif /* SLUICE_SUPERVISE_SHARED_H */
