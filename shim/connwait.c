/* SPDX-License-Identifier: MIT */
/*
 * connwait.c - a non-blocking connect under a full conns limit waits for
 * its slot without blocking (the contract is in connwait.h).
 *
 * Waiting in place would hang a single-threaded event loop whose own close
 * is what frees the slot. So the connect returns EINPROGRESS at once, and
 * what it waits for is kept in a connection record (fd.c) created then,
 * whose slots are not taken yet: every dup of the fd refers to it, so the
 * slot taken when the connect starts is held until the last fd closes, and
 * closing every fd before then abandons the wait without taking anything.
 * The state of a record (this file's table, indexed like fd.c's records):
 *
 *   HELD      the slots are held (every record fd.c makes itself; the
 *             default, 0)
 *   PENDING   waiting: the fields below are valid, nothing is taken
 *   STARTING  one thread is taking the slots and calling the real connect
 *   FAILED    it ran out of time (max-delay: the rule's errno; SO_SNDTIMEO:
 *             ETIMEDOUT) or the real connect failed at once: err, reported
 *             once by SO_ERROR or connect (then SPENT)
 *   SPENT     failed and reported
 *
 * Every change is a CAS (or a release store by the STARTING state's owner).
 * A connect starts (a) when a slot is given back (fd.c's released hook: in
 * the order they waited, from the thread that closed), (b) when the ready
 * timer (ready.c) or a poll, epoll or select that looks at the fd finds it
 * due (every 10 ms, for a shared= limiter another process frees; its
 * deadline), or (c) on a connect() or getsockopt(SO_ERROR) on it. Until
 * then the fd is hidden from poll and epoll (SL_HIDE_ALL), and never before
 * the rate slot a connect rule reserved for it (start_ns).
 *
 * A close racing a start (another thread's: the starter's handlers are
 * masked): the starter marks STARTING, then checks that the fd it connects
 * on still refers to the record; the closer cuts that reference, then
 * waits while the record is STARTING (seq_cst on both sides: one sees the
 * other). So the real connect never reaches a new socket that took the
 * number. The last close waits the same way, and decides with one CAS
 * whether the slots were taken.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/time.h>

#include "rule_lim.h"
#include "act.h"
#include "bitset.h"
#include "clock.h"
#include "connfam.h"
#include "connwait.h"
#include "cwrec.h"
#include "fd.h"
#include "log.h"
#include "ready.h"
#include "real.h"
#include "sandboxed.h"
#include "shm.h"
#include "state.h"

/* A wait with no instant (a slot frees on a close) is looked at again then. */
#define CW_RETRY_NS 10000000u

/* Which process made a record: 0, one more in each fork child (set alone). */
static uint32_t cw_gen;

struct cw *sl__cw_tab;                             /* [sl__fd_cap], mmap'd */
static _Atomic uint64_t cw_bits[SL_FD_LIMIT / 64]; /* PENDING records */
static _Atomic uint32_t cw_words;                  /* 1 + the highest word set */
_Atomic uint32_t sl__cw_live;                      /* records not HELD */
static _Atomic uint64_t cw_tickets;
static bool cw_enabled;

/* Take one slot of each limiter of w at now, all or none. */
static bool take_lims(struct cw *w, uint64_t now)
{
	for (uint32_t j = 0; j < w->n; j++) {
		struct sl_limiter *l = w->lims[j];
		struct sl_decision d = sl_limiter_acquire(l, 1, now, 0);
		if (d.verdict == SL_REFUSE && sl__shm_reclaim(l))
			d = sl_limiter_acquire(l, 1, now, 0);
		if (d.verdict != SL_ADMIT) {
			while (j-- > 0) {
				sl_limiter_release(w->lims[j], 1);
				sl__shm_hold(w->lims[j], -1);
			}
			return false;
		}
		sl__shm_hold(l, 1);
	}
	return true;
}

static void give_back(struct cw *w)
{
	for (uint32_t j = 0; j < w->n; j++) {
		sl_limiter_release(w->lims[j], 1);
		sl__shm_hold(w->lims[j], -1);
	}
}

uint64_t sl__cw_next_look(struct cw *w, uint64_t now)
{
	uint64_t t = now < w->start_ns ? w->start_ns
				       : atomic_load_explicit(&w->retry_ns, memory_order_relaxed);
	return t < w->deadline_ns ? t : w->deadline_ns;
}

/* kick's start of record w (k) on fd, signals masked. */
static uint32_t start(struct cw *w, uint32_t k, int fd, uint64_t now)
{
	uint32_t st = CW_PENDING;
	/* seq_cst: the check of fd below must come after the mark (the closer
	 * cuts the fd, then looks at the mark). Acquire: the fields. */
	if (!atomic_compare_exchange_strong(&w->state, &st, CW_STARTING))
		return st;
	if (sl__cw_fd_conn(fd) != k) { /* fd was closed: a dup connects later */
		atomic_store_explicit(&w->state, CW_PENDING, memory_order_release);
		return CW_PENDING;
	}
	int saved = errno;
	int busy = sl__busy;
	sl__busy = 1;
	if (!take_lims(w, now)) {
		if (now < w->deadline_ns) {
			atomic_store_explicit(&w->retry_ns, sl__sat_add(now, CW_RETRY_NS),
					      memory_order_relaxed);
			atomic_store_explicit(&w->state, CW_PENDING, memory_order_release);
			sl__ready_arm(fd, sl__cw_next_look(w, now));
			sl__busy = busy;
			errno = saved;
			return CW_PENDING;
		}
		w->err = w->late_err;
		st = CW_FAILED;
		for (uint32_t rest = w->rules; rest != 0; rest &= rest - 1)
			atomic_fetch_add_explicit(&sl__st.stats[__builtin_ctz(rest)].refused, 1,
						  memory_order_relaxed);
		sl_log(SL_LOG_DEBUG, "fd %d: connect waited for a conns slot past its limit", fd);
	} else {
		int r = SL_REAL(connect)(fd, (struct sockaddr *)&w->addr, w->len);
		int e = errno;
		st = CW_HELD;
		if (r != 0 && e != EINPROGRESS && e != EINTR) {
			give_back(w);
			w->err = e;
			st = CW_FAILED;
		}
		sl__fd_invalidate(fd);
		sl_log(SL_LOG_DEBUG, "fd %d: connect started on a free conns slot (%s)", fd,
		       st == CW_FAILED ? strerror(e) : "in progress");
	}
	sl__bits_clear(cw_bits, k - 1);
	if (st == CW_HELD)
		atomic_fetch_sub_explicit(&sl__cw_live, 1, memory_order_relaxed);
	/* Release: err is written before FAILED is seen. */
	atomic_store_explicit(&w->state, st, memory_order_release);
	sl__busy = busy;
	errno = saved;
	sl__ready_changed(fd);
	return st;
}

uint32_t sl__cw_kick(uint32_t k, int fd, uint64_t now, bool handed)
{
	struct cw *w = &sl__cw_tab[k - 1];
	/* A connect the parent was waiting for when it forked: the socket is
	 * shared, and only the parent may start it (a close in the child must
	 * not hand it a slot of the child's copy of the limiter). */
	if (w->gen != cw_gen)
		return CW_PENDING;
	if (now < w->deadline_ns &&
	    (now < w->start_ns ||
	     (!handed && now < atomic_load_explicit(&w->retry_ns, memory_order_relaxed))))
		return CW_PENDING;
	/* No handler of this thread runs while STARTING: one that closed fd
	 * would wait for ever for the frame it interrupted (on_closing). */
	sigset_t old;
	const bool masked = sl__signals_block(&old);
	uint32_t st = start(w, k, fd, now);
	if (masked)
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	return st;
}

/* fd.c's hooks. */
static void on_closing(int fd, uint32_t k)
{
	struct cw *w = &sl__cw_tab[k - 1];
	if (atomic_load(&w->state) == CW_HELD)
		return;
	/* The connect goes on on the last dup of fd if that still refers to
	 * the record (fd's reference is cut already: seq_cst, as the
	 * starter's check), so a waiting connect whose first fd is closed
	 * keeps its turn; else on whichever dup is looked at first. */
	int32_t a = fd;
	atomic_compare_exchange_strong(&w->alt, &a, -1);
	a = atomic_load(&w->alt);
	int32_t f = fd;
	atomic_compare_exchange_strong(&w->fd, &f, a >= 0 && sl__cw_fd_conn(a) == k ? a : -1);
	while (atomic_load(&w->state) == CW_STARTING)
		sched_yield();
}

static void on_duped(int fd, uint32_t k)
{
	struct cw *w = &sl__cw_tab[k - 1];
	if (atomic_load(&w->state) == CW_HELD)
		return;
	atomic_store(&w->alt, fd);
	int32_t f = -1; /* its fd closed meanwhile (a close racing the dup) */
	atomic_compare_exchange_strong(&w->fd, &f, fd);
}

static bool on_last(uint32_t k)
{
	struct cw *w = &sl__cw_tab[k - 1];
	uint32_t st = atomic_load(&w->state);
	for (;;) {
		if (st == CW_HELD)
			return true;
		if (st == CW_STARTING) {
			sched_yield();
			st = atomic_load(&w->state);
			continue;
		}
		if (atomic_compare_exchange_weak(&w->state, &st, CW_HELD))
			break;
	}
	if (st == CW_PENDING)
		sl__bits_clear(cw_bits, k - 1);
	atomic_fetch_sub_explicit(&sl__cw_live, 1, memory_order_relaxed);
	return false;
}

/* Set when this thread gave a slot back: the close wrapper hands it over
 * once the real close is done (sl__cw_after_close). */
__thread bool sl__cw_handoff_due __attribute__((tls_model("initial-exec")));

static void on_released(void)
{
	if (sl__cw_any())
		sl__cw_handoff_due = true;
}

/* A slot was given back: start the waiting connects in the order they
 * waited (each takes a slot if one is there). */
void sl__cw_handoff(void)
{
	sl__cw_handoff_due = false;
	(void)sl__fam_after_close(); /* slots a fork shared, once closed */
	if (!sl__cw_any())
		return;
	enum { MAX = 32 };
	uint32_t ks[MAX];
	uint64_t tk[MAX];
	unsigned n = 0;
	const uint32_t words = atomic_load(&cw_words);
	for (uint32_t wd = 0; wd < words; wd++)
		for (uint64_t b = atomic_load(&cw_bits[wd]); b != 0; b &= b - 1) {
			uint32_t i = wd * 64 + (uint32_t)__builtin_ctzll(b);
			if (atomic_load_explicit(&sl__cw_tab[i].state, memory_order_acquire) !=
			    CW_PENDING)
				continue;
			uint64_t t = sl__cw_tab[i].ticket;
			unsigned at;
			if (n < MAX) {
				at = n++;
			} else {
				if (tk[MAX - 1] <= t)
					continue; /* the 32 oldest are enough for one close */
				at = MAX - 1;
			}
			while (at > 0 && tk[at - 1] > t) {
				ks[at] = ks[at - 1];
				tk[at] = tk[at - 1];
				at--;
			}
			ks[at] = i + 1;
			tk[at] = t;
		}
	uint64_t now = sl__clock_ns();
	for (unsigned j = 0; j < n; j++) {
		int fd = atomic_load_explicit(&sl__cw_tab[ks[j] - 1].fd, memory_order_relaxed);
		if (fd >= 0)
			sl__cw_kick(ks[j], fd, now, true);
	}
}

static bool on_holds(uint32_t k)
{
	return atomic_load(&sl__cw_tab[k - 1].state) == CW_HELD;
}

static const struct sl_conn_hooks hooks = {on_closing, on_last, on_holds, on_released, on_duped};

int sl__cw_init_unsync(void)
{
	static const struct sl_ready_waiters mine = {sl__cw_hidden, sl__cw_again, sl__cw_soerror},
					     none = {NULL, NULL, NULL};
	cw_enabled = (sl__st.eagain_rules & sl__st.conns_rules) != 0;
	/* Asked only when connects may wait here: the wait wrappers' path is
	 * one load otherwise. */
	sl__ready_on_waiters_unsync(cw_enabled ? &mine : &none);
	if (cw_enabled && sl__cw_tab == NULL) {
		sl__cw_tab = sl__map(sizeof(*sl__cw_tab) * sl__fd_cap);
		if (sl__cw_tab == NULL)
			return -1;
	} else if (sl__cw_tab != NULL) {
		memset(sl__cw_tab, 0, sizeof(*sl__cw_tab) * sl__fd_cap); /* a re-init (tests) */
	}
	const uint32_t words = atomic_load_explicit(&cw_words, memory_order_relaxed);
	for (uint32_t w = 0; w < words; w++)
		atomic_store_explicit(&cw_bits[w], 0, memory_order_relaxed);
	atomic_store_explicit(&cw_words, 0, memory_order_relaxed);
	atomic_store_explicit(&sl__cw_live, 0, memory_order_relaxed);
	sl__fd_on_conn_unsync(cw_enabled ? &hooks : NULL);
	return 0;
}

void sl__cw_after_fork_unsync(void)
{
	cw_gen++; /* the parent's waiting connects are not this process's */
	if (sl__cw_tab == NULL)
		return;
	const uint32_t words = atomic_load_explicit(&cw_words, memory_order_relaxed);
	for (uint32_t wd = 0; wd < words; wd++)
		for (uint64_t b = atomic_load(&cw_bits[wd]); b != 0; b &= b - 1) {
			uint32_t st = CW_STARTING;
			atomic_compare_exchange_strong(&sl__cw_tab[wd * 64 + __builtin_ctzll(b)]
								.state,
						       &st, CW_PENDING);
		}
}

bool sl__cw_may_defer(uint32_t conns)
{
	if (!cw_enabled || sl__cw_tab == NULL || (conns & ~sl__st.eagain_rules) != 0)
		return false;
	for (uint32_t rest = conns; rest != 0; rest &= rest - 1) {
		const struct sl_rule *r = &sl__st.policy.rules[__builtin_ctz(rest)];
		if (!((r->scope == SL_SCOPE_PROCESS && r->redis_key[0] == '\0') ||
		      r->scope == SL_SCOPE_FD))
			return false;
	}
	return true;
}

bool sl__cw_defer(struct sl_call *c, uint32_t conns, const struct sockaddr *sa, socklen_t len)
{
	if (sl__cw_tab == NULL || sa == NULL || len > (socklen_t)sizeof(struct sockaddr_storage))
		return false;
	struct sl_limiter *lims[SL_CONN_RULES];
	unsigned n = 0;
	uint64_t deadline = UINT64_MAX;
	int late_err = ECONNREFUSED;
	for (uint32_t rest = conns; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &sl__st.policy.rules[i];
		if (n == SL_CONN_RULES)
			return false;
		lims[n++] = sl__limiter(c, i);
		uint64_t d = sl__sat_add(c->start_ns, r->max_delay_ns);
		if (d < deadline) {
			deadline = d;
			late_err = sl_rule_errno(r, SL_OP_CONNECT);
		}
	}
	struct timeval tv;
	socklen_t tl = sizeof(tv);
	int saved = errno;
	if (SL_REAL(getsockopt)(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &tl) == 0 &&
	    (tv.tv_sec > 0 || tv.tv_usec > 0)) {
		uint64_t d = sl__sat_add(c->start_ns, (uint64_t)tv.tv_sec * 1000000000u +
							      (uint64_t)tv.tv_usec * 1000u);
		if (d < deadline) {
			deadline = d;
			late_err = ETIMEDOUT;
		}
	}
	errno = saved;
	uint32_t k = sl__fd_conn_claim(c->fd, lims, n);
	if (k == 0)
		return false;
	struct cw *w = &sl__cw_tab[k - 1];
	const uint64_t now = sl__clock_ns();
	atomic_store_explicit(&w->fd, c->fd, memory_order_relaxed);
	atomic_store_explicit(&w->alt, -1, memory_order_relaxed);
	atomic_store_explicit(&w->retry_ns, sl__sat_add(now, CW_RETRY_NS), memory_order_relaxed);
	w->err = 0;
	w->late_err = late_err;
	w->start_ns = c->ready_ns;
	w->deadline_ns = deadline;
	w->ticket = atomic_fetch_add_explicit(&cw_tickets, 1, memory_order_relaxed);
	w->gen = cw_gen;
	w->rules = conns;
	w->n = n;
	memcpy(w->lims, lims, sizeof(lims[0]) * n);
	w->len = len;
	memcpy(&w->addr, sa, len);
	atomic_fetch_add_explicit(&sl__cw_live, 1, memory_order_relaxed);
	/* Release: the fields are complete before anyone sees PENDING; the
	 * record is reachable from no fd yet (attached below). */
	atomic_store_explicit(&w->state, CW_PENDING, memory_order_release);
	sl__bits_set(cw_bits, &cw_words, k - 1);
	sl__fd_conn_attach(c->fd, k);
	sl__ready_arm(c->fd, sl__cw_next_look(w, now));
	sl__ready_changed(c->fd);
	sl_log(SL_LOG_DEBUG, "fd %d: connect waits for a conns slot", c->fd);
	return true;
}
