/* SPDX-License-Identifier: MIT */
/*
 * xfer_recv.h - the receive side of the transfer engine (xfer.h): the fast
 * path of a receive every rule would admit whole (peek the limiters, receive,
 * charge what came at a second clock reading), inline in the wrappers, and
 * the general path's entry (xfer.c), the peek and charge helpers it
 * inlines; readv and writev's common entry.
 *
 * API: as xfer.h.
 */
#ifndef SLUICE_SHIM_XFER_RECV_H
#define SLUICE_SHIM_XFER_RECV_H

#include "rawcall.h"
#include "xfer.h"

/* sl__fast_peek1 and sl__fast_charge1 for the kinds they do not inline,
 * and the receive fast path for more than one rule (xfer.c). */
bool sl__fast_peek_lim(int fd, unsigned i, uint64_t n, uint64_t now);
void sl__fast_charge_lim(int fd, unsigned i, uint64_t n, uint64_t now);
bool sl__fast_recv_begin_multi(int fd, uint32_t rules, size_t total, uint64_t now);
void sl__fast_recv_end_multi(int fd, uint32_t rules, size_t total, ssize_t r, uint64_t now);

/* True if byte rule i (fast) would admit n units on fd at now. */
static inline __attribute__((always_inline)) bool sl__fast_peek1(int fd, unsigned i, uint64_t n,
								 uint64_t now)
{
	const struct sl_fast_rule *d = &sl__st.fast[i];
	uint64_t gen; /* a snapshot: a slot just retired answers as well */
	bool yes;
	switch (d->how) {
	case SL_FAST_PROC_BUCKET:
		yes = sl_fast_peek_gcra(&sl__fast_slot(d->lim, &gen)->u.gcra, n, now);
		break;
	case SL_FAST_PROC_FIXED:
		yes = sl_fast_peek_fixed(&sl__fast_slot(d->lim, &gen)->u.fixed, n, now);
		break;
	default: {
		const struct sl_gcra *g = sl__fast_bucket_of(fd, i, d);
		yes = g != NULL && sl_fast_peek_gcra(g, n, now);
		break;
	}
	}
	return yes || sl__fast_peek_lim(fd, i, n, now);
}

/* Charge byte rule i (fast) n units received on fd at now. */
static inline __attribute__((always_inline)) void sl__fast_charge1(int fd, unsigned i, uint64_t n,
								   uint64_t now)
{
	const struct sl_fast_rule *d = &sl__st.fast[i];
	if (d->how == SL_FAST_PROC_BUCKET || d->how == SL_FAST_PROC_FIXED) {
		sl_fast_charge_tunable(d->lim, n, now);
		return;
	}
	struct sl_gcra *g = sl__fast_bucket_of(fd, i, d);
	if (g == NULL || !sl_fast_charge_gcra(g, n, now))
		sl__fast_charge_lim(fd, i, n, now);
}

/* The general path of a receive on rec's fd; now: the clock as the fast
 * path read it (0: read it). xfer.c. */
ssize_t sl__recv_general(struct sl_io *io, const struct sl_fdrec *rec, uint64_t now);

/* The receive fast path's decision for fast `rules` on fd at now: true if
 * the byte rules would admit `total` units and the message rules admitted
 * the call (their unit is taken); false, nothing taken, if the general
 * path must decide. One byte rule, the common case, inline. */
static inline __attribute__((always_inline)) bool sl__fast_recv_begin(int fd, uint32_t rules,
								      size_t total, uint64_t now)
{
	if (__builtin_expect((rules & (rules - 1)) == 0 && (rules & sl__st.byte_rules), 1))
		return sl__fast_peek1(fd, (unsigned)__builtin_ctz(rules), total, now);
	return sl__fast_recv_begin_multi(fd, rules, total, now);
}

/* The receive fast path's end: r is what the real call returned. The bytes
 * received are charged (as debt later calls wait for) at a new clock
 * reading, the instant they were there, as sl__charge does; a message
 * rule's unit is given back if nothing came. Returns r, errno kept. */
static inline __attribute__((always_inline)) ssize_t
sl__fast_recv_end(int fd, uint32_t rules, size_t total, ssize_t r, uint64_t now)
{
	if (__builtin_expect((rules & (rules - 1)) == 0 && (rules & sl__st.byte_rules) && r > 0,
			     1)) {
		const unsigned i = (unsigned)__builtin_ctz(rules);
		sl__fast_charge1(fd, i, (uint64_t)r, sl__clock_ns());
		sl__fast_stats1(sl__st.fast[i].stats, (uint64_t)r);
		return r;
	}
	sl__fast_recv_end_multi(fd, rules, total, r, now);
	return r;
}

/* The whole call io as the system call glibc's function would make (one of
 * the hot paths' calls: a send, sendto, sendmsg, write, writev, recv,
 * recvfrom, read or readv): the kernel's result, -errno on failure. */
static inline __attribute__((always_inline)) long sl__io_raw(const struct sl_io *io)
{
	const long fd = io->fd, fl = io->flags, n = (long)io->total;
	switch (io->how) {
	case SL_IO_SEND:
		return sl__raw6(SYS_sendto, fd, (long)io->buf, n, fl, 0, 0);
	case SL_IO_SENDTO:
		return sl__raw6(SYS_sendto, fd, (long)io->buf, n, fl, (long)io->addr,
				(long)io->addrlen);
	case SL_IO_SENDMSG:
		return sl__raw6(SYS_sendmsg, fd, (long)io->msg, fl, 0, 0, 0);
	case SL_IO_WRITE:
		return sl__raw6(SYS_write, fd, (long)io->buf, n, 0, 0, 0);
	case SL_IO_WRITEV:
		return sl__raw6(SYS_writev, fd, (long)io->iov, io->iovcnt, 0, 0, 0);
	case SL_IO_RECV:
		return sl__raw6(SYS_recvfrom, fd, (long)io->buf, n, fl, 0, 0);
	case SL_IO_RECVFROM:
		return sl__raw6(SYS_recvfrom, fd, (long)io->buf, n, fl, (long)io->addr,
				(long)io->addrlenp);
	case SL_IO_READ:
		return sl__raw6(SYS_read, fd, (long)io->buf, n, 0, 0, 0);
	case SL_IO_READV:
		return sl__raw6(SYS_readv, fd, (long)io->iov, io->iovcnt, 0, 0, 0);
	default:
		return -ENOSYS; /* not a hot path's call */
	}
}

/* sl__fast_send_short_c and sl__fast_recv_credit_late for a result k of
 * sl__io_raw (xfer.c): errno set first, as glibc's function would have. */
ssize_t sl__fast_send_short_k(int fd, int flags, const struct sl_credit *c, size_t total, long k);
ssize_t sl__fast_recv_credit_late_k(int fd, struct sl_credit *c, long k);

/* A receive under one byte rule whose credit c (this thread's) holds the
 * whole buffer, `total` units (sl__credit_has; sl__busy set): the call is
 * made, then what came is spent from the credit. Nothing is spent before
 * the call: the credit is this thread's alone, and a signal handler's
 * call during it passes through (sl__busy), so the units are still there
 * after it; only c is live across the call. If nothing came (an error,
 * EAGAIN, the end), or a window's credit expired while the call waited for
 * data, the call is settled in sl__fast_recv_credit_late instead (xfer.c:
 * a window's bytes are charged at their arrival). A bucket's credit pays
 * for what came, expired or not, with no TSC reading after the call. raw:
 * the call is its system call (rawcall.h; the hot path of a single-threaded
 * process). */
ssize_t sl__fast_recv_credit_late(int fd, struct sl_credit *c, ssize_t r);
static inline __attribute__((always_inline)) ssize_t
sl__fast_recv_credit(const struct sl_io *io, struct sl_credit *c, bool raw)
{
	/* c alone carries the rule past the real call (the late path finds i
	 * from it): fewer registers to save. */
	__asm__("" : "+r"(c));
	const ssize_t r = raw ? sl__io_raw(io) : sl__io_xfer(io, 0, io->total);
	/* A bucket's credit pays for what came even if it expired while the
	 * call waited (sl__fast_recv_credit_late would do the same): no TSC
	 * reading after the call; a window's must still be good. */
	if (__builtin_expect(r > 0 && (__builtin_expect(!c->windowed, 1) ||
				       (int64_t)(sl__credit_tsc() - c->until) < 0),
			     1)) {
		c->units -= (size_t)r;
		sl__busy = 0;
		sl__credit_count(c, (uint64_t)r);
		return r;
	}
	return raw ? sl__fast_recv_credit_late_k(io->fd, c, r)
		   : sl__fast_recv_credit_late(io->fd, c, r);
}

/* A receive on a connection with turns that no recv rule matches (xfer.c). */
ssize_t sl__turn_recv(const struct sl_io *io, const struct sl_fdrec *rec);

/* The receive side of every wrapper: record, fast path, general path (see
 * sl__send, sl__send_rec). */
static inline __attribute__((always_inline)) ssize_t sl__recv_rec(const struct sl_io *io,
								  const struct sl_fdrec *rec)
{
	/* match read once: see sl__fast_send_ok. */
	const uint32_t rules = rec->match[SL_K_RECV];
	if ((io->flags & (MSG_PEEK | MSG_ERRQUEUE)) || rules == 0)
		return __builtin_expect(rec->turn == 0, 1) ? sl__io_xfer(io, 0, io->total)
							   : sl__turn_recv(io, rec);
	uint64_t now = 0;
	if ((rec->fast & SL_FDR_FAST(SL_K_RECV)) && !(io->flags & MSG_WAITALL) && io->total != 0 &&
	    atomic_load_explicit(&sl__st.fair_kept, memory_order_relaxed) == 0) {
		const uint32_t credit = rules & sl__st.credit_in_rules;
		if (__builtin_expect((rec->fast & SL_FDR_ANY_CREDIT(SL_K_RECV)) && credit != 0,
				     1)) {
			/* One bucket byte rule: this thread's credit may
			 * pay for the whole buffer (credit.h);
			 * sl__busy and a record being rewritten as for a
			 * send. */
			const unsigned i = (unsigned)__builtin_ctz(credit);
			const struct sl_fast_rule *d = &sl__st.fast[i];
			sl__busy = 1;
			const uint64_t key = SL_FDR_CKEY(rec, SL_K_RECV);
			struct sl_credit *c = &sl__credit[i];
			if (__builtin_expect(sl__credit_has(c, d, io->total, key), 1))
				return sl__fast_recv_credit(io, c, false);
			now = sl__clock_ns();
			if (sl__credit_wanted(i, d, io->total, key, now) &&
			    sl__credit_take(i, d, io->total, now, false, io->fd)) {
				/* The take left the rest of the slice: the
				 * call's units go back in, spent after it. */
				c->units += io->total;
				return sl__fast_recv_credit(io, c, false);
			}
			sl__busy = 0;
		} else {
			/* Two rules or more, each lending credit: each holds
			 * the whole buffer, and gets back what did not come. */
			if ((rec->fast & SL_FDR_MCREDIT(SL_K_RECV)) &&
			    sl__mcredit_spend(rules, SL_FDR_CKEY(rec, SL_K_RECV), io->total, false,
					      io->fd))
				return sl__mcredit_recv_end(rules, io->total,
							    sl__io_xfer(io, 0, io->total));
			now = sl__clock_ns();
		}
		if (sl__fast_recv_begin(io->fd, rules, io->total, now)) {
			sl__busy = 1;
			ssize_t r = sl__io_xfer(io, 0, io->total);
			sl__busy = 0;
			return sl__fast_recv_end(io->fd, rules, io->total, r, now);
		}
	}
	struct sl_io general = *io;
	return sl__recv_general(&general, rec, now);
}

/* The one entry of every receive wrapper (as sl__send, xfer.h). */
static inline __attribute__((always_inline)) ssize_t sl__recv(const struct sl_io *io)
{
	const struct sl_fdrec *rec = sl__xfer_rec(io->fd, SL_K_RECV);
	return rec != NULL ? sl__recv_rec(io, rec) : sl__io_xfer(io, 0, io->total);
}

/* writev and readv (how): the record first (rec, or looked up if NULL), as
 * iov is read only for a socket a rule may match. */
static inline __attribute__((always_inline)) ssize_t sl__xfer_vec(enum sl_io_how how, int fd,
								  const struct iovec *iov, int cnt,
								  const struct sl_fdrec *rec)
{
	const enum sl_kind_call k = how == SL_IO_WRITEV ? SL_K_SEND : SL_K_RECV;
	if (rec == NULL)
		rec = sl__xfer_rec(fd, k);
	if (rec == NULL || sl__bad_iov(iov, cnt))
		return k == SL_K_SEND ? SL_REAL(writev)(fd, iov, cnt)
				      : SL_REAL(readv)(fd, iov, cnt);
	struct sl_io io = {.how = how,
			   .fd = fd,
			   .iov = iov,
			   .iovcnt = cnt,
			   .total = sl__iov_total(iov, (size_t)cnt)};
	return k == SL_K_SEND ? sl__send_rec(&io, rec) : sl__recv_rec(&io, rec);
}

#endif /* SLUICE_SHIM_XFER_RECV_H */
