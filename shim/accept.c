/* SPDX-License-Identifier: MIT */
/*
 * accept.c - the rate and conns rules of accept and accept4 (wrap_sock.c
 * exports them).
 *
 * Delaying rate rules that are not per=peer take their token when the
 * connection is there: after the real accept, the call holds the connection
 * until its slot (connections queue in the backlog meanwhile, and clients
 * see slow accepts), so accepted connections are spaced by the rate however
 * long the listener was idle before (arrival_rules). On a non-blocking
 * listener they decide before the real accept (below). conns rules with
 * delay wait before the real accept for a free slot. Everything that needs the
 * client's address (per=peer) or refuses (reject) is decided after the real
 * accept: a refused connection is reset (SO_LINGER {1, 0}, then close), so
 * the client sees ECONNRESET and the program sees the rule's errno
 * (ECONNABORTED by default, which servers already retry). A signal during a
 * wait after the real accept does not cost the client its connection: the
 * call returns the fd.
 *
 * Non-blocking sockets (nb.c, ready.c), under delay rules with
 * nonblock=eagain: an accept that would wait before the real accept fails
 * with EAGAIN and the listening fd is reported readable when its slot comes.
 * A connection that a per=peer rule would make wait after the real accept is
 * held instead (acchold.c), its slot reserved, and the call goes on with
 * the next connection in the backlog (at most SL_AH_PER_CALL held per call):
 * the program gets another peer's connection or EAGAIN, and the held one
 * from an accept once its slot has come.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "accept.h"
#include "acchold.h"
#include "act.h"
#include "clock.h"
#include "count.h"
#include "fd.h"
#include "nb.h"
#include "real.h"
#include "state.h"
#include "turn.h"

/* Reset an accepted connection we refuse: the client sees ECONNRESET. */
static void reset_conn(int fd)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	SL_REAL(close)(fd);
}

/* Make the rest of call c wait for nothing: its deadline is now passed,
 * so delay rules police (as if the socket's timeout had run out). */
static void call_no_wait(struct sl_call *c)
{
	c->timeout_known = true;
	c->timeout_ns = 0;
}

/* The real accept or accept4 (flags < 0 means plain accept). */
static int real_accept(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	return flags < 0 ? SL_REAL(accept)(fd, sa, len) : SL_REAL(accept4)(fd, sa, len, flags);
}

/* Rules that may wait before the real accept: delay, not per=peer. */
static uint32_t pre_rules(uint32_t rules)
{
	uint32_t m = 0;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &sl__st.policy.rules[i];
		if (r->action == SL_ACTION_DELAY && r->scope != SL_SCOPE_PEER)
			m |= (uint32_t)1 << i;
	}
	return m;
}

/*
 * Of the pre rules, those that still wait before the real accept: conns
 * rules, and rate rules whose waits become EAGAIN on this listener (an
 * event loop calls accept when a connection is there, and its listener is
 * hidden until the slot). The other rate rules take their token when the
 * connection is there, after the real accept, and the call returns it at
 * its slot: a blocking accept that waited in the kernel through an idle
 * spell would otherwise have taken its token when it was called, and hand
 * over the next connection back to back with the one before.
 */
static uint32_t arrival_rules(struct sl_call *c, uint32_t pre, uint32_t conns)
{
	uint32_t rate = pre & ~conns;
	return rate == 0 ? pre : (pre & conns) | (rate & sl__call_nb(c));
}

/* per=peer rules of `rules` that wait after the real accept and may hold
 * the connection instead (acchold.c): delay with nonblock=eagain. */
static uint32_t hold_rules(uint32_t rules)
{
	uint32_t m = 0;
	for (uint32_t rest = rules & sl__st.eagain_rules & ~sl__st.conns_rules; rest != 0;
	     rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		if (sl__st.policy.rules[i].scope == SL_SCOPE_PEER)
			m |= (uint32_t)1 << i;
	}
	return m;
}

/* The end of an accept that returns connection r: the system protection
 * of its rules (turn.c) admits it or it is refused (what g, g2 and gc
 * took given back); its conns slots (gc) go to the fd, the call ends
 * admitted, errno is e. */
static int accepted(struct sl_call *c, uint32_t rules, const struct sl_grant *g,
		    const struct sl_grant *g2, const struct sl_grant *gc, int r, int e)
{
	const uint64_t now = sl__clock_ns();
	const uint32_t sys = (rules | gc->rules) & sl__st.sys_rules;
	uint64_t turns = gc->rules & sl__st.adapt_rules;
	if (__builtin_expect(sys != 0, 0)) {
		int who;
		turns |= sl__turn_gates(sys, now, &who);
		if (who >= 0) {
			sl__grant_refund(c, g, 1);
			sl__grant_refund(c, g2, 1);
			sl__grant_refund(c, gc, 1);
			reset_conn(r);
			sl_count_refused(&sl__st.stats[who]);
			return sl__call_fail(c, rules,
					     sl_rule_errno(&sl__st.policy.rules[who],
							   SL_OP_ACCEPT));
		}
	}
	struct sl_limiter *lims[SL_MAX_RULES];
	sl__fd_set_conn(r, lims, sl__grant_conns(gc, lims));
	if (turns != 0) /* its first turn has begun */
		sl__turn_accepted(r, turns, now);
	sl__call_end(c, rules, true);
	sl__busy = 0;
	errno = e;
	return r;
}

/* Connections one accept call may hold before it gives up with EAGAIN. */
#define SL_AH_PER_CALL 16

static int accept_slow(int fd, struct sockaddr *sa, socklen_t *len, int flags,
		       const struct sl_fdrec *rec, int depth)
{
	int saved = errno;
	sl__busy = 1;
	/* A held connection whose slot has come is the answer (acchold.c). */
	if (sl__ah_on()) {
		int h = sl__ah_take(fd, sl__clock_ns(), sa, len, flags);
		if (h >= 0) {
			sl__busy = 0;
			errno = saved;
			return h;
		}
	}
	uint32_t rules = rec->match[SL_K_ACCEPT], conns = rules & sl__st.conns_rules;
	uint32_t pre = pre_rules(rules);
	struct sl_call c;
	struct sl_grant g, g2, gc;
	int err = 0;
	sl__call_begin(&c, fd, SL_OP_ACCEPT, NULL, SO_RCVTIMEO);
	sl__nb_begin(&c, 0, pre);
	pre = arrival_rules(&c, pre, conns);
	if ((err = sl__admit(&c, pre & ~conns, 1, &g)) == 0 && (pre & conns) != 0) {
		sl__available(&c, pre & conns, true, &err);
		if (err != 0)
			sl__grant_refund(&c, &g, 1);
	}
	if (err != 0) {
		sl__nb_end(&c, SL_DIR_IN, false, 0);
		return sl__call_fail(&c, rules, err);
	}
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	errno = saved;
	int r = real_accept(fd, (struct sockaddr *)&ss, &sslen, flags);
	int e = errno;
	if (r < 0) {
		sl__grant_refund(&c, &g, 1);
		return sl__call_fail(&c, rules, e);
	}
	sl__fd_created(r);
	if (sa != NULL && len != NULL) {
		memcpy(sa, &ss, sslen < *len ? sslen : *len);
		*len = sslen;
	}
	struct sl_addr peer;
	c.peer = sl_addr_from(&peer, (struct sockaddr *)&ss, sslen) ? &peer : NULL;
	/* A signal while waiting after the real accept: the program keeps
	 * the connection, but never without its conns slots: it takes them
	 * only if they are free now (call_no_wait), else the connection
	 * is reset and the call fails with EINTR. */
	/* A non-blocking listener whose per=peer rules would make it wait
	 * holds the connection instead, its slot reserved (c.defer: ready_ns
	 * says when), and goes on with the next one in the backlog. */
	const uint32_t post = rules & ~pre & ~conns, held = hold_rules(post);
	if (held != 0 && depth < SL_AH_PER_CALL) {
		c.defer = true;
		c.nb_maybe |= held;
		c.ready_ns = 0;
	}
	err = sl__admit(&c, post, 1, &g2);
	c.defer = false;
	if (err == 0 && c.ready_ns > sl__clock_ns()) {
		uint64_t due = c.ready_ns;
		err = sl__admit(&c, conns, 1, &gc);
		if (err == 0 && sl__ah_hold(fd, r, due, (struct sockaddr *)&ss, sslen)) {
			struct sl_limiter *lims[SL_MAX_RULES];
			sl__fd_set_conn(r, lims, sl__grant_conns(&gc, lims));
			if (gc.rules & sl__st.adapt_rules)
				sl__turn_accepted(r, gc.rules & sl__st.adapt_rules, sl__clock_ns());
			sl__call_end(&c, rules, true);
			errno = saved;
			int next = accept_slow(fd, sa, len, flags, rec, depth + 1);
			sl__busy = 0;
			return next;
		}
		if (err == 0) /* the table is full: wait in place, as before (a
			       * signal: the program keeps the connection) */
			sl__sleep_until(due);
		else
			sl__grant_refund(&c, &g2, 1);
		if (err == 0)
			return accepted(&c, rules, &g, &g2, &gc, r, e);
		g2.rules = 0;
	}
	bool intr = err == EINTR;
	if (intr)
		call_no_wait(&c);
	if (err == 0 || intr) {
		err = sl__admit(&c, conns, 1, &gc);
		if (err == EINTR) {
			intr = true;
			call_no_wait(&c);
			err = sl__admit(&c, conns, 1, &gc);
		}
		err = intr && err != 0 ? EINTR : err;
	}
	if (err != 0) {
		sl__grant_refund(&c, &g, 1);
		sl__grant_refund(&c, &g2, 1);
		reset_conn(r);
		return sl__call_fail(&c, rules, err);
	}
	return accepted(&c, rules, &g, &g2, &gc, r, e);
}

int sl__accept(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	struct sl_fdrec rec;
	/* Arguments the kernel refuses go to it as they are: flags it does not
	 * know (EINVAL), an address without its length (EFAULT). */
	if (sl__fd_pass(fd, SL_K_ACCEPT) || sl__busy ||
	    (flags > 0 && (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != 0) ||
	    (sa != NULL && len == NULL) || !sl__fd_get(fd, &rec) || rec.match[SL_K_ACCEPT] == 0) {
		int r = real_accept(fd, sa, len, flags);
		if (r >= 0)
			sl__fd_created(r);
		return r;
	}
	return accept_slow(fd, sa, len, flags, &rec, 0);
}
