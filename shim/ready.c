/* SPDX-License-Identifier: MIT */
/*
 * ready.c - when is a held-back fd ready again, deferred connects, and the
 * timer that wakes event loops.
 *
 * nb.c holds an fd back in a direction (sl__ready_hold) until the instant its
 * tokens are there (ready_at[fd][dir]); the wait wrappers (poll.c,
 * epoll.c) do not report it ready before that instant, and wake the loop at
 * it. The directions: IN for recv and accept, OUT for send and connect.
 *
 * Deferred connect: a non-blocking connect cannot return EAGAIN (it means
 * something else there), so the rate slot is reserved as for a blocking
 * connect, the address is kept, the call returns EINPROGRESS at once, and
 * the real connect starts when the slot comes: from whichever wait wrapper
 * runs the timer then, or from a later connect() (EALREADY before) or
 * getsockopt(SO_ERROR) on the fd (0 before: in progress). Until then poll
 * and epoll report nothing for the fd, not even the POLLHUP an unconnected
 * socket shows. An error of the real connect that would have been its
 * return value is kept and given to the next getsockopt(SO_ERROR) or
 * connect(). A program that writes before the socket is reported writable
 * gets what the kernel says of an unconnected socket (EPIPE).
 *
 * The timer: epoll registrations must be given back to the kernel when a
 * hold ends (epoll.c takes the held-back direction out of them, so that
 * a level-triggered loop does not spin and an edge-triggered one is woken by
 * the re-arming). epoll.c learns of every change through the one hook it
 * registers (sl__ready_on_change_unsync); this file calls nothing of it.
 * Every fd with something due is in a bitmap, and sl__ready_next holds the
 * earliest instant; each wait wrapper calls sl__ready_tick first and caps
 * its timeout at what it returns. When nothing is due that costs one
 * load, inline (ready.h); the scan is out of line.
 *
 * poll and select ask sl__ready_hidden of every fd they are given; while
 * no fd can be hidden they skip that (sl__ready_none_hidden): every hold
 * first raises sl__ready_quiet_ns to its end, so a now at or past it finds
 * every ready instant behind it, and a deferred connect, or a connect that
 * may wait elsewhere, sets it to UINT64_MAX for good (their fds are hidden
 * until they are started, not until an instant).
 *
 * Thread-safety: everything here is thread-safe. The ready instants are
 * plain timestamps (relaxed atomics, nothing hangs on them); a deferred
 * connect's record is published with a release store of its state.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>

#include "bitset.h"
#include "call.h"
#include "clock.h"
#include "fd.h"
#include "log.h"
#include "ready.h"
#include "real.h"
#include "sluice_fast.h"
#include "state.h"
#include "wake.h"

/* A deferred connect being started by another thread hides its fd this
 * much longer. */
#define SL_NB_STARTING_NS 100000u

enum conn_state {
	SL_CONN_NONE = 0,
	SL_CONN_PENDING = 1,  /* waiting for its slot: fields below are valid */
	SL_CONN_STARTING = 2, /* a thread is calling the real connect */
	SL_CONN_FAILED = 3,   /* the real connect failed with err */
};

struct pending {
	_Atomic uint32_t state; /* enum conn_state */
	int32_t err;
	uint64_t due_ns;
	socklen_t len;
	struct sockaddr_storage addr;
};

static _Atomic uint64_t (*ready_at)[2]; /* [sl__fd_cap][dir], mmap'd */
static struct pending *pend;            /* [sl__fd_cap], mmap'd */
static _Atomic uint32_t fd_hi;          /* 1 + the highest fd written */
static _Atomic uint64_t timer_bits[SL_FD_LIMIT / 64];
static _Atomic uint32_t timer_words; /* 1 + the highest word ever armed */
_Atomic uint64_t sl__ready_next = UINT64_MAX;
_Atomic bool sl__ready_eagain_on;
_Atomic uint64_t sl__ready_quiet_ns;

static void note_fd(int fd)
{
	/* Relaxed: only bounds how much a test's re-init clears. */
	sl__fd_raise_hi(&fd_hi, fd);
}

/* The readiness hook (epoll.c's), or NULL. */
static bool (*change_hook)(int fd);

void sl__ready_on_change_unsync(bool (*hook)(int fd))
{
	change_hook = hook;
}

/* Connects waiting elsewhere (sl__ready_on_waiters_unsync); a copy, so the
 * test is one load. */
static struct sl_ready_waiters waiters;

void sl__ready_on_waiters_unsync(const struct sl_ready_waiters *w)
{
	waiters = *w;
	/* Relaxed: init. Their fds may be hidden at any time. */
	if (w->hidden != NULL)
		atomic_store_explicit(&sl__ready_quiet_ns, UINT64_MAX, memory_order_relaxed);
}

/* What is hidden of fd changed: tell the hook. True if it took it. */
static bool changed(int fd)
{
	return change_hook != NULL && change_hook(fd);
}

void sl__ready_changed(int fd)
{
	changed(fd);
}

static void ready_forget(int fd);

/* True if l is a tunable head of token or leaky buckets (a retune keeps
 * the kind; every per=process limiter is a tunable head, its own or a
 * shared= one): sl_fast_at_rest_tunable_gcra answers for it. */
static bool rests(struct sl_limiter *l)
{
	uint64_t gen;
	return l != NULL && l->kind == SL_KIND_TUNABLE && sl__fast_bucket(sl__fast_slot(l, &gen));
}

int sl__ready_init_unsync(void)
{
	uint32_t eagain = 0;
	sl__st.eagain_rules = 0;
	for (uint32_t i = 0; i < sl__st.policy.n_rules; i++) {
		const struct sl_rule *r = &sl__st.policy.rules[i];
		if (r->action == SL_ACTION_DELAY && r->nonblock == SL_NONBLOCK_EAGAIN)
			eagain |= (uint32_t)1 << i;
	}
	bool on = eagain != 0;
	if (on && ready_at == NULL) {
		ready_at = sl__map(sizeof(*ready_at) * sl__fd_cap);
		pend = sl__map(sizeof(*pend) * sl__fd_cap);
		if (ready_at == NULL || pend == NULL)
			return -1;
	} else if (ready_at != NULL) {
		/* A re-init (tests): clear what was written. */
		uint32_t hi = atomic_load_explicit(&fd_hi, memory_order_relaxed);
		memset((void *)ready_at, 0, sizeof(*ready_at) * hi);
		memset(pend, 0, sizeof(*pend) * hi);
	}
	atomic_store_explicit(&fd_hi, 0, memory_order_relaxed);
	/* Only the words ever armed: the first init writes none (they are
	 * zero, and left so the pages are never touched). */
	const uint32_t words = atomic_load_explicit(&timer_words, memory_order_relaxed);
	for (size_t w = 0; w < words; w++)
		atomic_store_explicit(&timer_bits[w], 0, memory_order_relaxed);
	atomic_store_explicit(&timer_words, 0, memory_order_relaxed);
	atomic_store_explicit(&sl__ready_next, UINT64_MAX, memory_order_relaxed);
	/* Nothing is held any more (the tables are clear), but what waits
	 * elsewhere may hide its fds at any time. */
	atomic_store_explicit(&sl__ready_quiet_ns, waiters.hidden != NULL ? UINT64_MAX : 0,
			      memory_order_relaxed);
	if (on)
		sl__fd_on_forget_unsync(ready_forget);
	/* Relaxed: init runs before any wrapper (or between test cases). */
	atomic_store_explicit(&sl__ready_eagain_on, on, memory_order_relaxed);
	sl__st.eagain_rules = eagain;
	sl__st.probe_rules = eagain & ~sl__st.thread_rules;
	sl__st.rest_rules = 0;
	for (uint32_t rest = sl__st.probe_rules & sl__st.proc_rules; rest != 0; rest &= rest - 1) {
		const unsigned i = (unsigned)__builtin_ctz(rest);
		if (rests(sl__st.rule_lim[i]))
			sl__st.rest_rules |= (uint32_t)1 << i;
	}
	sl__st.hard_rules = sl__st.probe_rules & ~sl__st.rest_rules;
	return 0;
}

/* Raise sl__ready_quiet_ns to t, before a hold until t is stored (ready.h):
 * every hold's end is at most the instant, so a now at or past it finds
 * nothing held. Relaxed: a timestamp, as the holds themselves (a poll that
 * runs at the same time may see the hold or not, as before); the hold's own
 * store comes after it in this thread, and with it anything that publishes
 * the hold to another thread. */
static void quiet_raise(uint64_t t)
{
	uint64_t q = atomic_load_explicit(&sl__ready_quiet_ns, memory_order_relaxed);
	while (q < t &&
	       !atomic_compare_exchange_weak_explicit(&sl__ready_quiet_ns, &q, t,
						      memory_order_relaxed, memory_order_relaxed))
		;
}

uint64_t sl__ready_hold(int fd, enum sl_dir dir, uint64_t t)
{
	if (ready_at == NULL || (unsigned)fd >= sl__fd_cap)
		return 0;
	quiet_raise(t);
	/* Relaxed: a timestamp; the wait wrappers only compare it. */
	uint64_t prev = atomic_exchange_explicit(&ready_at[fd][dir], t, memory_order_relaxed);
	note_fd(fd);
	changed(fd);
	return prev;
}

uint32_t sl__ready_hidden(int fd, uint64_t now, uint64_t *until)
{
	if (ready_at == NULL || (unsigned)fd >= sl__fd_cap)
		return 0;
	uint32_t h = waiters.hidden != NULL ? waiters.hidden(fd, now, until) : 0; /* a conns slot */
	if (h != 0)
		return h;
	uint64_t u = *until;
	/* Acquire pairs with the release in sl__connect_defer: due_ns is set. */
	uint32_t st = atomic_load_explicit(&pend[fd].state, memory_order_acquire);
	if (st == SL_CONN_PENDING || st == SL_CONN_STARTING) {
		uint64_t due = st == SL_CONN_PENDING ? pend[fd].due_ns : now + SL_NB_STARTING_NS;
		*until = due < u ? due : u;
		return SL_HIDE_ALL;
	}
	for (int dir = 0; dir < 2; dir++) {
		/* Relaxed: a timestamp (see sl__nb_end). */
		uint64_t a = atomic_load_explicit(&ready_at[fd][dir], memory_order_relaxed);
		if (a > now) {
			h |= dir == SL_DIR_IN ? SL_HIDE_IN : SL_HIDE_OUT;
			u = a < u ? a : u;
		}
	}
	if (h != 0)
		*until = u;
	return h;
}

void sl__ready_arm(int fd, uint64_t at)
{
	if ((unsigned)fd >= sl__fd_cap)
		return;
	/* seq_cst, with the exchange and the loads in sl__ready_tick_due (and
	 * the wait wrappers' first load of sl__ready_next, ready.h): either
	 * the scan sees this bit, or this lowering of sl__ready_next comes
	 * after the scan's reset of it, so no due fd is forgotten. The same
	 * holds for the bound of the scan, timer_words: raised (or seen
	 * high enough) before the bit is set. */
	sl__bits_set(timer_bits, &timer_words, (uint32_t)fd);
	uint64_t cur = atomic_load(&sl__ready_next);
	while (at < cur && !atomic_compare_exchange_weak(&sl__ready_next, &cur, at))
		;
	if (at < cur) /* lowered: a thread already waiting is woken then (wake.h) */
		sl__wake_lowered(at);
}

/* Start fd's deferred connect if it is due (or now, if `force`).
 * Returns the state it leaves. errno is preserved. */
static uint32_t connect_kick(int fd, uint64_t now)
{
	struct pending *p = &pend[fd];
	uint32_t st = SL_CONN_PENDING;
	/* Acquire: the record's fields written before the release that
	 * published PENDING are visible; only the winner starts it. */
	if (p->due_ns > now ||
	    !atomic_compare_exchange_strong_explicit(&p->state, &st, SL_CONN_STARTING,
						     memory_order_acquire, memory_order_acquire))
		return st;
	int saved = errno;
	int busy = sl__busy;
	sl__busy = 1;
	int r = SL_REAL(connect)(fd, (struct sockaddr *)&p->addr, p->len);
	int e = errno;
	sl__fd_invalidate(fd);
	st = SL_CONN_NONE;
	if (r != 0 && e != EINPROGRESS && e != EINTR) {
		p->err = e;
		st = SL_CONN_FAILED;
	}
	/* Release: err is written before FAILED is seen. */
	atomic_store_explicit(&p->state, st, memory_order_release);
	sl_log(SL_LOG_DEBUG, "fd %d: deferred connect started (%s)", fd,
	       st == SL_CONN_FAILED ? strerror(e) : "in progress");
	sl__busy = busy;
	errno = saved;
	changed(fd);
	return st;
}

__attribute__((noinline)) uint64_t sl__ready_tick_due(uint64_t now)
{
	/* seq_cst, as the inline sl__ready_tick's load (ready.h): read again,
	 * as another thread may have run the timer meanwhile. */
	uint64_t next = atomic_load(&sl__ready_next);
	if (now < next || ready_at == NULL)
		return next;
	atomic_store(&sl__ready_next, UINT64_MAX); /* seq_cst: see sl__ready_arm */
	const size_t words = atomic_load(&timer_words);
	for (size_t w = 0; w < words; w++) {
		uint64_t bits = atomic_load(&timer_bits[w]);
		for (; bits != 0; bits &= bits - 1) {
			int b = __builtin_ctzll(bits);
			uint64_t bit = (uint64_t)1 << b;
			/* Claim the fd: only one thread handles it. */
			if (!(atomic_fetch_and(&timer_bits[w], ~bit) & bit))
				continue;
			int fd = (int)(w * 64 + (size_t)b);
			uint32_t st = atomic_load_explicit(&pend[fd].state, memory_order_acquire);
			if (st == SL_CONN_PENDING)
				connect_kick(fd, now);
			uint64_t until = UINT64_MAX;
			bool hidden = sl__ready_hidden(fd, now, &until) != 0;
			/* The hook re-arms the timer if the fd is still hidden. */
			if (!changed(fd) && hidden)
				sl__ready_arm(fd, until);
		}
	}
	return atomic_load(&sl__ready_next);
}

/* fd is new or closed: forget its hold and deferred connect (a forget hook
 * of fd.c). */
static void ready_forget(int fd)
{
	if (ready_at == NULL || (unsigned)fd >= sl__fd_cap)
		return;
	/* Relaxed: the fd is being closed or is new; nothing is published. */
	if (atomic_load_explicit(&ready_at[fd][0], memory_order_relaxed) != 0)
		atomic_store_explicit(&ready_at[fd][0], 0, memory_order_relaxed);
	if (atomic_load_explicit(&ready_at[fd][1], memory_order_relaxed) != 0)
		atomic_store_explicit(&ready_at[fd][1], 0, memory_order_relaxed);
	if (atomic_load_explicit(&pend[fd].state, memory_order_relaxed) != SL_CONN_NONE)
		atomic_store_explicit(&pend[fd].state, SL_CONN_NONE, memory_order_relaxed);
}

bool sl__connect_defer(struct sl_call *c, const struct sockaddr *sa, socklen_t len)
{
	int fd = c->fd;
	if (!c->defer || c->ready_ns == 0 || pend == NULL || (unsigned)fd >= sl__fd_cap ||
	    len > (socklen_t)sizeof(struct sockaddr_storage) || c->ready_ns <= sl__clock_ns())
		return false;
	struct pending *p = &pend[fd];
	p->due_ns = c->ready_ns;
	p->len = len;
	p->err = 0;
	memcpy(&p->addr, sa, len);
	note_fd(fd);
	/* Relaxed: the release store below orders it for whoever sees
	 * PENDING; a deferred connect's fd is hidden until it is started,
	 * whenever that is: from now on nothing is taken for quiet. */
	atomic_store_explicit(&sl__ready_quiet_ns, UINT64_MAX, memory_order_relaxed);
	/* Release pairs with the acquire loads of the state: the fields above
	 * are complete before anyone sees PENDING. */
	atomic_store_explicit(&p->state, SL_CONN_PENDING, memory_order_release);
	sl__ready_arm(fd, c->ready_ns);
	changed(fd);
	sl_log(SL_LOG_DEBUG, "fd %d: connect deferred by %llu us", fd,
	       (unsigned long long)((c->ready_ns - c->start_ns) / 1000));
	return true;
}

/* What a deferred connect that failed reports, once: its error. */
static int connect_take_err(int fd)
{
	int e = pend[fd].err;
	/* Relaxed: the acquire that saw FAILED already ordered err. */
	atomic_store_explicit(&pend[fd].state, SL_CONN_NONE, memory_order_relaxed);
	return e;
}

bool sl__connect_again(int fd, const struct sockaddr *sa, socklen_t len, int *ret)
{
	if (waiters.again != NULL && waiters.again(fd, ret))
		return true;
	if (pend == NULL || (unsigned)fd >= sl__fd_cap ||
	    atomic_load_explicit(&pend[fd].state, memory_order_relaxed) == SL_CONN_NONE)
		return false;
	uint32_t st = connect_kick(fd, sl__clock_ns());
	*ret = -1;
	if (st == SL_CONN_PENDING || st == SL_CONN_STARTING) {
		errno = EALREADY;
	} else if (st == SL_CONN_FAILED) {
		errno = connect_take_err(fd);
	} else {
		/* Started: the kernel says EALREADY, EISCONN or 0. */
		*ret = SL_REAL(connect)(fd, sa, len);
	}
	return true;
}

int sl__connect_soerror(int fd, int *err)
{
	if (waiters.soerror != NULL && waiters.soerror(fd, err))
		return 1;
	if (pend == NULL || (unsigned)fd >= sl__fd_cap ||
	    atomic_load_explicit(&pend[fd].state, memory_order_relaxed) == SL_CONN_NONE)
		return 0;
	uint32_t st = connect_kick(fd, sl__clock_ns());
	if (st == SL_CONN_NONE)
		return 0;
	*err = st == SL_CONN_FAILED ? connect_take_err(fd) : 0;
	return 1;
}
