/* SPDX-License-Identifier: MIT */
/*
 * stats_json.h - the line each process appends to SLUICE_STATS at its end
 * (stats_json.c), the same from the preload (shim/stats.c) and the
 * supervisor (supervise/stat.c):
 *   {"pid":1234,"program":"curl","rules":[{"index":1,"rule":"send:1MiB/s",
 *    "op":"send","action":"delay","scope":"process","calls":10,"admitted":10,
 *    "delayed":9,"refused":0,"delay_ns_total":8123456789,
 *    "delay_ns_max":1000123456,"bytes":10485760}, ...]}
 * one entry per rule in the order the rules were given (engine/count.h says
 * what each counter counts).
 *
 * API: pure (formatting into the caller's buffer), any thread.
 */
#ifndef SLUICE_COMMON_STATS_JSON_H
#define SLUICE_COMMON_STATS_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "count.h"
#include "policy.h"

/* SLUICE_STATS's PATH src with "%p" replaced by pid. */
void sl_stats_path(const char *src, int pid, char *out, size_t cap);

/* The object of one process's line into buf (cap bytes), without its
 * closing brace, so that the caller may add members; its length (at most
 * cap: a caller that adds "}\n" passes 2 bytes less than it has).
 * stats[i] are rule i's counters, for i < n (rules past n count 0). */
size_t sl_stats_json(char *buf, size_t cap, int pid, const char *program, const struct sl_policy *p,
		     const struct sl_rstats *stats, uint32_t n);

#endif /* SLUICE_COMMON_STATS_JSON_H */
