/* SPDX-License-Identifier: MIT */
/*
 * xfer.c - the transfer engine of both directions: what a send or a receive
 * that rules match does. The wrappers are in wrap_send.c and wrap_recv.c.
 *
 * Every wrapper tests the fd's pass bit and calls libc at once when no rule
 * can match (files, pipes, ttys, unmatched sockets). Otherwise it describes
 * the call in a struct sl_io, and sl__send (xfer.h, with the fast path) or
 * sl__recv run it, calling sl__io_xfer for the real transfer of a sub-range
 * [off, off + len) of the caller's buffer.
 *
 * Send, byte rules: the amount is the bytes the call asks to send. On a
 * stream socket a send larger than a piece (a token bucket's burst, see
 * sl__piece_max) goes out in pieces: charge the piece (waiting for it as the
 * rule says), send it, refund what the kernel did not take, repeat; the call
 * returns the full count like a slow link, or the bytes sent so far when a
 * later piece fails or is interrupted (the error is dropped, as the kernel
 * does). A short piece (non-blocking socket, buffer full) ends the call, and
 * so does an empty pipe after the first piece of a splice into a socket.
 * One-shot parts go with one piece: MSG_FASTOPEN, the destination address
 * and ancillary data with the first, MSG_OOB with the last; a socket that
 * MSG_FASTOPEN connected is classified again (connect rules and conns do
 * not see such a connection).
 * With a reject rule the call sends at most what is available now (a partial
 * count) and fails only when nothing is. Datagrams are never split: one
 * datagram larger than a piece is refused with the rule's errno. Message
 * rules count 1 per call (per message for sendmmsg).
 *
 * Receive, byte rules: wait until at least one unit is available, then ask
 * the kernel for no more than is available, so TCP back-pressure slows the
 * sender; the bytes actually received are charged afterwards (as debt that
 * later receives wait for). A datagram's size cannot be chosen, so datagram
 * receives are not shortened, only charged. MSG_WAITALL loops over pieces
 * until the request is complete. MSG_PEEK and MSG_ERRQUEUE (the socket's
 * error queue, not its data) are neither charged nor delayed.
 *
 * sendmmsg sends one message per real call so that each can be charged and
 * waited for; recvmmsg receives at most as many messages as message rules
 * allow now, and charges the bytes after the fact.
 *
 * Non-blocking calls (O_NONBLOCK, MSG_DONTWAIT) under delay rules with
 * nonblock=eagain (the default) never sleep: byte rules act like reject
 * rules (a partial count, or nothing), a refusal is EAGAIN, and the fd is
 * held back until its tokens are there (nb.c, ready.c), which poll, select
 * and epoll respect. nonblock=sleep keeps the in-place delay, and so does
 * recvmmsg in either mode (sendmmsg goes through sendmsg and is handled).
 */
#undef _FORTIFY_SOURCE
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/ioctl.h>

#include "act.h"
#include "iov.h"
#include "match.h"
#include "nb.h"
#include "rawcall.h"
#include "state.h"
#include "turn.h"
#include "xfer.h"
#include "xfer_recv.h"

/* The real transfer of a piece [off, off + len) that is not the whole call:
 * the iovecs and the message are cut to the piece. Out of line: its
 * IOV_MAX iovecs stay off the whole call's stack. */
__attribute__((noinline)) ssize_t sl__io_xfer_piece(const struct sl_io *whole, size_t off,
						    size_t len)
{
	struct iovec v[IOV_MAX];
	struct msghdr m;
	struct sl_io piece = *whole, *io = &piece;
	if (io->how <= SL_IO_SPLICE_OUT) {
		/* One-shot parts of a send go with one piece: a TCP Fast Open
		 * connect and the destination with the first (after it the
		 * socket is connected: EISCONN), the urgent mark with the last
		 * byte of the call, not of every piece. */
		if (off != 0) {
			io->flags &= ~MSG_FASTOPEN;
			io->addr = NULL;
			io->addrlen = 0;
		}
		if (off + len < io->total)
			io->flags &= ~MSG_OOB;
	}
	const struct iovec *iov = io->msg != NULL ? io->msg->msg_iov : io->iov;
	int cnt = io->msg != NULL ? (int)io->msg->msg_iovlen : io->iovcnt;
	if (iov != NULL) {
		cnt = sl__iov_slice(iov, cnt, off, len, v, IOV_MAX);
		iov = v;
	}
	if (io->msg != NULL) {
		m = *io->msg;
		m.msg_iov = (struct iovec *)iov;
		m.msg_iovlen = (size_t)cnt;
		if (off != 0) { /* ancillary data and the name go with the first piece */
			m.msg_control = NULL;
			m.msg_controllen = 0;
			if (io->how == SL_IO_SENDMSG) {
				m.msg_name = NULL;
				m.msg_namelen = 0;
			}
		}
	}
	return sl__io_real(io, io->buf + off, len, io->buflen - off, iov, cnt, &m, off == 0);
}

/* A later piece of a splice from a pipe into a socket: no more than the
 * pipe holds now (FIONREAD), 0 if it is empty. The kernel's one call moves
 * what is there and returns; it waits only for the first byte, so a piece
 * after the pipe's last byte would block for ever where it would return. */
static size_t pipe_left(const struct sl_io *io, size_t want)
{
	int n = 0, saved = errno;
	if (ioctl(io->splice->in, FIONREAD, &n) != 0)
		n = (int)(want < INT_MAX ? want : INT_MAX); /* not a pipe: as before */
	errno = saved;
	return (size_t)n < want ? (size_t)n : want;
}

/* Rules of `rules` with action reject. */
uint32_t sl__rejecting(uint32_t rules)
{
	return rules & sl__st.reject_rules;
}

/* End a transfer: stats, errno, the return value. done > 0 wins over an
 * error (a partial count); otherwise err (shim) or e (kernel) is the errno. */
ssize_t sl__io_end(struct sl_call *c, uint32_t rules, size_t done, ssize_t r, int err, int e)
{
	sl__call_end_bytes(c, rules, err == 0 && r >= 0, done);
	sl__busy = 0;
	if (done > 0 || (err == 0 && r >= 0)) {
		errno = e;
		return (ssize_t)done;
	}
	errno = err != 0 ? err : e;
	return -1;
}

/* What the fast path took, given back: a byte rule the bytes not moved, a
 * message rule its one unit if nothing moved (as the general path does). */
/* The units rule i took for a transfer of total bytes that returned r and
 * did not use: a byte rule the bytes not moved, a message rule its unit
 * if r < 0. */
static uint64_t fast_unused(unsigned i, size_t total, ssize_t r)
{
	return (sl__st.byte_rules >> i) & 1 ? (r < 0 ? total : total - (size_t)r) : r < 0;
}

void sl__fast_give(int fd, uint32_t rules, size_t total, ssize_t r, uint64_t now)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		uint64_t back = fast_unused(i, total, r);
		struct sl_limiter *l = back != 0 ? sl__fast_lim_kept(fd, i) : NULL;
		if (l != NULL)
			sl_limiter_refund(l, back, now);
	}
}

bool sl__fast_take_lim(int fd, unsigned i, uint64_t n, uint64_t now)
{
	struct sl_limiter *l = sl__fast_lim(fd, i);
	return l != NULL && sl_fast_take(l, n, now);
}

bool sl__fast_peek_lim(int fd, unsigned i, uint64_t n, uint64_t now)
{
	struct sl_limiter *l = sl__fast_lim(fd, i);
	return l != NULL && sl_fast_peek(l, n, now);
}

void sl__fast_charge_lim(int fd, unsigned i, uint64_t n, uint64_t now)
{
	struct sl_limiter *l = sl__fast_lim_kept(fd, i);
	if (l != NULL)
		sl_fast_charge(l, n, now);
}

bool sl__fast_recv_begin_multi(int fd, uint32_t rules, size_t total, uint64_t now)
{
	for (uint32_t rest = rules & sl__st.byte_rules; rest != 0; rest &= rest - 1)
		if (!sl__fast_peek1(fd, (unsigned)__builtin_ctz(rest), total, now))
			return false;
	return (rules & ~sl__st.byte_rules) == 0 ||
	       sl__fast_take(fd, rules & ~sl__st.byte_rules, total, now);
}

void sl__fast_recv_end_multi(int fd, uint32_t rules, size_t total, ssize_t r, uint64_t now)
{
	int e = errno;
	if (r > 0) {
		const uint64_t later = sl__clock_ns();
		for (uint32_t rest = rules & sl__st.byte_rules; rest != 0; rest &= rest - 1)
			sl__fast_charge1(fd, (unsigned)__builtin_ctz(rest), (uint64_t)r, later);
	} else if ((rules & ~sl__st.byte_rules) != 0) {
		sl__fast_give(fd, rules & ~sl__st.byte_rules, total, -1, now);
	}
	sl__stats_end(rules, r >= 0, r > 0 ? (uint64_t)r : 0);
	errno = e;
}

__attribute__((noinline)) ssize_t sl__fast_recv_credit_late(int fd, struct sl_credit *c, ssize_t r)
{
	const unsigned i = (unsigned)(c - sl__credit);
	/* Bytes came under a bucket, and the credit expired during the call
	 * (it held the whole buffer before it): the credit pays, as on the hot
	 * path. Its units were admitted when taken (burst + rate x t holds),
	 * and what leaves in any window is at most one slice more than the
	 * bucket's bound, as for any credit (credit.h). What is left is
	 * expired: the next call gives it back and takes anew, one slow call
	 * per renewal (as a send's), not two. */
	if (r > 0 && !sl__credit_windowed(sl__st.fast[i].how)) {
		c->units -= (size_t)r;
		sl__busy = 0;
		sl__credit_count(c, (uint64_t)r);
		return r;
	}
	/* A window's credit is spent only in the window it was taken in, and
	 * nothing came, or an error: nothing is spent of the credit; the bytes
	 * that came are charged at their arrival (as the receive fast path
	 * charges them), and the credit goes back: the thread waited, or will
	 * (nothing came). */
	int e = errno;
	const uint64_t now = sl__clock_ns();
	if (r > 0)
		sl__fast_charge1(fd, i, (uint64_t)r, now);
	sl__credit_return_all(now);
	sl__busy = 0;
	sl__stats_end(1u << i, r >= 0, r > 0 ? (uint64_t)r : 0);
	errno = e;
	return r;
}

ssize_t sl__fast_recv_credit_late_k(int fd, struct sl_credit *c, long k)
{
	return sl__fast_recv_credit_late(fd, c, sl__raw_ret(k));
}

ssize_t sl__fast_send_short_k(int fd, int flags, const struct sl_credit *c, size_t total, long k)
{
	return sl__fast_send_short_c(fd, flags, c, total, sl__raw_ret(k));
}

/* Every rule in turn; what was taken is given back if one does not admit.
 * At most one sliding window, policed last (state.h: late_rules). */
bool sl__fast_take_multi(int fd, uint32_t rules, size_t total, uint64_t now)
{
	const uint32_t late = rules & sl__st.late_rules, first = rules & ~late;
	if ((late & (late - 1)) != 0)
		return false;
	for (uint32_t rest = first; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		if (!sl__fast_take1(fd, i, sl__units(i, total), now)) {
			sl__fast_give(fd, first & ~rest, total, -1, now);
			return false;
		}
	}
	if (late != 0) {
		unsigned i = (unsigned)__builtin_ctz(late);
		if (!sl__fast_take1(fd, i, sl__units(i, total), now)) {
			sl__fast_give(fd, first, total, -1, now);
			return false;
		}
	}
	return true;
}

__attribute__((noinline)) ssize_t sl__fast_send_short(int fd, int flags, uint32_t rules,
						      size_t total, ssize_t r, uint64_t now)
{
	int e = errno;
	if (now == 0) {
		/* The call spent credit (of each rule): what it did not use
		 * goes back into the credit, and with it to wherever the credit
		 * came from (credit.c: a fixed window's to its window). */
		now = sl__clock_ns();
		for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
			const unsigned i = (unsigned)__builtin_ctz(rest);
			sl__credit[i].units += fast_unused(i, total, r);
		}
		/* The socket is full: the thread will wait, without it. */
		sl__credit_return_all(now);
	} else {
		sl__credit_return_all(now);
		sl__fast_give(fd, rules, total, r, now);
	}
	const uint64_t bytes = r > 0 ? (uint64_t)r : 0;
	const struct sl_fdrec *rec;
	if (r > 0 && (rec = sl__fd_rec(fd)) != NULL) {
		/* An nb fd is held back if its next call's tokens are missing,
		 * as sl__nb_end does for the general path, and the call ends
		 * as there (sl__io_end): the hold counted as a delay, a turn
		 * settled by sl__nb_begin given back, the per=peer entries the
		 * hold asked for unpinned. Copied out: see sl__send_general. */
		struct sl_call c;
		struct sl_addr dst = rec->peer;
		sl__busy = 1;
		sl__call_begin(&c, fd, SL_OP_SEND, dst.family != 0 ? &dst : NULL, SO_SNDTIMEO);
		sl__nb_begin(&c, flags, rules);
		sl__nb_end(&c, SL_DIR_OUT, true, total - (size_t)r);
		sl__call_end_bytes(&c, rules, true, bytes);
		sl__busy = 0;
	} else {
		sl__stats_end(rules, r >= 0, bytes);
	}
	errno = e;
	return r;
}

__attribute__((noinline)) ssize_t
sl__fast_send_short_c(int fd, int flags, const struct sl_credit *c, size_t total, ssize_t r)
{
	return sl__fast_send_short(fd, flags, 1u << (unsigned)(c - sl__credit), total, r, 0);
}

/* The general path of a send: pieces, waits, reject rules' partial counts,
 * non-blocking refusals. */
__attribute__((noinline)) ssize_t sl__send_general(struct sl_io *io, uint64_t now)
{
	const struct sockaddr *to = io->msg != NULL ? io->msg->msg_name : io->addr;
	int saved = errno;
	/* Asked again rather than passed: the fast path keeps fewer values
	 * alive. Published already (sl__xfer_rec), so one load and a test. */
	const struct sl_fdrec *rec = sl__fd_rec(io->fd);
	if (rec == NULL) {
		errno = saved;
		return sl__io_xfer(io, 0, io->total);
	}
	sl__busy = 1;
	/* Copied out: the record may be rewritten if the program races a
	 * connect or close of fd with this call. */
	uint32_t rules = rec->match[SL_K_SEND];
	bool stream = rec->stream;
	struct sl_addr dst = rec->peer;
	const struct sl_addr *peer = dst.family != 0 ? &dst : NULL;
	socklen_t tolen = io->msg != NULL ? io->msg->msg_namelen : io->addrlen;
	if (peer == NULL && to != NULL && sl_addr_from(&dst, to, tolen)) {
		peer = &dst;
		/* Not the accept and conns rules a connection's turns put
		 * among its candidates (turn.c, mark_fd). */
		rules = sl_match(&sl__st.policy,
				 rec->cand[SL_K_SEND] & sl__st.kind_rules[SL_K_SEND], rec->family,
				 rec->type, peer);
	}
	if (__builtin_expect(rec->turn != 0, 0)) {
		/* A server's answer ends its turn; a client's request starts
		 * one (it may wait for its slot, or be refused). */
		const int err = sl__turn_send(io->fd, rec, io->flags);
		if (err != 0) {
			sl__busy = 0;
			errno = err;
			return -1;
		}
	}
	if (rules == 0) {
		sl__busy = 0;
		errno = saved;
		return sl__io_xfer(io, 0, io->total);
	}
	uint32_t bytes = rules & sl__st.byte_rules, reject = bytes & sl__st.reject_rules;
	struct sl_call c;
	struct sl_grant gm, g;
	gm.rules = g.rules = 0;
	sl__call_begin_at(&c, io->fd, SL_OP_SEND, peer, SO_SNDTIMEO,
			  now != 0 ? now : sl__clock_ns());
	/* The call may wait: this thread's credit is not held meanwhile. */
	sl__credit_return_all(c.start_ns);
	sl__nb_begin(&c, io->flags, rules);
	/* Skipped when empty, so that the first byte decision is taken at the
	 * call's start (see sl__call_begin). */
	int err = rules & ~bytes ? sl__admit(&c, rules & ~bytes, 1, &gm) : 0, e = saved;
	size_t done = 0;
	ssize_t r = 0;
	while (err == 0) {
		/* Each piece as the bursts are now (`sluice set` may change
		 * them), not from piece_min, which that may have made stale. */
		uint64_t piece = stream && bytes != 0 ? sl__piece_of(bytes) : UINT64_MAX;
		size_t want = io->total - done;
		want = want < piece ? want : (size_t)piece;
		if (done > 0 && io->how == SL_IO_SPLICE_OUT && (want = pipe_left(io, want)) == 0)
			break; /* the kernel's one call returns what the pipe held */
		if (reject != 0 && stream && want > 0) {
			c.nb_want = want;
			uint64_t avail = sl__available(&c, reject, false, &err);
			if (err != 0)
				break;
			want = want < avail ? want : (size_t)avail;
		}
		if (want > 0 && (err = sl__admit(&c, bytes, want, &g)) != 0) {
			if (err != SL_NB_PARTIAL)
				break;
			/* Non-blocking, and a byte rule would wait: this piece
			 * again, no larger than its rules allow now. */
			reject |= bytes & c.nb_rules;
			c.nb_partial = true;
			err = 0;
			continue;
		}
		errno = saved;
		r = sl__io_xfer(io, done, want);
		e = errno;
		sl__grant_refund(&c, &g, r < 0 ? want : want - (size_t)r);
		if (r < 0)
			break;
		done += (size_t)r;
		if ((size_t)r < want || done >= io->total || reject != 0)
			break;
	}
	if (done == 0 && (err != 0 || r < 0))
		sl__grant_refund(&c, &gm, 1);
	sl__nb_end(&c, SL_DIR_OUT, done > 0 && done < io->total, io->total - done);
	return sl__io_end(&c, rules, done, r, err, e);
}

/* A receive on a connection with turns (turn.c) that no recv rule
 * matches. */
__attribute__((noinline)) ssize_t sl__turn_recv(const struct sl_io *io, const struct sl_fdrec *rec)
{
	uint64_t tok;
	sl__busy = 1;
	const int err = sl__turn_recv_begin(io->fd, rec, io->flags, &tok);
	sl__busy = 0;
	if (err != 0) {
		errno = err;
		return -1;
	}
	const ssize_t r = sl__io_xfer(io, 0, io->total);
	sl__turn_recv_end(tok, r);
	return r;
}

/* The general path of a receive: waits, cut reads, charges after. */
__attribute__((noinline)) ssize_t sl__recv_general(struct sl_io *io, const struct sl_fdrec *rec,
						   uint64_t now)
{
	int saved = errno;
	sl__busy = 1;
	uint64_t tok = 0;
	if (__builtin_expect(rec->turn != 0, 0)) {
		const int err = sl__turn_recv_begin(io->fd, rec, io->flags, &tok);
		if (err != 0) {
			sl__busy = 0;
			errno = err;
			return -1;
		}
	}
	/* Copied out: see sl__send_general. */
	uint32_t rules = rec->match[SL_K_RECV], bytes = rules & sl__st.byte_rules;
	bool stream = rec->stream;
	struct sl_addr src = rec->peer;
	const struct sl_addr *peer = src.family != 0 ? &src : NULL;
	struct sl_call c;
	struct sl_grant gm;
	gm.rules = 0;
	sl__call_begin_at(&c, io->fd, SL_OP_RECV, peer, SO_RCVTIMEO,
			  now != 0 ? now : sl__clock_ns());
	sl__nb_begin(&c, io->flags, rules);
	/* Skipped when empty: see sl__send_general. */
	int err = rules & ~bytes ? sl__admit(&c, rules & ~bytes, 1, &gm) : 0, e = saved;
	bool all = stream && (io->flags & MSG_WAITALL), cut = false;
	size_t done = 0;
	ssize_t r = 0;
	while (err == 0 && (done < io->total || io->total == 0)) {
		size_t want = io->total - done;
		if (bytes != 0 && want > 0) {
			c.nb_want = want;
			uint64_t avail = sl__available(&c, bytes, sl__rejecting(bytes) == 0, &err);
			if (err != 0)
				break;
			if (stream && avail < want) {
				want = (size_t)avail;
				cut = true;
			}
		}
		errno = saved;
		r = sl__io_xfer(io, done, want);
		e = errno;
		if (r <= 0)
			break;
		sl__charge(&c, bytes, (uint64_t)r);
		done += (size_t)r;
		if (!all || io->total == 0)
			break;
	}
	if (done == 0 && (err != 0 || r <= 0))
		sl__grant_refund(&c, &gm, 1);
	sl__nb_end(&c, SL_DIR_IN, cut && r > 0, io->total - done);
	const ssize_t ret = sl__io_end(&c, rules, done, r, err, e);
	if (tok != 0)
		sl__turn_recv_end(tok, ret);
	return ret;
}
