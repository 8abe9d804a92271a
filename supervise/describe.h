/* SPDX-License-Identifier: MIT */
/*
 * describe.h - a trapped send or receive described for the engine
 * (describe.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_DESCRIBE_H
#define SLUICE_SUPERVISE_DESCRIBE_H

#include <linux/seccomp.h>

#include "state.h"

/* The held call of notification req (kind SL_SUP_SEND or SL_SUP_RECV), its
 * buffers, destination, timeout and rules filled in; NULL when the call was
 * let continue in the kernel (no rule, not a socket, nothing to move). */
struct sl_sup_call *sl_sup_describe(struct sl_sup *s, const struct seccomp_notif *req,
				    enum sl_sup_kind kind);
/* A write or send the supervisor can let continue in the kernel, charged
 * its whole length (a blocking stream socket it has described before, one
 * piece, no rule on the peer): the call, held, cont set; NULL with
 * *answered when it continued uncharged (no rule); NULL alone: describe it
 * with sl_sup_describe. */
struct sl_sup_call *sl_sup_describe_fast(struct sl_sup *s, const struct seccomp_notif *req,
					 bool *answered);

#endif /* SLUICE_SUPERVISE_DESCRIBE_H */
