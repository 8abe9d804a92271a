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
 * A registration no rule can ever hide is not mirrored either: the kernel
 * holds the program's own data, and its events pass through epoll_wait as
 * they come (ep_add_plain). That is an fd whose byte says classified, and no
 * rule of any kind a candidate (fd.h: every pass bit with READY): a file,
 * a pipe, an eventfd, or a socket of a family and type no rule names. A
 * registration belongs to the open file, whose family and type never
 * change; a connect that gives a socket a peer narrows which candidates
 * match, never adds one (a socket that has any candidate is mirrored,
 * matched or not). A new file at the number is a new registration, made
 * by a new EPOLL_CTL_ADD, which looks again. So nothing can hide such a
 * registration later: no hold (nb.c asks only matched fds, whose pass bits
 * are clear), no deferred connect, no held HUP, no held connection (all of
 * sockets with candidates). Data whose top 16 bits are the magic would be
 * taken for a token: such a registration is mirrored (ADD), or becomes
 * mirrored (a MOD of a plain one: ep_adopt). Its events are the kernel's:
 * one of a file still open through a dup after the registered fd was
 * closed keeps coming, with its data, as without the shim (a mirrored
 * registration's are dropped once its fd is forgotten).
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
 *
 * This file keeps the registrations (epoll_create*, epoll_ctl, the mirror
 * of what the kernel holds, kept in line when what is hidden changes);
 * epwait.c the waits. Their shared table: epoll_tab.h.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <string.h>

#include "anchors.h"
#include "acchold.h"
#include "clock.h"
#include "epoll.h"
#include "epoll_tab.h"
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

struct ep_fd *sl__ep_table; /* [sl__fd_cap], mmap'd */
_Atomic uint32_t sl__ep_hi; /* 1 + the highest fd epoll_ctl was given */
static _Atomic int ep_full_logged;

static bool ep_sync(int fd);
static void ep_forget(int fd);

int sl__ep_init_unsync(bool on)
{
	if (!on && sl__ep_table == NULL)
		return 0;
	if (sl__ep_table == NULL) {
		sl__ep_table = sl__map(sizeof(*sl__ep_table) * sl__fd_cap);
		if (sl__ep_table == NULL)
			return -1;
	} else {
		memset(sl__ep_table, 0,
		       sizeof(*sl__ep_table) *
			       atomic_load_explicit(&sl__ep_hi, memory_order_relaxed));
	}
	atomic_store_explicit(&sl__ep_hi, 0, memory_order_relaxed);
	sl__fd_on_forget_unsync(ep_forget);
	sl__ready_on_change_unsync(ep_sync);
	return 0;
}

/* sl__ep_hi covers fd from before its lock is first taken (ep_add, and
 * sl__ep_after_fork_unsync's scan). Relaxed: a bound for scans; the lock's
 * atomic read-modify-write that follows (a full barrier on x86) orders it
 * before the lock for a fork's copy of memory. */
static void ep_raise_hi(int fd)
{
	sl__fd_raise_hi(&sl__ep_hi, fd);
}

void sl__ep_after_fork_unsync(void)
{
	if (sl__ep_table == NULL)
		return;
	/* Relaxed: the child has one thread. A lock that another thread of
	 * the parent held at fork has no owner here: free it. Read as a byte
	 * first (GCC's atomic_flag is one) so that the pages of fds that were
	 * never locked stay untouched. */
	uint32_t hi = atomic_load_explicit(&sl__ep_hi, memory_order_relaxed);
	for (uint32_t fd = 0; fd < sl__fd_cap && fd < hi; fd++)
		if (*(volatile const unsigned char *)&sl__ep_table[fd].lock != 0)
			atomic_flag_clear_explicit(&sl__ep_table[fd].lock, memory_order_relaxed);
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
int sl__ep_apply(int fd, int s, uint32_t hidden)
{
	struct ep_reg *g = &sl__ep_table[fd].r[s];
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
	if (!sl__ep_has(fd))
		return false;
	int saved = errno;
	uint64_t now = sl__clock_ns(), until = UINT64_MAX;
	uint32_t hidden = sl__ready_hidden(fd, now, &until);
	struct ep_fd *e = &sl__ep_table[fd];
	sl__ep_lock(e);
	for (int s = 0; s < SL_EP_SLOTS; s++)
		if (atomic_load_explicit(&e->r[s].epfd1, memory_order_relaxed) != 0 &&
		    sl__ep_apply(fd, s, hidden) != 0 && (errno == ENOENT || errno == EBADF))
			ep_free(e, s);
	sl__ep_unlock(e);
	if (hidden != 0)
		sl__ready_arm(fd, until);
	errno = saved;
	return true;
}

/* The forget hook (fd.h): fd is closed or new. */
static void ep_forget(int fd)
{
	if (!sl__ep_has(fd))
		return;
	struct ep_fd *e = &sl__ep_table[fd];
	sl__ep_lock(e);
	for (int s = 0; s < SL_EP_SLOTS; s++)
		if (atomic_load_explicit(&e->r[s].epfd1, memory_order_relaxed) != 0)
			ep_free(e, s);
	sl__ep_unlock(e);
}

/* The slot of fd in epfd, or -1. Lock held. */
static int ep_find(struct ep_fd *e, int epfd)
{
	for (int s = 0; s < SL_EP_SLOTS; s++)
		if (atomic_load_explicit(&e->r[s].epfd1, memory_order_relaxed) == epfd + 1)
			return s;
	return -1;
}

/* The slot of fd for epfd: its own (*stale: fd was closed and reused
 * without our seeing it), else a free one. -1 with ENOMEM (logged once) if
 * fd is in SL_EP_SLOTS sets already. Lock held. */
static int ep_slot(struct ep_fd *e, int fd, int epfd, bool *stale)
{
	int s = ep_find(e, epfd);
	*stale = s >= 0;
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
	}
	return s;
}

/* EPOLL_CTL_ADD of a mirrored fd. Lock held. */
static int ep_add(int epfd, int fd, const struct epoll_event *ev, uint32_t hidden)
{
	struct ep_fd *e = &sl__ep_table[fd];
	bool stale;
	int s = ep_slot(e, fd, epfd, &stale);
	if (s < 0)
		return -1;
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
		sl__ep_apply(fd, s, hidden);
	return 0;
}

/* EPOLL_CTL_MOD of a mirrored registration. Lock held. */
static int ep_mod(int fd, int s, const struct epoll_event *ev, uint32_t hidden)
{
	struct ep_reg *g = &sl__ep_table[fd].r[s];
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
	return sl__ep_apply(fd, s, hidden);
}

/* True if fd is classified and no rule of any kind is a candidate for it
 * (every pass bit with READY, fd.h): nothing can ever hide the open file
 * it names (see the top of this file). Relaxed: the pass bits carry no
 * data, and the record is not read. */
static bool ep_unruled(int fd)
{
	const uint8_t want = SL_FDB_READY | SL_FDB_PASS_ALL;
	return (atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed) & want) == want;
}

/* True if ev's data could be taken for a token (its top 16 bits are the
 * magic): such a registration is mirrored, whatever its fd. */
static bool ep_token_like(const struct epoll_event *ev)
{
	return (ev->data.u64 >> 48) == SL_EP_MAGIC;
}

static int ep_adopt(int epfd, int fd, const struct epoll_event *ev);

/* EPOLL_CTL_ADD of an fd nothing can hide (ep_unruled), with data that is
 * not token-like: the program's own registration, not mirrored. */
static int ep_add_plain(int epfd, int fd, struct epoll_event *ev)
{
	int r = SL_REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, ev);
	if (r != 0)
		return r;
	int saved = errno;
	/* A slot of epfd left by a file that had the number before, closed
	 * without our seeing it (as ep_add's stale slot): freed, so that a MOD
	 * or DEL of this registration goes to the kernel as it was made. */
	if (sl__ep_has(fd)) {
		struct ep_fd *e = &sl__ep_table[fd];
		sl__ep_lock(e);
		int s = ep_find(e, epfd);
		if (s >= 0)
			ep_free(e, s);
		sl__ep_unlock(e);
	}
	/* The number was closed meanwhile (another thread; close forgets it
	 * before the real close: wrap_sock.c) and the kernel may have
	 * registered the file that took it, which rules may hide: mirrored
	 * after all. ENOENT or EBADF: the kernel registered the old file, or
	 * nothing that is still open at the number; it stays as it is (so
	 * does an EPOLLEXCLUSIVE one, which cannot be modified). */
	if (!ep_unruled(fd))
		(void)ep_adopt(epfd, fd, ev);
	errno = saved;
	return 0;
}

/* Make the kernel's registration of fd in epfd, made with the program's own
 * data (ep_add_plain, or before the shim was active), a mirrored one with
 * ev (EPOLL_CTL_MOD with the slot's token). Returns what that MOD returns
 * (0, or -1 with errno: ENOENT if there is no such registration, EINVAL
 * for EPOLLEXCLUSIVE, as the kernel says). */
static int ep_adopt(int epfd, int fd, const struct epoll_event *ev)
{
	uint64_t until = UINT64_MAX;
	uint32_t hidden = sl__ready_hidden(fd, sl__clock_ns(), &until);
	struct ep_fd *e = &sl__ep_table[fd];
	ep_raise_hi(fd);
	sl__ep_lock(e);
	bool stale;
	int s = ep_slot(e, fd, epfd, &stale), r = -1;
	if (s >= 0) {
		struct ep_reg *g = &e->r[s];
		/* Relaxed: under the lock; no event carries this slot's token
		 * before the MOD below gives it to the kernel. */
		atomic_store_explicit(&g->events, 0, memory_order_relaxed);
		if (!stale) {
			atomic_store_explicit(&g->epfd1, epfd + 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&e->n, 1, memory_order_relaxed);
		}
		r = ep_mod(fd, s, ev, hidden);
		if (r != 0)
			ep_free(e, s);
	}
	sl__ep_unlock(e);
	if (r == 0 && hidden != 0)
		sl__ready_arm(fd, until);
	return r;
}

SL_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	if (sl__busy || !sl__ready_on() || sl__ep_table == NULL || (unsigned)fd >= sl__fd_cap ||
	    epfd < 0 || (ev == NULL && op != EPOLL_CTL_DEL))
		return SL_REAL(epoll_ctl)(epfd, op, fd, ev);
	if (op == EPOLL_CTL_ADD && ep_unruled(fd) && !ep_token_like(ev))
		return ep_add_plain(epfd, fd, ev);
	uint64_t until = UINT64_MAX;
	uint32_t hidden = sl__ready_hidden(fd, sl__clock_ns(), &until);
	struct ep_fd *e = &sl__ep_table[fd];
	ep_raise_hi(fd);
	sl__ep_lock(e);
	int s = ep_find(e, epfd), r;
	bool adopt = false;
	if (op == EPOLL_CTL_ADD) {
		r = ep_add(epfd, fd, ev, hidden);
	} else if (s < 0 && op == EPOLL_CTL_MOD && ep_token_like(ev)) {
		adopt = true; /* plain, with data that would be taken for a token */
		r = 0;
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
	sl__ep_unlock(e);
	if (adopt)
		return ep_adopt(epfd, fd, ev);
	if (r == 0 && hidden != 0 && op != EPOLL_CTL_DEL)
		sl__ready_arm(fd, until);
	return r;
}

/* A new epoll fd: slots left by a closed one of the same number are stale. */
static int ep_created(int epfd)
{
	if (epfd >= 0)
		sl__fd_opened(epfd); /* fd.c: not a socket, whatever the number was */
	if (epfd < 0 || sl__ep_table == NULL)
		return epfd;
	sl__wake_add(epfd);
	uint32_t hi = atomic_load_explicit(&sl__ep_hi, memory_order_relaxed);
	for (uint32_t fd = 0; fd < hi; fd++) {
		struct ep_fd *e = &sl__ep_table[fd];
		if (atomic_load_explicit(&e->n, memory_order_relaxed) == 0)
			continue;
		sl__ep_lock(e);
		int s = ep_find(e, epfd);
		if (s >= 0)
			ep_free(e, s);
		sl__ep_unlock(e);
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
