/* SPDX-License-Identifier: MIT */
/*
 * nb.c - non-blocking calls under delay rules (the contract is in nb.h).
 *
 * How many tokens to wait for: waking for one byte would wake a loop once
 * per byte. An nb wait is sized for min(what the call still wants, half the
 * rule's piece (its burst), 100 ms of the rate) units (sl__need): half,
 * so that a loop that wakes late (timer granularity, its own work before it
 * calls send again) finds the bucket not yet full and loses no tokens to
 * the burst cap. With the default burst (5 ms of the rate) a connection that
 * always has more to send wakes its loop about 400 times a second; a larger
 * burst= wakes it less often (down to 10 times a second from burst=200ms of
 * the rate on).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#include "rule_lim.h"
#include "call.h"
#include "clock.h"
#include "fair.h"
#include "fd.h"
#include "sluice_fast.h"
#include "log.h"
#include "nb.h"
#include "ready.h"
#include "real.h"
#include "scope.h"
#include "sandboxed.h"
#include "state.h"

/* A limiter that names no instant (conns: a slot frees on a close) is
 * looked at again after this long. */
#define SL_NB_BACKOFF_NS 10000000u

void sl__nb_read(struct sl_call *c)
{
	uint32_t m = c->nb_maybe;
	c->nb_maybe = 0;
	/* In a sandbox no fcntl may be made (sandbox.h): the call is taken
	 * for a blocking one and waits in place. */
	if ((unsigned)c->fd >= sl__fd_cap || sl__sandboxed())
		return;
	int saved = errno;
	int fl = SL_REAL(fcntl)(c->fd, F_GETFL);
	errno = saved;
	if (fl >= 0 && (fl & O_NONBLOCK))
		c->nb_rules |= m;
}

uint64_t sl__need(const struct sl_call *c, unsigned i, uint64_t quantum_ns)
{
	const struct sl_rule *r = &sl__st.policy.rules[i];
	const struct sl_params p = sl__rule_now(i);
	if (r->op == SL_OP_CONNS || r->unit != SL_UNIT_BYTES || p.period_ns == 0)
		return 1;
	unsigned __int128 q = (unsigned __int128)p.amount * quantum_ns / p.period_ns;
	uint64_t n = q > UINT64_MAX ? UINT64_MAX : (uint64_t)q, half = sl__piece_max(i) / 2;
	n = n < half ? n : half;
	n = c->nb_want != 0 && c->nb_want < n ? c->nb_want : n;
	return n > 0 ? n : 1;
}

int sl__nb_refuse(struct sl_call *c, unsigned i, uint64_t now, uint64_t wait_ns)
{
	if (wait_ns == 0 || sl__st.policy.rules[i].op == SL_OP_CONNS)
		wait_ns = wait_ns > SL_NB_BACKOFF_NS ? wait_ns : SL_NB_BACKOFF_NS;
	uint64_t t = sl__sat_add(now, wait_ns);
	if (t > c->ready_ns)
		c->ready_ns = t;
	c->delayed_rules |= (uint32_t)1 << i;
	sl_log(SL_LOG_DEBUG, "rule %u: %s on non-blocking fd %d not ready for %llu us", i + 1,
	       sl_op_name(c->op), c->fd, (unsigned long long)(wait_ns / 1000));
	return EAGAIN;
}

/* The instant every nb rule of c has the units its next call needs (0 if
 * they have them now). */
static uint64_t nb_next(struct sl_call *c, uint64_t now)
{
	uint64_t t = 0;
	for (uint32_t rest = c->nb_rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		struct sl_limiter *l = sl__limiter(c, i);
		uint64_t need = sl__need(c, i, SL_NB_QUANTUM_NS);
		struct sl_decision d = sl_limiter_acquire(l, need, now, 0);
		if (d.verdict == SL_ADMIT) {
			sl_limiter_refund(l, need, now);
			continue;
		}
		uint64_t w = d.wait_ns != 0 && d.verdict == SL_REFUSE ? d.wait_ns
								      : SL_NB_BACKOFF_NS;
		t = sl__sat_add(now, w) > t ? sl__sat_add(now, w) : t;
	}
	return t;
}

/* probe_lim for a rule that is not per=process. */
static __attribute__((noinline)) const struct sl_limiter *probe_lim_other(int fd, unsigned i)
{
	if ((sl__st.lease_rules >> i) & 1)
		return sl__lease_limiter(i);
	if ((sl__st.fd_rules >> i) & 1)
		return (unsigned)fd < sl__fd_cap && sl__st.fd_lims != NULL ? sl__fd_lim(fd, i)
									   : sl__st.rule_lim[i];
	if ((sl__st.peer_rules >> i) & 1)
		return sl__peer_fd_cached(fd, i);
	return NULL;
}

/* The limiter of rule i for fd as the probe's first look sees it, with no
 * call made: NULL where only a call can say (per=peer before the fd
 * pinned its entry). A per=process rule's inline. */
static inline const struct sl_limiter *probe_lim(int fd, unsigned i)
{
	if ((sl__st.proc_rules >> i) & 1)
		return sl__st.rule_lim[i];
	return probe_lim_other(fd, i);
}

/* sl__nb_probe's first, read-only look: the rules matching fd in kind k
 * whose limiters may be short (0: none, or nothing to ask). A limiter with a
 * piece to spare (the smallest byte piece; one unit of a message rule) is
 * not contended (a rule that never limits always has it), and the fd is
 * reported with nothing reserved, so its calls keep the fast paths. *recp
 * and *rulesp get the fd's record and its nb rules, for probe_short.
 * Always inline: this is all the wait wrappers pay (in
 * sl__nb_hold_unready) for a matched fd whose rules have units to spare. */
static inline __attribute__((always_inline)) uint32_t probe_look(int fd, enum sl_kind_call k,
								 uint64_t now,
								 const struct sl_fdrec **recp,
								 uint32_t *rulesp)
{
	if (sl__busy || sl__fd_pass(fd, k))
		return 0;
	const struct sl_fdrec *rec = sl__fd_rec(fd);
	/* A stream socket with no peer is a listener (IN is an accept) or not
	 * connected yet (OUT is its connect's end): no transfer to probe. */
	if (rec == NULL || (rec->stream && rec->peer.family == 0))
		return 0;
	const uint32_t rules = rec->match[k] & sl__st.probe_rules;
	uint32_t shortr = 0;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		const unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_limiter *l = probe_lim(fd, i);
		const uint64_t n = (sl__st.byte_rules >> i & 1) ? sl__st.piece_min : 1;
		if (l == NULL || !sl_fast_peek(l, n != 0 ? n : 1, now))
			shortr |= (uint32_t)1 << i;
	}
	*recp = rec;
	*rulesp = rules;
	return shortr;
}

/* The call sl__nb_probe and a round ask the limiters with, for fd (record
 * rec, its peer copied to *peer: the record may be rewritten) in dir under
 * the nb `rules`. */
static struct sl_call probe_call(int fd, enum sl_dir dir, uint64_t now, const struct sl_fdrec *rec,
				 uint32_t rules, struct sl_addr *peer)
{
	*peer = rec->peer;
	return (struct sl_call){.fd = fd,
				.op = dir == SL_DIR_IN ? SL_OP_RECV : SL_OP_SEND,
				.peer = peer,
				.start_ns = now,
				.nb_rules = rules};
}

/* sl__nb_probe past its first look, for the rules `shortr` (not 0) of
 * `rules` that may be short: the instant their units are there, or 0. Out
 * of line: only a contended limiter comes here. */
static __attribute__((noinline)) uint64_t probe_short(int fd, enum sl_dir dir, uint64_t now,
						      const struct sl_fdrec *rec, uint32_t rules,
						      uint32_t shortr, uint32_t round)
{
	/* A turn of its own reserved (fair.c): the limiter shows its units
	 * taken, and its next call owns them. */
	if (sl__fair_has(fd, dir))
		return 0;
	int saved = errno;
	struct sl_addr peer;
	struct sl_call c = probe_call(fd, dir, now, rec, 0, &peer);
	uint64_t t = 0;
	/* A short fd's turn is reserved now, in line with the other fds that
	 * wait for the limiter (fair.c): two fds reported ready at once do not
	 * both count on the same units, and the first call of the one
	 * reported first does not leave the second with none. Its next call
	 * owns the units (a send's fast paths leave them to the general path
	 * while a turn is kept: xfer.h). */
	if ((shortr & sl__fair_rules()) != 0) {
		c.nb_rules = rules;
		c.nb_round = round;
		t = sl__fair_reserve(&c, dir, now);
		shortr &= ~sl__fair_rules();
	}
	for (; shortr != 0; shortr &= shortr - 1) {
		const unsigned i = (unsigned)__builtin_ctz(shortr);
		struct sl_limiter *l = sl__limiter(&c, i);
		const uint64_t need = sl__need(&c, i, SL_NB_QUANTUM_NS);
		/* Policed (no wait): a refusal takes nothing; an admission is
		 * given back. */
		struct sl_decision d = sl_limiter_acquire(l, need, now, 0);
		if (d.verdict == SL_ADMIT) {
			sl_limiter_refund(l, need, now);
			continue;
		}
		uint64_t w = d.wait_ns != 0 ? d.wait_ns : SL_NB_BACKOFF_NS;
		t = sl__sat_add(now, w) > t ? sl__sat_add(now, w) : t;
	}
	if (c.pinned != 0)
		sl__peer_unpin_call(&c);
	errno = saved;
	return t;
}

uint64_t sl__nb_probe(int fd, enum sl_dir dir, uint64_t now)
{
	const struct sl_fdrec *rec = NULL;
	uint32_t rules = 0;
	const uint32_t shortr = probe_look(fd, dir == SL_DIR_IN ? SL_K_RECV : SL_K_SEND, now, &rec,
					   &rules);
	return shortr == 0 ? 0 : probe_short(fd, dir, now, rec, rules, shortr, 0);
}

/* Hold fd back in dir until the instant probe_short names, if it is still
 * to come: true if it was. */
static __attribute__((noinline)) bool hold_short(int fd, enum sl_dir dir, uint64_t now,
						 const struct sl_fdrec *rec, uint32_t rules,
						 uint32_t shortr, const struct sl_nb_round *rd)
{
	const uint64_t t = probe_short(fd, dir, now, rec, rules, shortr, rd != NULL ? rd->n : 0);
	if (t <= now)
		return false;
	sl__ready_hold(fd, dir, t);
	return true;
}

uint32_t sl__nb_hold_look(int fd, uint32_t rev, uint64_t now, struct sl_nb_round *rd)
{
	uint32_t drop = 0, rules = 0, shortr, ready = 0;
	const struct sl_fdrec *rec = NULL, *r = NULL;
	/* Each direction held back if its units are short, else, if a rule
	 * was asked about, in the round (one call: both directions). */
	if (rev & SL_HIDE_IN) {
		shortr = probe_look(fd, SL_K_RECV, now, &r, &rules);
		if (shortr != 0 && hold_short(fd, SL_DIR_IN, now, r, rules, shortr, rd))
			drop |= SL_HIDE_IN | POLLHUP;
		else if (r != NULL)
			ready |= SL_HIDE_IN, rec = r;
	}
	if (rev & SL_HIDE_OUT) {
		r = NULL;
		shortr = probe_look(fd, SL_K_SEND, now, &r, &rules);
		if (shortr != 0 && hold_short(fd, SL_DIR_OUT, now, r, rules, shortr, rd))
			drop |= SL_HIDE_OUT;
		else if (r != NULL)
			ready |= SL_HIDE_OUT, rec = r;
	}
	if (ready != 0)
		drop |= sl__nb_round(rd, fd, ready, rec, now);
	return drop;
}

/* The kind of call rule i polices: its direction (a rule is of one). */
static enum sl_dir rule_dir(unsigned i)
{
	return (sl__st.kind_rules[SL_K_SEND] >> i & 1) ? SL_DIR_OUT : SL_DIR_IN;
}

/* Reserve fd's turn in dir (sl__fair_reserve) at now: the instant it
 * starts, or 0 if none was reserved. */
static uint64_t round_reserve(int fd, enum sl_dir dir, uint64_t now, uint32_t round)
{
	const struct sl_fdrec *rec = sl__fd_rec(fd);
	if (rec == NULL)
		return 0;
	int saved = errno;
	struct sl_addr peer;
	const enum sl_kind_call k = dir == SL_DIR_IN ? SL_K_RECV : SL_K_SEND;
	struct sl_call c = probe_call(fd, dir, now, rec, rec->match[k] & sl__st.probe_rules, &peer);
	c.nb_round = round;
	const uint64_t t = sl__fair_reserve(&c, dir, now);
	if (c.pinned != 0)
		sl__peer_unpin_call(&c);
	errno = saved;
	return t;
}

/* True if fd is a listener (its IN is an accept, not a receive) or a
 * stream socket not connected yet (its OUT is its connect's end). */
static bool round_listener(int fd)
{
	const struct sl_fdrec *rec = sl__fd_rec(fd);
	return rec != NULL && rec->stream && rec->peer.family == 0;
}

uint32_t sl__nb_round_more(struct sl_nb_round *rd, int fd, uint32_t f, uint64_t now)
{
	if (rd->first >= 0) { /* the round's first fd, noted inline */
		const int a = rd->first;
		const bool lst = round_listener(a);
		for (uint32_t rest = rd->rules; rest != 0; rest &= rest - 1)
			rd->fd[__builtin_ctz(rest)] = a;
		rd->first = -1;
		if (lst)
			rd->rules = 0;
	}
	if (round_listener(fd))
		return 0;
	const uint32_t shared = f & rd->rules;
	uint32_t drop = 0;
	if (shared != 0) {
		/* The first fd of each shared rule has its turn reserved in
		 * the rule's direction (if it has none), before this one's:
		 * its call then leaves this one's units. */
		for (uint32_t rest = shared; rest != 0; rest &= rest - 1) {
			const unsigned i = (unsigned)__builtin_ctz(rest);
			const int a = rd->fd[i];
			if (a != fd && !sl__fair_has(a, rule_dir(i)))
				(void)round_reserve(a, rule_dir(i), now, rd->n);
		}
		for (int dir = SL_DIR_IN; dir <= SL_DIR_OUT; dir++) {
			const enum sl_kind_call k = dir == SL_DIR_IN ? SL_K_RECV : SL_K_SEND;
			if ((shared & sl__st.kind_rules[k]) == 0)
				continue;
			const uint64_t t = round_reserve(fd, (enum sl_dir)dir, now, rd->n);
			if (t > now) {
				sl__ready_hold(fd, (enum sl_dir)dir, t);
				drop |= dir == SL_DIR_IN ? SL_HIDE_IN | POLLHUP : SL_HIDE_OUT;
			}
		}
	}
	for (uint32_t rest = f & ~rd->rules; rest != 0; rest &= rest - 1)
		rd->fd[__builtin_ctz(rest)] = fd;
	rd->rules |= f;
	return drop;
}

void sl__nb_end_slow(struct sl_call *c, enum sl_dir dir, bool cut)
{
	/* A call that moved less than asked without waiting for a rule may
	 * not have asked whether the fd is non-blocking yet. */
	if (sl__call_nb(c) == 0 || (unsigned)c->fd >= sl__fd_cap)
		return;
	int saved = errno;
	uint64_t now = sl__clock_ns(), t = c->ready_ns;
	/* Event-loop throttling counts as a delay (sl__call_end): a call
	 * refused (sl__nb_refuse) or cut short with the tokens of its next
	 * call missing (not by the kernel alone), and the time the fd is held
	 * back from now to the instant it is ready (only what extends an
	 * earlier hold). */
	/* Its next turn is reserved in the limiters that can (fair.c): the
	 * fds waiting for one limiter get their turns in order. */
	uint64_t turn = sl__fair_reserve(c, dir, now);
	if (turn != 0)
		t = turn;
	else if (t == 0 && cut)
		t = nb_next(c, now);
	if (t > now) {
		if (cut)
			c->delayed_rules |= c->nb_rules;
		uint64_t prev = sl__ready_hold(c->fd, dir, t), from = prev > now ? prev : now;
		c->waited_ns += t > from ? t - from : 0;
	}
	errno = saved;
}
