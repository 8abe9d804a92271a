/* SPDX-License-Identifier: MIT */
/*
 * tunable.c - limiters whose parameters change while they are in use.
 *
 * A struct sl_tunable is a head (kind SL_KIND_TUNABLE) and two limiter
 * slots; head.u.tun.gen says which slot is current (gen & 1). Callers pass
 * &t->head to the generic sl_limiter_* calls, which forward here.
 *
 * Retune (new parameters P at time T):
 *   1. snapshot the current slot's state word s1 (an RMW, so that it reads
 *      the latest value);
 *   2. build the other slot from P, its state carried over from s1 in units:
 *      a bucket's debt (tat - now, as units of the old rate, rounded up) is
 *      charged again at the new rate, a window keeps its counted units (a
 *      fixed window at most its new limit: the window ends as it would);
 *   3. publish it: gen + 1, a release store (the slot's parameters are
 *      visible to whoever sees the new gen);
 *   4. seq_cst fence, snapshot the old slot again (s2) and charge the new
 *      slot with what was taken from the old one between s1 and s2.
 *
 * Acquire: load gen (acquire), act on slot[gen & 1], then a seq_cst fence and
 * load gen again; if it moved, the admission is undone on the old slot and
 * retried on the new one. Why no admission follows the old parameters after
 * the switch, nor escapes the new slot's account: take the retuner's fence
 * F1 (step 4) and the acquirer's fence F2 (after its CAS). If F1 precedes F2
 * in the single order of seq_cst fences, the acquirer's second load sees the
 * new gen (the store precedes F1) and retries on the new slot. Otherwise its
 * CAS precedes the snapshot s2 in the state word's modification order, so
 * s2 includes it and step 4 charges it to the new slot. Either way it is
 * counted; in the race both may happen (counted twice: stricter, never
 * looser). Refunds and releases act on the current slot; a refund that
 * lands on a slot just retired is lost (stricter again).
 *
 * Rate limiter slots (every kind but concurrency) need no F2: their
 * admitting and charging CAS is seq_cst (SL__ADMIT_ORDER in gcra.c, fixed.c
 * and sliding.c; warm-up's __sync CAS is a full barrier), and so are the
 * second load of gen,
 * the retuner's store of gen and its snapshot s2. In the single order S of
 * seq_cst operations the CAS precedes the second load (program order), and
 * the store precedes s2. If the load reads the old gen, it precedes the
 * store in S (a seq_cst load reads the last seq_cst store before it), so
 * the CAS precedes s2 in S, hence in tat's modification order: s2 includes
 * it, as in the fence argument.
 *
 * A concurrency limit keeps its count in the head (head.u.tun.held) and only
 * the limit in the slots, so a retune changes the limit without touching
 * what is held; releases always reach the one count.
 *
 * Lock-freedom: no step waits for another thread or process; a retuner that
 * dies between steps leaves a working limiter (the old one before step 3,
 * the new one after it, missing at most the charges of step 4).
 *
 * Caveat: a retune rewrites the slot retired by the retune before it. An
 * acquirer that loaded gen before that earlier retune and was descheduled
 * until this one could read the slot while it is rewritten. Callers
 * serialise retunes and space them (the `sluice set` command keeps them at
 * least 100 ms apart, see head.u.tun.retune_ns), which makes that window a
 * descheduling of more than 100 ms between two loads; an acquirer that does
 * hit it gets an answer from mixed parameters, never a crash: every slot
 * value is a valid limiter's, and divisions use fields that are never 0.
 */
#include "internal.h"

static struct sl_tunable *tun_of(struct sl_limiter *head)
{
	/* head is the first member of struct sl_tunable. */
	return (struct sl_tunable *)(void *)head;
}

static const struct sl_tunable *tun_of_const(const struct sl_limiter *head)
{
	return (const struct sl_tunable *)(const void *)head;
}

/* The state word of a rate limiter slot; NULL for concurrency. */
static _Atomic uint64_t *slot_word(struct sl_limiter *l)
{
	switch (l->kind) {
	case SL_KIND_TOKEN:
	case SL_KIND_LEAKY:
		return &l->u.gcra.tat;
	case SL_KIND_FIXED:
		return &l->u.fixed.used;
	case SL_KIND_SLIDING:
		return &l->u.sliding.state;
	default:
		return NULL;
	}
}

/* Read the latest value of w: a relaxed RMW that adds nothing, so that it
 * cannot return a value older than the word's last modification (a plain
 * load may), and it takes part in the fence argument above. */
static uint64_t snapshot(_Atomic uint64_t *w)
{
	/* seq_cst: s2 of the argument for token and leaky slots (top). */
	return atomic_fetch_or_explicit(w, 0, memory_order_seq_cst);
}

/* ceil of units in `ticks` at g's rate. */
static uint64_t gcra_units_ceil(const struct sl_gcra *g, uint64_t ticks)
{
	uint64_t u = sl__units_in(ticks, g->mult, g->shift);
	if (u != UINT64_MAX && sl__cost(u, g->mult, g->shift) < ticks)
		u++;
	return u;
}

static uint64_t gcra_now(const struct sl_gcra *g, uint64_t now_ns)
{
	return sl__ns_to_ticks(sl__elapsed(now_ns, g->epoch_ns), g->tick_shift);
}

/* Units that fixed window state v holds from the current window on. */
static uint64_t fixed_ahead(const struct sl_fixed *w, uint64_t v, uint64_t now_ns)
{
	const uint64_t first = sl__sat_mul(sl__elapsed(now_ns, w->epoch_ns) / w->window_ns,
					   w->limit);
	return v > first ? v - first : 0;
}

/* The state word of `to` (new parameters, not yet shared) that carries what
 * state word s1 of `from` holds at now_ns. */
static uint64_t carry(const struct sl_limiter *from, uint64_t s1, const struct sl_limiter *to,
		      uint64_t now_ns)
{
	switch (from->kind) {
	case SL_KIND_TOKEN:
	case SL_KIND_LEAKY: {
		/* The debt beyond now, in units of the old rate, at the new
		 * rate; the new epoch is now_ns. Kept below 2^62 ticks, far
		 * beyond any wait, so that the fast path stays in use. */
		const struct sl_gcra *o = &from->u.gcra;
		const uint64_t now = gcra_now(o, now_ns);
		const uint64_t debt = s1 > now ? s1 - now : 0;
		const uint64_t units = gcra_units_ceil(o, debt);
		return sl__min(sl__cost(units, to->u.gcra.mult, to->u.gcra.shift), UINT64_C(1)
											   << 62);
	}
	case SL_KIND_FIXED: {
		const struct sl_fixed *n = &to->u.fixed;
		const uint64_t first = sl__sat_mul(sl__elapsed(now_ns, n->epoch_ns) / n->window_ns,
						   n->limit);
		/* The current window's count, capped at the new limit (the
		 * window ends as it would have), then what was booked beyond. */
		const uint64_t ahead = fixed_ahead(&from->u.fixed, s1, now_ns);
		const uint64_t cur = sl__min(ahead, from->u.fixed.limit);
		const uint64_t v = sl__sat_add(first,
					       sl__sat_add(sl__min(cur, n->limit), ahead - cur));
		return v == UINT64_MAX ? UINT64_MAX - 1 : v;
	}
	case SL_KIND_SLIDING: {
		uint64_t prev, cur;
		sl__sliding_units(&from->u.sliding, s1, now_ns, &prev, &cur);
		return sl__sliding_state(&to->u.sliding, now_ns, prev, cur);
	}
	default:
		return 0;
	}
}

/* Units taken from old slot `from` between snapshots s1 and s2 (both at
 * about now_ns), to be charged to the new slot. */
static uint64_t taken_between(const struct sl_limiter *from, uint64_t s1, uint64_t s2,
			      uint64_t now_ns)
{
	switch (from->kind) {
	case SL_KIND_TOKEN:
	case SL_KIND_LEAKY: {
		/* Every admission moves tat to max(tat, now) + cost. */
		const uint64_t base = sl__max(s1, gcra_now(&from->u.gcra, now_ns));
		return s2 > base ? gcra_units_ceil(&from->u.gcra, s2 - base) : 0;
	}
	case SL_KIND_FIXED: {
		const uint64_t a1 = fixed_ahead(&from->u.fixed, s1, now_ns);
		const uint64_t a2 = fixed_ahead(&from->u.fixed, s2, now_ns);
		return a2 > a1 ? a2 - a1 : 0;
	}
	case SL_KIND_SLIDING: {
		uint64_t p1, c1, p2, c2;
		sl__sliding_units(&from->u.sliding, s1, now_ns, &p1, &c1);
		sl__sliding_units(&from->u.sliding, s2, now_ns, &p2, &c2);
		return c2 > c1 ? c2 - c1 : 0;
	}
	default:
		return 0;
	}
}

/* Warm-up slots (two state words, see warmup.c). carry: old state
 * (sched, stored) at now_ns into `to` (epoch now_ns): the schedule's debt,
 * in units of the old stable rate rounded up, at the new one; the stored
 * permits (refilled to now) as the same fraction of the new M, rounded up.
 * taken: units admitted on the old slot since (sched1) by its later
 * schedule sched2: the schedule's advance in stable units, rounded up
 * (each unit moved it at least S, so this counts no fewer). */
static void warm_carry(const struct sl_warm *o, uint64_t sched, uint64_t stored, struct sl_warm *to,
		       uint64_t now_ns)
{
	const uint64_t now = sl__elapsed(now_ns, o->epoch_ns);
	uint64_t debt = 0;
	if (sched > now) {
		const sl__u128 u = (sl__u128)(sched - now) * o->amount;
		const sl__u128 units = u / o->period_ns + (u % o->period_ns != 0);
		const sl__u128 ns = (units * to->period_ns + to->amount - 1) / to->amount;
		debt = ns >> 62 ? UINT64_C(1) << 62 : (uint64_t)ns;
	} else {
		const uint64_t idle = now - sched;
		stored = idle >= o->warmup_ns
				 ? o->max_q
				 : sl__min(o->max_q,
					   sl__sat_add(stored,
						       (uint64_t)(((sl__u128)idle * o->max_q +
								   o->warmup_ns - 1) /
								  o->warmup_ns)));
	}
	const sl__u128 frac = ((sl__u128)sl__min(stored, o->max_q) * to->max_q + o->max_q - 1) /
			      o->max_q;
	sl__warmup_set_unsync(to, debt, (uint64_t)frac);
}

static uint64_t warm_taken(const struct sl_warm *o, uint64_t sched1, uint64_t sched2,
			   uint64_t now_ns)
{
	const uint64_t base = sl__max(sched1, sl__elapsed(now_ns, o->epoch_ns));
	if (sched2 <= base)
		return 0;
	const sl__u128 u = (sl__u128)(sched2 - base) * o->amount;
	const sl__u128 units = u / o->period_ns + (u % o->period_ns != 0);
	return units >> 64 ? UINT64_MAX : (uint64_t)units;
}

/* The epoch of the new slot: windows stay aligned where they were; a bucket
 * restarts its time origin at the retune (its debt is carried over). */
static uint64_t new_epoch(const struct sl_limiter *old, uint64_t now_ns)
{
	switch (old->kind) {
	case SL_KIND_FIXED:
		return old->u.fixed.epoch_ns;
	case SL_KIND_SLIDING:
		return old->u.sliding.epoch_ns;
	default:
		return now_ns;
	}
}

/*
 * sl_tunable_init - a tunable limiter of p->kind (any kind but
 * SL_KIND_TUNABLE) at now_ns; slot 0 is current. Returns what
 * sl_limiter_init returns. Not thread-safe: call before sharing t.
 */
enum sl_status sl_tunable_init(struct sl_tunable *t, const struct sl_params *p, uint64_t now_ns)
{
	if (p->kind == SL_KIND_TUNABLE)
		return SL_EINVAL;
	struct sl_limiter first;
	enum sl_status st = sl_limiter_init(&first, p, now_ns);
	if (st != SL_OK)
		return st;
	*t = (struct sl_tunable){
		.head = {.magic = SL_LIMITER_MAGIC, .kind = SL_KIND_TUNABLE, .params = *p}};
	t->slot[0] = first;
	t->slot[1] = first;
	/* Relaxed: init runs before t is shared (see sl_token_init). */
	atomic_store_explicit(&t->head.u.tun.gen, 0, memory_order_relaxed);
	atomic_store_explicit(&t->head.u.tun.retune_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&t->head.u.tun.held, 0, memory_order_relaxed);
	return SL_OK;
}

/*
 * sl_tunable_retune - switch t to parameters p (same kind) at now_ns,
 * keeping its state (see the top of this file). Returns SL_OK, SL_EINVAL
 * for another kind, or the init error of p (t unchanged). Safe against
 * concurrent acquires, refunds and releases in any thread or process; not
 * against another retune of t (callers serialise them).
 */
enum sl_status sl_tunable_retune(struct sl_tunable *t, const struct sl_params *p, uint64_t now_ns)
{
	struct sl_tun *h = &t->head.u.tun;
	/* Relaxed: retunes are serialised by the caller, so gen is ours. */
	const uint64_t g = atomic_load_explicit(&h->gen, memory_order_relaxed);
	struct sl_limiter *old = &t->slot[g & 1], *nw = &t->slot[(g + 1) & 1];
	if (p->kind != old->kind)
		return SL_EINVAL;
	struct sl_limiter next;
	enum sl_status st = sl_limiter_init(&next, p, new_epoch(old, now_ns));
	if (st != SL_OK)
		return st;
	_Atomic uint64_t *ow = slot_word(old);
	uint64_t s1 = 0, w_stored = 0;
	const bool warm = old->kind == SL_KIND_WARMUP;
	if (warm) {
		/* The 16-byte state is its own snapshot (a CAS, seq_cst). */
		sl__warmup_state(&old->u.warm, &s1, &w_stored);
		warm_carry(&old->u.warm, s1, w_stored, &next.u.warm, now_ns);
	} else if (ow != NULL) {
		s1 = snapshot(ow);
		/* Relaxed: next is private until the release store below. */
		atomic_store_explicit(slot_word(&next), carry(old, s1, &next, now_ns),
				      memory_order_relaxed);
	}
	*nw = next;
	/* Release (seq_cst, which includes it): publishes the new slot's
	 * parameters and state to every acquirer that loads this gen (acquire
	 * in sl__tunable_acquire); seq_cst for the argument at the top. */
	atomic_store_explicit(&h->gen, g + 1, memory_order_seq_cst);
	/* Relaxed: a report for `sluice stat`; nothing is read through it. */
	atomic_store_explicit(&h->retune_ns, now_ns, memory_order_relaxed);
	if (ow == NULL && !warm)
		return SL_OK;
	/* F1 of the argument at the top of the file: pairs with the fence in
	 * sl__tunable_acquire. */
	atomic_thread_fence(memory_order_seq_cst);
	uint64_t late;
	if (warm) {
		uint64_t s2, stored2;
		sl__warmup_state(&old->u.warm, &s2, &stored2);
		late = warm_taken(&old->u.warm, s1, s2, now_ns);
	} else {
		late = taken_between(old, s1, snapshot(ow), now_ns);
	}
	/* Already taken, so it is debt on the new slot. */
	if (late > 0)
		sl_limiter_charge(nw, late, now_ns);
	return SL_OK;
}

/* The current slot. Acquire: pairs with the release store of gen in
 * sl_tunable_retune, so the slot's parameters are those it published. */
static struct sl_limiter *current(struct sl_tunable *t, uint64_t *gen)
{
	*gen = atomic_load_explicit(&t->head.u.tun.gen, memory_order_acquire);
	return &t->slot[*gen & 1];
}

const struct sl_limiter *sl_tunable_current(const struct sl_tunable *t)
{
	/* Acquire: as in current(). */
	uint64_t g = atomic_load_explicit(&t->head.u.tun.gen, memory_order_acquire);
	return &t->slot[g & 1];
}

/* sl__tunable_acquire's loop: concurrency, and retries after a retune. */
static __attribute__((noinline)) struct sl_decision
tunable_acquire_loop(struct sl_limiter *head, uint64_t n, uint64_t now_ns, uint64_t max_wait_ns)
{
	struct sl_tunable *t = tun_of(head);
	for (;;) {
		uint64_t g;
		struct sl_limiter *l = current(t, &g);
		const bool conc = l->kind == SL_KIND_CONC;
		struct sl_decision d = conc ? sl__conc_take(&head->u.tun.held, n, l->u.conc.limit)
					    : sl_limiter_acquire(l, n, now_ns, max_wait_ns);
		if (d.verdict != SL_ADMIT || n == 0)
			return d;
		/* F2 of the argument at the top of the file: orders our CAS
		 * before the load below (pairs with the retuner's fence). */
		atomic_thread_fence(memory_order_seq_cst);
		/* Relaxed: the fence orders it; only equality matters. */
		if (atomic_load_explicit(&head->u.tun.gen, memory_order_relaxed) == g)
			return d;
		/* Retuned meanwhile: undo here, retry under the new slot. */
		if (conc)
			sl__conc_give(&head->u.tun.held, n);
		else
			sl_limiter_refund(l, n, now_ns);
	}
}

/* Acquire on the current slot; see the top of the file. A rate limiter's
 * admission that no retune raced with is the whole of it. */
struct sl_decision sl__tunable_acquire(struct sl_limiter *head, uint64_t n, uint64_t now_ns,
				       uint64_t max_wait_ns)
{
	uint64_t g;
	struct sl_limiter *l = current(tun_of(head), &g);
	if (l->kind == SL_KIND_CONC)
		return tunable_acquire_loop(head, n, now_ns, max_wait_ns);
	/* Buckets (the shim's per=process limiters) straight to GCRA. A rate
	 * limiter's seq_cst CAS makes F2 unneeded: a seq_cst load (top). */
	const struct sl_decision d = l->kind - SL_KIND_TOKEN <= SL_KIND_LEAKY - SL_KIND_TOKEN
					     ? sl_gcra_acquire(&l->u.gcra, n, now_ns, max_wait_ns)
					     : sl_limiter_acquire(l, n, now_ns, max_wait_ns);
	if (d.verdict != SL_ADMIT || n == 0 ||
	    atomic_load_explicit(&head->u.tun.gen, memory_order_seq_cst) == g)
		return d;
	sl_limiter_refund(l, n, now_ns);
	return tunable_acquire_loop(head, n, now_ns, max_wait_ns);
}

enum sl_status sl__tunable_refund(struct sl_limiter *head, uint64_t n, uint64_t now_ns)
{
	uint64_t g;
	struct sl_limiter *l = current(tun_of(head), &g);
	if (l->kind == SL_KIND_CONC)
		return sl__conc_give(&head->u.tun.held, n);
	return sl_limiter_refund(l, n, now_ns);
}

/* Charge on the current slot; a charge that raced with a retune is made
 * again on the new slot (debt must not be lost; twice is stricter). */
enum sl_status sl__tunable_charge(struct sl_limiter *head, uint64_t n, uint64_t now_ns)
{
	for (;;) {
		uint64_t g;
		struct sl_limiter *l = current(tun_of(head), &g);
		if (l->kind == SL_KIND_CONC)
			return SL_EINVAL;
		enum sl_status st = sl_limiter_charge(l, n, now_ns);
		/* A rate limiter's charging CAS is seq_cst too (SL__ADMIT_ORDER):
		 * a seq_cst load, no F2, as in sl__tunable_acquire. */
		if (st != SL_OK ||
		    atomic_load_explicit(&head->u.tun.gen, memory_order_seq_cst) == g)
			return st;
	}
}

enum sl_status sl__tunable_release(struct sl_limiter *head, uint64_t n)
{
	uint64_t g;
	struct sl_limiter *l = current(tun_of(head), &g);
	if (l->kind != SL_KIND_CONC)
		return SL_EINVAL;
	return sl__conc_give(&head->u.tun.held, n);
}

uint64_t sl__tunable_available(const struct sl_limiter *head, uint64_t now_ns)
{
	const struct sl_tunable *t = tun_of_const(head);
	const struct sl_limiter *l = sl_tunable_current(t);
	if (l->kind != SL_KIND_CONC)
		return sl_limiter_available(l, now_ns);
	/* Relaxed: a snapshot for reporting and retry decisions. */
	const uint64_t held = atomic_load_explicit(&head->u.tun.held, memory_order_relaxed);
	return held < l->u.conc.limit ? l->u.conc.limit - held : 0;
}

/*
 * sl_tunable_validate - true if t's head is a tunable head whose params
 * make a valid limiter, and both slots are valid limiters of that kind
 * (for concurrency, with the count in the head, which may exceed a limit
 * that a retune lowered, but not 2^62). Read-only; safe on any readable
 * 576 bytes.
 */
bool sl_tunable_validate(const struct sl_tunable *t)
{
	const struct sl_limiter *h = &t->head;
	if (h->magic != SL_LIMITER_MAGIC || h->kind != SL_KIND_TUNABLE ||
	    h->params.kind == SL_KIND_TUNABLE)
		return false;
	for (int i = 0; i < 2; i++)
		if (t->slot[i].kind != h->params.kind || !sl_limiter_validate(&t->slot[i]))
			return false;
	/* Relaxed: a plausibility check of one word. */
	return h->params.kind != SL_KIND_CONC ||
	       atomic_load_explicit(&h->u.tun.held, memory_order_relaxed) < (UINT64_C(1) << 62);
}
