/* SPDX-License-Identifier: MIT */
/*
 * epoll.c - epoll_create, epoll_create1, epoll_ctl, epoll_wait, epoll_pwait
 * and epoll_pwait2 for event loops whose sockets are throttled (ready.c).
 *
 * The kernel does the filtering. While an fd is throttled in a direction,
 * that direction's bits are taken out of every registration of the fd
 * (EPOLL_CTL_MOD), so a level-triggered loop is not woken for it again and
 * again (no busy spin); when the throttle ends they are put back, and the
 * MOD makes the kernel look at the fd again and queue an event if it is
 * ready: an edge-triggered loop gets the edge it missed (no lost wake-up),
 * a oneshot registration fires once. A registration with every bit hidden
 * (a deferred connect: its unconnected socket would show EPOLLHUP) is
 * "parked": EPOLLONESHOT with no events, so at most one EPOLLHUP comes back,
 * which epoll_wait drops. EPOLLEXCLUSIVE registrations cannot be modified:
 * they are deleted and added again instead.
 *
 * To know which fd an event is about, the shim owns the epoll_data of each
 * registration: the kernel holds a token (a magic in the top 16 bits, the
 * slot and the fd) and epoll_wait puts the program's data back. Each fd has
 * SL_EP_SLOTS slots (one per epoll set it is in); a registration beyond
 * that fails with ENOMEM (logged), and fds at or above sl__fd_cap pass
 * through with their own data and are never hidden. Events that do not
 * carry the magic (a registration made before the shim was active) pass
 * through unchanged.
 *
 * The wait wrappers run the ready timer first (sl__ready_tick) and cap
 * their timeout at its next instant, so the loop wakes when a throttled fd
 * becomes ready; such an early wake-up that finds no event waits again for
 * what is left of the caller's timeout, and never returns 0 before it.
 * A wake-up for a ready instant waits with epoll_pwait2 (nanoseconds) where
 * the kernel has it, else to the next millisecond (rounded up, never early).
 *
 * Locking: each fd's slots have a small spinlock, held while its kernel
 * registrations are changed (epoll_ctl is a short, non-blocking system
 * call), never while sleeping or waiting. epoll_wait takes no lock.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <string.h>

#include "anchors.h"
#include "acchold.h"
#include "clock.h"
#include "epoll.h"
#include "fd.h"
#include "hup.h"
#include "log.h"
#include "nb.h"
#include "ready.h"
#include "real.h"
#include "wake.h"

/* Referenced by the unit tests so that this archive member is linked into
 * them even when a sanitizer runtime already defines the libc names. */
const int sl__epoll_anchor = 1;

#define SL_EP_SLOTS 4
#define SL_EP_MAGIC 0x51ceull
#define SL_EP_TOKEN(fd, s) ((SL_EP_MAGIC << 48) | ((uint64_t)(s) << 32) | (uint32_t)(fd))
/* Bits that say what to wait for (the rest are flags, or always reported). */
#define SL_EP_EVBITS                                                                               \
	(EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM | EPOLLWRBAND |   \
	 EPOLLRDHUP | EPOLLMSG)

/* What the kernel holds for a registration. */
enum ep_ks {
	SL_KS_MASK = 0,   /* kevents */
	SL_KS_PARKED = 1, /* EPOLLONESHOT, no events: its events are dropped */
	SL_KS_ABSENT = 2, /* deleted (EPOLLEXCLUSIVE, everything hidden) */
};

struct ep_reg {
	_Atomic int32_t epfd1;   /* epoll fd + 1; 0: free slot */
	_Atomic uint32_t events; /* the program's events */
	_Atomic uint64_t data;   /* the program's epoll_data */
	uint32_t kevents;        /* (lock) events last given to the kernel */
	_Atomic uint8_t ks;      /* enum ep_ks; written under the lock */
	_Atomic uint8_t armed;   /* 0 once a oneshot event was delivered, until MOD */
};

struct ep_fd {
	atomic_flag lock;
	_Atomic uint8_t n; /* slots in use */
	struct ep_reg r[SL_EP_SLOTS];
};

static struct ep_fd *ep_table; /* [sl__fd_cap], mmap'd */
static _Atomic uint32_t ep_hi; /* 1 + the highest fd epoll_ctl was given */
static _Atomic int ep_full_logged;

static bool ep_sync(int fd);
static void ep_forget(int fd);

int sl__ep_init_unsync(bool on)
{
	if (!on && ep_table == NULL)
		return 0;
	if (ep_table == NULL) {
		ep_table = sl__map(sizeof(*ep_table) * sl__fd_cap);
		if (ep_table == NULL)
			return -1;
	} else {
		memset(ep_table, 0,
		       sizeof(*ep_table) * atomic_load_explicit(&ep_hi, memory_order_relaxed));
	}
	atomic_store_explicit(&ep_hi, 0, memory_order_relaxed);
	sl__fd_on_forget_unsync(ep_forget);
	sl__ready_on_change_unsync(ep_sync);
	return 0;
}

/* ep_hi covers fd from before its lock is first taken (ep_add, and
 * sl__ep_after_fork_unsync's scan). Relaxed: a bound for scans; the lock's
 * atomic read-modify-write that follows (a full barrier on x86) orders it
 * before the lock for a fork's copy of memory. */
static void ep_raise_hi(int fd)
{
	uint32_t hi = atomic_load_explicit(&ep_hi, memory_order_relaxed);
	while (hi < (uint32_t)fd + 1 &&
	       !atomic_compare_exchange_weak_explicit(&ep_hi, &hi, (uint32_t)fd + 1,
						      memory_order_relaxed, memory_order_relaxed))
		;
}

void sl__ep_after_fork_unsync(void)
{
	if (ep_table == NULL)
		return;
	/* Relaxed: the child has one thread. A lock that another thread of
	 * the parent held at fork has no owner here: free it. Read as a byte
	 * first (GCC's atomic_flag is one) so that the pages of fds that were
	 * never locked stay untouched. */
	uint32_t hi = atomic_load_explicit(&ep_hi, memory_order_relaxed);
	for (uint32_t fd = 0; fd < sl__fd_cap && fd < hi; fd++)
		if (*(volatile const unsigned char *)&ep_table[fd].lock != 0)
			atomic_flag_clear_explicit(&ep_table[fd].lock, memory_order_relaxed);
}

static void ep_lock(struct ep_fd *e)
{
	/* Acquire pairs with the release in ep_unlock: the slots as the
	 * last holder left them. */
	for (int spins = 0; atomic_flag_test_and_set_explicit(&e->lock, memory_order_acquire);
	     spins++)
		if (spins > 64)
			sched_yield();
}

static void ep_unlock(struct ep_fd *e)
{
	atomic_flag_clear_explicit(&e->lock, memory_order_release);
}

static bool ep_has(int fd)
{
	/* Relaxed: a hint; the slots are read under the lock. */
	return ep_table != NULL && (unsigned)fd < sl__fd_cap &&
	       atomic_load_explicit(&ep_table[fd].n, memory_order_relaxed) != 0;
}

/* What the kernel should hold for program events ev with bits `hidden`
 * hidden: SL_KS_MASK with *kev, or SL_KS_PARKED. */
static enum ep_ks ep_want(uint32_t ev, uint32_t hidden, uint32_t *kev)
{
	*kev = ev;
	if (hidden == 0)
		return SL_KS_MASK;
	if (hidden == SL_HIDE_ALL || (ev & SL_EP_EVBITS & ~hidden) == 0)
		return SL_KS_PARKED;
	*kev = ev & ~hidden;
	return SL_KS_MASK;
}

/* Give the kernel what slot s of fd should hold now. Lock held. Returns 0,
 * or -1 with errno if the kernel refused (the registration is gone). */
static int ep_apply(int fd, int s, uint32_t hidden)
{
	struct ep_reg *g = &ep_table[fd].r[s];
	int epfd = atomic_load_explicit(&g->epfd1, memory_order_relaxed) - 1;
	uint32_t ev = atomic_load_explicit(&g->events, memory_order_relaxed), kev;
	enum ep_ks want = ep_want(ev, hidden, &kev);
	enum ep_ks ks = (enum ep_ks)atomic_load_explicit(&g->ks, memory_order_relaxed);
	if (!atomic_load_explicit(&g->armed, memory_order_relaxed))
		return 0; /* a delivered oneshot: the program re-arms it */
	if (want == ks && (want != SL_KS_MASK || kev == g->kevents))
		return 0;
	struct epoll_event e = {.events = kev, .data.u64 = SL_EP_TOKEN(fd, s)};
	int r = 0;
	if (ev & EPOLLEXCLUSIVE) {
		if (ks != SL_KS_ABSENT)
			r = SL_REAL(epoll_ctl)(epfd, EPOLL_CTL_DEL, fd, NULL);
		if (r == 0 && want == SL_KS_MASK)
			r = SL_REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, &e);
		if (want == SL_KS_PARKED)
			want = SL_KS_ABSENT;
	} else {
		if (want == SL_KS_PARKED)
			e.events = EPOLLONESHOT;
		r = SL_REAL(epoll_ctl)(epfd, EPOLL_CTL_MOD, fd, &e);
	}
	if (r == 0) {
		g->kevents = kev;
		atomic_store_explicit(&g->ks, (uint8_t)want, memory_order_relaxed);
	}
	return r;
}

static void ep_free(struct ep_fd *e, int s)
{
	/* Relaxed: under the lock; epoll_wait reading a freed slot drops the
	 * event, as the kernel would after EPOLL_CTL_DEL. */
	atomic_store_explicit(&e->r[s].epfd1, 0, memory_order_relaxed);
	atomic_fetch_sub_explicit(&e->n, 1, memory_order_relaxed);
}

/* The readiness hook (ready.h): bring the kernel registrations of fd in
 * line with what is hidden now. */
static bool ep_sync(int fd)
{
	if (!ep_has(fd))
		return false;
	int saved = errno;
	uint64_t now = sl__clock_ns(), until = UINT64_MAX;
	uint32_t hidden = sl__ready_hidden(fd, now, &until);
	struct ep_fd *e = &ep_table[fd];
	ep_lock(e);
	for (int s = 0; s < SL_EP_SLOTS; s++)
		if (atomic_load_explicit(&e->r[s].epfd1, memory_order_relaxed) != 0 &&
		    ep_apply(fd, s, hidden) != 0 && (errno == ENOENT || errno == EBADF))
			ep_free(e, s);
	ep_unlock(e);
	if (hidden != 0)
		sl__ready_arm(fd, until);
	errno = saved;
	return true;
}

/* The forget hook (fd.h): fd is closed or new. */
static void ep_forget(int fd)
{
	if (!ep_has(fd))
		return;
	struct ep_fd *e = &ep_table[fd];
	ep_lock(e);
	for (int s = 0; s < SL_EP_SLOTS; s++)
		if (atomic_load_explicit(&e->r[s].epfd1, memory_order_relaxed) != 0)
			ep_free(e, s);
	ep_unlock(e);
}

/* The slot of fd in epfd, or -1. Lock held. */
static int ep_find(struct ep_fd *e, int epfd)
{
	for (int s = 0; s < SL_EP_SLOTS; s++)
		if (atomic_load_explicit(&e->r[s].epfd1, memory_order_relaxed) == epfd + 1)
			return s;
	return -1;
}

/* EPOLL_CTL_ADD of a mirrored fd. Lock held. */
static int ep_add(int epfd, int fd, const struct epoll_event *ev, uint32_t hidden)
{
	struct ep_fd *e = &ep_table[fd];
	int s = ep_find(e, epfd);
	bool stale = s >= 0; /* fd was closed and reused without our seeing it */
	for (int i = 0; s < 0 && i < SL_EP_SLOTS; i++)
		if (atomic_load_explicit(&e->r[i].epfd1, memory_order_relaxed) == 0)
			s = i;
	if (s < 0) {
		if (!atomic_exchange_explicit(&ep_full_logged, 1, memory_order_relaxed))
			sl_log(SL_LOG_WARN,
			       "fd %d is in more than %d epoll sets: epoll_ctl fails "
			       "with ENOMEM",
			       fd, SL_EP_SLOTS);
		errno = ENOMEM;
		return -1;
	}
	uint32_t kev;
	enum ep_ks want = ep_want(ev->events, hidden, &kev);
	struct epoll_event k = {.events = want == SL_KS_PARKED ? EPOLLONESHOT : kev,
				.data.u64 = SL_EP_TOKEN(fd, s)};
	if ((ev->events & EPOLLEXCLUSIVE) && want == SL_KS_PARKED)
		k.events = ev->events; /* added, then taken out below */
	int r = SL_REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, &k);
	if (r != 0)
		return r;
	struct ep_reg *g = &e->r[s];
	/* Release on data pairs with the acquire in ep_translate. */
	atomic_store_explicit(&g->data, ev->data.u64, memory_order_release);
	atomic_store_explicit(&g->events, ev->events, memory_order_relaxed);
	atomic_store_explicit(&g->armed, 1, memory_order_relaxed);
	g->kevents = k.events;
	atomic_store_explicit(&g->ks,
			      (uint8_t)(want == SL_KS_PARKED && !(ev->events & EPOLLEXCLUSIVE)
						? SL_KS_PARKED
						: SL_KS_MASK),
			      memory_order_relaxed);
	if (!stale) {
		atomic_store_explicit(&g->epfd1, epfd + 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&e->n, 1, memory_order_relaxed);
	}
	if ((ev->events & EPOLLEXCLUSIVE) && want == SL_KS_PARKED)
		ep_apply(fd, s, hidden);
	return 0;
}

/* EPOLL_CTL_MOD of a mirrored registration. Lock held. */
static int ep_mod(int fd, int s, const struct epoll_event *ev, uint32_t hidden)
{
	struct ep_reg *g = &ep_table[fd].r[s];
	uint32_t old = atomic_load_explicit(&g->events, memory_order_relaxed);
	if ((old | ev->events) & EPOLLEXCLUSIVE) { /* the kernel refuses it: let it say so */
		int epfd = atomic_load_explicit(&g->epfd1, memory_order_relaxed) - 1;
		struct epoll_event k = {.events = ev->events, .data.u64 = SL_EP_TOKEN(fd, s)};
		return SL_REAL(epoll_ctl)(epfd, EPOLL_CTL_MOD, fd, &k);
	}
	atomic_store_explicit(&g->data, ev->data.u64, memory_order_release);
	atomic_store_explicit(&g->events, ev->events, memory_order_relaxed);
	atomic_store_explicit(&g->armed, 1, memory_order_relaxed);
	/* Force the MOD: it re-arms a oneshot registration even when the
	 * events are the same. */
	g->kevents = ~0u;
	atomic_store_explicit(&g->ks, SL_KS_MASK, memory_order_relaxed);
	return ep_apply(fd, s, hidden);
}

SL_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (sl__busy || !sl__ready_on() || ep_table == NULL || (unsigned)fd >= sl__fd_cap ||
	    epfd < 0 || (ev == NULL && op != EPOLL_CTL_DEL))
		return SL_REAL(epoll_ctl)(epfd, op, fd, ev);
	uint64_t until = UINT64_MAX;
	uint32_t hidden = sl__ready_hidden(fd, sl__clock_ns(), &until);
	struct ep_fd *e = &ep_table[fd];
	ep_raise_hi(fd);
	ep_lock(e);
	int s = ep_find(e, epfd), r;
	if (op == EPOLL_CTL_ADD) {
		r = ep_add(epfd, fd, ev, hidden);
	} else if (s < 0) {
		r = SL_REAL(epoll_ctl)(epfd, op, fd, ev); /* not ours: as it was made */
	} else if (op == EPOLL_CTL_MOD) {
		r = ep_mod(fd, s, ev, hidden);
		if (r != 0 && errno == ENOENT)
			ep_free(e, s);
	} else if (op != EPOLL_CTL_DEL) {
		r = SL_REAL(epoll_ctl)(epfd, op, fd, ev);
	} else {
		r = atomic_load_explicit(&e->r[s].ks, memory_order_relaxed) == SL_KS_ABSENT
			    ? 0
			    : SL_REAL(epoll_ctl)(epfd, op, fd, ev);
		ep_free(e, s);
	}
	ep_unlock(e);
	if (r == 0 && hidden != 0 && op != EPOLL_CTL_DEL)
		sl__ready_arm(fd, until);
	return r;
}

/* A new epoll fd: slots left by a closed one of the same number are stale. */
static int ep_created(int epfd)
{
	if (epfd >= 0)
		sl__fd_opened(epfd); /* fd.c: not a socket, whatever the number was */
	if (epfd < 0 || ep_table == NULL)
		return epfd;
	sl__wake_add(epfd);
	uint32_t hi = atomic_load_explicit(&ep_hi, memory_order_relaxed);
	for (uint32_t fd = 0; fd < hi; fd++) {
		struct ep_fd *e = &ep_table[fd];
		if (atomic_load_explicit(&e->n, memory_order_relaxed) == 0)
			continue;
		ep_lock(e);
		int s = ep_find(e, epfd);
		if (s >= 0)
			ep_free(e, s);
		ep_unlock(e);
	}
	return epfd;
}

SL_EXPORT int epoll_create(int size)
{
	return ep_created(SL_REAL(epoll_create)(size));
}

SL_EXPORT int epoll_create1(int flags)
{
	return ep_created(SL_REAL(epoll_create1)(flags));
}

/* An event with HUP for slot s of fd (hup.h): true if it must wait for the
 * end of fd's hold in IN; the registration is parked until then (ep_sync
 * brings it back; checked again under the lock, so a hold that ended
 * meanwhile brings it back at once). */
static bool ep_hup(uint32_t fd, uint32_t s, uint32_t rev, uint32_t asked)
{
	if (!sl__hup_held((int)fd, rev, asked))
		return false;
	int saved = errno;
	struct ep_fd *e = &ep_table[fd];
	uint64_t until = UINT64_MAX;
	/* Asked before the lock, as ep_sync does: a deferred connect that
	 * comes due here is started, and its readiness hook takes this lock. */
	uint32_t hidden = sl__ready_hidden((int)fd, sl__clock_ns(), &until);
	ep_lock(e);
	if (atomic_load_explicit(&e->r[s].epfd1, memory_order_relaxed) != 0) {
		ep_apply((int)fd, (int)s, SL_HIDE_ALL);
		if ((hidden & SL_HIDE_IN) == 0)
			ep_apply((int)fd, (int)s, hidden);
	}
	ep_unlock(e);
	if (until != UINT64_MAX)
		sl__ready_arm((int)fd, until);
	errno = saved;
	return true;
}

/* Put the program's data back into the n events; drop those of parked or
 * freed registrations. Returns how many are left. */
static int ep_translate(struct epoll_event *ev, int n)
{
	int m = 0;
	uint64_t now = 0; /* read at the first event that needs it */
	for (int i = 0; i < n; i++) {
		uint64_t u = ev[i].data.u64;
		if ((u >> 48) != SL_EP_MAGIC) {
			ev[m++] = ev[i];
			continue;
		}
		if (u == SL_EP_WAKE_TOKEN) { /* another thread's hold ended (wake.h) */
			sl__wake_fired();
			continue;
		}
		uint32_t fd = (uint32_t)u, s = (uint32_t)(u >> 32) & 0xffffu;
		if (fd >= sl__fd_cap || s >= SL_EP_SLOTS)
			continue;
		struct ep_reg *g = &ep_table[fd].r[s];
		/* Relaxed: a stale answer drops or delivers one event, which the
		 * kernel may also do around a concurrent epoll_ctl. */
		if (atomic_load_explicit(&g->epfd1, memory_order_relaxed) == 0 ||
		    atomic_load_explicit(&g->ks, memory_order_relaxed) == SL_KS_PARKED)
			continue;
		uint32_t asked = atomic_load_explicit(&g->events, memory_order_relaxed);
		if ((ev[i].events & SL_HUP_BITS) && ep_hup(fd, s, ev[i].events, asked))
			continue;
		/* Ready, but its next call would be refused for units
		 * (sl__nb_probe): held back (the hold takes the bits out of
		 * its registrations and gives them back when it ends, which
		 * re-arms an edge or a oneshot), and not reported. */
		uint32_t rev = ev[i].events;
		if (sl__nb_may_hold((int)fd, rev)) {
			if (now == 0)
				now = sl__clock_ns();
			rev &= ~sl__nb_hold_unready((int)fd, rev, now);
			if (rev == 0)
				continue;
		}
		if (asked & EPOLLONESHOT)
			atomic_store_explicit(&g->armed, 0, memory_order_relaxed);
		ev[m] = ev[i];
		ev[m].events = sl__hup_filter((int)fd, rev);
		/* Acquire pairs with the release in ep_add / ep_mod. */
		ev[m].data.u64 = atomic_load_explicit(&g->data, memory_order_acquire);
		m++;
	}
	return m;
}

enum ep_how { SL_EP_WAIT, SL_EP_PWAIT, SL_EP_PWAIT2 };

static _Atomic int pwait2_missing; /* the kernel lacks epoll_pwait2 */

/* One real wait until t (UINT64_MAX: none), d ns from now. `precise`: the
 * wait ends at a ready instant, so wait to the nanosecond if the kernel can
 * (epoll_pwait2), not to the next millisecond. */
static int ep_wait_once(enum ep_how how, int epfd, struct epoll_event *ev, int max, uint64_t t,
			uint64_t d, bool precise, const sigset_t *mask)
{
	/* Relaxed: a hint; a racing thread meets ENOSYS once itself. */
	if (how == SL_EP_PWAIT2 ||
	    (precise && !atomic_load_explicit(&pwait2_missing, memory_order_relaxed))) {
		struct timespec ts = {.tv_sec = (time_t)(d / 1000000000u),
				      .tv_nsec = (long)(d % 1000000000u)};
		int n = SL_REAL(epoll_pwait2)(epfd, ev, max, t == UINT64_MAX ? NULL : &ts, mask);
		if (n >= 0 || errno != ENOSYS || how == SL_EP_PWAIT2)
			return n;
		atomic_store_explicit(&pwait2_missing, 1, memory_order_relaxed);
	}
	uint64_t ms = (d + 999999u) / 1000000u; /* rounded up: never early */
	int to = t == UINT64_MAX ? -1 : ms > INT_MAX ? INT_MAX : (int)ms;
	return how == SL_EP_PWAIT ? SL_REAL(epoll_pwait)(epfd, ev, max, to, mask)
				  : SL_REAL(epoll_wait)(epfd, ev, max, to);
}

/* Add an EPOLLIN event for each listener registered in epfd that has a
 * held connection due (acchold.c: the kernel's listener may have nothing
 * queued), unless the kernel reported it already. Raw tokens, before
 * ep_translate. Returns the new count. */
static int ep_inject(int epfd, struct epoll_event *ev, int n, int max)
{
	uint64_t now = sl__clock_ns();
	const uint32_t hi = atomic_load_explicit(&ep_hi, memory_order_relaxed);
	for (uint32_t fd = 0; fd < hi && n < max; fd++) {
		struct ep_fd *e = &ep_table[fd];
		if (atomic_load_explicit(&e->n, memory_order_relaxed) == 0 ||
		    !sl__ah_due((int)fd, now))
			continue;
		for (int s = 0; s < SL_EP_SLOTS && n < max; s++) {
			struct ep_reg *g = &e->r[s];
			if (atomic_load_explicit(&g->epfd1, memory_order_relaxed) != epfd + 1 ||
			    !(atomic_load_explicit(&g->events, memory_order_relaxed) & EPOLLIN))
				continue;
			uint64_t tok = SL_EP_TOKEN(fd, s);
			bool there = false;
			for (int k = 0; k < n && !there; k++)
				there = ev[k].data.u64 == tok;
			if (!there)
				ev[n++] = (struct epoll_event){.events = EPOLLIN, .data.u64 = tok};
		}
	}
	return n;
}

/* The wait loop of every epoll_wait flavour; deadline is absolute
 * (UINT64_MAX: none). */
static int ep_wait(enum ep_how how, int epfd, struct epoll_event *ev, int max, uint64_t deadline,
		   const sigset_t *mask)
{
	for (;;) {
		/* Counted as waiting before the timer is read (wake.h): a hold
		 * another thread makes from here on wakes this wait. */
		sl__wake_enter();
		uint64_t now = sl__clock_ns(), next = sl__ready_tick(now);
		if (sl__ah_on()) { /* held connections (acchold.c) */
			uint64_t h = sl__ah_next(now);
			next = h < next ? h : next;
			/* One already due on this epoll set: report it now, do
			 * not wait (ev is scratch until the wait fills it). */
			if (max > 0 && ep_inject(epfd, ev, 0, max) > 0)
				next = now;
		}
		uint64_t t = deadline < next ? deadline : next, d = t > now ? t - now : 0;
		int n = ep_wait_once(how, epfd, ev, max, t, d, next < deadline, mask);
		sl__wake_leave();
		if (n >= 0 && sl__ah_on())
			n = ep_inject(epfd, ev, n, max);
		if (n <= 0 && (n < 0 || sl__clock_ns() >= deadline))
			return n;
		if (n > 0 && (n = ep_translate(ev, n)) > 0)
			return n;
		if (sl__clock_ns() >= deadline)
			return 0;
	}
}

/* Absolute deadline of a timeout in ms (negative: none). */
static uint64_t ms_deadline(int ms)
{
	return ms < 0 ? UINT64_MAX : sl__clock_ns() + (uint64_t)ms * 1000000u;
}

SL_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	if (sl__busy || !sl__ready_on() || max <= 0)
		return SL_REAL(epoll_wait)(epfd, ev, max, timeout);
	return ep_wait(SL_EP_WAIT, epfd, ev, max, ms_deadline(timeout), NULL);
}

SL_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
			  const sigset_t *mask)
{
	if (sl__busy || !sl__ready_on() || max <= 0)
		return SL_REAL(epoll_pwait)(epfd, ev, max, timeout, mask);
	return ep_wait(SL_EP_PWAIT, epfd, ev, max, ms_deadline(timeout), mask);
}

SL_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts,
			   const sigset_t *mask)
{
	if (sl__busy || !sl__ready_on() || max <= 0 ||
	    (ts != NULL && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)))
		return SL_REAL(epoll_pwait2)(epfd, ev, max, ts, mask);
	uint64_t deadline = UINT64_MAX;
	if (ts != NULL) {
		uint64_t s = (uint64_t)ts->tv_sec;
		deadline = s > (UINT64_MAX - sl__clock_ns()) / 1000000000u - 1
				   ? UINT64_MAX
				   : sl__clock_ns() + s * 1000000000u + (uint64_t)ts->tv_nsec;
	}
	return ep_wait(SL_EP_PWAIT2, epfd, ev, max, deadline, mask);
}
