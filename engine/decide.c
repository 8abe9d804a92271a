/* SPDX-License-Identifier: MIT */
/*
 * decide.c - what one rule decides about one call.
 */
#include <errno.h>

#include "decide.h"

int sl_decide_errno(const struct sl_rule *r, enum sl_op op, uint64_t start_ns, uint64_t timeout_at,
		    bool never)
{
	if (!never && r->action == SL_ACTION_DELAY &&
	    timeout_at < sl_decide_add(start_ns, r->max_delay_ns))
		return EAGAIN;
	return sl_rule_errno(r, op);
}

struct sl_answer sl_decide_rule(const struct sl_rule *r, struct sl_limiter *l, uint64_t n,
				uint64_t now, uint64_t limit, struct sl_decision police)
{
	struct sl_decision d = police;
	if (d.verdict != SL_ADMIT && r->action == SL_ACTION_DRYRUN)
		return (struct sl_answer){
			.step = SL_STEP_DRY,
			.would_refuse = d.verdict == SL_NEVER || d.wait_ns > r->max_delay_ns,
			.at_ns = d.wait_ns,
		};
	if (d.verdict != SL_ADMIT && r->action == SL_ACTION_DELAY && limit > now)
		d = sl_limiter_acquire(l, n, now, limit - now);
	if (d.verdict == SL_ADMIT)
		return (struct sl_answer){.step = SL_STEP_GO,
					  .at_ns = sl_decide_add(now, d.wait_ns)};
	/* Token, leaky and fixed limiters reserved up to the limit already:
	 * their refusal is final. Sliding windows and concurrency cannot
	 * reserve, so their hint (or a backoff) is worth a retry. */
	const uint32_t kind = l->kind == SL_KIND_TUNABLE ? l->params.kind : l->kind;
	if (d.verdict == SL_REFUSE && r->action == SL_ACTION_DELAY &&
	    (kind == SL_KIND_SLIDING || kind == SL_KIND_CONC))
		return (struct sl_answer){.step = SL_STEP_RETRY, .at_ns = d.wait_ns};
	return (struct sl_answer){.step = SL_STEP_REFUSE, .never = d.verdict == SL_NEVER};
}

uint64_t sl_decide_retry_at(uint64_t now, uint64_t hint_ns, uint64_t limit, uint64_t *backoff_ns)
{
	if (hint_ns == UINT64_MAX)
		return UINT64_MAX;
	uint64_t at = sl_decide_add(now, hint_ns != 0 ? hint_ns : *backoff_ns);
	if (hint_ns == 0)
		*backoff_ns = *backoff_ns < SL_DECIDE_BACKOFF_MAX_NS / 2 ? *backoff_ns * 2
									 : SL_DECIDE_BACKOFF_MAX_NS;
	return at <= limit ? at : UINT64_MAX;
}
