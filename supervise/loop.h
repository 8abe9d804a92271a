/* SPDX-License-Identifier: MIT */
/*
 * loop.h - the notification loop: receive, dispatch to the
 * handlers (sock.c, io.c), step held calls at their deadline or when their
 * fd is ready, sweep (loop.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_LOOP_H
#define SLUICE_SUPERVISE_LOOP_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "state.h"

/* Advance a held call (its deadline came, or its fd is ready). Returns true
 * when the call is finished (answered or dead) and its slot may be freed. */
bool sl_sup_step(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);

/* The signals the launcher blocks from before the fork on and reads in
 * the loop: all but SIGKILL, SIGSTOP, the synchronous faults and job
 * control. Each but SIGCHLD is passed on to the program (loop.c). */
void sl_sup_signals(sigset_t *set);
/* Supervise until the child and every descendant have exited: the status
 * the launcher exits with (launch.c). */
int sl_sup_loop(struct sl_sup *s, pid_t child, const sigset_t *oldmask);

#endif /* SLUICE_SUPERVISE_LOOP_H */
