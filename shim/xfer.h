/* SPDX-License-Identifier: MIT */
/*
 * xfer.h - the transfer engine of both directions (xfer.c), and the send
 * fast path every send wrapper inlines.
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
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "act.h"
#include "clock.h"
#include "fd.h"
#include "internal.h"
#include "real.h"
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
size_t sl__iov_total(const struct iovec *iov, size_t cnt);
/* True if p can never be a valid user pointer (below the lowest mappable
 * address, 64 KiB by default: NULL, small integers). The vector wrappers
 * read the caller's iovec/msghdr to size the call; with such a pointer they
 * let the real call fail with EFAULT instead of faulting in the shim. */
static inline bool sl__bad_ptr(const void *p)
{
	return (uintptr_t)p < 65536u;
}
/* The same for a msghdr and its iovec array. */
static inline bool sl__bad_msg(const struct msghdr *m)
{
	return sl__bad_ptr(m) || (m->msg_iovlen != 0 && sl__bad_ptr(m->msg_iov));
}

/* The real call of io with its buffer at b, len bytes (or the iovecs iov of
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
		return SL_REAL(send)(io->fd, b, len, io->flags);
	case SL_IO_SENDTO:
		return SL_REAL(sendto)(io->fd, b, len, io->flags, io->addr, io->addrlen);
	case SL_IO_SENDMSG:
		return SL_REAL(sendmsg)(io->fd, m, io->flags);
	case SL_IO_WRITE:
		return SL_REAL(write)(io->fd, b, len);
	case SL_IO_WRITEV:
		return SL_REAL(writev)(io->fd, iov, cnt);
	case SL_IO_SENDFILE:
		return SL_REAL(sendfile)(io->fd, io->in_fd, io->offset, len);
	case SL_IO_SENDFILE64:
		return SL_REAL(sendfile64)(io->fd, io->in_fd, io->offset, len);
	case SL_IO_SPLICE_OUT:
	case SL_IO_SPLICE_IN:
		return SL_REAL(splice)(io->splice->in, io->splice->off_in, io->splice->out,
				       io->splice->off_out, len, io->splice->flags);
	case SL_IO_RECV:
		return SL_REAL(recv)(io->fd, b, len, io->flags);
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
	case SL_IO_READ:
		return SL_REAL(read)(io->fd, b, len);
	case SL_IO_READV:
		return SL_REAL(readv)(io->fd, iov, cnt);
	case SL_IO_READ_CHK:
		return SL_REAL(__read_chk)(io->fd, b, len, buflen);
	case SL_IO_RECV_CHK:
		return SL_REAL(__recv_chk)(io->fd, b, len, buflen, io->flags);
	case SL_IO_RECVFROM_CHK:
		return SL_REAL(__recvfrom_chk)(io->fd, b, len, buflen, io->flags,
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
 * The send fast path. A send whose rules are all fast_rules (per=process,
 * calls or bytes, not dry-run, not sliding windows), small enough that no
 * byte rule splits it, is first policed at one clock reading. If every rule
 * admits it at once it goes out as it is, what the kernel did not take is
 * given back, and the stats count it: what the general path does with such
 * a call, without its bookkeeping for waits, pieces and errnos. If a rule
 * would make it wait or refuse it, what was taken is given back and the
 * general path decides from the same clock reading.
 *
 * The sl__busy protocol: sl__fast_begin sets sl__busy when it admits, and
 * sl__fast_end clears it right after the real call, so that a send the real
 * call makes (another interposer's, a signal handler's) passes through
 * instead of being charged twice. Nothing between them may return.
 */

/* A send the fast path looked at: its rules and the clock reading (0 if
 * it read none: the general path reads it then). */
struct sl_fast {
	uint32_t rules;
	uint64_t now;
};

/* Units a transfer of `total` bytes charges rule i. */
static inline uint64_t sl__units(unsigned i, size_t total)
{
	return (sl__st.byte_rules >> i) & 1 ? (uint64_t)total : 1;
}

/* Give back, at now, what `rules` took for a transfer of `total` bytes that
 * returned r (xfer.c). */
void sl__fast_give(uint32_t rules, size_t total, ssize_t r, uint64_t now);
/* A short send on the fast path: an nb fd is held back if its next call's
 * tokens are missing, as sl__nb_end does for the general path (xfer.c). */
void sl__fast_cut(int fd, int flags, uint32_t rules, size_t left);

/* The record of fd for a send the shim acts on; NULL if the call passes
 * through (re-entered, not classified a socket, no send rule can match). */
static inline const struct sl_fdrec *sl__send_rec(int fd)
{
	const struct sl_fdrec *rec;
	if (sl__busy || (rec = sl__fd_rec(fd)) == NULL || rec->cand[SL_K_SEND] == 0)
		return NULL;
	return rec;
}

/* Police a send of `total` bytes on rec's fd (`to`: its destination
 * address, NULL if none) with the fast path: true if every rule admits it
 * at once (then send it and pass the result to sl__fast_end, which must
 * follow: sl__busy is set until then); false, having charged nothing, if
 * the general path must decide (from f->now). errno is left alone. */
static inline bool sl__fast_begin(struct sl_fast *f, const struct sl_fdrec *rec, size_t total,
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
		struct sl_decision d = sl_limiter_acquire(sl__st.rule_lim[i], sl__units(i, total),
							  now, 0);
		if (__builtin_expect(d.verdict != SL_ADMIT, 0)) {
			sl__fast_give(rules & ~rest, total, -1, now);
			return false;
		}
	}
	f->rules = rules;
	sl__busy = 1;
	return true;
}

/* End a send that sl__fast_begin admitted: r is what the real call returned
 * (and errno its errno). Gives back what the kernel did not take, counts the
 * call; returns r with errno unchanged. */
static inline ssize_t sl__fast_end(const struct sl_fast *f, int fd, int flags, size_t total,
				   ssize_t r)
{
	sl__busy = 0;
	if (__builtin_expect(r < 0 || (size_t)r != total, 0)) {
		int e = errno;
		sl__fast_give(f->rules, total, r, f->now);
		if (r > 0)
			sl__fast_cut(fd, flags, f->rules, total - (size_t)r);
		errno = e;
	}
	sl__stats_end(f->rules, r >= 0, r > 0 ? (uint64_t)r : 0);
	return r;
}

/* The general path of a send on rec's fd (sl__send_rec); now: the clock
 * as the fast path read it (0: read it). xfer.c. */
ssize_t sl__send_general(struct sl_io *io, const struct sl_fdrec *rec, uint64_t now);

/* The one entry of every send wrapper past its pass test: record, fast
 * path, general path. Inlined with a constant io->how, the real call is a
 * direct one; and since only the general path's copy of *io has its address
 * taken, a wrapper's description of the call stays in registers on the
 * fast path. */
static inline __attribute__((always_inline)) ssize_t sl__send(const struct sl_io *io)
{
	const struct sl_fdrec *rec = sl__send_rec(io->fd);
	struct sl_fast f;
	if (rec == NULL)
		return sl__io_xfer(io, 0, io->total);
	if (sl__fast_begin(&f, rec, io->total, io->msg != NULL ? io->msg->msg_name : io->addr))
		return sl__fast_end(&f, io->fd, io->flags, io->total,
				    sl__io_xfer(io, 0, io->total));
	struct sl_io general = *io;
	return sl__send_general(&general, rec, f.now);
}

/* The receive side of every wrapper, past its pass test (xfer.c). */
ssize_t sl__recv(struct sl_io *io);

#endif /* SLUICE_SHIM_XFER_H */
