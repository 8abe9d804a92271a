/* SPDX-License-Identifier: MIT */
/*
 * decide.h - what one rule decides about one call (decide.c): the part of
 * admitting that both front ends share. The preload sleeps where the
 * answer says to wait, the supervisor holds the trapped call; neither
 * re-derives what the answer means.
 *
 * A call first polices each rule (sl_limiter_acquire with max_wait 0,
 * which takes nothing when it refuses); a rule that does not admit at once
 * is then asked sl_decide_rule with that answer:
 *   GO      its units are taken, for a slot at at_ns (now, or later: the
 *           call waits until then);
 *   RETRY   nothing taken, a limiter that cannot reserve (a sliding window,
 *           a concurrency limit) may admit later: ask again at
 *           sl_decide_retry_at(), if that is within the call's limit;
 *   REFUSE  nothing taken; the call fails with sl_decide_errno();
 *   DRY     a dry-run rule that would have delayed (would_refuse false) or
 *           refused the call: nothing taken, the call goes on.
 *
 * The limit on a wait (sl_decide_limit) is the earlier of the rule's
 * max-delay from the call's start and the socket's own timeout
 * (SO_SNDTIMEO, SO_RCVTIMEO: the preload reads it, the supervisor has none
 * to read and passes UINT64_MAX).
 *
 * API: pure functions of the rule, the limiter and `now`; any thread.
 */
#ifndef SLUICE_ENGINE_DECIDE_H
#define SLUICE_ENGINE_DECIDE_H

#include <stdbool.h>

#include "policy.h"
#include "sluice_core.h"

enum sl_step {
	SL_STEP_GO = 0,
	SL_STEP_RETRY = 1,
	SL_STEP_REFUSE = 2,
	SL_STEP_DRY = 3,
};

struct sl_answer {
	uint8_t step;      /* enum sl_step */
	bool never;        /* REFUSE: no wait could ever admit (n > what the
	                      limiter admits at once, on-error=closed) */
	bool would_refuse; /* DRY: would have refused rather than delayed */
	uint64_t at_ns;    /* GO: the slot's instant; RETRY, DRY: the limiter's
	                      hint (0: none) */
};

/* Saturating a + b. */
static inline uint64_t sl_decide_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

/* The instant past which rule r may not make a call begun at start_ns wait;
 * timeout_at: the socket's own limit (UINT64_MAX: none). */
static inline uint64_t sl_decide_limit(const struct sl_rule *r, uint64_t start_ns,
				       uint64_t timeout_at)
{
	uint64_t a = sl_decide_add(start_ns, r->max_delay_ns);
	return a < timeout_at ? a : timeout_at;
}

/* The errno a refusal by rule r gives call op: EAGAIN when the socket's
 * timeout, not max-delay, was the limit that bit; else the rule's. */
int sl_decide_errno(const struct sl_rule *r, enum sl_op op, uint64_t start_ns, uint64_t timeout_at,
		    bool never);

/* The rest of rule r's charge of n units on limiter l at now, when
 * policing answered `police` (not an admit at once): reserve up to `limit`
 * (a delay rule), or classify the refusal. */
struct sl_answer sl_decide_rule(const struct sl_rule *r, struct sl_limiter *l, uint64_t n,
				uint64_t now, uint64_t limit, struct sl_decision police);

/* When a RETRY asks again: the hint, or without one the backoff (*backoff_ns,
 * starting at SL_DECIDE_BACKOFF_NS, doubles up to SL_DECIDE_BACKOFF_MAX_NS:
 * a conns slot frees only on a close). UINT64_MAX if that is past limit:
 * the call is refused instead. */
#define SL_DECIDE_BACKOFF_NS 1000000u
#define SL_DECIDE_BACKOFF_MAX_NS 50000000u
uint64_t sl_decide_retry_at(uint64_t now, uint64_t hint_ns, uint64_t limit, uint64_t *backoff_ns);

#endif /* SLUICE_ENGINE_DECIDE_H */
