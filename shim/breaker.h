/* SPDX-License-Identifier: MIT */
/*
 * breaker.h - the shim's circuit breakers on connect (breaker.c): what the
 * connect, getsockopt and init code call. Kept apart from internal.h so that
 * the hooks in those files stay one call each.
 */
#ifndef SLUICE_SHIM_BREAKER_H
#define SLUICE_SHIM_BREAKER_H

#include <stdint.h>
#include <sys/socket.h>

#include "policy.h"

/* Break rules in force (0: connect goes straight to the rules). */
extern uint32_t sl__break_n;

/* connect under the breakers: fails at once (no system call) while a
 * matching breaker is open, otherwise the rules' connect (sl__connect,
 * connect.c) and its outcome counted. errno as the call's. */
int sl__break_connect(int fd, const struct sockaddr *sa, socklen_t len);
/* getsockopt(SO_ERROR) of fd gave err to the program: the outcome of its
 * non-blocking connect, if one is pending. errno is preserved. */
void sl__break_soerror(int fd, int err);
/* Build the breakers of p at now_ns (init.c). 0, or -1 (logged). */
int sl__break_init_unsync(const struct sl_policy *p, uint64_t now_ns);
/* SLUICE_STATS: the breakers' counters as a JSON array into buf; returns
 * the length written (truncated to len - 1, NUL-terminated). */
size_t sl__break_stats_json(char *buf, size_t len);

#endif /* SLUICE_SHIM_BREAKER_H */
