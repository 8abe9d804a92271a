/* SPDX-License-Identifier: MIT */
/*
 * stat.h - the status record (segment stat-TGID) of each supervised process (stat.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_STAT_H
#define SLUICE_SUPERVISE_STAT_H

#include <stdbool.h>
#include <stdint.h>

struct sl_sup;
struct sl_sup_proc;
struct sl_shm_stat;
struct sl_limiter;

/* Create and publish p's record, its per=process limiters initialised at
 * now_ns; p->rec stays NULL if that fails. */
void sl_sup_stat_open(const struct sl_sup *s, struct sl_sup_proc *p, uint64_t now_ns);
/* Remove p's record, first writing its SLUICE_STATS line if asked. */
void sl_sup_stat_close(const struct sl_sup *s, struct sl_sup_proc *p);
/* The record's limiter of rule i (retuned by `sluice set`), or NULL. */
struct sl_limiter *sl_sup_stat_lim(struct sl_sup_proc *p, unsigned i);
/* The counters (engine/count.h, as the preload counts): rule i refused a
 * call; bytes moved under rules; a call of rules ended, admitted if ok,
 * having waited waited_ns for the rules in `delayed`. */
void sl_sup_stat_refused(struct sl_sup_proc *p, unsigned i);
void sl_sup_stat_bytes(struct sl_sup_proc *p, uint32_t rules, uint64_t n);
void sl_sup_stat_end(struct sl_sup_proc *p, uint32_t rules, bool ok, uint32_t delayed,
		     uint64_t waited_ns);

/* The figures of the tree's controller of slot index x (conns:adaptive,
 * system protection, client limit: shm_format.h, sl_shm_stat_slot) and
 * its turns in flight, into every process's record: `sluice stat` shows
 * them as for a preloaded process. */
struct sl_adapt;
void sl_sup_stat_adapt(const struct sl_sup *s, unsigned x, const struct sl_adapt *a,
		       uint64_t in_flight);

#endif /* SLUICE_SUPERVISE_STAT_H */
