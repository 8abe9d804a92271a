/* SPDX-License-Identifier: MIT */
/*
 * accept.h - accept and accept4 under rate and conns rules (accept.c).
 */
#ifndef SLUICE_SHIM_ACCEPT_H
#define SLUICE_SHIM_ACCEPT_H

#include <sys/socket.h>

#include "internal.h"

/* accept4(2) as the program sees it (flags < 0: plain accept(2)): the
 * rules' waits and refusals around the real call. Any thread. */
int sl__accept(int fd, struct sockaddr *sa, socklen_t *len, int flags);

#endif /* SLUICE_SHIM_ACCEPT_H */
