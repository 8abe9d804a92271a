/* SPDX-License-Identifier: MIT */
/*
 * xfer.h - the transfer engine of both directions (xfer.c), and the send
 * fast path every send wrapper inlines (the receive one: xfer_recv.h).
 *
 * A wrapper whose fd's pass bit is clear describes its call in a struct
 * sl_io and hands it to sl__send or sl__recv. The engine calls the real
 * function for a sub-range [off, off + len) of the caller's buffer
 * (sl__io_real, below: inlined with a constant `how`, its switch folds to
 * the one real call).
 *
 * API: any thread; a struct sl_io is the calling thread's.
 */
#ifndef SLUICE_SHIM_XFER_H
#define SLUICE_SHIM_XFER_H

#include <errno.h>
#include <limits.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "act.h"
#include "clock.h"
#include "credit.h"
#include "fair.h"
#include "fd.h"
#include "internal.h"
#include "real.h"
#include "scope.h"
#include "sluice_fast.h"
#include "state.h"

/* The fortified entry points are declared only under _FORTIFY_SOURCE. */
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *from,
		       socklen_t *fromlen);

enum sl_io_how {
	SL_IO_SEND,
	SL_IO_SENDTO,
	SL_IO_SENDMSG,
	SL_IO_WRITE,
	SL_IO_WRITEV,
	SL_IO_SENDFILE,
	SL_IO_SENDFILE64,
	SL_IO_SPLICE_OUT, /* the send kinds end here */
	SL_IO_SPLICE_IN,
	SL_IO_RECV,
	SL_IO_RECVFROM,
	SL_IO_RECVMSG,
	SL_IO_READ,
	SL_IO_READV,
	SL_IO_READ_CHK,
	SL_IO_RECV_CHK,
	SL_IO_RECVFROM_CHK,
};

/* One call, described for the split loops. */
struct sl_io {
	enum sl_io_how how;
	int fd;
	int flags;
	char *buf;             /* send: really const */
	size_t total;          /* bytes asked for */
	size_t buflen;         /* the _chk variants' object size */
	struct sockaddr *addr; /* sendto: destination; recvfrom: source */
	socklen_t addrlen;
	socklen_t *addrlenp;
	struct msghdr *msg;      /* sendmsg/recvmsg; send: really const */
	const struct iovec *iov; /* writev/readv */
	int iovcnt;
	int in_fd; /* sendfile */
	off_t *offset;
	const struct sl_splice *splice; /* splice (wrap_splice.c) */
};

/* A splice call as the program made it; fd (struct sl_io) is its socket. */
struct sl_splice {
	int in, out;
	loff_t *off_in, *off_out;
	unsigned int flags;
};

/* End a transfer: stats, errno, the return value (done > 0 wins over an
 * error; otherwise err, from the shim, or e, from the kernel, is errno). */
ssize_t sl__io_end(struct sl_call *c, uint32_t rules, size_t done, ssize_t r, int err, int e);
/* Rules of `rules` with action reject. */
uint32_t sl__rejecting(uint32_t rules);
/* The bytes of cnt iovecs (the caller checked the array: sl__bad_iov,
 * sl__bad_msg). One iovec, the common case of writev and sendmsg, without
 * the loop. */
static inline size_t sl__iov_total(const struct iovec *iov, size_t cnt)
{
	if (__builtin_expect(cnt == 1, 1))
		return iov[0].iov_len;
	size_t t = 0;
	for (size_t i = 0; i < cnt; i++)
		t += iov[i].iov_len;
	return t;
}
/* True if p can never be a valid user pointer (below the lowest mappable
 * address, 64 KiB by default: NULL, small integers). The vector wrappers
 * read the caller's iovec/msghdr to size the call; with such a pointer they
 * let the real call fail with EFAULT instead of faulting in the shim. */
static inline bool sl__bad_ptr(const void *p)
{
	return (uintptr_t)p < 65536u;
}
/* The same for an iovec array of cnt (also a count out of the kernel's
 * range: EINVAL, from the kernel). */
static inline bool sl__bad_iov(const struct iovec *iov, int cnt)
{
	return cnt < 0 || cnt > IOV_MAX || (cnt > 0 && sl__bad_ptr(iov));
}
/* The same for a msghdr and its iovec array; more than IOV_MAX iovecs too
 * (the kernel's EMSGSIZE, before the shim reads past the caller's array). */
static inline bool sl__bad_msg(const struct msghdr *m)
{
	return sl__bad_ptr(m) || m->msg_iovlen > IOV_MAX ||
	       (m->msg_iovlen != 0 && sl__bad_ptr(m->msg_iov));
}

/* The real call of io (its slot never NULL, SL_REAL_SET, but splice's)
 * with its buffer at b, len bytes (or the iovecs iov of
 * cnt, or the message m) and, for the _chk variants, an object size of
 * buflen; `first` if this is the first piece (the source address goes back
 * to the caller with it). */
static inline __attribute__((always_inline)) ssize_t sl__io_real(const struct sl_io *io, char *b,
								 size_t len, size_t buflen,
								 const struct iovec *iov, int cnt,
								 struct msghdr *m, bool first)
{
	switch (io->how) {
	case SL_IO_SEND:
		return SL_REAL_SET(send)(io->fd, b, len, io->flags);
	case SL_IO_SENDTO:
		return SL_REAL_SET(sendto)(io->fd, b, len, io->flags, io->addr, io->addrlen);
	case SL_IO_SENDMSG:
		return SL_REAL_SET(sendmsg)(io->fd, m, io->flags);
	case SL_IO_WRITE:
		return SL_REAL_SET(write)(io->fd, b, len);
	case SL_IO_WRITEV:
		return SL_REAL_SET(writev)(io->fd, iov, cnt);
	case SL_IO_SENDFILE:
		return SL_REAL_SET(sendfile)(io->fd, io->in_fd, io->offset, len);
	case SL_IO_SENDFILE64:
		return SL_REAL_SET(sendfile64)(io->fd, io->in_fd, io->offset, len);
	case SL_IO_SPLICE_OUT:
	case SL_IO_SPLICE_IN:
		return SL_REAL(splice)(io->splice->in, io->splice->off_in, io->splice->out,
				       io->splice->off_out, len, io->splice->flags);
	case SL_IO_RECV:
		return SL_REAL_SET(recv)(io->fd, b, len, io->flags);
	case SL_IO_RECVFROM:
		return SL_REAL_SET(recvfrom)(io->fd, b, len, io->flags, first ? io->addr : NULL,
					     first ? io->addrlenp : NULL);
	case SL_IO_RECVMSG: {
		ssize_t r = SL_REAL_SET(recvmsg)(io->fd, m, io->flags);
		if (first && m != io->msg) { /* what the kernel reports back */
			io->msg->msg_namelen = m->msg_namelen;
			io->msg->msg_controllen = m->msg_controllen;
			io->msg->msg_flags = m->msg_flags;
		}
		return r;
	}
	case SL_IO_READ:
		return SL_REAL_SET(read)(io->fd, b, len);
	case SL_IO_READV:
		return SL_REAL_SET(readv)(io->fd, iov, cnt);
	case SL_IO_READ_CHK:
		return SL_REAL_SET(__read_chk)(io->fd, b, len, buflen);
	case SL_IO_RECV_CHK:
		return SL_REAL_SET(__recv_chk)(io->fd, b, len, buflen, io->flags);
	case SL_IO_RECVFROM_CHK:
		return SL_REAL_SET(__recvfrom_chk)(io->fd, b, len, buflen, io->flags,
						   first ? io->addr : NULL,
						   first ? io->addrlenp : NULL);
	}
	errno = ENOSYS;
	return -1;
}

/* The real transfer of a piece [off, off + len) that is not the whole call
 * (xfer.c). */
ssize_t sl__io_xfer_piece(const struct sl_io *whole, size_t off, size_t len);

/* The real transfer of [off, off + len). The whole call (off == 0 and len ==
 * total) passes every argument through unchanged. */
static inline __attribute__((always_inline)) ssize_t sl__io_xfer(const struct sl_io *io, size_t off,
								 size_t len)
{
	if (off == 0 && len == io->total)
		return sl__io_real(io, io->buf, len, io->buflen, io->iov, io->iovcnt, io->msg,
				   true);
	return sl__io_xfer_piece(io, off, len);
}

/*
 * The fast paths. A transfer whose rules are all fast_rules (per=process,
 * per=fd or per=thread; state.h) is first decided at one clock reading with
 * the core's inline police (sluice_fast.h), each rule's limiter found
 * inline (sl__fast_lim).
 *
 * Send: if the call is small enough that no byte rule splits it and every
 * rule admits it at once, it goes out as it is, what the kernel did not take
 * is given back, and the stats count it: what the general path does with
 * such a call, without its bookkeeping for waits, pieces and errnos. If a
 * rule would make it wait or refuse it, what was taken is given back and the
 * general path decides from the same clock reading. At most one sliding
 * window is policed, last (state.h: late_rules), so it is never given back
 * for another rule's refusal.
 *
 * Receive (no MSG_PEEK, MSG_ERRQUEUE or MSG_WAITALL, no fair turn kept):
 * if every byte rule would admit the whole buffer now (a peek: the general
 * path would not cut the call either) and every message rule admits the
 * call, it is made as it is; the bytes it moved are then charged at a new
 * clock reading and a message rule's unit is given back if nothing came,
 * as the general path does.
 *
 * The sl__busy protocol: sl__busy is set once the fast path has admitted
 * and cleared right after the real call, so that a transfer the real call
 * makes (another interposer's, a signal handler's) passes through instead
 * of being charged twice. Nothing between the two may return.
 */

/* Units a transfer of `total` bytes charges rule i. */
static inline uint64_t sl__units(unsigned i, size_t total)
{
	return (sl__st.byte_rules >> i) & 1 ? (uint64_t)total : 1;
}

/* The limiter of fast rule i for a call on fd; NULL if it cannot be found
 * here (a thread without a per=thread slot yet: the general path takes
 * one; an fd whose per=peer entry cannot be pinned: sl__peer_fd_lim). */
static inline struct sl_limiter *sl__fast_lim(int fd, unsigned i)
{
	if ((sl__st.proc_rules >> i) & 1)
		return sl__st.rule_lim[i];
	if ((sl__st.fd_rules >> i) & 1)
		return sl__fd_lim(fd, i);
	if ((sl__st.peer_rules >> i) & 1) /* the call's record is published */
		return sl__peer_fd_lim(fd, i, &sl__fdrecs[fd].peer);
	return sl__thread_lim(i);
}

/* The same after the real call (a give-back, a charge): the limiter the
 * call used, never a new per=peer pin (a close racing the call dropped the
 * fd's; then the units are not given back or charged: at most one call's,
 * on a socket that is gone). A per=thread slot is the thread's until it
 * ends. */
static inline struct sl_limiter *sl__fast_lim_kept(int fd, unsigned i)
{
	if ((sl__st.peer_rules >> i) & 1)
		return sl__peer_fd_cached(fd, i);
	return sl__fast_lim(fd, i);
}

/* Give back, at now, what fast `rules` took on fd for a transfer of
 * `total` bytes that returned r: a byte rule the bytes not moved, a message
 * rule its unit if r < 0 (xfer.c). */
void sl__fast_give(int fd, uint32_t rules, size_t total, ssize_t r, uint64_t now);

/* sl__fast_take1 for the kinds it does not inline (xfer.c). */
bool sl__fast_take_lim(int fd, unsigned i, uint64_t n, uint64_t now);
/* sl__fast_take for more than one rule (xfer.c). */
bool sl__fast_take_multi(int fd, uint32_t rules, size_t total, uint64_t now);

/* The plain token or leaky bucket of fast rule i (a per=fd, per=thread or
 * per=peer bucket rule) for a call on fd, or NULL: another kind, a thread
 * without its slot yet, an fd without its pinned entry (sl__fast_lim and
 * the full API decide then). */
static inline __attribute__((always_inline)) struct sl_gcra *
sl__fast_bucket_of(int fd, unsigned i, const struct sl_fast_rule *d)
{
	struct sl_limiter *l;
	switch (d->how) {
	case SL_FAST_FD_BUCKET:
		l = sl__fd_lim(fd, i);
		break;
	case SL_FAST_THREAD_BUCKET:
		l = sl__thread_lim(i);
		break;
	case SL_FAST_PEER_BUCKET:
		l = sl__peer_fd_cached(fd, i);
		break;
	default:
		return NULL;
	}
	return l != NULL ? &l->u.gcra : NULL;
}

/* Police n units of fast rule i for a call on fd at now: true if taken.
 * The process's tunable heads and the plain buckets directly, the rest
 * through sl__fast_lim. */
static inline __attribute__((always_inline)) bool
sl__fast_take_d(int fd, const struct sl_fast_rule *d, unsigned i, uint64_t n, uint64_t now)
{
	switch (d->how) {
	case SL_FAST_PROC_BUCKET:
		return sl_fast_take_tunable_gcra(d->lim, n, now);
	case SL_FAST_PROC_FIXED:
		return sl_fast_take_tunable_fixed(d->lim, n, now);
	case SL_FAST_PROC_SLIDING:
	case SL_FAST_PROC_TUNABLE:
		return sl_fast_take_tunable(d->lim, n, now);
	default: {
		struct sl_gcra *g = sl__fast_bucket_of(fd, i, d);
		return g != NULL ? sl_fast_take_gcra(g, n, now) : sl__fast_take_lim(fd, i, n, now);
	}
	}
}

static inline __attribute__((always_inline)) bool sl__fast_take1(int fd, unsigned i, uint64_t n,
								 uint64_t now)
{
	return sl__fast_take_d(fd, &sl__st.fast[i], i, n, now);
}

/* sl__fast_take1 for a send: a bucket through this thread's credit
 * (credit.h) when a slice is worth taking (key: the fd record's ckey). */
static inline __attribute__((always_inline)) bool sl__fast_take_send1(int fd,
								      const struct sl_fast_rule *d,
								      unsigned i, uint64_t n,
								      uint64_t now, uint64_t key)
{
	if (sl__credit_wanted(i, d, n, key, now))
		return sl__credit_take(i, d, n, now, true, fd);
	return sl__fast_take_d(fd, d, i, n, now);
}

/* Police fast `rules` for a transfer of `total` bytes on fd at now: true if
 * every one admits it at once (then it is taken); false, having taken
 * nothing, if the general path must decide. One rule, the common case,
 * inline. */
static inline __attribute__((always_inline)) bool sl__fast_take(int fd, uint32_t rules,
								size_t total, uint64_t now)
{
	if (__builtin_expect((rules & (rules - 1)) == 0, 1)) {
		const unsigned i = (unsigned)__builtin_ctz(rules);
		return sl__fast_take1(fd, i, sl__units(i, total), now);
	}
	return sl__fast_take_multi(fd, rules, total, now);
}

/* The record of fd for a transfer of kind k the shim acts on; NULL if the
 * call passes through (fd not tracked, not a socket, no rule of kind k can
 * match, or re-entered). One load of the fd byte: its pass bit, then its
 * record (acquire: see sl__fd_rec). */
static inline __attribute__((always_inline)) const struct sl_fdrec *
sl__xfer_rec(int fd, enum sl_kind_call k)
{
	if (__builtin_expect((unsigned)fd >= SL_FD_LIMIT, 0))
		return NULL;
	const uint8_t b = atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire);
	if ((b & SL_FDB_PASS(k)) || sl__busy)
		return NULL;
	if (__builtin_expect(b & SL_FDB_READY, 1))
		return sl__fdrecs[fd].cand[k] != 0 ? &sl__fdrecs[fd] : NULL;
	const struct sl_fdrec *rec = sl__fd_rec_miss(fd);
	return rec != NULL && rec->cand[k] != 0 ? rec : NULL;
}

/* True if a send of `total` bytes on rec's fd (`to` its destination, NULL if
 * none) may take the fast path: not while a turn is kept (fair.h, a hint). */
static inline bool sl__fast_send_ok(const struct sl_fdrec *rec, uint32_t rules, size_t total,
				    const void *to)
{
	/* rules != 0 too: match and fast are two reads, and a record being
	 * rewritten (a connect racing the call) may show one new, one old. */
	return (rec->fast & SL_FDR_FAST(SL_K_SEND)) && rules != 0 && total <= sl__st.piece_min &&
	       (to == NULL || rec->peer.family != 0) &&
	       atomic_load_explicit(&sl__st.fair_kept, memory_order_relaxed) == 0;
}

/* The stats of a fast transfer of one rule (its stats st) that moved
 * `bytes`: what sl__stats_end counts for an admitted call. */
static inline void sl__fast_stats1(struct sl_rstats *st, uint64_t bytes)
{
	atomic_fetch_add_explicit(&st->calls, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&st->admitted, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&st->bytes, bytes, memory_order_relaxed);
}

/* A fast send the kernel did not take whole (r < total, or an error):
 * gives back what it did not take and this thread's credit (now: the
 * clock as the fast path read it, 0 if it read none), holds an nb fd back if its next call's
 * tokens are missing, counts the call; returns r, errno as the kernel left
 * it (xfer.c). */
ssize_t sl__fast_send_short(int fd, int flags, uint32_t rules, size_t total, ssize_t r,
			    uint64_t now);

/* The same for a send whose credit paid for one rule: the rule is found
 * from its credit c, this thread's (sl__send_hot keeps nothing else across
 * the call). */
ssize_t sl__fast_send_short_c(int fd, int flags, const struct sl_credit *c, size_t total,
			      ssize_t r);

/* The real call of a send the fast path admitted (sl__busy set) for
 * `rules` (one: d's alone), and its end: a short one given to
 * sl__fast_send_short, else counted. */
static inline __attribute__((always_inline)) ssize_t sl__fast_send_out(const struct sl_io *io,
								       uint32_t rules,
								       const struct sl_fast_rule *d,
								       bool one, uint64_t now)
{
	const ssize_t r = sl__io_xfer(io, 0, io->total);
	sl__busy = 0;
	/* r < 0 too: (size_t)-1 is a total of SIZE_MAX. */
	if (__builtin_expect(r < 0 || (size_t)r != io->total, 0))
		return sl__fast_send_short(io->fd, io->flags, rules, io->total, r, now);
	if (__builtin_expect(one, 1))
		sl__fast_stats1(d->stats, (uint64_t)r);
	else
		sl__stats_end(rules, true, (uint64_t)r);
	return r;
}

/* The general path of a send whose fd has a record (sl__xfer_rec); now: the
 * clock as the fast path read it (0: read it). xfer.c. */
ssize_t sl__send_general(struct sl_io *io, uint64_t now);

/* The one entry of every send wrapper: record (sl__xfer_rec: the pass test
 * is there), fast path, general path; sl__send_rec for a wrapper that found
 * the record itself (before reading the caller's iovecs). Inlined with a constant io->how, the real call is a
 * direct one; and since only the general path's copy of *io has its address
 * taken, a wrapper's description of the call stays in registers on the
 * fast path. */
static inline __attribute__((always_inline)) ssize_t sl__send_rec(const struct sl_io *io,
								  const struct sl_fdrec *rec)
{
	const uint32_t rules = rec->match[SL_K_SEND];
	uint64_t now = 0;
	if (__builtin_expect(sl__fast_send_ok(rec, rules, io->total,
					      io->msg != NULL ? io->msg->msg_name : io->addr),
			     1)) {
		const uint32_t credit = rules & sl__st.credit_rules;
		if (__builtin_expect((rec->fast & SL_FDR_ANY_CREDIT(SL_K_SEND)) && credit != 0,
				     1)) {
			/* One bucket rule: this thread's credit first
			 * (credit.h). Its own copy of the call's end: fewer
			 * registers live without a clock reading. A record
			 * being rewritten may show the bit of one match and
			 * the rules of another: the call is then policed by
			 * the lowest credit rule among them alone, as the
			 * fd's record said before or after (one call, on a
			 * socket connected or closed meanwhile). */
			const unsigned i = (unsigned)__builtin_ctz(credit);
			const struct sl_fast_rule *d = &sl__st.fast[i];
			const uint64_t n = sl__units(i, io->total);
			/* Before the credit's load and store, and until the
			 * real call is made: the sl__busy protocol above. */
			sl__busy = 1;
			const uint64_t key = SL_FDR_CKEY(rec, SL_K_SEND);
			if (__builtin_expect(sl__credit_spend(&sl__credit[i], d, n, key), 1))
				return sl__fast_send_out(io, rules, d, true, 0);
			now = sl__clock_ns(); /* as below */
			if (__builtin_expect(sl__fast_take_send1(io->fd, d, i, n, now, key), 1))
				return sl__fast_send_out(io, rules, d, true, now);
			sl__busy = 0;
		} else {
			/* Two rules or more, each lending credit: as for one. */
			if ((rec->fast & SL_FDR_MCREDIT(SL_K_SEND)) &&
			    sl__mcredit_spend(rules, SL_FDR_CKEY(rec, SL_K_SEND), io->total, true,
					      io->fd))
				return sl__mcredit_send_end(io->fd, io->flags, rules, io->total,
							    sl__io_xfer(io, 0, io->total));
			/* Kept for the general path if a rule does not admit
			 * at once: its first decision is at this instant too
			 * (nothing here blocks). */
			now = sl__clock_ns();
			/* One rule, the common case: its descriptor found
			 * once, for the police and the stats. */
			const bool one = (rules & (rules - 1)) == 0;
			const unsigned i = (unsigned)__builtin_ctz(rules);
			const struct sl_fast_rule *d = &sl__st.fast[i];
			if (__builtin_expect(one ? sl__fast_take_d(io->fd, d, i,
								   sl__units(i, io->total), now)
						 : sl__fast_take_multi(io->fd, rules, io->total,
								       now),
					     1)) {
				sl__busy = 1;
				return sl__fast_send_out(io, rules, d, one, now);
			}
		}
	}
	struct sl_io general = *io;
	return sl__send_general(&general, now);
}

static inline __attribute__((always_inline)) ssize_t sl__send(const struct sl_io *io)
{
	const struct sl_fdrec *rec = sl__xfer_rec(io->fd, SL_K_SEND);
	return rec != NULL ? sl__send_rec(io, rec) : sl__io_xfer(io, 0, io->total);
}

#endif /* SLUICE_SHIM_XFER_H */
