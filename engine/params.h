/* SPDX-License-Identifier: MIT */
/*
 * params.h - what a rule's limiter is and how large a piece of a transfer
 * it may be asked for at once (params.c).
 *
 * API: pure, any thread.
 */
#ifndef SLUICE_ENGINE_PARAMS_H
#define SLUICE_ENGINE_PARAMS_H

#include "policy.h"
#include "sluice_core.h"

/* Limiter parameters of rule r: the algorithm's kind (conns: concurrency;
 * a token bucket with warmup=: the warm-up kind), its amount, period and
 * burst, and the warm-up's. */
void sl_params_of(const struct sl_rule *r, struct sl_params *p);

/* Rule r's parameters now: those `sluice set` gave limiter l since (a
 * tunable one: per=process in a status record, shared=), else the rule's.
 * l may be NULL. */
struct sl_params sl_params_now(const struct sl_rule *r, const struct sl_limiter *l);

/*
 * The largest piece a split transfer may charge at once to byte rule r of
 * parameters p (sl_params_now): the burst for a token bucket; for a leaky
 * bucket its capacity, or 10 ms worth of bytes when the capacity is
 * unbounded; the window's size for a fixed window; for a sliding window
 * 10 ms worth, at most N/32. At least 1. Both front ends split by it, so a
 * transfer under one rule goes out in the same pieces in either mode.
 */
uint64_t sl_piece_max(const struct sl_rule *r, const struct sl_params *p);

/* The largest piece a transfer under `rules` may be charged at once: the
 * smallest sl_piece_max of its byte rules, leaving out dry-run ones (a
 * dry-run rule never splits a transfer); UINT64_MAX if none is left.
 * now(ctx, i) gives rule i's parameters now (sl_params_now of the limiter
 * the call uses). */
uint64_t sl_piece_of(const struct sl_policy *p, uint32_t rules,
		     struct sl_params (*now)(void *ctx, unsigned i), void *ctx);

#endif /* SLUICE_ENGINE_PARAMS_H */
