/* SPDX-License-Identifier: MIT */
/*
 * xfer_hot.h - the hot paths of the send and receive wrappers: a call on a
 * socket under one rule that this thread's credit pays for (credit.h),
 * decided from the fd's bits the wrapper's shell loaded (SL_WRAP_SHELL,
 * real.h), made and counted as sl__send and sl__recv would (xfer.h,
 * xfer_recv.h). Anything else returns false, nothing taken, and the
 * wrapper's full path (slow_NAME's tail call) decides.
 *
 * Each lives in its own slow_NAME, apart from the full path, so that only
 * fd, flags, the size and the rule stay live across the real call: the
 * function saves few registers (bench/instructions.sh: the send and recv
 * rows).
 *
 * API: as xfer.h.
 */
#ifndef SLUICE_SHIM_XFER_HOT_H
#define SLUICE_SHIM_XFER_HOT_H

#include "mcredit.h"
#include "xfer.h"
#include "xfer_recv.h"

/* sl__xfer_rec for a hot path, from the bits b the shell loaded: the
 * record only if it is published and a rule of kind k may match; NULL for
 * anything else (the full path asks again, and classifies the fd or lets
 * the call pass). */
static inline __attribute__((always_inline)) const struct sl_fdrec *
sl__xfer_rec_hot(int fd, enum sl_kind_call k, unsigned b)
{
	if ((b & (SL_FDB_PASS(k) | SL_FDB_READY)) != SL_FDB_READY || sl__busy)
		return NULL;
		/* The shell's load was relaxed: the record is read after it. Under
	 * ThreadSanitizer, which does not model fences (and whose race report
	 * would call the shim's own open), an acquire load of the bits, as
	 * sl__xfer_rec's. */
#if defined(__SANITIZE_THREAD__)
	(void)atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire);
#else
	atomic_thread_fence(memory_order_acquire);
#endif
	return sl__fdrecs[fd].cand[k] != 0 ? &sl__fdrecs[fd] : NULL;
}

/* A keyed credit rule's record (SL_FDR_KCREDIT(k)): true if this thread's
 * credit of its rule shows the record's key (was taken on this fd). */
static inline bool sl__xfer_credit_mine(const struct sl_fdrec *rec, enum sl_kind_call k)
{
	const uint32_t rules = rec->match[k] &
			       (k == SL_K_RECV ? sl__st.credit_in_rules : sl__st.credit_rules);
	return rules != 0 && sl__credit[__builtin_ctz(rules)].key == SL_FDR_CKEY(rec, k);
}

/* slow_NAME's answers (sl__xfer_credit): the full path, hot_NAME (one
 * rule's credit), hot2_NAME (two rules' credits). */
enum { SL_HOT_NONE, SL_HOT_ONE, SL_HOT_TWO };

/* slow_NAME's question (wrap_send.c): SL_HOT_ONE if the fd's record (*rec)
 * shows the credit bit of kind k, or its keyed credit bit and this
 * thread's credit is the fd's, for hot_NAME; SL_HOT_TWO if it shows the
 * credit bit of two or more rules (SL_FDR_MCREDIT), for hot2_NAME; else
 * SL_HOT_NONE, *rec the record or NULL, for full_NAME. */
static inline __attribute__((always_inline)) int
sl__xfer_credit(int fd, enum sl_kind_call k, unsigned b, const struct sl_fdrec **rec)
{
	*rec = sl__xfer_rec_hot(fd, k, b);
	if (*rec == NULL)
		return SL_HOT_NONE;
	const unsigned f = (*rec)->fast;
	if (__builtin_expect(f & SL_FDR_CREDIT(k), 1))
		return SL_HOT_ONE;
	if ((f & SL_FDR_KCREDIT(k)) && sl__xfer_credit_mine(*rec, k))
		return SL_HOT_ONE;
	return (f & SL_FDR_MCREDIT(k)) ? SL_HOT_TWO : SL_HOT_NONE;
}

/* The two rules of a record's match that hot2_NAME spends from (i, the
 * lowest, and j): true if match[k] is exactly two rules, both lending
 * (lend: sl__st.mcredit_rules, a receive's counting bytes); three or more
 * take the full path (sl__mcredit_spend's loop). */
static inline __attribute__((always_inline)) bool sl__xfer_two(uint32_t rules, uint32_t lend,
							       unsigned *i, unsigned *j)
{
	const uint32_t second = rules & (rules - 1);
	if (second == 0 || (second & (second - 1)) != 0 || (rules & ~lend) != 0)
		return false;
	*i = (unsigned)__builtin_ctz(rules);
	*j = (unsigned)__builtin_ctz(second);
	return true;
}

/* sl__mcredit_spend2 with sl__busy set before it (the sl__busy protocol,
 * xfer.h), and clear again if it spent nothing. */
static inline __attribute__((always_inline)) bool sl__xfer_spend2(unsigned i, unsigned j,
								  uint64_t key, size_t n, bool send)
{
	sl__busy = 1;
	if (sl__mcredit_spend2(i, j, key, n, send))
		return true;
	sl__busy = 0;
	return false;
}

/* A send's two-rule hot path (rec from sl__xfer_credit, SL_HOT_TWO): as
 * sl__send_hot, from both rules' credits or neither (mcredit.h); a credit
 * short, or anything sl__send_rec would not pay from credit, returns false,
 * nothing taken, and the full path decides (and takes slices). */
static inline __attribute__((always_inline)) bool
sl__send_hot2(const struct sl_io *io, const struct sl_fdrec *rec, ssize_t *out)
{
	const uint32_t rules = rec->match[SL_K_SEND];
	const void *to = io->msg != NULL ? io->msg->msg_name : io->addr;
	unsigned i, j;
	if (!sl__xfer_two(rules, sl__st.mcredit_rules, &i, &j) || io->total > sl__st.piece_min ||
	    (to != NULL && rec->peer.family == 0) ||
	    atomic_load_explicit(&sl__st.fair_kept, memory_order_relaxed) != 0)
		return false;
	if (__builtin_expect(!sl__xfer_spend2(i, j, SL_FDR_CKEY(rec, SL_K_SEND), io->total, true),
			     0))
		return false;
	const ssize_t r = sl__io_xfer(io, 0, io->total);
	sl__busy = 0;
	if (__builtin_expect(r < 0 || (size_t)r != io->total, 0)) {
		*out = sl__fast_send_short(io->fd, io->flags, rules, io->total, r, 0);
		return true;
	}
	sl__credit_count(&sl__credit[i], (uint64_t)r);
	sl__credit_count(&sl__credit[j], (uint64_t)r);
	*out = r;
	return true;
}

/* A receive's two-rule hot path (as sl__send_hot2; the conditions
 * sl__recv_hot's): each credit holds the whole buffer before the call and
 * gets back what did not come after it (sl__mcredit_recv_end). */
static inline __attribute__((always_inline)) bool
sl__recv_hot2(const struct sl_io *io, const struct sl_fdrec *rec, ssize_t *out)
{
	const uint32_t rules = rec->match[SL_K_RECV];
	unsigned i, j;
	if (!sl__xfer_two(rules, sl__st.mcredit_rules & sl__st.byte_rules, &i, &j) ||
	    io->total == 0 || (io->flags & (MSG_PEEK | MSG_ERRQUEUE | MSG_WAITALL)) ||
	    atomic_load_explicit(&sl__st.fair_kept, memory_order_relaxed) != 0)
		return false;
	if (__builtin_expect(!sl__xfer_spend2(i, j, SL_FDR_CKEY(rec, SL_K_RECV), io->total, false),
			     0))
		return false;
	const ssize_t r = sl__io_xfer(io, 0, io->total);
	if (__builtin_expect(r <= 0, 0)) {
		*out = sl__mcredit_recv_end(rules, io->total, r);
		return true;
	}
	struct sl_credit *const base = sl__credit;
	base[i].units += io->total - (size_t)r;
	base[j].units += io->total - (size_t)r;
	sl__busy = 0;
	sl__credit_count(&base[i], (uint64_t)r);
	sl__credit_count(&base[j], (uint64_t)r);
	*out = r;
	return true;
}

/* A send's hot path (rec from sl__xfer_credit, which saw its credit bit:
 * not read again; a record rewritten since is the race sl__send_rec
 * describes, one call policed as the record said before or after): true
 * if the call was made (*out: its result); false, nothing taken and
 * sl__busy clear, if sl__send must decide. A short send gives back to rule i alone: its units are all
 * this call took. Counted in the thread's slot (credit.h). */
static inline __attribute__((always_inline)) bool
sl__send_hot(const struct sl_io *io, const struct sl_fdrec *rec, ssize_t *out, bool raw)
{
	/* A record being rewritten may show the credit bit of one match and
	 * the rules of another: the credit rules among them, the lowest alone
	 * (see sl__send_rec), never another kind's. */
	const uint32_t rules = rec->match[SL_K_SEND] & sl__st.credit_rules;
	const void *to = io->msg != NULL ? io->msg->msg_name : io->addr;
	/* sl__fast_send_ok but its fast bit: the credit bit implies it (fd.c,
	 * rec_fill, sets it first; a credit rule is a fast rule). A kept turn
	 * (fair.h) sends the call to the general path, as a receive's. */
	if (rules == 0 || io->total > sl__st.piece_min || (to != NULL && rec->peer.family == 0) ||
	    atomic_load_explicit(&sl__st.fair_kept, memory_order_relaxed) != 0)
		return false;
	const size_t i = (size_t)__builtin_ctz(rules);
	const struct sl_fast_rule *d = &sl__st.fast[i];
	/* The credit alone carries the rule past the real call: fewer
	 * registers to save (its address computed once). */
	struct sl_credit *c = &sl__credit[i];
	__asm__("" : "+r"(c));
	/* The sl__busy protocol (xfer.h): before the credit's load and store. */
	sl__busy = 1;
	if (__builtin_expect(!sl__credit_spend(c, d, sl__units(i, io->total),
					       SL_FDR_CKEY(rec, SL_K_SEND)),
			     0)) {
		sl__busy = 0;
		return false;
	}
	const ssize_t r = raw ? sl__io_raw(io) : sl__io_xfer(io, 0, io->total);
	sl__busy = 0;
	/* r < 0 too: (size_t)-1 is a total of SIZE_MAX. */
	if (__builtin_expect((size_t)r != io->total, 0)) {
		*out = raw ? sl__fast_send_short_k(io->fd, io->flags, c, io->total, r)
			   : sl__fast_send_short_c(io->fd, io->flags, c, io->total, r);
		return true;
	}
	sl__credit_count(c, (uint64_t)r);
	*out = r;
	return true;
}

/* A receive's hot path (as sl__send_hot, the credit bit seen): the credit
 * of the one byte rule must hold the whole buffer before the call, and
 * pays for what came after it (sl__fast_recv_credit). The conditions
 * are sl__recv_rec's for its credit path. */
static inline __attribute__((always_inline)) bool
sl__recv_hot(const struct sl_io *io, const struct sl_fdrec *rec, ssize_t *out, bool raw)
{
	/* The credit rules among the match, as for a send. */
	const uint32_t rules = rec->match[SL_K_RECV] & sl__st.credit_in_rules;
	if (__builtin_expect(rules == 0 || io->total == 0, 0) ||
	    (io->flags & (MSG_PEEK | MSG_ERRQUEUE | MSG_WAITALL)) ||
	    atomic_load_explicit(&sl__st.fair_kept, memory_order_relaxed) != 0)
		return false;
	const size_t i = (size_t)__builtin_ctz(rules);
	const struct sl_fast_rule *d = &sl__st.fast[i];
	struct sl_credit *c = &sl__credit[i];
	__asm__("" : "+r"(c)); /* as for a send */
	sl__busy = 1;
	if (__builtin_expect(!sl__credit_has(c, d, io->total, SL_FDR_CKEY(rec, SL_K_RECV)), 0)) {
		sl__busy = 0;
		return false;
	}
	*out = sl__fast_recv_credit(io, c, raw);
	return true;
}

/* writev's and readv's hot paths (how; two: hot2_NAME's): as
 * sl__xfer_vec's, iov is read only for a socket a rule may match. */
static inline __attribute__((always_inline)) bool sl__vec_hot(enum sl_io_how how, int fd,
							      const struct iovec *iov, int cnt,
							      const struct sl_fdrec *rec,
							      ssize_t *out, bool two, bool raw)
{
	const enum sl_kind_call k = how == SL_IO_WRITEV ? SL_K_SEND : SL_K_RECV;
	if (sl__bad_iov(iov, cnt))
		return false;
	const struct sl_io io = {.how = how,
				 .fd = fd,
				 .iov = iov,
				 .iovcnt = cnt,
				 .total = sl__iov_total(iov, (size_t)cnt)};
	if (two)
		return k == SL_K_SEND ? sl__send_hot2(&io, rec, out) : sl__recv_hot2(&io, rec, out);
	return k == SL_K_SEND ? sl__send_hot(&io, rec, out, raw) : sl__recv_hot(&io, rec, out, raw);
}

/* hot_NAME, hotr_NAME and hot2_NAME (wrap_send.c, wrap_recv.c): each a
 * copy of hot_NAME_i with `two` and `raw` constant, apart so that each
 * saves few registers; hotr_NAME makes the system call itself (rawcall.h),
 * so that it calls nothing but in tail position. */
#define SL_HOT_PAIR(name, params, args)                                                            \
	static __attribute__((noinline)) ssize_t hot_##name params                                 \
	{                                                                                          \
		return hot_##name##_i(SL_WRAP_ARGS args, false, false);                            \
	}                                                                                          \
	static __attribute__((noinline)) ssize_t hotr_##name params                                \
	{                                                                                          \
		return hot_##name##_i(SL_WRAP_ARGS args, false, true);                             \
	}                                                                                          \
	static __attribute__((noinline)) ssize_t hot2_##name params                                \
	{                                                                                          \
		return hot_##name##_i(SL_WRAP_ARGS args, true, false);                             \
	}

#endif /* SLUICE_SHIM_XFER_HOT_H */
