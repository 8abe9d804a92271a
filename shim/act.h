/* SPDX-License-Identifier: MIT */
/*
 * act.h - one call in progress, and what it does with its rules' answers
 * (act.c): acquire, wait to absolute deadlines, refuse, refund, count.
 *
 * API: a struct sl_call belongs to the thread making the call; the
 * functions may run in any number of threads at once.
 */
#ifndef SLUICE_SHIM_ACT_H
#define SLUICE_SHIM_ACT_H

#include "addr.h"
#include "call.h"
#include "internal.h"
#include "state.h"

/* Start a call: reads the clock once into start_ns, and the call's first
 * decision (sl__admit or sl__available, even with no rules) is taken at that
 * instant without reading it again: call it right before that decision,
 * with nothing that blocks in between. Later decisions read the clock. */
void sl__call_begin(struct sl_call *c, int fd, enum sl_op op, const struct sl_addr *peer,
		    int timeout_opt);
/* The same with the clock read already (now), by a caller that has done
 * nothing that blocks since. */
void sl__call_begin_at(struct sl_call *c, int fd, enum sl_op op, const struct sl_addr *peer,
		       int timeout_opt, uint64_t now);
/*
 * Charge n units to every rule in `rules`, acting as each rule says:
 * delay sleeps to the slot's deadline, reject refuses at once, dry-run
 * never waits. On success returns 0 and fills *g (release what was not used
 * with sl__grant_refund). On refusal returns the errno to fail with (the
 * rule's, EAGAIN past the socket's timeout, EINTR if a signal arrived while
 * waiting) and nothing stays charged.
 */
int sl__admit(struct sl_call *c, uint32_t rules, uint64_t n, struct sl_grant *g);
/* Give back `unused` units of each limiter of g, as of its slot's instant
 * (a fixed window gives back only units of the window they were taken in). */
void sl__grant_refund(const struct sl_call *c, const struct sl_grant *g, uint64_t unused);
/* Units the rules in `rules` admit right now (the smallest). Waits until it
 * is at least 1 if `wait` (then returns 0 with *err set on refusal). */
uint64_t sl__available(struct sl_call *c, uint32_t rules, bool wait, int *err);
/* Charge n units after the fact (a receive): taken as debt, never refused
 * (sl_limiter_charge). */
void sl__charge(struct sl_call *c, uint32_t rules, uint64_t n);
/* Count n bytes against the stats of rules. */
void sl__stats_bytes(uint32_t rules, uint64_t n);
/* Finish the call's stats: one call seen by each rule in `rules`, admitted
 * if ok, and the call's delay for the rules that made it wait. */
void sl__call_end(struct sl_call *c, uint32_t rules, bool ok);
/* sl__call_end and sl__stats_bytes(rules, bytes) in one pass. */
void sl__call_end_bytes(struct sl_call *c, uint32_t rules, bool ok, uint64_t bytes);
/* The stats of a call of `rules` that waited for none of them: one call
 * seen by each, admitted if ok, `bytes` moved. Relaxed: statistics, read
 * by `sluice stat` and at exit; nothing is published through them. */
static inline void sl__stats_end(uint32_t rules, bool ok, uint64_t bytes)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		struct sl_rstats *s = &sl__st.stats[__builtin_ctz(rest)];
		/* Unconditional adds: no branch on the hot path (ok and bytes
		 * are almost always 1 and non-zero there). */
		atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->admitted, (uint64_t)ok, memory_order_relaxed);
		atomic_fetch_add_explicit(&s->bytes, bytes, memory_order_relaxed);
	}
}

/* The conns limiters of a grant, into lims; returns how many. */
unsigned sl__grant_conns(const struct sl_grant *g, struct sl_limiter **lims);
/* Set by sl__call_fail: the thread's last call failed by a rule's refusal,
 * not by the kernel (the breaker clears it before a connect and reads it
 * after: a refusal by sluice says nothing of the peer). */
extern __thread int sl__call_refused __attribute__((tls_model("initial-exec")));
/* Fail call c with err: its stats, sl__busy cleared, errno. Returns -1. */
int sl__call_fail(struct sl_call *c, uint32_t rules, int err);

#endif /* SLUICE_SHIM_ACT_H */
