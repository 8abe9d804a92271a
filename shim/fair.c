/* SPDX-License-Identifier: MIT */
/*
 * fair.c - connections that share a byte limiter get their turns in the
 * order they waited, in event loops as blocking calls do.
 *
 * fair.c and nb.c call each other, a pair: nb.c takes a turn here for an
 * fd it holds back, and a turn is sized by nb.c's sl__need (what the fd's
 * next call needs), one rule of the non-blocking contract.
 *
 * Without this, non-blocking fds waiting for one limiter are all held back
 * until the same instant (the one at which the units their next call needs
 * are there), and whichever the loop serves first takes them: the first fd
 * of curl's poll array took every token and the second got nothing until
 * the first was done.
 *
 * The mechanism: a ticket order, kept by the limiter itself. When an nb call
 * is cut short or refused (nb.c), its next turn is reserved in the limiter,
 * as a blocking call's wait is (a token or leaky bucket hands out slots one
 * after the other: a reservation made later starts later): sl__need units
 * (at most what the call wanted, half the burst, 100 ms of the rate; in a
 * wait's round of k events, a (k+1)-th of a piece), and the fd is held back
 * until that turn starts. Its next receive on that fd
 * owns those units (they are taken already: sl_call.credit, which
 * sl__available counts and sl__charge uses first) and gives back only
 * what it did not use; reservations made after it stay where they are. (A
 * refund and a new acquire would not do: a token bucket does not know
 * whose units it gives back, and the turn would go to the last one.) A connection
 * that wants less than its share reserves less (what it asked for) or not at
 * all (it is not cut short), and the rest goes to the others.
 *
 * The bound (docs/rules.md): while k fds are backlogged on one limiter,
 * between two turns of one of them each other one has at most one turn of
 * at most q = min(burst/2, 100 ms of the rate) bytes, so over any interval
 * their byte counts differ by at most about 2q + burst.
 *
 * Both directions: a receive's units are charged after the fact
 * (sl__charge uses the turn's first), a send's are taken before it is made
 * (sl__admit asks the limiter only for what the turn does not cover).
 * While any turn is kept (sl__st.fair_kept), the fast paths of both (xfer.h,
 * xfer_recv.h, xfer_hot.h) leave every call to the general path, which
 * settles the fd's own turn first. A reservation not used is given back
 * when the fd is closed (the forget hook) or by its next call. Two threads calling on one fd in one
 * direction at once: the second finds the record busy and reserves nothing
 * (it waits as before, for the units to be there).
 */
#include <string.h>

#include "rule_lim.h"
#include "clock.h"
#include "fair.h"
#include "fd.h"
#include "log.h"
#include "nb.h"
#include "scope.h"
#include "state.h"

#define FAIR_RULES 4 /* reserved rules per fd and direction */
/* A turn further away than this is not reserved (the fd waits as before). */
#define FAIR_MAX_WAIT_NS 10000000000ull

enum { FAIR_NONE = 0, FAIR_BUSY = 1, FAIR_KEPT = 2 };

struct resv {
	_Atomic uint32_t state;
	_Atomic uint64_t turn_ns; /* the instant the turn starts (all its rules) */
	uint32_t n;
	uint8_t rule[FAIR_RULES];
	struct sl_limiter *lim[FAIR_RULES];
	uint64_t units[FAIR_RULES];
};

static struct resv (*tab)[2]; /* [sl__fd_cap][dir], mmap'd */
static _Atomic uint32_t fd_hi;
static uint32_t fair_rules; /* rules whose turns are reserved */

/* Take (fd, dir)'s kept turn if there is one and it has started at now:
 * true with *out copied. A call before its turn (a loop that reads an fd
 * not reported ready) does not get it: it finds the units spoken for. */
static bool take(int fd, enum sl_dir dir, struct resv *out, uint64_t now)
{
	if (tab == NULL || (unsigned)fd >= sl__fd_cap)
		return false;
	struct resv *r = &tab[fd][dir];
	uint32_t st = FAIR_KEPT;
	/* Acquire: the reservation's fields, written before KEPT. */
	if (atomic_load_explicit(&r->state, memory_order_acquire) != FAIR_KEPT ||
	    atomic_load_explicit(&r->turn_ns, memory_order_relaxed) > now ||
	    !atomic_compare_exchange_strong_explicit(&r->state, &st, FAIR_BUSY,
						     memory_order_acquire, memory_order_relaxed))
		return false;
	memcpy(out, r, sizeof(*out));
	atomic_store_explicit(&r->state, FAIR_NONE, memory_order_release);
	atomic_fetch_sub_explicit(&sl__st.fair_kept, 1, memory_order_relaxed);
	return true;
}

/* fd is closed or new: a turn it kept goes back to the limiters. */
static void forget(int fd)
{
	for (int dir = 0; dir < 2; dir++) {
		struct resv r;
		if (atomic_load_explicit(&sl__st.fair_kept, memory_order_relaxed) == 0 ||
		    !take(fd, (enum sl_dir)dir, &r, UINT64_MAX))
			continue;
		uint64_t now = sl__clock_ns();
		for (uint32_t j = 0; j < r.n; j++)
			sl_limiter_refund(r.lim[j], r.units[j], now);
	}
}

int sl__fair_init_unsync(void)
{
	fair_rules = 0;
	for (uint32_t i = 0; i < sl__st.policy.n_rules; i++) {
		const struct sl_rule *r = &sl__st.policy.rules[i];
		if (((sl__st.eagain_rules & sl__st.byte_rules) >> i & 1) &&
		    (r->algo == SL_ALGO_TOKEN || r->algo == SL_ALGO_LEAKY) &&
		    r->scope != SL_SCOPE_PEER && r->redis_key[0] == '\0')
			fair_rules |= (uint32_t)1 << i;
	}
	if (fair_rules != 0 && tab == NULL) {
		tab = sl__map(sizeof(*tab) * sl__fd_cap);
		if (tab == NULL)
			return -1;
	} else if (tab != NULL) { /* a re-init (tests) */
		memset((void *)tab, 0, sizeof(*tab) * atomic_load(&fd_hi));
	}
	atomic_store_explicit(&fd_hi, 0, memory_order_relaxed);
	atomic_store_explicit(&sl__st.fair_kept, 0, memory_order_relaxed);
	if (fair_rules != 0)
		sl__fd_on_forget_unsync(forget);
	sl__st.round_rules = fair_rules & sl__st.probe_rules;
	return 0;
}

uint32_t sl__fair_rules(void)
{
	return tab != NULL ? fair_rules : 0;
}

bool sl__fair_has(int fd, enum sl_dir dir)
{
	/* Relaxed: a hint, as sl__st.fair_kept is; the turn's own call settles. */
	return tab != NULL && (unsigned)fd < sl__fd_cap &&
	       atomic_load_explicit(&tab[fd][dir].state, memory_order_relaxed) != FAIR_NONE;
}

void sl__fair_settle_slow(struct sl_call *c, enum sl_dir dir)
{
	struct resv r;
	if (!take(c->fd, dir, &r, c->start_ns))
		return;
	for (uint32_t j = 0; j < r.n; j++) {
		/* A per=thread turn kept by another thread: its units are that
		 * thread's limiter's, and go back there; this call asks its own
		 * (spent here, they gave this thread another's units, and a
		 * refund of what it left put them in the wrong limiter). */
		if (sl__limiter(c, r.rule[j]) != r.lim[j]) {
			sl_limiter_refund(r.lim[j], r.units[j], c->start_ns);
			continue;
		}
		c->credit_rules |= (uint32_t)1 << r.rule[j];
		c->credit[r.rule[j]] = r.units[j];
	}
}

void sl__fair_return(struct sl_call *c)
{
	uint64_t now = sl__clock_ns();
	for (uint32_t rest = c->credit_rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		if (c->credit[i] != 0)
			sl_limiter_refund(sl__limiter(c, i), c->credit[i], now);
	}
	c->credit_rules = 0;
}

/* The instant to hold c's fd until, its turn starting at t: t, or later if
 * a rule without turns refused it until later (c->ready_ns). A refusal by
 * a rule with turns names a later instant than the turn (the units of the
 * turn are counted taken): the turn is what the fd waits for. */
static uint64_t later(const struct sl_call *c, uint64_t t)
{
	if ((c->delayed_rules & ~fair_rules) != 0 && c->ready_ns > t)
		return c->ready_ns;
	return t;
}

uint64_t sl__fair_reserve(struct sl_call *c, enum sl_dir dir, uint64_t now)
{
	if (c->credit_rules != 0)
		sl__fair_return(c);
	uint32_t rules = c->nb_rules & fair_rules;
	if (tab == NULL || rules == 0 || (unsigned)c->fd >= sl__fd_cap)
		return 0;
	struct resv *r = &tab[c->fd][dir];
	uint32_t st = FAIR_NONE;
	if (!atomic_compare_exchange_strong_explicit(&r->state, &st, FAIR_BUSY,
						     memory_order_acquire, memory_order_relaxed))
		/* A turn still to come (this call came before it): the fd
		 * waits for it. */
		return st == FAIR_KEPT
			       ? later(c, atomic_load_explicit(&r->turn_ns, memory_order_relaxed))
			       : 0;
	sl__fd_raise_hi(&fd_hi, c->fd);
	uint64_t t = 0;
	r->n = 0;
	for (; rules != 0 && r->n < FAIR_RULES; rules &= rules - 1) {
		unsigned i = (unsigned)__builtin_ctz(rules);
		struct sl_limiter *l = sl__limiter(c, i);
		uint64_t need = sl__need(c, i, SL_NB_QUANTUM_NS);
		/* In a round of k fds, a turn is at most a (k+1)-th of a
		 * piece (k turns of a k-th would wait for the bucket's
		 * rounding at the last): a rule that never limits reports
		 * every fd at once (half a piece each reported one fd of
		 * 3000, each of the rest a turn later). The fd's call needs
		 * no more than its turn (sl__available). */
		if (c->nb_round > 1 && need > 1) {
			const uint64_t share = sl__piece_max(i) / ((uint64_t)c->nb_round + 1);
			need = share == 0 ? 1 : share < need ? share : need;
			/* And at most what the limiter holds, if it holds any:
			 * the turn starts now. Turns kept by fds reported
			 * before and not called since (a loop that stopped
			 * serving them) may hold the rest; under a rule that
			 * never limits, a turn of the full share waited for
			 * them to refill, and the fd was held back (CPython's
			 * test_selectors: its writer, then a zero-timeout
			 * select reported nothing). */
			const uint64_t there = sl_limiter_available(l, now);
			need = there != 0 && there < need ? there : need;
		}
		struct sl_decision d = sl_limiter_acquire(l, need, now, FAIR_MAX_WAIT_NS);
		if (d.verdict != SL_ADMIT)
			continue;
		uint64_t at = sl__sat_add(now, d.wait_ns);
		r->rule[r->n] = (uint8_t)i;
		r->lim[r->n] = l;
		r->units[r->n] = need;
		r->n++;
		t = at > t ? at : t;
	}
	sl_log(SL_LOG_DEBUG, "fair: fd %d reserves %u rules, turn in %llu us", c->fd, r->n,
	       (unsigned long long)(t > now ? (t - now) / 1000 : 0));
	if (r->n == 0) {
		atomic_store_explicit(&r->state, FAIR_NONE, memory_order_release);
		return 0;
	}
	atomic_store_explicit(&r->turn_ns, t, memory_order_relaxed);
	t = later(c, t);
	atomic_fetch_add_explicit(&sl__st.fair_kept, 1, memory_order_relaxed);
	/* Release: the fields above are complete before KEPT is seen. */
	atomic_store_explicit(&r->state, FAIR_KEPT, memory_order_release);
	return t;
}
