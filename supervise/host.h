/* SPDX-License-Identifier: MIT */
/*
 * host.h - the host's figures for system protection (load1=, cpu=; host.c),
 * read by turn.c at most every SL_ADAPT_HOST_EVERY_NS. Their own file so
 * that a test can define them (the linker then takes not this one).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_HOST_H
#define SLUICE_SUPERVISE_HOST_H

#include <stdbool.h>
#include <stdint.h>

/* The host's 1-minute load average in 1/1000 (sysinfo); false if it
 * cannot be read. */
bool sl_sup_host_load1(uint64_t *milli);
/* The CPUs' busy and total time in ticks since boot (the first line of
 * /proc/stat, engine/adaptive.h: sl_adapt_cpu_parse); false if it cannot
 * be read. */
bool sl_sup_host_cpu(uint64_t *busy, uint64_t *total);

#endif /* SLUICE_SUPERVISE_HOST_H */
