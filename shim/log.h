/* SPDX-License-Identifier: MIT */
/*
 * log.h - "sluice: ..." lines on stderr or in SLUICE_LOG_FILE (log.c).
 *
 * API: sl_log(level, fmt, ...) from any thread; it tests the level before
 * anything is formatted. sl__log_set_file is init-only.
 */
#ifndef SLUICE_SHIM_LOG_H
#define SLUICE_SHIM_LOG_H

#include <stddef.h>

#include "internal.h"

extern int sl__log_level; /* enum sl_log_level */
void sl__log_set_file(const char *path);
void sl__log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "sluice: note: ..." whatever the level (a fact the user asked about). */
void sl__log_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* True the first time `key` (its hash) is asked about in the set of n
 * hashes at `set` (zeroed storage of the caller's): a warning given once per
 * key. Past a full set nothing is new (no flood of warnings). */
bool sl__log_first(_Atomic uint64_t *set, unsigned n, const char *key);
#define sl_log(level, ...)                                                                         \
	do {                                                                                       \
		if ((int)(level) <= sl__log_level)                                                 \
			sl__log_write((level), __VA_ARGS__);                                       \
	} while (0)

#endif /* SLUICE_SHIM_LOG_H */
