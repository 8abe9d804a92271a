/* SPDX-License-Identifier: MIT */
/*
 * epwait.c - epoll_wait, epoll_pwait and epoll_pwait2 over the registrations
 * epoll.c mirrors (epoll_tab.h): the program's data put back into each
 * event, the events of parked or freed registrations dropped, held-back fds
 * kept out (sl__nb_hold_unready), and the wait capped at the ready timer's
 * next instant (see epoll.c).
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "acchold.h"
#include "anchors.h"
#include "clock.h"
#include "epoll_tab.h"
#include "hup.h"
#include "nb.h"
#include "ready.h"
#include "real.h"
#include "wake.h"

/* Referenced by the unit tests so that this archive member is linked into
 * them even when a sanitizer runtime already defines the libc names. */
const int sl__epwait_anchor = 1;

/* An event with HUP for slot s of fd (hup.h): true if it must wait for the
 * end of fd's hold in IN; the registration is parked until then (ep_sync
 * brings it back; checked again under the lock, so a hold that ended
 * meanwhile brings it back at once). */
static bool ep_hup(uint32_t fd, uint32_t s, uint32_t rev, uint32_t asked)
{
	if (!sl__hup_held((int)fd, rev, asked))
		return false;
	int saved = errno;
	struct ep_fd *e = &sl__ep_table[fd];
	uint64_t until = UINT64_MAX;
	/* Asked before the lock, as ep_sync does: a deferred connect that
	 * comes due here is started, and its readiness hook takes this lock. */
	uint32_t hidden = sl__ready_hidden((int)fd, sl__clock_ns(), &until);
	sl__ep_lock(e);
	if (atomic_load_explicit(&e->r[s].epfd1, memory_order_relaxed) != 0) {
		sl__ep_apply((int)fd, (int)s, SL_HIDE_ALL);
		if ((hidden & SL_HIDE_IN) == 0)
			sl__ep_apply((int)fd, (int)s, hidden);
	}
	sl__ep_unlock(e);
	if (until != UINT64_MAX)
		sl__ready_arm((int)fd, until);
	errno = saved;
	return true;
}

/* ep_translate looks for the wake-up's token only among tokens with no
 * slot. */
_Static_assert(((SL_EP_WAKE_TOKEN >> 32) & 0xffffu) >= SL_EP_SLOTS,
	       "the wake-up's token names no slot");

/* Put the program's data back into the n events; drop those of parked or
 * freed registrations. Returns how many are left. rd: the wait's round
 * (nb.h), NULL for one event (a constant there: ep_translate). */
static inline __attribute__((always_inline)) int ep_translate_in(struct epoll_event *ev, int n,
								 struct sl_nb_round *rd)
{
	int m = 0;
	uint64_t now = 0; /* read at the first event that needs it */
	for (int i = 0; i < n; i++) {
		uint64_t u = ev[i].data.u64;
		if ((u >> 48) != SL_EP_MAGIC) {
			ev[m++] = ev[i];
			continue;
		}
		uint32_t fd = (uint32_t)u, s = (uint32_t)(u >> 32) & 0xffffu;
		if (fd >= sl__fd_cap || s >= SL_EP_SLOTS) {
			/* The wake-up's token has no slot (wake.h): another
			 * thread's hold ended. */
			if (u == SL_EP_WAKE_TOKEN)
				sl__wake_fired();
			continue;
		}
		/* sl__fd_cap <= SL_FD_LIMIT (state.c): what sl__nb_unready
		 * tests again need not be. */
		if (fd >= SL_FD_LIMIT)
			__builtin_unreachable();
		struct ep_reg *g = &sl__ep_table[fd].r[s];
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
		rev &= ~sl__nb_unready((int)fd, rev, &now, rd);
		if (rev == 0)
			continue;
		if (asked & EPOLLONESHOT)
			atomic_store_explicit(&g->armed, 0, memory_order_relaxed);
		/* Both fields of the event are written: no copy of ev[i]. */
		ev[m].events = sl__hup_filter((int)fd, rev);
		/* Acquire pairs with the release in ep_add / ep_mod. */
		ev[m].data.u64 = atomic_load_explicit(&g->data, memory_order_acquire);
		m++;
	}
	return m;
}

/* ep_translate_in, compiled apart for one event (no round: the common
 * case pays nothing for it) and for more. */
static int ep_translate(struct epoll_event *ev, int n)
{
	if (n == 1)
		return ep_translate_in(ev, 1, NULL);
	struct sl_nb_round round;
	return ep_translate_in(ev, n, sl__nb_round_begin(&round, n));
}

enum ep_how { SL_EP_WAIT, SL_EP_PWAIT, SL_EP_PWAIT2 };

static _Atomic int pwait2_missing; /* the kernel lacks epoll_pwait2 */

/* ep_wait_once's wait through epoll_pwait2 (nanoseconds): its result, or
 * -2 if the kernel lacks it and the wait is to be made to the millisecond
 * (noted for the next waits). Out of line: a wait to the ready timer's
 * instant, or the program's own epoll_pwait2. */
static __attribute__((noinline)) int ep_wait_ns(enum ep_how how, int epfd, struct epoll_event *ev,
						int max, uint64_t t, uint64_t d,
						const sigset_t *mask)
{
	struct timespec ts = {.tv_sec = (time_t)(d / 1000000000u),
			      .tv_nsec = (long)(d % 1000000000u)};
	int n = SL_REAL(epoll_pwait2)(epfd, ev, max, t == UINT64_MAX ? NULL : &ts, mask);
	if (n >= 0 || errno != ENOSYS || how == SL_EP_PWAIT2)
		return n;
	atomic_store_explicit(&pwait2_missing, 1, memory_order_relaxed);
	return -2;
}

/* One real wait until t (UINT64_MAX: none), d ns from now. `precise`: the
 * wait ends at a ready instant, so wait to the nanosecond if the kernel can
 * (epoll_pwait2), not to the next millisecond. */
static inline int ep_wait_once(enum ep_how how, int epfd, struct epoll_event *ev, int max,
			       uint64_t t, uint64_t d, bool precise, const sigset_t *mask)
{
	/* Relaxed: a hint; a racing thread meets ENOSYS once itself. */
	if (how == SL_EP_PWAIT2 ||
	    (precise && !atomic_load_explicit(&pwait2_missing, memory_order_relaxed))) {
		int n = ep_wait_ns(how, epfd, ev, max, t, d, mask);
		if (n != -2)
			return n;
	}
	int to = -1; /* no timeout */
	if (t != UINT64_MAX) {
		/* Rounded up: never early (no division for a poll, d == 0). */
		uint64_t ms = d == 0 ? 0 : (d + 999999u) / 1000000u;
		to = ms > INT_MAX ? INT_MAX : (int)ms;
	}
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
	const uint32_t hi = atomic_load_explicit(&sl__ep_hi, memory_order_relaxed);
	for (uint32_t fd = 0; fd < hi && n < max; fd++) {
		struct ep_fd *e = &sl__ep_table[fd];
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

/* ep_wait's look at the held connections (acchold.c): the instant the next
 * one is due, or now if one is due on this epoll set already. */
static __attribute__((noinline)) uint64_t ep_held_next(int epfd, struct epoll_event *ev, int max,
						       uint64_t now, uint64_t next)
{
	next = sl__ah_next(now, next);
	/* One already due on this epoll set: report it now, do not wait (ev
	 * is scratch until the wait fills it). */
	if (max > 0 && ep_inject(epfd, ev, 0, max) > 0)
		next = now;
	return next;
}

/* The kernel filled all `max` events: if the wake-up timer's is among them
 * (wake.h; never passed on), it took room a program's event may need. It
 * is taken out and the kernel asked again, without waiting, for one event
 * that is not among those (a level-triggered one comes again once those
 * not delivered yet have come). Raw tokens, before ep_translate. Seen:
 * CPython's selectors wait for as many events as fds are registered; a new
 * epoll set gets the timer's edge if it expired before (it is never read),
 * and select(0) over one writable socket returned nothing. Returns the new
 * count; errno is kept. */
static __attribute__((noinline)) int ep_wake_room(enum ep_how how, int epfd, struct epoll_event *ev,
						  int n, const sigset_t *mask)
{
	int w = 0;
	while (w < n && ev[w].data.u64 != SL_EP_WAKE_TOKEN)
		w++;
	if (w == n)
		return n;
	sl__wake_fired();
	memmove(&ev[w], &ev[w + 1], sizeof(*ev) * (size_t)(n - 1 - w));
	n--;
	const int saved = errno;
	struct epoll_event more;
	if (ep_wait_once(how, epfd, &more, 1, 0, 0, false, mask) == 1) {
		bool there = more.data.u64 == SL_EP_WAKE_TOKEN;
		for (int i = 0; i < n && !there; i++)
			there = ev[i].data.u64 == more.data.u64;
		if (!there)
			ev[n++] = more;
	}
	errno = saved;
	return n;
}

/* The wait loop of every epoll_wait flavour: span is the caller's timeout
 * in ns (UINT64_MAX: none) from the call.
 *
 * The clock is read only when something needs the instant: a deadline
 * ahead, an instant armed in the ready timer, a held connection. A poll
 * (span 0) or an endless wait with nothing armed waits 0 or without end
 * whatever now is, and reads it not at all (the events a wait reports read
 * it for themselves: ep_translate). */
static int ep_wait(enum ep_how how, int epfd, struct epoll_event *ev, int max, uint64_t span,
		   const sigset_t *mask)
{
	/* The caller's timeout has passed already (a timeout of 0): the waits
	 * do not block, and a wait that finds nothing is the answer. Then no
	 * thread needs to wake this one (wake.h), and the clock is not read
	 * to see whether the deadline has passed: it has. Its deadline is the
	 * first reading, if one is taken (0 until then: passed, whatever now
	 * is). */
	const bool past = span == 0;
	const struct sl_wait_start ws = sl__ready_wait_start(span);
	uint64_t now = ws.now, deadline = ws.deadline;
	bool have_now = ws.have_now;
	for (;;) {
		/* Counted as waiting before the timer is read (wake.h): a hold
		 * another thread makes from here on wakes this wait. */
		if (!past)
			sl__wake_enter();
		/* seq_cst, as sl__ready_tick's own (ready.h): after the enter. */
		uint64_t next = atomic_load(&sl__ready_next);
		const bool held = sl__ah_on(); /* held connections (acchold.c) */
		if (next != UINT64_MAX || held) {
			if (!have_now) {
				now = sl__clock_ns();
				have_now = true;
				deadline = past ? now : deadline;
			}
			if (next <= now) /* sl__ready_tick's part for what is due */
				next = sl__ready_tick_due(now);
			if (held)
				next = ep_held_next(epfd, ev, max, now, next);
		}
		/* t is UINT64_MAX, or the clock was read, or past (0 then). */
		uint64_t t = deadline < next ? deadline : next, d = t > now ? t - now : 0;
		int n = ep_wait_once(how, epfd, ev, max, t, d, next < deadline, mask);
		if (!past)
			sl__wake_leave();
		if (n >= 0 && sl__ah_on())
			n = ep_inject(epfd, ev, n, max);
		if (n < 0)
			return n;
		if (n == max && sl__wake_maybe())
			n = ep_wake_room(how, epfd, ev, n, mask);
		if (n > 0 && (n = ep_translate(ev, n)) > 0)
			return n;
		if (past)
			return 0;
		now = sl__clock_ns();
		have_now = true;
		if (now >= deadline)
			return 0;
	}
}

/* The span of a timeout in ms (negative: none). */
static inline uint64_t ms_span(int ms)
{
	return ms < 0 ? UINT64_MAX : (uint64_t)ms * 1000000u;
}

/* The real epoll_wait, for a wait the wrapper does not look into. Out of
 * line (a tail call): the wrapper's own path keeps no stack frame for
 * SL_REAL's first-use resolution. */
static __attribute__((noinline)) int ep_wait_real(int epfd, struct epoll_event *ev, int max,
						  int timeout)
{
	return SL_REAL(epoll_wait)(epfd, ev, max, timeout);
}

SL_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	if (sl__busy || !sl__ready_on() || max <= 0)
		return ep_wait_real(epfd, ev, max, timeout);
	return ep_wait(SL_EP_WAIT, epfd, ev, max, ms_span(timeout), NULL);
}

SL_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout,
			  const sigset_t *mask)
{
	if (sl__busy || !sl__ready_on() || max <= 0)
		return SL_REAL(epoll_pwait)(epfd, ev, max, timeout, mask);
	return ep_wait(SL_EP_PWAIT, epfd, ev, max, ms_span(timeout), mask);
}

SL_EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *ts,
			   const sigset_t *mask)
{
	if (sl__busy || !sl__ready_on() || max <= 0 ||
	    (ts != NULL && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)))
		return SL_REAL(epoll_pwait2)(epfd, ev, max, ts, mask);
	uint64_t span = UINT64_MAX;
	if (ts != NULL) {
		uint64_t s = (uint64_t)ts->tv_sec;
		span = s > UINT64_MAX / 1000000000u - 1 ? UINT64_MAX
							: s * 1000000000u + (uint64_t)ts->tv_nsec;
	}
	return ep_wait(SL_EP_PWAIT2, epfd, ev, max, span, mask);
}
