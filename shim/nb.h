/* SPDX-License-Identifier: MIT */
/*
 * nb.h - non-blocking calls under delay rules (nb.c).
 *
 * An event loop must never sleep inside send: every other connection of the
 * loop would stall. So a delay rule with nonblock=eagain (the default), on a
 * call that must not block (O_NONBLOCK on the fd, or MSG_DONTWAIT), polices
 * instead of waiting (act.c): the call transfers what the tokens allow now,
 * a partial count, or fails with EAGAIN. Either way the fd is then held
 * back in that direction until the instant its tokens are there
 * (sl__ready_hold, ready.h), which poll, select and epoll respect.
 *
 * API: per call (struct sl_call is the calling thread's); any thread.
 */
#ifndef SLUICE_SHIM_NB_H
#define SLUICE_SHIM_NB_H

#include <sys/socket.h>

#include "call.h"
#include "clock.h"
#include "fair.h"
#include "fd.h"
#include "internal.h"
#include "ready.h"
#include "sluice_fast.h"
#include "state.h"

/*
 * Of `rules`, those whose waits become EAGAIN for call c (c->nb_rules):
 * delay rules with nonblock=eagain, if flags has MSG_DONTWAIT or the fd is
 * O_NONBLOCK. The fd's flags (a fcntl) are read only when a wait is due
 * (sl__call_nb), as the socket's timeout is: a call admitted at once never
 * asks. Call after sl__call_begin.
 */
static inline void sl__nb_begin(struct sl_call *c, int flags, uint32_t rules)
{
	uint32_t m = rules & sl__st.eagain_rules;
	/* The turn an earlier call of this fd reserved (fair.h) is given back
	 * first: this call finds its units available. */
	if (c->op == SL_OP_RECV || c->op == SL_OP_SEND)
		sl__fair_settle(c, c->op == SL_OP_RECV ? SL_DIR_IN : SL_DIR_OUT);
	if (flags & MSG_DONTWAIT)
		c->nb_rules = m;
	else
		c->nb_maybe = m;
}
/* The part of sl__call_nb that reads the fd's O_NONBLOCK. */
void sl__nb_read(struct sl_call *c);
/* c->nb_rules, the fd's flags read first if they are not yet. */
static inline uint32_t sl__call_nb(struct sl_call *c)
{
	if (c->nb_maybe != 0)
		sl__nb_read(c);
	return c->nb_rules;
}
/* True if rule i's waits become EAGAIN for c (the fd's flags read only if
 * i may be such a rule). */
static inline bool sl__nb_has(struct sl_call *c, unsigned i)
{
	return (((c->nb_rules | c->nb_maybe) >> i) & 1) && ((sl__call_nb(c) >> i) & 1);
}
/* sl__admit's answer when an nb byte rule refuses a send's piece (unless
 * c->nb_partial): nothing is noted, and the caller sends what the rules
 * allow now instead, as it does for reject rules. */
#define SL_NB_PARTIAL (-1)
/* Units rule i must have before a call that waits for it goes on:
 * min(what the call still wants (c->nb_want, if set), half the rule's
 * piece, quantum_ns of the rate), at least 1; 1 for conns and message
 * rules. An nb call uses SL_NB_QUANTUM_NS, a blocking wait
 * SL_WAIT_QUANTUM_NS: waking for every unit, a receive under a delay rule
 * moved a few bytes per call at full CPU. */
uint64_t sl__need(const struct sl_call *c, unsigned i, uint64_t quantum_ns);
#define SL_NB_QUANTUM_NS 100000000u
#define SL_WAIT_QUANTUM_NS 2000000u
/* An nb rule refuses call c: note until when (now + wait_ns), count a delay.
 * Returns EAGAIN. */
int sl__nb_refuse(struct sl_call *c, unsigned i, uint64_t now, uint64_t wait_ns);
/* The part of sl__nb_end for a call that was refused or cut. */
void sl__nb_end_slow(struct sl_call *c, enum sl_dir dir, bool cut);
/* At the end of an nb call that still wants `left` units: if it was refused
 * for tokens, or `cut` (it moved less than asked) and the tokens for its
 * next call are missing, the fd is held back in dir until they are there. */
static inline void sl__nb_end(struct sl_call *c, enum sl_dir dir, bool cut, uint64_t left)
{
	if (c->ready_ns != 0 || cut) {
		c->nb_want = left;
		sl__nb_end_slow(c, dir, cut);
	}
}

/*
 * The wait wrappers' question (poll.c, epoll.c) about an fd the kernel
 * reports ready in dir (IN: a receive, OUT: a send): the instant its next
 * call there would find the units sl__need sizes in every nonblock=eagain
 * delay rule that matches it, or 0 if that is now (or nothing matches,
 * the fd has a reserved turn, or its rules are per=thread: the thread that
 * polls need not be the one that calls). The caller holds the fd back until
 * then instead of reporting it: a fresh socket is never reported ready and
 * then refused with EAGAIN. Read-only when the units are there.
 */
uint64_t sl__nb_probe(int fd, enum sl_dir dir, uint64_t now);
/* sl__nb_hold_unready past its first look (nb.c). */
struct sl_nb_round;
uint32_t sl__nb_hold_look(int fd, uint32_t rev, uint64_t now, struct sl_nb_round *rd);
/* The rules a wait wrapper asks about (probe_rules, state.h) for the fd
 * whose published record is rec, in the directions of the poll bits rev. */
static inline uint32_t sl__nb_asked(const struct sl_fdrec *rec, uint32_t rev)
{
	return (((rev & SL_HIDE_IN) ? rec->match[SL_K_RECV] : 0) |
		((rev & SL_HIDE_OUT) ? rec->match[SL_K_SEND] : 0)) &
	       sl__st.probe_rules;
}
/* True if every rule of `asked` (not 0) is a per=process bucket at rest at
 * now (core's sl_fast_at_rest_tunable_gcra: full, so a police of a piece
 * admits): the question is answered, with no cost to compute and no call.
 * A rule that never limits always is. One rule, the common case, with no
 * loop. */
static inline __attribute__((always_inline)) bool sl__nb_at_rest(uint32_t asked, uint64_t now)
{
	if (asked & sl__st.hard_rules)
		return false;
	if ((asked & (asked - 1)) == 0)
		return sl_fast_at_rest_tunable_gcra(sl__st.rule_lim[__builtin_ctz(asked)], now);
	for (; asked != 0; asked &= asked - 1)
		if (!sl_fast_at_rest_tunable_gcra(sl__st.rule_lim[__builtin_ctz(asked)], now))
			return false;
	return true;
}
/*
 * One wait's round (a poll, select or epoll_wait that returns): the fds it
 * reports ready to receive or to send under a rule with turns (fair.h). The
 * first fd of a rule is reported on the probe's word, with nothing
 * reserved. A second one of the same rule is not: the first one's call
 * takes every unit it finds, up to what it asks for (a receive what came,
 * a send a partial write of what the rules allow now), and would leave the
 * second with none (two connections reported at once with the bucket full:
 * the second refused with EAGAIN). So from the second fd of a rule on, each
 * reported fd has its turn reserved in that rule's direction
 * (sl__fair_reserve), the first one's too, and an fd whose turn is still to
 * come is held back in that direction until it, not reported. A rule is of
 * one kind (a send rule or a receive rule), so its direction is its own. A
 * round is the wait wrapper's own (on its stack, begun with
 * sl__nb_round_begin) before it looks at what the kernel reported; a wait
 * the kernel answered with one fd passes NULL (no round: nothing to
 * share). A listener's IN (an accept) is not in it.
 */
struct sl_nb_round {
	uint32_t rules;       /* rules with an fd reported in this round */
	int first;            /* the round's first fd, until sl__nb_round_more
	                           spreads it to fd[] (then -1) */
	int fd[SL_MAX_RULES]; /* of each rule of `rules`, the first fd reported */
	uint32_t n;           /* the fds the wait reported: a turn's share (fair.c) */
};
static inline struct sl_nb_round *sl__nb_round_begin(struct sl_nb_round *rd, long reported)
{
	if (__builtin_expect(reported < 2, 1))
		return NULL;
	rd->rules = 0; /* the other fields are read under rules only, but n */
	rd->n = reported > UINT32_MAX ? UINT32_MAX : (uint32_t)reported;
	return rd;
}
/* sl__nb_round past the round's first fd (nb.c): a listener's IN (an
 * accept) is not a receive, and is dropped from the round there. */
uint32_t sl__nb_round_more(struct sl_nb_round *rd, int fd, uint32_t f, uint64_t now);
/* fd (record rec) is to be reported in the poll bits rev: note it in the
 * round rd (NULL: none); the bits to take out of what is reported (0:
 * none). Inline, the round's first fd: two stores. */
static inline __attribute__((always_inline)) uint32_t
sl__nb_round(struct sl_nb_round *rd, int fd, uint32_t rev, const struct sl_fdrec *rec, uint64_t now)
{
	if (__builtin_expect(rd == NULL, 1))
		return 0;
	const uint32_t f = (((rev & SL_HIDE_IN) ? rec->match[SL_K_RECV] : 0) |
			    ((rev & SL_HIDE_OUT) ? rec->match[SL_K_SEND] : 0)) &
			   sl__st.round_rules;
	if (__builtin_expect(f == 0, 1))
		return 0;
	if (rd->rules == 0) {
		rd->rules = f;
		rd->first = fd;
		return 0;
	}
	return sl__nb_round_more(rd, fd, f, now);
}
/* For the poll bits `rev` the kernel reported for fd (poll and epoll bits
 * are the same on Linux): hold fd back in each direction sl__nb_probe finds
 * not ready, and return the bits to take out of what is reported (0: none).
 * A held-back IN takes HUP and RDHUP with it (hup.h: the end of a stream
 * comes after the data before it). Its first look is inline: a classified
 * fd with no rule to ask about, or whose rules are all at rest
 * (sl__nb_at_rest), is ready; anything else asks sl__nb_hold_look, which
 * answers the same for such an fd. */
static inline __attribute__((always_inline)) uint32_t
sl__nb_hold_unready(int fd, uint32_t rev, uint64_t now, struct sl_nb_round *rd)
{
	if ((unsigned)fd < SL_FD_LIMIT &&
	    (atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire) & SL_FDB_READY)) {
		const struct sl_fdrec *rec = &sl__fdrecs[fd];
		const uint32_t asked = sl__nb_asked(rec, rev);
		if (asked == 0)
			return 0;
		if (sl__nb_at_rest(asked, now))
			return sl__nb_round(rd, fd, rev, rec, now);
	}
	return sl__nb_hold_look(fd, rev, now, rd);
}
/* sl__nb_hold_unready for a wait wrapper that reads the clock only for an
 * fd that needs it: *now is the clock (0: not read yet), read here for a
 * classified fd with rules to ask about, or an fd not classified yet whose
 * directions in rev do not pass. One load of the fd's bits. */
static inline __attribute__((always_inline)) uint32_t
sl__nb_unready(int fd, uint32_t rev, uint64_t *now, struct sl_nb_round *rd)
{
	if ((unsigned)fd < SL_FD_LIMIT) {
		const uint8_t b = atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire);
		if (b & SL_FDB_READY) {
			const struct sl_fdrec *rec = &sl__fdrecs[fd];
			const uint32_t asked = sl__nb_asked(rec, rev);
			if (asked == 0)
				return 0;
			if (*now == 0)
				*now = sl__clock_ns();
			return sl__nb_at_rest(asked, *now) ? sl__nb_round(rd, fd, rev, rec, *now)
							   : sl__nb_hold_look(fd, rev, *now, rd);
		}
		if (!((rev & SL_HIDE_IN) && !(b & SL_FDB_PASS(SL_K_RECV))) &&
		    !((rev & SL_HIDE_OUT) && !(b & SL_FDB_PASS(SL_K_SEND))))
			return 0;
	} else if ((rev & (SL_HIDE_IN | SL_HIDE_OUT)) == 0) {
		return 0;
	}
	if (*now == 0)
		*now = sl__clock_ns();
	return sl__nb_hold_look(fd, rev, *now, rd);
}
#endif /* SLUICE_SHIM_NB_H */
