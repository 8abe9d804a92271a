/* SPDX-License-Identifier: MIT */
/*
 * stats.h - SLUICE_STATS=PATH, what each rule did, written at exit
 * (stats.c). The counters themselves are struct sl_rstats (shm_format.h),
 * counted by act.c.
 */
#ifndef SLUICE_SHIM_STATS_H
#define SLUICE_SHIM_STATS_H

#include "internal.h"

/* Reset the per-process counters (init; the child after fork). */
void sl__stats_reset(void);
/* Write SLUICE_STATS (the destructor; tests call it). */
void sl__stats_write(void);
/* What writes more members into the object (",\"breakers\":[...]"): at
 * most len - 1 bytes into buf, NUL-terminated, returning their length.
 * Set at start (init.c: the breakers), so that this file calls up to no
 * module above it. */
void sl__stats_on_write_unsync(size_t (*extra)(char *buf, size_t len));

#endif /* SLUICE_SHIM_STATS_H */
