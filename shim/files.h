/* SPDX-License-Identifier: MIT */
/*
 * files.h - SLUICE_STATS and SLUICE_LOG_FILE opened so that another local
 * user cannot redirect or read them (files.c).
 *
 * API: sl__file_open_private from any thread; sl__files_check_unsync at
 * start only.
 */
#ifndef SLUICE_SHIM_FILES_H
#define SLUICE_SHIM_FILES_H

#include <stddef.h>

#include "internal.h"

/* Open path for appending, safely: the fd, or -1 with the reason in why. */
int sl__file_open_private(const char *path, char *why, size_t cap);
/* Check both paths of p at start: 0, or -1 (exit 2; logged). Under
 * SLUICE_CONFIG_ERROR=warn a refused path is cleared and 0 returned. */
int sl__files_check_unsync(struct sl_policy *p);

#endif /* SLUICE_SHIM_FILES_H */
