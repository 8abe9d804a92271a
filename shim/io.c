/*
 * io.c - the send family (send, sendto, sendmsg, sendmmsg, write, writev,
 * sendfile) and the engine both families share; the receive wrappers (recv,
 * recvfrom, recvmsg, recvmmsg, read, readv and the fortified __read_chk,
 * __recv_chk, __recvfrom_chk) are in recv.c.
 *
 * Every wrapper tests the fd's pass bit and calls libc at once when no rule
 * can match (files, pipes, ttys, unmatched sockets). Otherwise it describes
 * the call in a struct sl_io, and sl__io_send or sl__io_recv run it,
 * calling back sl_io_xfer for the real transfer of a sub-range
 * [off, off + len) of the caller's buffer.
 *
 * Send, byte rules: the amount is the bytes the call asks to send. On a
 * stream socket a send larger than a piece (a token bucket's burst, see
 * sl__piece_max) goes out in pieces: charge the piece (waiting for it as the
 * rule says), send it, refund what the kernel did not take, repeat; the call
 * returns the full count like a slow link, or the bytes sent so far when a
 * later piece fails or is interrupted (the error is dropped, as the kernel
 * does). A short piece (non-blocking socket, buffer full) ends the call.
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
 * marked throttled until its tokens are there (ready.c), which poll, select
 * and epoll respect. nonblock=sleep keeps the in-place delay, and so does
 * recvmmsg in either mode (sendmmsg goes through sendmsg and is handled).
 */
#undef _FORTIFY_SOURCE
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "internal.h"

/* Referenced by the unit tests so that this archive member is linked into
 * them even when a sanitizer runtime already defines the libc names. */
const int sl__io_anchor = 1;

/* The iovecs covering [off, off + len) of iov[0..cnt) into out (room for
 * IOV_MAX). Returns how many. */
static int sl_iov_slice(const struct iovec *iov, int cnt, size_t off, size_t len,
			struct iovec *out)
{
	int n = 0;
	for (int i = 0; i < cnt && len > 0 && n < IOV_MAX; i++) {
		size_t l = iov[i].iov_len;
		if (off >= l) {
			off -= l;
			continue;
		}
		size_t take = l - off < len ? l - off : len;
		out[n].iov_base = (char *)iov[i].iov_base + off;
		out[n].iov_len = take;
		n++;
		len -= take;
		off = 0;
	}
	return n;
}

size_t sl__iov_total(const struct iovec *iov, size_t cnt)
{
	size_t t = 0;
	for (size_t i = 0; i < cnt; i++)
		t += iov[i].iov_len;
	return t;
}

/* The real call of io with its buffer at b, len bytes (or the iovecs iov of
 * cnt, or the message m) and, for the _chk variants, an object size of
 * buflen; `first` if this is the first piece (the source address goes back
 * to the caller with it). */
static ssize_t sl_io_real(const struct sl_io *io, char *b, size_t len, size_t buflen,
			  const struct iovec *iov, int cnt, struct msghdr *m, bool first)
{
	switch (io->how) {
	case SL_IO_SEND: return SL_REAL(send)(io->fd, b, len, io->flags);
	case SL_IO_SENDTO:
		return SL_REAL(sendto)(io->fd, b, len, io->flags, io->addr, io->addrlen);
	case SL_IO_SENDMSG: return SL_REAL(sendmsg)(io->fd, m, io->flags);
	case SL_IO_WRITE: return SL_REAL(write)(io->fd, b, len);
	case SL_IO_WRITEV: return SL_REAL(writev)(io->fd, iov, cnt);
	case SL_IO_SENDFILE: return SL_REAL(sendfile)(io->fd, io->in_fd, io->offset, len);
	case SL_IO_SENDFILE64: return SL_REAL(sendfile64)(io->fd, io->in_fd, io->offset, len);
	case SL_IO_RECV: return SL_REAL(recv)(io->fd, b, len, io->flags);
	case SL_IO_RECVFROM:
		return SL_REAL(recvfrom)(io->fd, b, len, io->flags, first ? io->addr : NULL,
					 first ? io->addrlenp : NULL);
	case SL_IO_RECVMSG: {
		ssize_t r = SL_REAL(recvmsg)(io->fd, m, io->flags);
		if (first && m != io->msg) { /* what the kernel reports back */
			io->msg->msg_namelen = m->msg_namelen;
			io->msg->msg_controllen = m->msg_controllen;
			io->msg->msg_flags = m->msg_flags;
		}
		return r;
	}
	case SL_IO_READ: return SL_REAL(read)(io->fd, b, len);
	case SL_IO_READV: return SL_REAL(readv)(io->fd, iov, cnt);
	case SL_IO_READ_CHK: return SL_REAL(__read_chk)(io->fd, b, len, buflen);
	case SL_IO_RECV_CHK: return SL_REAL(__recv_chk)(io->fd, b, len, buflen, io->flags);
	case SL_IO_RECVFROM_CHK:
		return SL_REAL(__recvfrom_chk)(io->fd, b, len, buflen, io->flags,
					       first ? io->addr : NULL, first ? io->addrlenp : NULL);
	}
	errno = ENOSYS;
	return -1;
}

/* The real transfer of a piece [off, off + len) that is not the whole call:
 * the iovecs and the message are cut to the piece. Out of line: its
 * IOV_MAX iovecs stay off the whole call's stack. */
static __attribute__((noinline)) ssize_t sl_io_xfer_piece(const struct sl_io *whole, size_t off,
							  size_t len)
{
	struct iovec v[IOV_MAX];
	struct msghdr m;
	struct sl_io piece = *whole, *io = &piece;
	if (io->how <= SL_IO_SENDFILE64) {
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
		cnt = sl_iov_slice(iov, cnt, off, len, v);
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
	return sl_io_real(io, io->buf + off, len, io->buflen - off, iov, cnt, &m, off == 0);
}

/* The real transfer of [off, off + len). The whole call (off == 0 and len ==
 * total) passes every argument through unchanged. */
static ssize_t sl_io_xfer(const struct sl_io *io, size_t off, size_t len)
{
	if (off == 0 && len == io->total)
		return sl_io_real(io, io->buf, len, io->buflen, io->iov, io->iovcnt, io->msg, true);
	return sl_io_xfer_piece(io, off, len);
}

/* The smallest piece any of the byte rules allows; dry-run rules never
 * split a transfer. */
static uint64_t sl_piece(uint32_t bytes)
{
	uint64_t p = UINT64_MAX;
	for (uint32_t rest = bytes; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		if (sl__st.policy.rules[i].action == SL_ACTION_DRYRUN)
			continue;
		uint64_t m = sl__piece_max(i);
		p = m < p ? m : p;
	}
	return p;
}

/* Rules of `rules` with action reject. */
uint32_t sl__rejecting(uint32_t rules)
{
	return rules & sl__st.reject_rules;
}

/* End a transfer: stats, errno, the return value. done > 0 wins over an
 * error (a partial count); otherwise err (shim) or e (kernel) is the errno. */
ssize_t sl__io_end(struct sl_call *c, uint32_t rules, size_t done, ssize_t r, int err,
			 int e)
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

/*
 * The fast path. A send whose rules are all fast_rules (per=process, calls
 * or bytes, not dry-run), small enough that no byte rule splits it, is first
 * policed at one clock reading. If every rule admits it at once it goes out
 * as it is, what the kernel did not take is given back, and the stats count
 * it: what the general path does with such a call, without its bookkeeping
 * for waits, pieces and errnos. If a rule would make it wait or refuse it,
 * what was taken is given back and the general path decides as usual.
 */

/* Units a transfer of `total` bytes charges rule i. */
static inline uint64_t sl_units(unsigned i, size_t total)
{
	return (sl__st.byte_rules >> i) & 1 ? (uint64_t)total : 1;
}

/* Give back, at now, what `rules` took for a transfer of `total` bytes that
 * returned r: a byte rule the bytes not moved, a message rule its one unit
 * if nothing moved (as the general path does). */
static void sl_fast_give(uint32_t rules, size_t total, ssize_t r, uint64_t now)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		uint64_t back = (sl__st.byte_rules >> i) & 1 ? (r < 0 ? total : total - (size_t)r)
							     : r < 0;
		if (back != 0)
			sl_limiter_refund(sl__st.rule_lim[i], back, now);
	}
}

/* A short send on the fast path: an nb fd is marked throttled if its next
 * call's tokens are missing, as sl__nb_end does for the general path. */
static __attribute__((noinline)) void sl_fast_cut(int fd, int flags, uint32_t rules,
						  size_t left)
{
	struct sl_call c;
	sl__busy = 1;
	sl__call_begin(&c, fd, SL_OP_SEND, NULL, SO_SNDTIMEO);
	sl__nb_begin(&c, flags, rules);
	sl__nb_end(&c, SL_DIR_OUT, true, left);
	sl__busy = 0;
}

/* A send the fast path looked at: its rules and the clock reading (0 if
 * it read none: the general path reads it then). */
struct sl_fast {
	uint32_t rules;
	uint64_t now;
};

/* The record of fd for a send the shim acts on; NULL if the call passes
 * through (re-entered, not classified a socket, no send rule can match). */
static inline const struct sl_fdrec *sl_send_rec(int fd)
{
	const struct sl_fdrec *rec;
	if (sl__busy || (rec = sl__fd_rec(fd)) == NULL || rec->cand[SL_K_SEND] == 0)
		return NULL;
	return rec;
}

/* Police a send of `total` bytes on rec's fd (`to`: its destination
 * address, NULL if none) with the fast path: true if every rule admits it
 * at once (then send it and pass the result to sl_fast_end, which must
 * follow: sl__busy is set until then); false, having charged nothing, if
 * the general path must decide (from f->now). errno is left alone. */
static inline bool sl_fast_begin(struct sl_fast *f, const struct sl_fdrec *rec, size_t total,
				 const void *to)
{
	const uint32_t rules = rec->match[SL_K_SEND];
	f->now = 0;
	if (rules == 0 || (rules & ~sl__st.fast_rules) != 0 || total > sl__st.piece_min ||
	    (to != NULL && rec->peer.family == 0))
		return false;
	const uint64_t now = sl__clock_ns();
	/* Kept for the general path if a rule does not admit at once: its
	 * first decision is at this instant too (nothing here blocks). */
	f->now = now;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		struct sl_decision d =
			sl_limiter_acquire(sl__st.rule_lim[i], sl_units(i, total), now, 0);
		if (__builtin_expect(d.verdict != SL_ADMIT, 0)) {
			sl_fast_give(rules & ~rest, total, -1, now);
			return false;
		}
	}
	f->rules = rules;
	/* As the general path: a send the real call makes (another
	 * interposer's, a signal handler's) is not throttled again. */
	sl__busy = 1;
	return true;
}

/* End a send that sl_fast_begin admitted: r is what the real call returned
 * (and errno its errno). Gives back what the kernel did not take, counts the
 * call; returns r with errno unchanged. */
static inline ssize_t sl_fast_end(const struct sl_fast *f, int fd, int flags, size_t total, ssize_t r)
{
	sl__busy = 0;
	if (__builtin_expect(r < 0 || (size_t)r != total, 0)) {
		int e = errno;
		sl_fast_give(f->rules, total, r, f->now);
		if (r > 0)
			sl_fast_cut(fd, flags, f->rules, total - (size_t)r);
		errno = e;
	}
	sl__stats_end(f->rules, r >= 0, r > 0 ? (uint64_t)r : 0);
	return r;
}

/* The general path of a send on rec's fd (sl_send_rec); now: the clock
 * as the fast path read it (0: read it). */
static __attribute__((noinline)) ssize_t sl_io_send_general(struct sl_io *io,
							    const struct sl_fdrec *rec,
							    uint64_t now)
{
	const struct sockaddr *to = io->msg != NULL ? io->msg->msg_name : io->addr;
	int saved = errno;
	sl__busy = 1;
	/* Copied out: the record may be rewritten if the program races a
	 * connect or close of fd with this call. */
	uint32_t rules = rec->match[SL_K_SEND];
	bool stream = rec->stream;
	struct sl_addr dst = rec->peer;
	const struct sl_addr *peer = dst.family != 0 ? &dst : NULL;
	socklen_t tolen = io->msg != NULL ? io->msg->msg_namelen : io->addrlen;
	if (peer == NULL && to != NULL && sl__addr_from(&dst, to, tolen)) {
		peer = &dst;
		rules = sl__match(rec->cand[SL_K_SEND], rec->family, rec->type, peer);
	}
	if (rules == 0) {
		sl__busy = 0;
		errno = saved;
		return sl_io_xfer(io, 0, io->total);
	}
	uint32_t bytes = rules & sl__st.byte_rules, reject = bytes & sl__st.reject_rules;
	struct sl_call c;
	struct sl_grant gm, g;
	gm.rules = g.rules = 0;
	sl__call_begin_at(&c, io->fd, SL_OP_SEND, peer, SO_SNDTIMEO,
			  now != 0 ? now : sl__clock_ns());
	sl__nb_begin(&c, io->flags, rules);
	/* Skipped when empty, so that the first byte decision is taken at the
	 * call's start (see sl__call_begin). */
	int err = rules & ~bytes ? sl__admit(&c, rules & ~bytes, 1, &gm) : 0, e = saved;
	size_t done = 0;
	ssize_t r = 0;
	while (err == 0) {
		/* Each piece as the bursts are now (`sluice set` may change
		 * them), not from piece_min, which that may have made stale. */
		uint64_t piece = stream && bytes != 0 ? sl_piece(bytes) : UINT64_MAX;
		size_t want = io->total - done;
		want = want < piece ? want : (size_t)piece;
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
		r = sl_io_xfer(io, done, want);
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

/* The send side of every wrapper, past its pass test. */
ssize_t sl__io_send(struct sl_io *io)
{
	const struct sl_fdrec *rec = sl_send_rec(io->fd);
	struct sl_fast f;
	if (rec == NULL)
		return sl_io_xfer(io, 0, io->total);
	if (sl_fast_begin(&f, rec, io->total, io->msg != NULL ? io->msg->msg_name : io->addr))
		return sl_fast_end(&f, io->fd, io->flags, io->total, sl_io_xfer(io, 0, io->total));
	return sl_io_send_general(io, rec, f.now);
}

/* The receive side of every wrapper, past its pass test. */
ssize_t sl__io_recv(struct sl_io *io)
{
	const struct sl_fdrec *rec;
	if (sl__busy || (io->flags & (MSG_PEEK | MSG_ERRQUEUE)) ||
	    (rec = sl__fd_rec(io->fd)) == NULL ||
	    rec->match[SL_K_RECV] == 0)
		return sl_io_xfer(io, 0, io->total);
	int saved = errno;
	sl__busy = 1;
	/* Copied out: see sl__io_send. */
	uint32_t rules = rec->match[SL_K_RECV], bytes = rules & sl__st.byte_rules;
	bool stream = rec->stream;
	struct sl_addr src = rec->peer;
	const struct sl_addr *peer = src.family != 0 ? &src : NULL;
	struct sl_call c;
	struct sl_grant gm;
	gm.rules = 0;
	sl__call_begin(&c, io->fd, SL_OP_RECV, peer, SO_RCVTIMEO);
	sl__nb_begin(&c, io->flags, rules);
	/* Skipped when empty: see sl__io_send. */
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
		r = sl_io_xfer(io, done, want);
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
	return sl__io_end(&c, rules, done, r, err, e);
}

static __attribute__((noinline)) ssize_t
sl_send_slow(int fd, const void *buf, size_t n, int flags)
{
	const struct sl_fdrec *rec;
	struct sl_fast f;
	if (sl__fd_pass(fd, SL_K_SEND) || (rec = sl_send_rec(fd)) == NULL)
		return SL_REAL(send)(fd, buf, n, flags);
	if (sl_fast_begin(&f, rec, n, NULL))
		return sl_fast_end(&f, fd, flags, n, SL_REAL(send)(fd, buf, n, flags));
	struct sl_io io = {.how = SL_IO_SEND, .fd = fd, .buf = (char *)buf, .total = n,
			   .flags = flags};
	return sl_io_send_general(&io, rec, f.now);
}

SL_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	/* The fast path: a pass bit and a resolved pointer, then a tail call. */
	SL_REAL_TYPE(send) fn = SL_REAL_LOAD(send);
	if (__builtin_expect(sl__fd_pass(fd, SL_K_SEND) && fn != NULL, 1))
		return fn(fd, buf, n, flags);
	return sl_send_slow(fd, buf, n, flags);
}

static __attribute__((noinline)) ssize_t
sl_sendto_slow(int fd, const void *buf, size_t n, int flags,
			 const struct sockaddr *to, socklen_t tolen)
{
	ssize_t r;
	if (sl__fd_pass(fd, SL_K_SEND)) {
		r = SL_REAL(sendto)(fd, buf, n, flags, to, tolen);
	} else {
		struct sl_io io = {.how = SL_IO_SENDTO, .fd = fd, .buf = (char *)buf, .total = n,
				   .flags = flags, .addr = (struct sockaddr *)to, .addrlen = tolen};
		r = sl__io_send(&io);
	}
	if (flags & MSG_FASTOPEN) /* it connected the socket: classify it again */
		sl__fd_invalidate(fd);
	return r;
}

SL_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
			 const struct sockaddr *to, socklen_t tolen)
{
	/* The fast path: a pass bit and a resolved pointer, then a tail call. */
	SL_REAL_TYPE(sendto) fn = SL_REAL_LOAD(sendto);
	if (__builtin_expect(sl__fd_pass(fd, SL_K_SEND) && fn != NULL && !(flags & MSG_FASTOPEN),
			     1))
		return fn(fd, buf, n, flags, to, tolen);
	return sl_sendto_slow(fd, buf, n, flags, to, tolen);
}

static __attribute__((noinline)) ssize_t
sl_sendmsg_slow(int fd, const struct msghdr *msg, int flags)
{
	ssize_t r;
	if (sl__fd_pass(fd, SL_K_SEND) || sl__bad_msg(msg)) {
		r = SL_REAL(sendmsg)(fd, msg, flags);
	} else {
		struct sl_io io = {.how = SL_IO_SENDMSG, .fd = fd, .msg = (struct msghdr *)msg,
				   .total = sl__iov_total(msg->msg_iov, msg->msg_iovlen),
				   .flags = flags};
		r = sl__io_send(&io);
	}
	if (flags & MSG_FASTOPEN) /* it connected the socket: classify it again */
		sl__fd_invalidate(fd);
	return r;
}

SL_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	/* The fast path: a pass bit and a resolved pointer, then a tail call. */
	SL_REAL_TYPE(sendmsg) fn = SL_REAL_LOAD(sendmsg);
	if (__builtin_expect(sl__fd_pass(fd, SL_K_SEND) && fn != NULL && !(flags & MSG_FASTOPEN),
			     1))
		return fn(fd, msg, flags);
	return sl_sendmsg_slow(fd, msg, flags);
}

static __attribute__((noinline)) ssize_t
sl_write_slow(int fd, const void *buf, size_t n)
{
	const struct sl_fdrec *rec;
	struct sl_fast f;
	if (sl__fd_pass(fd, SL_K_SEND) || (rec = sl_send_rec(fd)) == NULL)
		return SL_REAL(write)(fd, buf, n);
	if (sl_fast_begin(&f, rec, n, NULL))
		return sl_fast_end(&f, fd, 0, n, SL_REAL(write)(fd, buf, n));
	struct sl_io io = {.how = SL_IO_WRITE, .fd = fd, .buf = (char *)buf, .total = n};
	return sl_io_send_general(&io, rec, f.now);
}

SL_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	/* The fast path: a pass bit and a resolved pointer, then a tail call. */
	SL_REAL_TYPE(write) fn = SL_REAL_LOAD(write);
	if (__builtin_expect(sl__fd_pass(fd, SL_K_SEND) && fn != NULL, 1))
		return fn(fd, buf, n);
	return sl_write_slow(fd, buf, n);
}

static __attribute__((noinline)) ssize_t
sl_writev_slow(int fd, const struct iovec *iov, int cnt)
{
	if (sl__fd_pass(fd, SL_K_SEND) || cnt < 0 || cnt > IOV_MAX ||
	    (cnt > 0 && sl__bad_ptr(iov)))
		return SL_REAL(writev)(fd, iov, cnt);
	struct sl_io io = {.how = SL_IO_WRITEV, .fd = fd, .iov = iov, .iovcnt = cnt,
			   .total = sl__iov_total(iov, (size_t)cnt)};
	return sl__io_send(&io);
}

SL_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	/* The fast path: a pass bit and a resolved pointer, then a tail call. */
	SL_REAL_TYPE(writev) fn = SL_REAL_LOAD(writev);
	if (__builtin_expect(sl__fd_pass(fd, SL_K_SEND) && fn != NULL, 1))
		return fn(fd, iov, cnt);
	return sl_writev_slow(fd, iov, cnt);
}

static __attribute__((noinline)) ssize_t
sl_sendfile_slow(int out, int in, off_t *offset, size_t n)
{
	if (sl__fd_pass(out, SL_K_SEND))
		return SL_REAL(sendfile)(out, in, offset, n);
	struct sl_io io = {.how = SL_IO_SENDFILE, .fd = out, .in_fd = in, .offset = offset,
			   .total = n};
	return sl__io_send(&io);
}

SL_EXPORT ssize_t sendfile(int out, int in, off_t *offset, size_t n)
{
	/* The fast path: a pass bit and a resolved pointer, then a tail call. */
	SL_REAL_TYPE(sendfile) fn = SL_REAL_LOAD(sendfile);
	if (__builtin_expect(sl__fd_pass(out, SL_K_SEND) && fn != NULL, 1))
		return fn(out, in, offset, n);
	return sl_sendfile_slow(out, in, offset, n);
}

static __attribute__((noinline)) ssize_t
sl_sendfile64_slow(int out, int in, off_t *offset, size_t n)
{
	if (sl__fd_pass(out, SL_K_SEND))
		return SL_REAL(sendfile64)(out, in, offset, n);
	struct sl_io io = {.how = SL_IO_SENDFILE64, .fd = out, .in_fd = in, .offset = offset,
			   .total = n};
	return sl__io_send(&io);
}

SL_EXPORT ssize_t sendfile64(int out, int in, off_t *offset, size_t n)
{
	/* The fast path: a pass bit and a resolved pointer, then a tail call. */
	SL_REAL_TYPE(sendfile64) fn = SL_REAL_LOAD(sendfile64);
	if (__builtin_expect(sl__fd_pass(out, SL_K_SEND) && fn != NULL, 1))
		return fn(out, in, offset, n);
	return sl_sendfile64_slow(out, in, offset, n);
}

/* One message at a time, each charged and waited for; see the file
 * comment. Returns the messages sent, or -1 if none was. */
SL_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	if (sl__fd_pass(fd, SL_K_SEND) || sl__busy)
		return SL_REAL(sendmmsg)(fd, vec, vlen, flags);
	unsigned int i;
	for (i = 0; i < vlen; i++) {
		ssize_t r = sendmsg(fd, &vec[i].msg_hdr, flags);
		if (r < 0)
			break;
		vec[i].msg_len = (unsigned int)r;
	}
	return i > 0 || vlen == 0 ? (int)i : -1;
}
