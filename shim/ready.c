/*
 * ready.c - non-blocking sockets under delay rules: when is a throttled fd
 * ready again, deferred connects, and the timer that wakes event loops.
 *
 * An event loop must never sleep inside send: every other connection of the
 * loop would stall. So a delay rule with nonblock=eagain (the default), on a
 * call that must not block (O_NONBLOCK on the fd, or MSG_DONTWAIT), polices
 * instead of waiting (act.c): the call transfers what the tokens allow now,
 * a partial count, or fails with EAGAIN. Either way the fd is then
 * "throttled" in that direction until the instant its tokens are there
 * (sl_ready_at[fd][dir]), and the wait wrappers (poll.c, epoll.c) do not
 * report it ready before that instant, and wake the loop at it. The
 * directions: IN for recv and accept, OUT for send and connect.
 *
 * How many tokens to wait for: waking for one byte would wake a loop once
 * per byte. An nb wait is sized for min(what the call still wants, half the
 * rule's piece (its burst), 100 ms of the rate) units (sl__need): half,
 * so that a loop that wakes late (timer granularity, its own work before it
 * calls send again) finds the bucket not yet full and loses no tokens to
 * the burst cap. With the default burst (5 ms of the rate) a connection that
 * always has more to send wakes its loop about 400 times a second; a larger
 * burst= wakes it less often (down to 10 times a second from burst=200ms of
 * the rate on).
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
 * throttle ends (epoll.c takes the throttled direction out of them, so that
 * a level-triggered loop does not spin and an edge-triggered one is woken by
 * the re-arming). Every fd with something due is in a bitmap, and
 * sl_timer_next holds the earliest instant; each wait wrapper calls
 * sl__ready_tick first and caps its timeout at what it returns. When
 * nothing is due that costs one relaxed load.
 *
 * Thread-safety: everything here is thread-safe. The ready instants are
 * plain timestamps (relaxed atomics, nothing hangs on them); a deferred
 * connect's record is published with a release store of its state.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

/* A limiter that names no instant (conns: a slot frees on a close) is
 * looked at again after this long. */
#define SL_NB_BACKOFF_NS 10000000u
/* A deferred connect being started by another thread hides its fd this
 * much longer. */
#define SL_NB_STARTING_NS 100000u

enum sl_conn_state {
	SL_CONN_NONE = 0,
	SL_CONN_PENDING = 1,  /* waiting for its slot: fields below are valid */
	SL_CONN_STARTING = 2, /* a thread is calling the real connect */
	SL_CONN_FAILED = 3,   /* the real connect failed with err */
};

struct sl_pending {
	_Atomic uint32_t state; /* enum sl_conn_state */
	int32_t err;
	uint64_t due_ns;
	socklen_t len;
	struct sockaddr_storage addr;
};

static _Atomic uint64_t (*sl_ready_at)[2]; /* [sl__fd_cap][dir], mmap'd */
static struct sl_pending *sl_pend;          /* [sl__fd_cap], mmap'd */
static _Atomic uint32_t sl_fd_hi;           /* 1 + the highest fd written */
static _Atomic uint64_t sl_timer_bits[SL_FD_LIMIT / 64];
static _Atomic uint32_t sl_timer_words; /* 1 + the highest word ever armed */
static _Atomic uint64_t sl_timer_next = UINT64_MAX;
static _Atomic bool sl_on;

static uint64_t sl_sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static void sl_note_fd(int fd)
{
	/* Relaxed: only bounds how much a test's re-init clears. */
	uint32_t hi = atomic_load_explicit(&sl_fd_hi, memory_order_relaxed);
	while (hi < (uint32_t)fd + 1 &&
	       !atomic_compare_exchange_weak_explicit(&sl_fd_hi, &hi, (uint32_t)fd + 1,
						      memory_order_relaxed, memory_order_relaxed))
		;
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
	if (on && sl_ready_at == NULL) {
		sl_ready_at = sl__map(sizeof(*sl_ready_at) * sl__fd_cap);
		sl_pend = sl__map(sizeof(*sl_pend) * sl__fd_cap);
		if (sl_ready_at == NULL || sl_pend == NULL)
			return -1;
	} else if (sl_ready_at != NULL) {
		/* A re-init (tests): clear what was written. */
		uint32_t hi = atomic_load_explicit(&sl_fd_hi, memory_order_relaxed);
		memset((void *)sl_ready_at, 0, sizeof(*sl_ready_at) * hi);
		memset(sl_pend, 0, sizeof(*sl_pend) * hi);
	}
	atomic_store_explicit(&sl_fd_hi, 0, memory_order_relaxed);
	/* Only the words ever armed: the first init writes none (they are
	 * zero, and left so the pages are never touched). */
	const uint32_t words = atomic_load_explicit(&sl_timer_words, memory_order_relaxed);
	for (size_t w = 0; w < words; w++)
		atomic_store_explicit(&sl_timer_bits[w], 0, memory_order_relaxed);
	atomic_store_explicit(&sl_timer_words, 0, memory_order_relaxed);
	atomic_store_explicit(&sl_timer_next, UINT64_MAX, memory_order_relaxed);
	if (sl__ep_init_unsync(on) != 0)
		return -1;
	/* Relaxed: init runs before any wrapper (or between test cases). */
	atomic_store_explicit(&sl_on, on, memory_order_relaxed);
	sl__st.eagain_rules = eagain;
	return 0;
}

bool sl__ready_on(void)
{
	/* Relaxed: set once at init, before the program runs. */
	return atomic_load_explicit(&sl_on, memory_order_relaxed) && sl__st.active;
}

void sl__nb_read(struct sl_call *c)
{
	uint32_t m = c->nb_maybe;
	c->nb_maybe = 0;
	if ((unsigned)c->fd >= sl__fd_cap)
		return;
	int saved = errno;
	int fl = SL_REAL(fcntl)(c->fd, F_GETFL);
	errno = saved;
	if (fl >= 0 && (fl & O_NONBLOCK))
		c->nb_rules |= m;
}

uint64_t sl__need(const struct sl_call *c, unsigned i, uint64_t quantum_ns)
{
	const struct sl_rule *r = &sl__st.policy.rules[i];
	const struct sl_params p = sl__rule_now(i);
	if (r->op == SL_OP_CONNS || r->unit != SL_UNIT_BYTES || p.period_ns == 0)
		return 1;
	unsigned __int128 q = (unsigned __int128)p.amount * quantum_ns / p.period_ns;
	uint64_t n = q > UINT64_MAX ? UINT64_MAX : (uint64_t)q, half = sl__piece_max(i) / 2;
	n = n < half ? n : half;
	n = c->nb_want != 0 && c->nb_want < n ? c->nb_want : n;
	return n > 0 ? n : 1;
}

int sl__nb_refuse(struct sl_call *c, unsigned i, uint64_t now, uint64_t wait_ns)
{
	if (wait_ns == 0 || sl__st.policy.rules[i].op == SL_OP_CONNS)
		wait_ns = wait_ns > SL_NB_BACKOFF_NS ? wait_ns : SL_NB_BACKOFF_NS;
	uint64_t t = sl_sat_add(now, wait_ns);
	if (t > c->ready_ns)
		c->ready_ns = t;
	c->delayed_rules |= (uint32_t)1 << i;
	sl_log(SL_LOG_DEBUG, "rule %u: %s on non-blocking fd %d not ready for %llu us", i + 1,
	       sl_op_name(c->op), c->fd, (unsigned long long)(wait_ns / 1000));
	return EAGAIN;
}

/* The instant every nb rule of c has the units its next call needs (0 if
 * they have them now). */
static uint64_t sl_nb_next(struct sl_call *c, uint64_t now)
{
	uint64_t t = 0;
	for (uint32_t rest = c->nb_rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		struct sl_limiter *l = sl__limiter(c, i);
		uint64_t need = sl__need(c, i, SL_NB_QUANTUM_NS);
		struct sl_decision d = sl_limiter_acquire(l, need, now, 0);
		if (d.verdict == SL_ADMIT) {
			sl_limiter_refund(l, need, now);
			continue;
		}
		uint64_t w = d.wait_ns != 0 && d.verdict == SL_REFUSE ? d.wait_ns : SL_NB_BACKOFF_NS;
		t = sl_sat_add(now, w) > t ? sl_sat_add(now, w) : t;
	}
	return t;
}

void sl__nb_end_slow(struct sl_call *c, enum sl_dir dir, bool cut)
{
	/* A call that moved less than asked without waiting for a rule may
	 * not have asked whether the fd is non-blocking yet. */
	if (sl__call_nb(c) == 0 || (unsigned)c->fd >= sl__fd_cap)
		return;
	int saved = errno;
	uint64_t now = sl__clock_ns(), t = c->ready_ns;
	if (t == 0 && cut)
		t = sl_nb_next(c, now);
	if (t > now) {
		/* Relaxed: a timestamp; the wait wrappers only compare it. */
		atomic_store_explicit(&sl_ready_at[c->fd][dir], t, memory_order_relaxed);
		sl_note_fd(c->fd);
		if (sl__ep_has(c->fd))
			sl__ep_sync(c->fd);
	}
	errno = saved;
}

uint32_t sl__ready_hidden(int fd, uint64_t now, uint64_t *until)
{
	if (sl_ready_at == NULL || (unsigned)fd >= sl__fd_cap)
		return 0;
	uint64_t u = *until;
	uint32_t h = 0;
	/* Acquire pairs with the release in sl__connect_defer: due_ns is set. */
	uint32_t st = atomic_load_explicit(&sl_pend[fd].state, memory_order_acquire);
	if (st == SL_CONN_PENDING || st == SL_CONN_STARTING) {
		uint64_t due = st == SL_CONN_PENDING ? sl_pend[fd].due_ns
						     : now + SL_NB_STARTING_NS;
		*until = due < u ? due : u;
		return SL_HIDE_ALL;
	}
	for (int dir = 0; dir < 2; dir++) {
		/* Relaxed: a timestamp (see sl__nb_end). */
		uint64_t a = atomic_load_explicit(&sl_ready_at[fd][dir], memory_order_relaxed);
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
	/* seq_cst, with the exchange and the loads in sl__ready_tick: either
	 * the scan sees this bit, or this lowering of sl_timer_next comes
	 * after the scan's reset of it, so no due fd is forgotten. The same
	 * holds for the bound of the scan, sl_timer_words: raised (or seen
	 * high enough) before the bit is set. */
	uint32_t words = atomic_load(&sl_timer_words), need = (uint32_t)fd / 64 + 1;
	while (words < need && !atomic_compare_exchange_weak(&sl_timer_words, &words, need))
		;
	atomic_fetch_or(&sl_timer_bits[fd / 64], (uint64_t)1 << (fd % 64));
	uint64_t cur = atomic_load(&sl_timer_next);
	while (at < cur && !atomic_compare_exchange_weak(&sl_timer_next, &cur, at))
		;
}

/* Start fd's deferred connect if it is due (or now, if `force`).
 * Returns the state it leaves. errno is preserved. */
static uint32_t sl_connect_kick(int fd, uint64_t now)
{
	struct sl_pending *p = &sl_pend[fd];
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
	if (sl__ep_has(fd))
		sl__ep_sync(fd);
	return st;
}

uint64_t sl__ready_tick(uint64_t now)
{
	/* Relaxed: a stale (later) value only delays this round's wake-up;
	 * the thread that armed the timer runs it in its own wait. */
	uint64_t next = atomic_load_explicit(&sl_timer_next, memory_order_relaxed);
	if (now < next || sl_ready_at == NULL)
		return next;
	atomic_store(&sl_timer_next, UINT64_MAX); /* seq_cst: see sl__ready_arm */
	const size_t words = atomic_load(&sl_timer_words);
	for (size_t w = 0; w < words; w++) {
		uint64_t bits = atomic_load(&sl_timer_bits[w]);
		for (; bits != 0; bits &= bits - 1) {
			int b = __builtin_ctzll(bits);
			uint64_t bit = (uint64_t)1 << b;
			/* Claim the fd: only one thread handles it. */
			if (!(atomic_fetch_and(&sl_timer_bits[w], ~bit) & bit))
				continue;
			int fd = (int)(w * 64 + (size_t)b);
			uint32_t st = atomic_load_explicit(&sl_pend[fd].state, memory_order_acquire);
			if (st == SL_CONN_PENDING)
				sl_connect_kick(fd, now);
			uint64_t until = UINT64_MAX;
			bool hidden = sl__ready_hidden(fd, now, &until) != 0;
			if (sl__ep_has(fd))
				sl__ep_sync(fd); /* re-arms the timer if still hidden */
			else if (hidden)
				sl__ready_arm(fd, until);
		}
	}
	return atomic_load(&sl_timer_next);
}

void sl__ready_forget(int fd)
{
	if (sl_ready_at == NULL || (unsigned)fd >= sl__fd_cap)
		return;
	/* Relaxed: the fd is being closed or is new; nothing is published. */
	if (atomic_load_explicit(&sl_ready_at[fd][0], memory_order_relaxed) != 0)
		atomic_store_explicit(&sl_ready_at[fd][0], 0, memory_order_relaxed);
	if (atomic_load_explicit(&sl_ready_at[fd][1], memory_order_relaxed) != 0)
		atomic_store_explicit(&sl_ready_at[fd][1], 0, memory_order_relaxed);
	if (atomic_load_explicit(&sl_pend[fd].state, memory_order_relaxed) != SL_CONN_NONE)
		atomic_store_explicit(&sl_pend[fd].state, SL_CONN_NONE, memory_order_relaxed);
	sl__ep_forget(fd);
}

bool sl__connect_defer(struct sl_call *c, const struct sockaddr *sa, socklen_t len)
{
	int fd = c->fd;
	if (!c->defer || c->ready_ns == 0 || sl_pend == NULL || (unsigned)fd >= sl__fd_cap ||
	    len > (socklen_t)sizeof(struct sockaddr_storage) || c->ready_ns <= sl__clock_ns())
		return false;
	struct sl_pending *p = &sl_pend[fd];
	p->due_ns = c->ready_ns;
	p->len = len;
	p->err = 0;
	memcpy(&p->addr, sa, len);
	sl_note_fd(fd);
	/* Release pairs with the acquire loads of the state: the fields above
	 * are complete before anyone sees PENDING. */
	atomic_store_explicit(&p->state, SL_CONN_PENDING, memory_order_release);
	sl__ready_arm(fd, c->ready_ns);
	if (sl__ep_has(fd))
		sl__ep_sync(fd);
	sl_log(SL_LOG_DEBUG, "fd %d: connect deferred by %llu us", fd,
	       (unsigned long long)((c->ready_ns - c->start_ns) / 1000));
	return true;
}

/* What a deferred connect that failed reports, once: its error. */
static int sl_connect_take_err(int fd)
{
	int e = sl_pend[fd].err;
	/* Relaxed: the acquire that saw FAILED already ordered err. */
	atomic_store_explicit(&sl_pend[fd].state, SL_CONN_NONE, memory_order_relaxed);
	return e;
}

bool sl__connect_again(int fd, const struct sockaddr *sa, socklen_t len, int *ret)
{
	if (sl_pend == NULL || (unsigned)fd >= sl__fd_cap ||
	    atomic_load_explicit(&sl_pend[fd].state, memory_order_relaxed) == SL_CONN_NONE)
		return false;
	uint32_t st = sl_connect_kick(fd, sl__clock_ns());
	*ret = -1;
	if (st == SL_CONN_PENDING || st == SL_CONN_STARTING) {
		errno = EALREADY;
	} else if (st == SL_CONN_FAILED) {
		errno = sl_connect_take_err(fd);
	} else {
		/* Started: the kernel says EALREADY, EISCONN or 0. */
		*ret = SL_REAL(connect)(fd, sa, len);
	}
	return true;
}

int sl__connect_soerror(int fd, int *err)
{
	if (sl_pend == NULL || (unsigned)fd >= sl__fd_cap ||
	    atomic_load_explicit(&sl_pend[fd].state, memory_order_relaxed) == SL_CONN_NONE)
		return 0;
	uint32_t st = sl_connect_kick(fd, sl__clock_ns());
	if (st == SL_CONN_NONE)
		return 0;
	*err = st == SL_CONN_FAILED ? sl_connect_take_err(fd) : 0;
	return 1;
}
