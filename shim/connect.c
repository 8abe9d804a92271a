/* SPDX-License-Identifier: MIT */
/*
 * connect.c - the rate and conns rules of connect (wrap_sock.c exports it).
 *
 * conns:adaptive rules take no slot at a connect: the connection's requests
 * are their client turns (turn.c, sl__turn_connected).
 *
 * Rate rules are asked first; a refusal fails at once with the rule's errno
 * and opens nothing. conns rules then take one slot each (delay polls for a
 * free slot, bounded by max-delay and SO_SNDTIMEO, which is also the
 * kernel's connect timeout). A connect that succeeds, or is in progress
 * (EINPROGRESS, or EINTR: the kernel goes on connecting), keeps its slots on
 * the fd until the last fd of the connection is closed; a failed one gives
 * them back at once.
 *
 * Non-blocking sockets (nb.c, ready.c), under delay rules with
 * nonblock=eagain: a connect has its rate slot reserved, returns EINPROGRESS
 * at once and connects for real when the slot comes. Its conns slots, if
 * they are full, are waited for the same way (connwait.c), unless a conns
 * rule is per=thread, per=peer or redis=KEY (then in place). A connect on
 * a TCP socket already connecting or connected goes to the kernel
 * uncharged.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "act.h"
#include "clock.h"
#include "connect.h"
#include "connwait.h"
#include "fd.h"
#include "match.h"
#include "nb.h"
#include "ready.h"
#include "real.h"
#include "rule_lim.h"
#include "sandboxed.h"
#include "shm.h"
#include "state.h"
#include "turn.h"

/* True if fd is a stream socket already connecting or connected: another
 * connect on it is the kernel's to answer (EALREADY, EISCONN), not a new
 * connection to charge (programs that poll connect() until EISCONN would
 * pay for each call, and a full conns limit would wait for its own slot).
 * TCP: its state (TCP_INFO); other streams (AF_UNIX, which connects at
 * once): the peer its classification found. errno is preserved. */
static bool tcp_started(int fd, const struct sl_fdrec *rec)
{
	if (rec->stream && !(rec->family & (SL_FAM_INET | SL_FAM_INET6)))
		return rec->peer.family != 0;
	if (!rec->stream || sl__sandboxed())
		return false; /* a sandbox: no getsockopt (sandbox.h), charged as new */
	struct tcp_info ti;
	socklen_t l = sizeof(ti);
	int saved = errno;
	bool started = SL_REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0 &&
		       ti.tcpi_state != TCP_CLOSE;
	errno = saved;
	return started;
}

/* True if fd is O_NONBLOCK (asked only once a conns slot is full). errno is
 * preserved. */
static bool fd_nonblock(int fd)
{
	int saved = errno;
	int fl = SL_REAL(fcntl)(fd, F_GETFL);
	errno = saved;
	return fl >= 0 && (fl & O_NONBLOCK);
}

/* Take one slot of each conns rule in `conns` now, all or none (a deferred
 * connect's try): 0 with *g filled, or EAGAIN with nothing taken. */
static int conns_take_now(struct sl_call *c, uint32_t conns, struct sl_grant *g)
{
	uint64_t now = sl__clock_ns();
	g->rules = 0;
	g->n = 1;
	for (uint32_t rest = conns; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		struct sl_limiter *l = sl__limiter(c, i);
		struct sl_decision d = sl_limiter_acquire(l, 1, now, 0);
		if (d.verdict == SL_REFUSE && sl__shm_reclaim(l))
			d = sl_limiter_acquire(l, 1, now, 0);
		if (d.verdict != SL_ADMIT) {
			sl__grant_refund(c, g, 1);
			g->rules = 0;
			return EAGAIN;
		}
		g->rules |= (uint32_t)1 << i;
		g->lim[i] = l;
		g->at_ns[i] = now;
		sl__shm_hold(l, 1);
	}
	return 0;
}

static int connect_slow(int fd, const struct sockaddr *sa, socklen_t len,
			const struct sl_fdrec *rec)
{
	if (tcp_started(fd, rec))
		return SL_REAL(connect)(fd, sa, len);
	int saved = errno;
	sl__busy = 1;
	struct sl_addr dst;
	bool known = sl_addr_from(&dst, sa, len);
	uint32_t rules = sl_match(&sl__st.policy, rec->cand[SL_K_CONNECT], rec->family, rec->type,
				  known ? &dst : NULL);
	/* conns:adaptive rules take no slot here: the connection's requests
	 * are their client turns (turn.c). */
	const uint32_t adapt = rules & sl__st.adapt_rules;
	rules &= ~adapt;
	uint32_t conns = rules & sl__st.conns_rules;
	struct sl_call c;
	struct sl_grant g, gc;
	sl__call_begin(&c, fd, SL_OP_CONNECT, known ? &dst : NULL, SO_SNDTIMEO);
	sl__nb_begin(&c, 0, rules & ~conns);
	c.defer = true;
	int err = sl__admit(&c, rules & ~conns, 1, &g);
	if (err != 0)
		return sl__call_fail(&c, rules, err);
	/* A non-blocking connect whose conns slots are full waits for them
	 * without blocking (connwait.c), if every one of its conns rules can. */
	const bool later = conns != 0 && sl__cw_may_defer(conns);
	err = later ? conns_take_now(&c, conns, &gc) : sl__admit(&c, conns, 1, &gc);
	if (later && err != 0) {
		if (fd_nonblock(fd) && sl__cw_defer(&c, conns, sa, len)) { /* EINPROGRESS */
			if (adapt != 0)
				sl__turn_connected(fd, adapt, sl__clock_ns());
			sl__call_end(&c, rules, true);
			sl__busy = 0;
			errno = EINPROGRESS;
			return -1;
		}
		err = sl__admit(&c, conns, 1, &gc); /* blocking, or cannot be kept: in place */
	}
	if (err != 0) {
		sl__grant_refund(&c, &g, 1);
		return sl__call_fail(&c, rules, err);
	}
	struct sl_limiter *lims[SL_MAX_RULES];
	if (sl__connect_defer(&c, sa, len)) { /* non-blocking: EINPROGRESS now */
		sl__fd_set_conn(fd, lims, sl__grant_conns(&gc, lims));
		if (adapt != 0)
			sl__turn_connected(fd, adapt, sl__clock_ns());
		sl__call_end(&c, rules, true);
		sl__busy = 0;
		errno = EINPROGRESS;
		return -1;
	}
	errno = saved;
	int r = SL_REAL(connect)(fd, sa, len);
	int e = errno;
	bool open = r == 0 || e == EINPROGRESS || e == EINTR;
	if (open)
		sl__fd_set_conn(fd, lims, sl__grant_conns(&gc, lims));
	else
		sl__grant_refund(&c, &gc, 1);
	sl__fd_invalidate(fd);
	if (open && adapt != 0)
		sl__turn_connected(fd, adapt, sl__clock_ns());
	sl__call_end(&c, rules, open);
	sl__busy = 0;
	errno = e;
	return r;
}

int sl__connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct sl_fdrec rec;
	int r;
	if (sl__connect_again(fd, sa, len, &r)) /* its earlier connect was deferred */
		return r;
	if (sl__fd_pass(fd, SL_K_CONNECT) || sl__busy || !sl__fd_get(fd, &rec) ||
	    rec.cand[SL_K_CONNECT] == 0) {
		r = SL_REAL(connect)(fd, sa, len);
		/* The fd may have been classified before it had a peer: look
		 * again on its next call (sl__fd_invalidate leaves errno). */
		sl__fd_invalidate(fd);
		return r;
	}
	return connect_slow(fd, sa, len, &rec);
}
