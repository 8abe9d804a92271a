/* SPDX-License-Identifier: MIT */
/*
 * wait.h - a call waiting for its slot (wait.c): the socket's timeout, the
 * sleep, signals.
 *
 * API: the thread making the call; errno is preserved.
 */
#ifndef SLUICE_SHIM_WAIT_H
#define SLUICE_SHIM_WAIT_H

#include <stdint.h>

#include "call.h"

/* The absolute instant the socket's own timeout (SO_SNDTIMEO/SO_RCVTIMEO,
 * c->timeout_opt) ends a wait of call c, UINT64_MAX for none; read once,
 * on first need (never in a sandbox). */
uint64_t sl__call_timeout(struct sl_call *c);
/* Sleep until t, counting the time slept (c->waited_ns). Returns 0, or
 * EINTR for a signal the call is not to resume after (see wait.c). A sleep
 * the system refuses (a seccomp filter: ENOSYS, EPERM) makes the call pass
 * through (c->passing) and returns 0. */
int sl__call_sleep(struct sl_call *c, uint64_t t);

#endif /* SLUICE_SHIM_WAIT_H */
