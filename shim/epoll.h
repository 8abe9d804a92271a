/* SPDX-License-Identifier: MIT */
/*
 * epoll.h - the epoll wrappers' tables (epoll.c).
 */
#ifndef SLUICE_SHIM_EPOLL_H
#define SLUICE_SHIM_EPOLL_H

#include "internal.h"

/* Map (once, if `on`) and clear the registration mirror; register the
 * forget and readiness hooks. Init only. Returns 0 or -1. */
int sl__ep_init_unsync(bool on);
/* The child after fork: free the per-fd locks that threads gone with the
 * fork held. */
void sl__ep_after_fork_unsync(void);

#endif /* SLUICE_SHIM_EPOLL_H */
