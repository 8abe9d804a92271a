/* SPDX-License-Identifier: MIT */
/*
 * connect.h - connect under rate and conns rules (connect.c).
 */
#ifndef SLUICE_SHIM_CONNECT_H
#define SLUICE_SHIM_CONNECT_H

#include <sys/socket.h>

#include "internal.h"

/* connect(2) as the program sees it: the rules' waits and refusals, then
 * the real call. Any thread. */
int sl__connect(int fd, const struct sockaddr *sa, socklen_t len);

#endif /* SLUICE_SHIM_CONNECT_H */
