/* SPDX-License-Identifier: MIT */
/*
 * limiter.c - the generic limiter: init from struct sl_params, dispatch on
 * the kind, validation of a (possibly foreign or corrupt) limiter, names.
 *
 * A limiter may live in a MAP_SHARED segment written by another process, so
 * sl_limiter_validate() trusts nothing in it: it rebuilds the parameters
 * from the stored sl_params with the same init code and requires every
 * derived field to match exactly. A limiter that passes cannot divide by
 * zero, shift out of range or overflow the fixed-point products, whatever
 * its state word holds.
 */
#include "internal.h"
#include "sluice_fast.h"

/*
 * sl_limiter_init - initialise l as p->kind with epoch now_ns. Returns
 * SL_EINVAL for an unknown kind or a zero amount/period (burst for token),
 * SL_ERANGE for parameters beyond the fixed-point range; l is then left
 * unmarked (magic 0). Not thread-safe: call before sharing l.
 */
enum sl_status sl_limiter_init(struct sl_limiter *l, const struct sl_params *p, uint64_t now_ns)
{
	*l = (struct sl_limiter){.params = *p};
	enum sl_status st;
	switch (p->kind) {
	case SL_KIND_TOKEN:
		st = sl_token_init(&l->u.gcra, p->amount, p->period_ns, p->burst, now_ns);
		break;
	case SL_KIND_LEAKY:
		st = sl_leaky_init(&l->u.gcra, p->amount, p->period_ns, p->burst, now_ns);
		break;
	case SL_KIND_FIXED:
		st = sl_fixed_init(&l->u.fixed, p->amount, p->period_ns, now_ns);
		break;
	case SL_KIND_SLIDING:
		st = sl_sliding_init(&l->u.sliding, p->amount, p->period_ns, now_ns);
		break;
	case SL_KIND_CONC:
		st = sl_conc_init(&l->u.conc, p->amount);
		break;
	case SL_KIND_WARMUP:
		st = sl_warmup_init(&l->u.warm, p, now_ns);
		break;
	default:
		return SL_EINVAL;
	}
	if (st != SL_OK)
		return st;
	l->kind = p->kind;
	l->magic = SL_LIMITER_MAGIC;
	return SL_OK;
}

/*
 * sl_limiter_acquire - see sluice_core.h. Sliding windows and concurrency
 * always police (max_wait_ns is ignored). An unknown kind gives SL_NEVER.
 * Token and leaky buckets are tested first, with one unsigned comparison:
 * a switch compiles to a chain of compares that reaches them last; then
 * tunable heads (every per=process limiter of the shim), whose current slot
 * comes back here.
 */
struct sl_decision sl_limiter_acquire(struct sl_limiter *l, uint64_t n, uint64_t now_ns,
				      uint64_t max_wait_ns)
{
	_Static_assert(SL_KIND_LEAKY == SL_KIND_TOKEN + 1, "token and leaky kinds are adjacent");
	if (l->kind - SL_KIND_TOKEN <= SL_KIND_LEAKY - SL_KIND_TOKEN)
		return sl_gcra_acquire(&l->u.gcra, n, now_ns, max_wait_ns);
	if (l->kind == SL_KIND_TUNABLE)
		return sl__tunable_acquire(l, n, now_ns, max_wait_ns);
	switch (l->kind) {
	case SL_KIND_FIXED:
		return sl_fixed_acquire(&l->u.fixed, n, now_ns, max_wait_ns);
	case SL_KIND_SLIDING:
		return sl_sliding_acquire(&l->u.sliding, n, now_ns);
	case SL_KIND_CONC:
		return sl_conc_acquire(&l->u.conc, n);
	case SL_KIND_WARMUP:
		return sl_warmup_acquire(&l->u.warm, n, now_ns, max_wait_ns);
	default:
		return sl__never();
	}
}

/* sl_limiter_refund - see sluice_core.h; SL_EINVAL for an unknown kind. */
enum sl_status sl_limiter_refund(struct sl_limiter *l, uint64_t n, uint64_t now_ns)
{
	switch (l->kind) {
	case SL_KIND_TOKEN:
	case SL_KIND_LEAKY:
		return sl_gcra_refund(&l->u.gcra, n, now_ns);
	case SL_KIND_FIXED:
		return sl_fixed_refund(&l->u.fixed, n, now_ns);
	case SL_KIND_SLIDING:
		return sl_sliding_refund(&l->u.sliding, n, now_ns);
	case SL_KIND_CONC:
		return sl_conc_release(&l->u.conc, n);
	case SL_KIND_WARMUP:
		return sl_warmup_refund(&l->u.warm, n, now_ns);
	case SL_KIND_TUNABLE:
		return sl__tunable_refund(l, n, now_ns);
	default:
		return SL_EINVAL;
	}
}

/* sl_limiter_charge - see sluice_core.h; concurrency holds units rather
 * than spending them, so it has no debt to take: SL_EINVAL, as for an
 * unknown kind. */
enum sl_status sl_limiter_charge(struct sl_limiter *l, uint64_t n, uint64_t now_ns)
{
	switch (l->kind) {
	case SL_KIND_TOKEN:
	case SL_KIND_LEAKY:
		return sl_gcra_charge(&l->u.gcra, n, now_ns);
	case SL_KIND_FIXED:
		return sl_fixed_charge(&l->u.fixed, n, now_ns);
	case SL_KIND_SLIDING:
		return sl_sliding_charge(&l->u.sliding, n, now_ns);
	case SL_KIND_WARMUP:
		return sl_warmup_charge(&l->u.warm, n, now_ns);
	case SL_KIND_TUNABLE:
		return sl__tunable_charge(l, n, now_ns);
	default:
		return SL_EINVAL;
	}
}

/* sl_limiter_release - see sluice_core.h. */
enum sl_status sl_limiter_release(struct sl_limiter *l, uint64_t n)
{
	if (l->kind == SL_KIND_TUNABLE)
		return sl__tunable_release(l, n);
	if (l->kind != SL_KIND_CONC)
		return SL_EINVAL;
	return sl_conc_release(&l->u.conc, n);
}

/* sl_limiter_available - see sluice_core.h; 0 for an unknown kind. */
uint64_t sl_limiter_available(const struct sl_limiter *l, uint64_t now_ns)
{
	switch (l->kind) {
	case SL_KIND_TOKEN:
	case SL_KIND_LEAKY:
		return sl_gcra_available(&l->u.gcra, now_ns);
	case SL_KIND_FIXED:
		return sl_fixed_available(&l->u.fixed, now_ns);
	case SL_KIND_SLIDING:
		return sl_sliding_available(&l->u.sliding, now_ns);
	case SL_KIND_CONC: {
		const uint64_t held = sl_conc_held(&l->u.conc);
		return held < l->u.conc.limit ? l->u.conc.limit - held : 0;
	}
	case SL_KIND_WARMUP:
		return sl_warmup_available(&l->u.warm, now_ns);
	case SL_KIND_TUNABLE:
		return sl__tunable_available(l, now_ns);
	default:
		return 0;
	}
}

static bool gcra_same(const struct sl_gcra *a, const struct sl_gcra *b)
{
	return a->mult == b->mult && a->tau_ticks == b->tau_ticks &&
	       a->limit_ticks == b->limit_ticks && a->burst == b->burst && a->shift == b->shift &&
	       a->tick_shift == b->tick_shift && a->leaky == b->leaky &&
	       a->fast_shift == b->fast_shift && a->capped == b->capped &&
	       a->cost1_ticks == b->cost1_ticks;
}

static bool sliding_same(const struct sl_sliding *a, const struct sl_sliding *b)
{
	if (a->limit != b->limit || a->window_ns != b->window_ns || a->quantum != b->quantum ||
	    a->limit_q != b->limit_q)
		return false;
	/* Relaxed: a read-only plausibility check of one word. Counts above
	 * the limit cannot arise from acquire. */
	const uint64_t state = atomic_load_explicit(&a->state, memory_order_relaxed);
	const uint64_t mask = (UINT64_C(1) << 20) - 1;
	return (state & mask) <= a->limit_q && ((state >> 20) & mask) <= a->limit_q;
}

/*
 * sl_limiter_validate - true if l carries the magic, a known kind and
 * parameters that are exactly what init derives from l->params, and its
 * state is one that the operations can produce (sliding counts and held
 * concurrency units within the limit). Read-only; safe on any readable
 * 192 bytes. A concurrent writer may make it fail spuriously, never crash.
 */
bool sl_limiter_validate(const struct sl_limiter *l)
{
	if (l->magic != SL_LIMITER_MAGIC || l->kind != l->params.kind)
		return false;
	/* Only a warm-up limiter has a warm-up. */
	if (l->kind != SL_KIND_WARMUP && (l->params.cold != 0 || l->params.warmup_ns != 0))
		return false;
	struct sl_limiter ref;
	if (sl_limiter_init(&ref, &l->params, 0) != SL_OK)
		return false;
	switch (l->kind) {
	case SL_KIND_TOKEN:
	case SL_KIND_LEAKY:
		return gcra_same(&l->u.gcra, &ref.u.gcra);
	case SL_KIND_FIXED:
		return l->u.fixed.limit == ref.u.fixed.limit &&
		       l->u.fixed.window_ns == ref.u.fixed.window_ns;
	case SL_KIND_SLIDING:
		return sliding_same(&l->u.sliding, &ref.u.sliding);
	case SL_KIND_CONC:
		return l->u.conc.limit == ref.u.conc.limit &&
		       sl_conc_held(&l->u.conc) <= l->u.conc.limit;
	case SL_KIND_WARMUP:
		return sl__warmup_same(&l->u.warm, &l->params);
	default:
		return false;
	}
}

/* Names for messages; never NULL. */
const char *sl_status_name(enum sl_status s)
{
	switch (s) {
	case SL_OK:
		return "ok";
	case SL_EINVAL:
		return "invalid argument";
	case SL_ERANGE:
		return "out of range";
	case SL_EUNDERFLOW:
		return "underflow";
	}
	return "unknown status";
}

const char *sl_kind_name(enum sl_kind k)
{
	switch (k) {
	case SL_KIND_NONE:
		return "none";
	case SL_KIND_TOKEN:
		return "token";
	case SL_KIND_LEAKY:
		return "leaky";
	case SL_KIND_FIXED:
		return "fixed";
	case SL_KIND_SLIDING:
		return "sliding";
	case SL_KIND_CONC:
		return "concurrency";
	case SL_KIND_TUNABLE:
		return "tunable";
	case SL_KIND_WARMUP:
		return "warmup";
	}
	return "unknown";
}

/* sl_fast_take's out-of-line part (sluice_fast.h): the full police. */
bool sl_fast_take_other(struct sl_limiter *l, uint64_t n, uint64_t now_ns)
{
	/* A police admits with no wait or refuses; n == 0 is admitted. */
	return sl_limiter_acquire(l, n, now_ns, 0).verdict == SL_ADMIT;
}

/* A fast take that raced with a retune, undone (sluice_fast.h). */
bool sl_fast_undo(struct sl_limiter *l, uint64_t n, uint64_t now_ns)
{
	(void)sl_limiter_refund(l, n, now_ns);
	return false;
}

/* sl_fast_peek's out-of-line part: a police of n at now admits exactly when
 * that many are available. */
bool sl_fast_peek_other(const struct sl_limiter *l, uint64_t n, uint64_t now_ns)
{
	return sl_limiter_available(l, now_ns) >= n;
}
