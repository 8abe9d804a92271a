/* SPDX-License-Identifier: MIT */
/*
 * wrap_raw.h - libc's syscall() for the numbers the wrappers throttle
 * (wrap_raw.c).
 */
#ifndef SLUICE_SHIM_WRAP_RAW_H
#define SLUICE_SHIM_WRAP_RAW_H

#include <stdbool.h>

/* The raw call nr with arguments a made as the libc call of the same name,
 * through its wrapper: true with its result in *r (-1 and errno as
 * syscall() gives them), false for any other number. */
bool sl__wrap_raw_io(long nr, const long *a, long *r);
/* wrap_fd.c: syscall() routes those numbers through `route` (init only). */
void sl__wrap_fd_on_io_unsync(bool (*route)(long nr, const long *a, long *r));

#endif /* SLUICE_SHIM_WRAP_RAW_H */
