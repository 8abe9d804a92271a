/* SPDX-License-Identifier: MIT */
/*
 * calls.h - the slots of held calls: a new one, and its release,
 * which gives back what the call still holds and counts its end (calls.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_CALLS_H
#define SLUICE_SUPERVISE_CALLS_H

#include <linux/seccomp.h>

#include "admit.h"
#include "state.h"

/* A free call slot (zeroed, used, dup -1) or NULL when SL_SUP_CALLS_MAX calls
 * are held. */
struct sl_sup_call *sl_sup_call_new(struct sl_sup *s, const struct seccomp_notif *req,
				    struct sl_sup_thread *th);
/* Release a call: refund what it still holds, close its dup. */
void sl_sup_call_free(struct sl_sup *s, struct sl_sup_call *c);

/* Call c after the engine's verdict v at now_ns (admit.h: GO or RETRY, with
 * wait_ns): stepped again at its deadline; true if a GO's slot is now. */
bool sl_sup_call_wait(struct sl_sup_call *c, enum sl_sup_verdict v, uint64_t now_ns,
		      uint64_t wait_ns);

#endif /* SLUICE_SUPERVISE_CALLS_H */
