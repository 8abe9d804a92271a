/* SPDX-License-Identifier: MIT */
/*
 * sockalive.h - whether a socket still exists in some process, asked of the
 * kernel's socket diagnostics (NETLINK_SOCK_DIAG, what ss(8) reads) by the
 * socket's identity (sockalive.c; the request: common/sockdiag.h). A connection whose fds live in several
 * processes (a fork) is gone when no process holds it any more: the kernel
 * then reports its TCP socket without an inode (orphaned, closing) or not
 * at all, and a unix socket not at all.
 *
 * API: thread-safe; each query makes its own netlink socket.
 */
#ifndef SLUICE_SHIM_SOCKALIVE_H
#define SLUICE_SHIM_SOCKALIVE_H

#include <stdbool.h>
#include <stdint.h>

#include "sockdiag.h"

/* The identity of connected socket fd: false (errno) if fd is not a TCP or
 * unix stream socket, or not connected. */
bool sl__sockid_of(int fd, struct sl_sockid *id);
/* 1 if the socket is still held by some process, 0 if not, -1 if the
 * kernel cannot tell (errno). */
int sl__sock_alive(const struct sl_sockid *id);

#endif /* SLUICE_SHIM_SOCKALIVE_H */
