/* SPDX-License-Identifier: MIT */
/*
 * epoll.h - the epoll wrappers' tables (epoll.c).
 */
#ifndef SLUICE_SHIM_EPOLL_H
#define SLUICE_SHIM_EPOLL_H

#include "internal.h"

/* The token of the wake-up timer's registration in every epoll set
 * (wake.c): the magic with slot 0xffff; epoll_wait drops its events. */
#define SL_EP_WAKE_TOKEN ((0x51ceull << 48) | (0xffffull << 32))

/* Map (once, if `on`) and clear the registration mirror; register the
 * forget and readiness hooks. Init only. Returns 0 or -1. */
int sl__ep_init_unsync(bool on);
/* The child after fork: free the per-fd locks that threads gone with the
 * fork held. */
void sl__ep_after_fork_unsync(void);

#endif /* SLUICE_SHIM_EPOLL_H */
