/* SPDX-License-Identifier: MIT */
/*
 * params.c - a rule's limiter parameters and its largest piece.
 */
#include <string.h>

#include "params.h"

void sl_params_of(const struct sl_rule *r, struct sl_params *p)
{
	static const uint32_t kinds[] = {
		[SL_ALGO_TOKEN] = SL_KIND_TOKEN,
		[SL_ALGO_LEAKY] = SL_KIND_LEAKY,
		[SL_ALGO_FIXED] = SL_KIND_FIXED,
		[SL_ALGO_SLIDING] = SL_KIND_SLIDING,
	};
	memset(p, 0, sizeof(*p));
	p->kind = r->op == SL_OP_CONNS         ? SL_KIND_CONC
		  : r->algo <= SL_ALGO_SLIDING ? kinds[r->algo]
					       : SL_KIND_TOKEN;
	p->amount = r->amount;
	p->period_ns = r->period_ns;
	p->burst = r->burst;
	if (r->warmup_ns != 0 && p->kind == SL_KIND_TOKEN) {
		p->kind = SL_KIND_WARMUP;
		p->cold = r->cold;
		p->warmup_ns = r->warmup_ns;
	}
}

struct sl_params sl_params_now(const struct sl_rule *r, const struct sl_limiter *l)
{
	struct sl_params p = {.amount = r->amount, .period_ns = r->period_ns, .burst = r->burst};
	if (l != NULL && l->kind == SL_KIND_TUNABLE)
		p = sl_tunable_current((const struct sl_tunable *)(const void *)l)->params;
	return p;
}

/* Bytes of `ns` nanoseconds at the rate amount per period. */
static uint64_t rate_for(const struct sl_params *p, uint64_t ns)
{
	unsigned __int128 b = (unsigned __int128)p->amount * ns;
	return p->period_ns ? (uint64_t)(b / p->period_ns) : p->amount;
}

uint64_t sl_piece_max(const struct sl_rule *r, const struct sl_params *p)
{
	uint64_t m;
	switch (r->algo) {
	case SL_ALGO_TOKEN:
		m = p->burst;
		break;
	case SL_ALGO_LEAKY:
		m = p->burst != 0 ? p->burst : rate_for(p, 10000000u);
		break;
	case SL_ALGO_SLIDING: {
		/* A sliding window cannot reserve: a piece of p waits until the
		 * estimate is N - p, so the steady rate is (N - p) per window
		 * (p = N, half the rate: it waits for an empty estimate, two
		 * windows after a full one). 10 ms worth, at most N/32, keeps
		 * it within 1% (W = 1 s) to 3% (W <= 320 ms) of the rate. */
		uint64_t ten_ms = rate_for(p, 10000000u);
		m = p->amount / 32 < ten_ms ? p->amount / 32 : ten_ms;
		break;
	}
	default:
		m = p->amount;
		break;
	}
	return m == 0 ? 1 : m;
}

uint64_t sl_piece_of(const struct sl_policy *p, uint32_t rules,
		     struct sl_params (*now)(void *ctx, unsigned i), void *ctx)
{
	uint64_t piece = UINT64_MAX;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &p->rules[i];
		if (r->unit != SL_UNIT_BYTES || r->action == SL_ACTION_DRYRUN)
			continue;
		const struct sl_params prm = now(ctx, i);
		uint64_t m = sl_piece_max(r, &prm);
		piece = m < piece ? m : piece;
	}
	return piece;
}
