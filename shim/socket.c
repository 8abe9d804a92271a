/*
 * socket.c - wrappers that open, accept and close connections, and the
 * descriptor bookkeeping calls (dup*, fcntl F_DUPFD, close_range).
 *
 * connect: rate rules are asked first; a refusal fails at once with the
 * rule's errno and opens nothing. conns rules then take one slot each (delay
 * polls for a free slot, bounded by max-delay and SO_SNDTIMEO, which is also
 * the kernel's connect timeout). A connect that succeeds, or is in progress
 * (EINPROGRESS, or EINTR: the kernel goes on connecting), keeps its slots on
 * the fd until the last fd of the connection is closed; a failed one gives
 * them back at once.
 *
 * accept/accept4: delaying rules that are not per=peer wait before the real
 * accept, so connections queue in the backlog and clients see slow accepts;
 * conns rules with delay also wait there for a free slot. Everything that
 * needs the client's address (per=peer) or refuses (reject) is decided after
 * the real accept: a refused connection is reset (SO_LINGER {1, 0}, then
 * close), so the client sees ECONNRESET and the program sees the rule's
 * errno (ECONNABORTED by default, which servers already retry). A signal
 * during a wait after the real accept does not cost the client its
 * connection: the call returns the fd.
 *
 * Non-blocking sockets (ready.c), under delay rules with nonblock=eagain: an
 * accept that would wait before the real accept fails with EAGAIN and the
 * listening fd is reported readable when its slot comes; a connect has its
 * rate slot reserved, returns EINPROGRESS at once and connects for real when
 * the slot comes. Waits that come after the real accept (per=peer) and
 * conns slots of a connect are still taken in place.
 */
#undef _FORTIFY_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

#include "breaker.h"
#include "internal.h"

/* Referenced by the unit tests so that this archive member is linked into
 * them even when a sanitizer runtime already defines the libc names. */
const int sl__socket_anchor = 1;

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1u << 2)
#endif
#define SL_CLOSE_RANGE_FLAGS ((1u << 1) | CLOSE_RANGE_CLOEXEC) /* UNSHARE | CLOEXEC */

/* Collect the conns limiters of a grant into lims; returns how many. */
static unsigned sl_grant_conns(const struct sl_grant *g, struct sl_limiter **lims)
{
	unsigned n = 0;
	for (uint32_t rest = g->rules & sl__st.conns_rules; rest != 0; rest &= rest - 1)
		lims[n++] = g->lim[__builtin_ctz(rest)];
	return n;
}

/* Fail the call with err: stats, errno. Returns -1. */
static int sl_fail(struct sl_call *c, uint32_t rules, int err)
{
	sl__break_refused = 1;
	sl__call_end(c, rules, false);
	sl__busy = 0;
	errno = err;
	return -1;
}

/* True if fd is a TCP socket already connecting or connected: another
 * connect on it is the kernel's to answer (EALREADY, EISCONN), not a new
 * connection to charge (programs that poll connect() until EISCONN would
 * pay for each call, and a full conns limit would wait for its own slot).
 * errno is preserved. */
static bool sl_tcp_started(int fd, const struct sl_fdrec *rec)
{
	if (!rec->stream || !(rec->family & (SL_FAM_INET | SL_FAM_INET6)))
		return false;
	struct tcp_info ti;
	socklen_t l = sizeof(ti);
	int saved = errno;
	bool started = SL_REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0 &&
		       ti.tcpi_state != TCP_CLOSE;
	errno = saved;
	return started;
}

static int sl_connect_slow(int fd, const struct sockaddr *sa, socklen_t len,
			   const struct sl_fdrec *rec)
{
	if (sl_tcp_started(fd, rec))
		return SL_REAL(connect)(fd, sa, len);
	int saved = errno;
	sl__busy = 1;
	struct sl_addr dst;
	bool known = sl__addr_from(&dst, sa, len);
	uint32_t rules = sl__match(rec->cand[SL_K_CONNECT], rec->family, rec->type,
				   known ? &dst : NULL);
	uint32_t conns = rules & sl__st.conns_rules;
	struct sl_call c;
	struct sl_grant g, gc;
	sl__call_begin(&c, fd, SL_OP_CONNECT, known ? &dst : NULL, SO_SNDTIMEO);
	sl__nb_begin(&c, 0, rules & ~conns);
	c.defer = true;
	int err = sl__admit(&c, rules & ~conns, 1, &g);
	if (err != 0)
		return sl_fail(&c, rules, err);
	err = sl__admit(&c, conns, 1, &gc);
	if (err != 0) {
		sl__grant_refund(&c, &g, 1);
		return sl_fail(&c, rules, err);
	}
	struct sl_limiter *lims[SL_MAX_RULES];
	if (sl__connect_defer(&c, sa, len)) { /* non-blocking: EINPROGRESS now */
		sl__fd_set_conn(fd, lims, sl_grant_conns(&gc, lims));
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
		sl__fd_set_conn(fd, lims, sl_grant_conns(&gc, lims));
	else
		sl__grant_refund(&c, &gc, 1);
	sl__fd_invalidate(fd);
	sl__call_end(&c, rules, open);
	sl__busy = 0;
	errno = e;
	return r;
}

SL_EXPORT int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	if (sl__break_n != 0) /* circuit breakers (breaker.c) wrap the rules */
		return sl__break_connect(fd, sa, len);
	return sl__connect_rules(fd, sa, len);
}

int sl__connect_rules(int fd, const struct sockaddr *sa, socklen_t len)
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
	return sl_connect_slow(fd, sa, len, &rec);
}

/* Reset an accepted connection we refuse: the client sees ECONNRESET. */
static void sl_reset(int fd)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	SL_REAL(close)(fd);
}

/* Make the rest of call c wait for nothing: its deadline is now passed,
 * so delay rules police (as if the socket's timeout had run out). */
static void sl_call_no_wait(struct sl_call *c)
{
	c->timeout_known = true;
	c->timeout_ns = 0;
}

/* The real accept or accept4 (flags < 0 means plain accept). */
static int sl_accept_real(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	return flags < 0 ? SL_REAL(accept)(fd, sa, len) : SL_REAL(accept4)(fd, sa, len, flags);
}

/* Rules that may wait before the real accept: delay, not per=peer. */
static uint32_t sl_accept_pre(uint32_t rules)
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

static int sl_accept_slow(int fd, struct sockaddr *sa, socklen_t *len, int flags,
			  const struct sl_fdrec *rec)
{
	int saved = errno;
	sl__busy = 1;
	uint32_t rules = rec->match[SL_K_ACCEPT], conns = rules & sl__st.conns_rules;
	uint32_t pre = sl_accept_pre(rules);
	struct sl_call c;
	struct sl_grant g, g2, gc;
	int err = 0;
	sl__call_begin(&c, fd, SL_OP_ACCEPT, NULL, SO_RCVTIMEO);
	sl__nb_begin(&c, 0, pre);
	if ((err = sl__admit(&c, pre & ~conns, 1, &g)) == 0 && (pre & conns) != 0) {
		sl__available(&c, pre & conns, true, &err);
		if (err != 0)
			sl__grant_refund(&c, &g, 1);
	}
	if (err != 0) {
		sl__nb_end(&c, SL_DIR_IN, false, 0);
		return sl_fail(&c, rules, err);
	}
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	errno = saved;
	int r = sl_accept_real(fd, (struct sockaddr *)&ss, &sslen, flags);
	int e = errno;
	if (r < 0) {
		sl__grant_refund(&c, &g, 1);
		return sl_fail(&c, rules, e);
	}
	sl__fd_forget(r);
	if (sa != NULL && len != NULL) {
		memcpy(sa, &ss, sslen < *len ? sslen : *len);
		*len = sslen;
	}
	struct sl_addr peer;
	c.peer = sl__addr_from(&peer, (struct sockaddr *)&ss, sslen) ? &peer : NULL;
	/* A signal while waiting after the real accept: the program keeps
	 * the connection, but never without its conns slots: it takes them
	 * only if they are free now (sl_call_no_wait), else the connection
	 * is reset and the call fails with EINTR. */
	err = sl__admit(&c, rules & ~pre & ~conns, 1, &g2);
	bool intr = err == EINTR;
	if (intr)
		sl_call_no_wait(&c);
	if (err == 0 || intr) {
		err = sl__admit(&c, conns, 1, &gc);
		if (err == EINTR) {
			intr = true;
			sl_call_no_wait(&c);
			err = sl__admit(&c, conns, 1, &gc);
		}
		err = intr && err != 0 ? EINTR : err;
	}
	if (err != 0) {
		sl__grant_refund(&c, &g, 1);
		sl__grant_refund(&c, &g2, 1);
		sl_reset(r);
		return sl_fail(&c, rules, err);
	}
	struct sl_limiter *lims[SL_MAX_RULES];
	sl__fd_set_conn(r, lims, sl_grant_conns(&gc, lims));
	sl__call_end(&c, rules, true);
	sl__busy = 0;
	errno = e;
	return r;
}

/* accept and accept4 share this; flags < 0 is plain accept. */
static int sl_accept(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	struct sl_fdrec rec;
	/* Arguments the kernel refuses go to it as they are: flags it does not
	 * know (EINVAL), an address without its length (EFAULT). */
	if (sl__fd_pass(fd, SL_K_ACCEPT) || sl__busy ||
	    (flags > 0 && (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != 0) ||
	    (sa != NULL && len == NULL) || !sl__fd_get(fd, &rec) || rec.match[SL_K_ACCEPT] == 0) {
		int r = sl_accept_real(fd, sa, len, flags);
		if (r >= 0)
			sl__fd_forget(r);
		return r;
	}
	return sl_accept_slow(fd, sa, len, flags, &rec);
}

SL_EXPORT int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	return sl_accept(fd, sa, len, -1);
}

SL_EXPORT int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	if (flags < 0) /* invalid (EINVAL); negative means plain accept below */
		return SL_REAL(accept4)(fd, sa, len, flags);
	return sl_accept(fd, sa, len, flags);
}

/* New sockets start unknown, whatever their fd number was used for. */
SL_EXPORT int socket(int domain, int type, int protocol)
{
	int r = SL_REAL(socket)(domain, type, protocol);
	if (r >= 0)
		sl__fd_forget(r);
	return r;
}

SL_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
	int r = SL_REAL(socketpair)(domain, type, protocol, sv);
	if (r == 0) {
		sl__fd_forget(sv[0]);
		sl__fd_forget(sv[1]);
	}
	return r;
}

SL_EXPORT int close(int fd)
{
	/* Relaxed: only a hint; sl__fd_forget exchanges the byte. */
	if ((unsigned)fd < SL_FD_LIMIT && atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed))
		sl__fd_forget(fd);
	return SL_REAL(close)(fd);
}

SL_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	/* Forgotten before the real call (as close does: after it, another
	 * thread may already have the numbers again), so only when it cannot
	 * fail with EINVAL: a failed call must keep what it did not close. */
	if (first <= last && ((unsigned)flags & ~SL_CLOSE_RANGE_FLAGS) == 0 &&
	    !((unsigned)flags & CLOSE_RANGE_CLOEXEC))
		for (unsigned fd = first; fd <= last && fd < sl__fd_cap; fd++)
			if (atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed))
				sl__fd_forget((int)fd);
	return SL_REAL(close_range)(first, last, flags);
}

SL_EXPORT int dup(int fd)
{
	int r = SL_REAL(dup)(fd);
	if (r >= 0)
		sl__fd_dup(fd, r);
	return r;
}

SL_EXPORT int dup2(int oldfd, int newfd)
{
	int r = SL_REAL(dup2)(oldfd, newfd);
	if (r >= 0 && oldfd != newfd)
		sl__fd_dup(oldfd, newfd);
	return r;
}

SL_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	int r = SL_REAL(dup3)(oldfd, newfd, flags);
	if (r >= 0)
		sl__fd_dup(oldfd, newfd);
	return r;
}

/* After a successful fcntl: F_DUPFD made a new fd for the same socket. */
static int sl_fcntl_done(int fd, int cmd, int r)
{
	if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		sl__fd_dup(fd, r);
	return r;
}

/* fcntl's third argument is an int or a pointer; like musl, pass it on as
 * an unsigned long, which holds either on every Linux ABI. */
SL_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	unsigned long arg = va_arg(ap, unsigned long);
	va_end(ap);
	return sl_fcntl_done(fd, cmd, SL_REAL(fcntl)(fd, cmd, arg));
}

/* glibc's name for fcntl under _FILE_OFFSET_BITS=64 on 32-bit ABIs. */
SL_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	unsigned long arg = va_arg(ap, unsigned long);
	va_end(ap);
	return sl_fcntl_done(fd, cmd, SL_REAL(fcntl64)(fd, cmd, arg));
}
