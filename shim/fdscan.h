/* SPDX-License-Identifier: MIT */
/*
 * fdscan.h - fd.c's questions from outside a call (fdscan.c): the fds
 * inherited through exec, classified at start, and whether an fd still is
 * the socket it was classified as.
 *
 * API: sl__fd_same from any thread; sl__fd_scan_unsync at start only.
 */
#ifndef SLUICE_SHIM_FDSCAN_H
#define SLUICE_SHIM_FDSCAN_H

#include <stdbool.h>

/* True unless fd provably no longer is the socket it was classified as
 * (another inode: it changed through a path no wrapper saw). One fstat;
 * called only when a rule is about to act on fd, never in a sandbox. If it
 * returns false, fd is forgotten (its next call classifies it again). */
bool sl__fd_same(int fd);
/* Classify every fd open now (the constructor: fds inherited through exec
 * are classified before the program can install a seccomp filter). */
void sl__fd_scan_unsync(void);

#endif /* SLUICE_SHIM_FDSCAN_H */
