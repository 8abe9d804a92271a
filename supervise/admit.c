/* SPDX-License-Identifier: MIT */
/*
 * admit.c - which limiter each rule of a supervised call uses, and taking
 * and giving back units: the supervisor's transport over engine/ (which
 * rules match, what each decides, piece sizes, counters), the same code the
 * preload decides with.
 *
 * Scopes (per=), for the supervised tree:
 *   process  one limiter per rule and supervised process (thread group),
 *            but one for the whole tree of a conns:adaptive rule (turn.c);
 *   thread   one per rule and thread;
 *   fd       one per rule and fd of a process, reset when the supervisor
 *            places a new socket at that number;
 *   peer     a bounded table of SL_SUP_PEERS (process, rule, address without
 *            port) entries; which entry a peer uses and which one a
 *            newcomer takes over is engine/peers.c's, as in the preload.
 *
 * A grant is what one piece of a call took: units of every matched rule,
 * recorded in the call so that what the piece did not move goes back
 * (sl_limiter_refund at the instant it was granted for).
 */
#include "admit.h"
#include "notif.h"
#include "shared.h"
#include "stat.h"
#include "state.h"
#include "turn.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "match.h"
#include "params.h"
#include "peers.h"
#include "shm_format.h"

#define SL_SUP_PEERS 1024

struct sl_sup_fdrow {
	uint32_t init; /* limiters initialised, by rule */
	struct sl_limiter lim[SL_MAX_RULES];
};

struct sl_sup_peer {
	struct sl_limiter lim;
	struct sl_peer_slot slot; /* owner: the process (engine/peers.h) */
};

uint32_t sl_sup_match(const struct sl_sup *s, enum sl_op op, unsigned fam, unsigned type,
		      const struct sl_addr *a)
{
	return sl_match(&s->policy, sl_match_op(&s->policy, op), fam, type, a);
}

bool sl_sup_may_match(const struct sl_sup *s, enum sl_op op, unsigned fam, unsigned type)
{
	return (sl_match_socket(&s->policy, fam, type) & sl_match_op(&s->policy, op)) != 0;
}

static void lim_init(const struct sl_sup *s, struct sl_limiter *l, unsigned i, uint64_t now_ns)
{
	struct sl_params p;
	sl_params_of(&s->policy.rules[i], &p);
	sl_limiter_init(l, &p, now_ns);
}

static struct sl_limiter *peer_lim(struct sl_sup *s, struct sl_sup_call *c, unsigned i,
				   uint64_t now_ns)
{
	if (s->peers == NULL && (s->peers = calloc(SL_SUP_PEERS, sizeof(*s->peers))) == NULL)
		return NULL;
	const struct sl_peer_table t = {.base = s->peers,
					.n = SL_SUP_PEERS,
					.stride = sizeof(*s->peers),
					.slot_off = offsetof(struct sl_sup_peer, slot)};
	bool fresh;
	const long k = sl_peer_find(&t, i, (uint32_t)c->th->proc->tgid, &c->peer, &fresh);
	if (k < 0)
		return NULL;
	if (fresh)
		lim_init(s, &s->peers[k].lim, i, now_ns);
	return &s->peers[k].lim;
}

/* The limiter of rule i for call c, initialised on first use; NULL if there
 * is no memory for it (the call then passes that rule). */
struct sl_limiter *sl_sup_lim_of(struct sl_sup *s, struct sl_sup_call *c, unsigned i,
				 uint64_t now_ns)
{
	const struct sl_rule *r = &s->policy.rules[i];
	struct sl_sup_proc *p = c->th->proc;
	uint32_t bit = 1u << i;
	switch (r->scope) {
	case SL_SCOPE_THREAD: {
		struct sl_sup_thread *t = c->th;
		if (t->lims == NULL && (t->lims = calloc(SL_MAX_RULES, sizeof(*t->lims))) == NULL)
			return NULL;
		if (!(t->lims_init & bit)) {
			lim_init(s, &t->lims[i], i, now_ns);
			t->lims_init |= bit;
		}
		return &t->lims[i];
	}
	case SL_SCOPE_FD: {
		size_t fd = (size_t)(uint32_t)c->req.data.args[0];
		if (fd >= p->n_fdrows) {
			size_t n = fd + 64;
			struct sl_sup_fdrow **rows = realloc(p->fdrows, n * sizeof(*rows));
			if (rows == NULL)
				return NULL;
			memset(rows + p->n_fdrows, 0, (n - p->n_fdrows) * sizeof(*rows));
			p->fdrows = rows;
			p->n_fdrows = n;
		}
		if (p->fdrows[fd] == NULL &&
		    (p->fdrows[fd] = calloc(1, sizeof(**p->fdrows))) == NULL)
			return NULL;
		struct sl_sup_fdrow *row = p->fdrows[fd];
		if (!(row->init & bit)) {
			lim_init(s, &row->lim[i], i, now_ns);
			row->init |= bit;
		}
		return &row->lim[i];
	}
	case SL_SCOPE_PEER:
		return peer_lim(s, c, i, now_ns);
	default:
		if (r->adaptive) /* one for the supervised tree, retuned by turn.c */
			return sl_sup_turn_lim(s, i, now_ns);
		if (sl_sup_shared_lim(s, i) != NULL)
			return sl_sup_shared_lim(s, i); /* shared=NAME */
		if (sl_sup_stat_lim(p, i) != NULL)
			return sl_sup_stat_lim(p, i); /* initialised with the record */
		if (!(p->lims_init & bit)) {
			lim_init(s, &p->lims[i], i, now_ns);
			p->lims_init |= bit;
		}
		return &p->lims[i];
	}
}

void sl_sup_fd_reset(struct sl_sup_proc *p, int fd)
{
	if (fd >= 0 && (size_t)fd < p->n_fdrows && p->fdrows[fd] != NULL)
		p->fdrows[fd]->init = 0;
}

void sl_sup_proc_free_rows(struct sl_sup_proc *p)
{
	for (size_t i = 0; i < p->n_fdrows; i++)
		free(p->fdrows[i]);
	free(p->fdrows);
	p->fdrows = NULL;
	p->n_fdrows = 0;
}

static enum sl_op op_of(const struct sl_sup_call *c)
{
	return c->kind == SL_SUP_CONNECT  ? SL_OP_CONNECT
	       : c->kind == SL_SUP_ACCEPT ? SL_OP_ACCEPT
	       : c->kind == SL_SUP_SEND   ? SL_OP_SEND
					  : SL_OP_RECV;
}

/* Give back what the current grant took from every rule but `upto`. */
static void undo(struct sl_sup *s, struct sl_sup_call *c, uint32_t taken, uint64_t now_ns)
{
	for (uint32_t rest = taken; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		struct sl_limiter *l = sl_sup_lim_of(s, c, i, now_ns);
		if (l != NULL && c->grant_n[i] != 0)
			sl_limiter_refund(l, c->grant_n[i], c->grant_at_ns);
		c->grant_n[i] = 0;
	}
}

/* The instant the socket's own timeout ends a wait of call c (UINT64_MAX:
 * none), as the preload reads SO_SNDTIMEO / SO_RCVTIMEO. */
static uint64_t timeout_at(const struct sl_sup_call *c)
{
	return c->timeout_ns != 0 ? sl_decide_add(c->start_ns, c->timeout_ns) : UINT64_MAX;
}

uint64_t sl_sup_limit(const struct sl_sup *s, const struct sl_sup_call *c, unsigned i)
{
	return sl_decide_limit(&s->policy.rules[i], c->start_ns, timeout_at(c));
}

enum sl_sup_verdict sl_sup_settle(struct sl_sup *s, struct sl_sup_call *c, unsigned i,
				  struct sl_answer a, uint64_t now_ns, uint64_t limit,
				  uint64_t *wait_ns, int *err)
{
	const struct sl_rule *r = &s->policy.rules[i];
	if (a.step == SL_STEP_DRY || a.step == SL_STEP_GO) {
		/* Counted as it would be (once, at the call's end), never held. */
		if (a.step == SL_STEP_DRY && a.would_refuse)
			sl_sup_stat_refused(c->th->proc, i);
		else if (a.step == SL_STEP_DRY)
			c->delayed_rules |= 1u << i;
		return SL_SUP_GO;
	}
	uint64_t at = a.step == SL_STEP_RETRY
			      ? sl_decide_retry_at(now_ns, a.at_ns, limit, &c->backoff_ns)
			      : UINT64_MAX;
	if (at != UINT64_MAX) {
		c->delayed_rules |= 1u << i;
		c->waited_ns += at - now_ns;
		*wait_ns = at - now_ns;
		return SL_SUP_RETRY;
	}
	*err = sl_decide_errno(r, op_of(c), c->start_ns, timeout_at(c), a.never);
	c->refused = true;
	sl_sup_stat_refused(c->th->proc, i);
	return SL_SUP_REFUSE;
}

enum sl_sup_verdict sl_sup_admit(struct sl_sup *s, struct sl_sup_call *c, uint64_t bytes,
				 uint64_t msgs, uint64_t now_ns, uint64_t *wait_ns, int *err)
{
	uint64_t due = now_ns;
	uint32_t taken = 0, delayed = 0;
	c->grant_at_ns = now_ns;
	for (uint32_t rest = c->rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &s->policy.rules[i];
		uint64_t n = r->unit == SL_UNIT_BYTES ? bytes : msgs;
		c->grant_n[i] = 0;
		if (n == 0)
			continue;
		struct sl_limiter *l = sl_sup_lim_of(s, c, i, now_ns);
		if (l == NULL)
			continue;
		/* The engine's answer (engine/decide.h): police, then reserve
		 * up to the rule's limit or classify the refusal. */
		struct sl_decision d = sl_limiter_acquire(l, n, now_ns, 0);
		struct sl_answer a = {.step = SL_STEP_GO, .at_ns = now_ns};
		uint64_t limit = sl_sup_limit(s, c, i);
		if (d.verdict != SL_ADMIT)
			a = sl_decide_rule(r, l, n, now_ns, limit, d);
		if (a.step == SL_STEP_DRY) {
			sl_sup_settle(s, c, i, a, now_ns, limit, wait_ns, err);
			continue;
		}
		if (a.step == SL_STEP_GO) {
			c->grant_n[i] = n;
			taken |= 1u << i;
			if (a.at_ns > now_ns)
				delayed |= 1u << i;
			if (a.at_ns > due)
				due = a.at_ns;
			continue;
		}
		undo(s, c, taken, now_ns);
		return sl_sup_settle(s, c, i, a, now_ns, limit, wait_ns, err);
	}
	/* Fixed and sliding windows take a refund in the window the units
	 * were taken for: the instant the wait ends. */
	c->delayed_rules |= delayed;
	c->waited_ns += due - now_ns;
	c->grant_at_ns = due;
	c->granted = taken != 0;
	c->grant_bytes = bytes;
	c->grant_msgs = msgs;
	*wait_ns = due - now_ns;
	return SL_SUP_GO;
}

void sl_sup_refund(struct sl_sup *s, struct sl_sup_call *c, uint64_t bytes)
{
	if (!c->granted)
		return;
	uint64_t now = sl_sup_now_ns();
	bool all = bytes == UINT64_MAX;
	for (uint32_t rest = c->rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &s->policy.rules[i];
		uint64_t give = r->unit == SL_UNIT_BYTES
					? (bytes < c->grant_n[i] ? bytes : c->grant_n[i])
				: all ? c->grant_n[i]
				      : 0;
		if (give == 0)
			continue;
		struct sl_limiter *l = sl_sup_lim_of(s, c, i, now);
		if (l != NULL)
			sl_limiter_refund(l, give, c->grant_at_ns);
	}
	c->granted = false;
}

struct piece_ctx {
	struct sl_sup *s;
	struct sl_sup_call *c;
	uint64_t now_ns;
};

/* Rule i's parameters now: `sluice set` may have retuned its limiter. */
static struct sl_params rule_now(void *ctx, unsigned i)
{
	struct piece_ctx *x = ctx;
	return sl_params_now(&x->s->policy.rules[i], sl_sup_lim_of(x->s, x->c, i, x->now_ns));
}

uint64_t sl_sup_piece_cap(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns)
{
	struct piece_ctx x = {s, c, now_ns};
	uint64_t cap = sl_piece_of(&s->policy, c->rules, rule_now, &x);
	return cap < SL_SUP_PIECE_MAX ? cap : SL_SUP_PIECE_MAX;
}
