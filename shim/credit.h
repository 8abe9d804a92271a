/* SPDX-License-Identifier: MIT */
/*
 * credit.h - thread-local credit: a send or receive under one token or
 * leaky bucket rule (any scope) or one per=process fixed or sliding window spends
 * units its thread took from the rule's limiter earlier, with no clock
 * reading and no atomic (credit.c).
 *
 * A thread whose call the bucket admits takes, instead of the call's n
 * units, a slice of min(piece/8, 1 ms of the rate) units (piece: what the
 * rule may be charged at once, engine/params.h) when that is more than n
 * and the bucket has it now; the rest is its credit. The slice counts as
 * spent in the limiter when taken, so what all threads send is never more
 * than the limiter admitted: burst + rate x t. What changes is which
 * thread gets the tokens, and when they leave:
 *   - credit is good for the time the slice is worth at the rate (at most
 *     1 ms), read on the TSC (one unordered rdtsc): a thread idle longer
 *     gives it back before its next call (a receive that found it valid
 *     and then waited for data spends it for what came, a bucket's, and
 *     the next call gives back the rest). So what leaves in any window is
 *     at most one slice more than the limiter's own bound for it;
 *   - it is good only at the tunable head's generation it was taken at:
 *     `sluice set` makes every thread's credit void (not given back: the
 *     old slot is retired; a per=thread rule's buckets are never retuned,
 *     its credit is void all the same, and goes back to the thread's own
 *     bucket at its next take);
 *   - it goes back to the limiter when the thread's next call finds it too
 *     small (before the call takes anew or waits), when a send is short
 *     (the socket is full: the thread will wait), and when the thread
 *     exits (a pthread key destructor; a per=thread rule's is dropped
 *     then: the thread's bucket ends with it). A fork child starts with
 *     none.
 * A per=process fixed or sliding window lends credit within one aligned
 * window: a slice taken in it is good until the window's end at most (and
 * given back, it goes to the window it came from, which takes nothing back
 * once it is over), so no fixed window ever admits more than its limit.
 * A sliding window's estimate (prev x (W - e) / W + cur) counts the whole
 * slice in the current window from the take on, before its units leave,
 * and only falls as the window goes on: each unit leaves when the estimate,
 * with every unit counted that has left, admitted it; the window never
 * admits more than without credit.
 * A per=thread rule's credit comes from the thread's own bucket: what
 * changes there is only when its tokens leave the bucket, one slice early.
 * A per=fd or per=peer rule's comes from the bucket of the fd it was taken
 * for, and is spent only on calls on that fd while it names the same
 * socket (the key: fd and inode, kept in the fd's record, sl_fdrec.ckey).
 * A call on another fd gives the credit back and takes its own units
 * alone; the next call on the same fd takes a slice. So a thread that
 * sends on one connection pays about as under per=process, and one that
 * serves many in turn a little more than without credit (the key test and
 * rekey: bench/instructions.sh, the send4 row). Given back, the
 * credit goes to its fd's bucket if the fd still names the socket (a
 * close and reuse of the fd racing that check may give the new socket's
 * bucket one slice, never more than its burst).
 * A call under two or more rules, all buckets that lend (not windows),
 * spends from each one's credit or from none (mcredit.c): each rule's
 * slice is taken and given back as under one rule, so each limiter's bound
 * holds as there.
 * A thread of a sandboxed process (sandbox.h) that has not taken credit
 * before the filter takes none: its exit handler's key may allocate.
 * No TSC (another architecture, a TSC the clock turned off, or the first
 * 10 ms before the clock fits its line: clock.c): no credit, the calls
 * take the fast path of xfer.h as before.
 *
 * Signals: the spend is a load and a store; the caller sets sl__busy
 * before it, so a signal handler's send in between passes through (as one
 * made during the real call does) and cannot spend the same units.
 *
 * Counting: a call the credit pays for on the hot path (xfer_hot.h, and
 * a receive's sl__fast_recv_credit) counts in its thread's slot of the
 * status record (shm_format.h, struct sl_tcount) with two plain adds, not
 * in the rule's shared counters with three locked ones; a call that takes
 * a slice, or spends credit on the full path (sl__fast_send_out), counts
 * there as before. Readers add both. A thread
 * claims a slot with its first slice and gives it up when it exits (the
 * counts stay: the next owner adds to them); while all SL_SHM_TSLOTS are
 * claimed, a thread takes no credit (the fast path of xfer.h, as before).
 *
 * Memory: 88 bytes of TLS per credit rule (8) and thread: 704 bytes.
 *
 * API: the calling thread's credit only, except sl__credit_reset_unsync
 * (state init, fork child: one thread).
 */
#ifndef SLUICE_SHIM_CREDIT_H
#define SLUICE_SHIM_CREDIT_H

#include "internal.h"
#include "sluice_fast.h"
#include "state.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#define SL_CREDIT_TSC 1
#else
#define SL_CREDIT_TSC 0
#endif

#define SL_CREDIT_RULES 8 /* rules 0..7 may take credit (TLS per thread) */

/* One rule's credit in one thread: what the spend reads. */
struct sl_credit {
	uint64_t units; /* left to spend (0 for a rule that takes none) */
	uint64_t gen;   /* the tunable head's generation it was taken at */
	uint64_t until; /* TSC: void from here */
	uint64_t key;   /* 0, or for a per=fd or per=peer rule the fd and
	                   socket it was taken for (sl__fd_credit_key) */
	uint64_t at;    /* the clock (ns) it was taken at: a fixed window's
	                   give-back names its window by it */
	/* This thread's counters of the rule in the status record
	 * (shm_format.h: its slot), set with every slice: what the credit
	 * pays for counts there. */
	struct sl_tcount *cnt;
	uint64_t windowed; /* a fixed or sliding window's (sl__credit_windowed):
	                      a receive tests its deadline after the call
	                      too (sl__fast_recv_credit); a bucket's pays
	                      for what came, expired or not (xfer.c) */
	uint64_t pad;
};
/* What a take reads. */
struct sl_credit_slice {
	uint64_t max_n; /* calls of fewer units use credit (0: none) */
	uint64_t gen1;  /* the generation max_n is for, + 1 (0: none yet) */
	uint64_t span;  /* TSC ticks a slice is good for */
};

extern __thread struct sl_credit sl__credit[SL_CREDIT_RULES]
	__attribute__((tls_model("initial-exec")));
extern __thread struct sl_credit_slice sl__credit_slice[SL_CREDIT_RULES]
	__attribute__((tls_model("initial-exec")));

/* The TSC now (unordered: a deadline's test needs no fence); 0 without. */
static inline uint64_t sl__credit_tsc(void)
{
#if SL_CREDIT_TSC
	return __rdtsc();
#else
	return 0;
#endif
}

/* sl__credit_has but its deadline (the caller tests it: mcredit.c reads
 * the TSC once for two rules). */
static inline __attribute__((always_inline)) bool
sl__credit_holds(const struct sl_credit *c, const struct sl_fast_rule *d, uint64_t n, uint64_t key)
{
	/* Relaxed gen: a retune racing the spend lets it use the old slot's
	 * units once more, which that slot admitted. */
	return c->units >= n && c->key == key &&
	       c->gen == atomic_load_explicit(&d->lim->u.tun.gen, memory_order_relaxed);
}

/* Whether this thread's credit c (&sl__credit[i]) of fast rule i
 * (descriptor d; i in sl__st.credit_rules) holds n units, at d's
 * generation, not expired, for key (the call's fd record's ckey: 0 for a
 * rule not keyed). Nothing is spent: a receive spends what came, after the
 * call (sl__fast_recv_credit). */
static inline __attribute__((always_inline)) bool
sl__credit_has(const struct sl_credit *c, const struct sl_fast_rule *d, uint64_t n, uint64_t key)
{
	return sl__credit_holds(c, d, n, key) && (int64_t)(sl__credit_tsc() - c->until) < 0;
}

/* Spend n units of fast rule i from this thread's credit c: true if it had
 * them (sl__credit_has). */
static inline __attribute__((always_inline)) bool
sl__credit_spend(struct sl_credit *c, const struct sl_fast_rule *d, uint64_t n, uint64_t key)
{
	if (!sl__credit_has(c, d, n, key))
		return false;
	c->units -= n;
	return true;
}

/* Count a call credit c paid for, r bytes, in this thread's slot: plain
 * adds, no other thread writes it (shm_format.h). */
static inline __attribute__((always_inline)) void sl__credit_count(struct sl_credit *c, uint64_t r)
{
	struct sl_tcount *t = c->cnt;
	t->calls++;
	t->bytes += r;
}

/* Whether a fast rule reached as how lends credit: a token or leaky
 * bucket of any scope, a per=process fixed or sliding window (init.c
 * makes sl__st.credit_rules of it, with a TSC and i < SL_CREDIT_RULES). */
static inline bool sl__credit_lends(uint8_t how)
{
	return how == SL_FAST_PROC_BUCKET || how == SL_FAST_PROC_FIXED ||
	       how == SL_FAST_PROC_SLIDING || how == SL_FAST_THREAD_BUCKET ||
	       how == SL_FAST_FD_BUCKET || how == SL_FAST_PEER_BUCKET;
}

/* Whether a rule reached as how counts in windows (fixed or sliding): its
 * credit is spent within the window it was taken in and goes back there. */
static inline bool sl__credit_windowed(uint8_t how)
{
	return how == SL_FAST_PROC_FIXED || how == SL_FAST_PROC_SLIDING;
}

/* Give this thread's credit of rule i back at now (credit.c). */
void sl__credit_return_one(unsigned i, uint64_t now);

/* Whether a take of n units of rule i for a call whose record shows key
 * should go through sl__credit_take (a slice may be worth taking): a rule
 * of sl__st.credit_rules, a call smaller than the last slice, or none
 * computed at this generation. A keyed rule whose credit is another fd's
 * (or none yet): that credit goes back, the key becomes this call's, and
 * no: the call takes its own units on the plain fast path, the next call
 * on the same fd a slice. */
static inline bool sl__credit_wanted(unsigned i, const struct sl_fast_rule *d, uint64_t n,
				     uint64_t key, uint64_t now)
{
	if (!((sl__st.credit_rules >> i) & 1))
		return false;
	struct sl_credit *k = &sl__credit[i];
	if (__builtin_expect(k->key != key, 0)) {
		if (k->units != 0)
			sl__credit_return_one(i, now);
		k->key = key;
		return false;
	}
	const struct sl_credit_slice *c = &sl__credit_slice[i];
	return n < c->max_n ||
	       c->gen1 != atomic_load_explicit(&d->lim->u.tun.gen, memory_order_relaxed) + 1;
}

/* Take n units of fast rule i (a bucket, d) at now for a call on fd, when
 * sl__credit_wanted said so: first this thread's old credit goes back,
 * then a slice if it is worth taking and the bucket has it now (the rest
 * becomes credit), else, if plain, n alone. Nothing if the bucket is not
 * at hand (a thread without its per=thread slot yet, an fd without its
 * per=peer pin: the general path takes them).
 * true if n were taken; false: nothing was (the caller decides: a send's
 * general path; a receive's peek, which takes nothing). */
bool sl__credit_take(unsigned i, const struct sl_fast_rule *d, uint64_t n, uint64_t now, bool plain,
		     int fd);

/* Give this thread's credit of every rule back at now (a short send, a
 * thread's exit). */
void sl__credit_return_all(uint64_t now);

/* A call of n bytes under two or more rules whose record shows
 * SL_FDR_MCREDIT(k) (key: the record's ckey[k]; send: a send's units, else
 * a receive's, n of each): true, sl__busy set, if this thread's credit of
 * each rule held its units, slices taken for those short, and they are
 * spent; false, nothing spent and sl__busy clear, if the fast path must
 * decide. mcredit.c. */
bool sl__mcredit_spend(uint32_t rules, uint64_t key, size_t n, bool send, int fd);
/* The end of a send of `total` bytes the credits of `rules` paid for
 * (sl__mcredit_spend): counted in this thread's slots, or, short, ended by
 * sl__fast_send_short (what was not sent goes back into each credit).
 * Clears sl__busy; returns r, errno as the call left it. */
ssize_t sl__mcredit_send_end(int fd, int flags, uint32_t rules, size_t total, ssize_t r);
/* The end of a receive of `total` bytes whose credits paid the whole
 * buffer before it (sl__mcredit_spend; the credit is this thread's, so
 * giving back after the call is sound): what did not come goes back into
 * each, and the call is counted; nothing came (an error, EAGAIN, the end):
 * the credit goes back whole. Clears sl__busy; returns r, errno as the
 * call left it. */
ssize_t sl__mcredit_recv_end(uint32_t rules, size_t total, ssize_t r);

/* Forget the calling thread's credit without giving it back (state init;
 * a fork child, whose limiters are its own or its parent's). */
void sl__credit_reset_unsync(void);

/* The TSC ticks of ns for a slice's deadline: 1 (*ticks set), 0 (not
 * now: no line fitted yet), -1 (never: no TSC). clock.c's; tests point it
 * at fakes. */
extern int (*sl__credit_span)(uint64_t ns, uint64_t *ticks);

#endif /* SLUICE_SHIM_CREDIT_H */
