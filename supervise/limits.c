/* SPDX-License-Identifier: MIT */
/*
 * limits.c - which rules a supervised call matches, which limiter each one
 * uses, and taking and giving back units: the supervisor's glue over core/
 * (the limiters) and policy/ (the rules and their matching), the same code
 * the shim decides with.
 *
 * Scopes (per=), for the supervised tree:
 *   process  one limiter per rule and supervised process (thread group);
 *   thread   one per rule and thread;
 *   fd       one per rule and fd of a process, reset when the supervisor
 *            places a new socket at that number;
 *   peer     a bounded table of SL_SUP_PEERS (process, rule, address without
 *            port) entries; a miss evicts the least recently used of the
 *            8 probed. An evicted peer starts again with a full bucket.
 *
 * A grant is what one piece of a call took: units of every matched rule,
 * recorded in the call so that what the piece did not move goes back
 * (sl_limiter_refund at the instant it was granted for).
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "shm_format.h"

#define SL_SUP_PEERS 1024
#define PEER_PROBES 8

struct sl_sup_fdrow {
	uint32_t init; /* limiters initialised, by rule */
	struct sl_limiter lim[SL_MAX_RULES];
};

struct sl_sup_peer {
	struct sl_limiter lim;
	pid_t tgid;
	uint32_t rule_plus1;    /* 0: empty */
	uint64_t used;          /* s->peer_clock at the last use */
	struct sl_sup_addr key; /* port 0 */
};

unsigned sl_sup_fam_bit(int domain)
{
	return domain == AF_INET    ? SL_FAM_INET
	       : domain == AF_INET6 ? SL_FAM_INET6
	       : domain == AF_UNIX  ? SL_FAM_UNIX
				    : 0;
}

unsigned sl_sup_type_bit(int type)
{
	type &= 0xf; /* without SOCK_NONBLOCK, SOCK_CLOEXEC */
	return type == SOCK_STREAM ? SL_TYPE_STREAM : type == SOCK_DGRAM ? SL_TYPE_DGRAM : 0;
}

static const uint8_t no_addr[16];

uint32_t sl_sup_match(const struct sl_sup *s, enum sl_op op, unsigned fam, unsigned type,
		      const struct sl_sup_addr *a)
{
	uint32_t m = 0;
	for (uint32_t i = 0; i < s->policy.n_rules; i++) {
		const struct sl_rule *r = &s->policy.rules[i];
		if (r->op != op || !sl_rule_fits_socket(r, fam, type))
			continue;
		bool fits = a != NULL ? sl_rule_fits_addr(r, a->family, a->port, a->addr)
				      : sl_rule_fits_addr(r, 0, 0, no_addr);
		if (fits)
			m |= 1u << i;
	}
	return m;
}

bool sl_sup_needs_peer(const struct sl_sup *s, enum sl_op op)
{
	for (uint32_t i = 0; i < s->policy.n_rules; i++) {
		const struct sl_rule *r = &s->policy.rules[i];
		if (r->op == op && (r->to.family != 0 || r->port_lo != 0 || r->port_hi != 65535 ||
				    r->scope == SL_SCOPE_PEER))
			return true;
	}
	return false;
}

bool sl_sup_may_match(const struct sl_sup *s, enum sl_op op, unsigned fam, unsigned type)
{
	for (uint32_t i = 0; i < s->policy.n_rules; i++)
		if (s->policy.rules[i].op == op &&
		    sl_rule_fits_socket(&s->policy.rules[i], fam, type))
			return true;
	return false;
}

static void lim_init(const struct sl_sup *s, struct sl_limiter *l, unsigned i, uint64_t now_ns)
{
	struct sl_params p;
	sl_shm_rule_params(&s->policy.rules[i], &p);
	sl_limiter_init(l, &p, now_ns);
}

static struct sl_limiter *peer_lim(struct sl_sup *s, struct sl_sup_call *c, unsigned i,
				   uint64_t now_ns)
{
	if (s->peers == NULL && (s->peers = calloc(SL_SUP_PEERS, sizeof(*s->peers))) == NULL)
		return NULL;
	struct sl_sup_addr key = c->peer;
	key.port = 0;
	pid_t tgid = c->th->proc->tgid;
	uint32_t h = 2166136261u;
	for (size_t k = 0; k < sizeof(key); k++)
		h = (h ^ ((const uint8_t *)&key)[k]) * 16777619u;
	h = (h ^ (uint32_t)tgid ^ (i << 24)) * 16777619u;
	struct sl_sup_peer *victim = NULL;
	s->peer_clock++;
	for (unsigned k = 0; k < PEER_PROBES; k++) {
		struct sl_sup_peer *e = &s->peers[(h + k) % SL_SUP_PEERS];
		if (e->rule_plus1 == i + 1 && e->tgid == tgid &&
		    memcmp(&e->key, &key, sizeof(key)) == 0) {
			e->used = s->peer_clock;
			return &e->lim;
		}
		if (victim == NULL || e->rule_plus1 == 0 ||
		    (victim->rule_plus1 != 0 && e->used < victim->used))
			victim = e;
	}
	victim->rule_plus1 = i + 1;
	victim->tgid = tgid;
	victim->key = key;
	victim->used = s->peer_clock;
	lim_init(s, &victim->lim, i, now_ns);
	return &victim->lim;
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

enum sl_sup_verdict sl_sup_admit(struct sl_sup *s, struct sl_sup_call *c, uint64_t bytes,
				 uint64_t msgs, uint64_t now_ns, uint64_t *wait_ns, int *err)
{
	uint64_t wait = 0;
	uint32_t taken = 0;
	uint64_t elapsed = now_ns - c->start_ns;
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
		if (r->action == SL_ACTION_DRYRUN) {
			struct sl_decision d = sl_limiter_acquire(l, n, now_ns, 0);
			if (d.verdict == SL_ADMIT) {
				c->grant_n[i] = n;
				taken |= 1u << i;
			}
			if (msgs != 0) /* once per call; "would have" for dry-run */
				sl_sup_stat_decision(c->th->proc, i, d.verdict == SL_ADMIT, 0);
			continue;
		}
		uint64_t max_wait = 0;
		if (r->action == SL_ACTION_DELAY)
			max_wait = r->max_delay_ns == UINT64_MAX ? UINT64_MAX
				   : r->max_delay_ns > elapsed   ? r->max_delay_ns - elapsed
								 : 0;
		struct sl_decision d = sl_limiter_acquire(l, n, now_ns, max_wait);
		if (d.verdict == SL_ADMIT) {
			c->grant_n[i] = n;
			taken |= 1u << i;
			if (d.wait_ns > wait)
				wait = d.wait_ns;
			continue;
		}
		undo(s, c, taken, now_ns);
		/* A limiter that cannot reserve (a sliding window) says when to
		 * ask again; a delay rule waits that long if max-delay allows.
		 * The others refused because even max-delay would not do. */
		if (d.verdict == SL_REFUSE && r->action == SL_ACTION_DELAY &&
		    r->algo == SL_ALGO_SLIDING && d.wait_ns != 0 && d.wait_ns != UINT64_MAX &&
		    (r->max_delay_ns == UINT64_MAX || elapsed + d.wait_ns <= r->max_delay_ns)) {
			*wait_ns = d.wait_ns;
			return SL_SUP_RETRY;
		}
		*err = sl_rule_errno(r, op_of(c));
		sl_sup_stat_decision(c->th->proc, i, false, 0);
		return SL_SUP_REFUSE;
	}
	/* A call is counted at its first piece; every piece's wait adds to
	 * the delay. */
	for (uint32_t rest = taken; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		if (s->policy.rules[i].action != SL_ACTION_DRYRUN)
			sl_sup_stat_wait(c->th->proc, i, msgs != 0,
					 msgs != 0 ? elapsed + wait : wait);
	}
	/* Fixed and sliding windows take a refund in the window the units
	 * were taken for: the instant the wait ends. */
	c->grant_at_ns = now_ns + wait;
	c->granted = taken != 0;
	c->grant_bytes = bytes;
	c->grant_msgs = msgs;
	*wait_ns = wait;
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

uint64_t sl_sup_piece_cap(const struct sl_sup *s, uint32_t rules)
{
	uint64_t cap = SL_SUP_PIECE_MAX;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		const struct sl_rule *r = &s->policy.rules[__builtin_ctz(rest)];
		if (r->unit != SL_UNIT_BYTES)
			continue;
		uint64_t c;
		switch (r->algo) {
		case SL_ALGO_TOKEN:
			c = r->burst;
			break;
		case SL_ALGO_LEAKY: /* 5 ms of the rate */
			c = (uint64_t)((unsigned __int128)r->amount * 5000000u / r->period_ns);
			break;
		default: /* a window admits at most its amount at once */
			c = r->amount;
			break;
		}
		if (c < 1)
			c = 1;
		if (c < cap)
			cap = c;
	}
	return cap;
}
