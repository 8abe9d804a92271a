/* SPDX-License-Identifier: MIT */
/*
 * poll.c - poll, ppoll, select and pselect for loops whose sockets are
 * throttled (ready.c).
 *
 * Each call looks up every fd it is given: a direction that is throttled
 * is taken out of the events passed to the kernel (an fd with nothing left
 * to wait for, or a deferred connect, is passed as a negative fd, which the
 * kernel skips: not even POLLHUP/POLLERR come back for it), and the timeout
 * is cut at the earliest instant one of them becomes ready. When that cut
 * expires with nothing to report, the call is made again with what is left
 * of the caller's timeout, so a throttled fd is reported as soon as it is
 * ready and the caller never sees an early 0. The caller's array and sets
 * are as they were when the call returns, except for what the kernel
 * reports; select updates the timeval with the time left, as Linux does.
 *
 * poll and select wait through ppoll and pselect, which take nanoseconds.
 *
 * While no fd can be hidden (sl__ready_none_hidden: nothing held now, no
 * deferred connect) the fds are not looked up one by one, and the call
 * costs the ready timer's load and, for the fds the kernel reports, the
 * question whether their next call would find its units (sl__nb_probe).
 *
 * Limits: at most SL_POLL_EDITS entries of one poll call are changed; past
 * that, entries are passed as they are (such an fd may be reported before it
 * is ready, and the program's next call on it gets EAGAIN). select handles
 * fds below FD_SETSIZE only, as select itself does.
 */
#include <errno.h>
#include <string.h>
#include <sys/time.h>

#include "anchors.h"
#include "acchold.h"
#include "clock.h"
#include "hup.h"
#include "nb.h"
#include "ready.h"
#include "real.h"

/* Referenced by the unit tests so that this archive member is linked into
 * them even when a sanitizer runtime already defines the libc names. */
const int sl__poll_anchor = 1;

#define SL_POLL_EDITS 1024
#define SL_POLL_EVBITS (SL_HIDE_IN | SL_HIDE_OUT)

/* One entry of the caller's array changed for the kernel. */
struct poll_edit {
	uint32_t i;
	short events; /* the caller's */
	bool negated; /* fd was passed as ~fd */
};

static uint64_t deadline_ns(uint64_t now, uint64_t sec, uint64_t nsec)
{
	uint64_t max_s = (UINT64_MAX - now) / 1000000000u - 1;
	return sec > max_s ? UINT64_MAX : now + sec * 1000000000u + nsec;
}

/* A timeout of sec s and nsec ns (both valid) in ns, UINT64_MAX if that is
 * beyond what an instant can hold (none). */
static uint64_t span_ns(time_t sec, long nsec)
{
	const uint64_t s = (uint64_t)sec;
	return s > UINT64_MAX / 1000000000u - 1 ? UINT64_MAX : s * 1000000000u + (uint64_t)nsec;
}

/* The timespec from now to t, or NULL for t == UINT64_MAX (no timeout). */
static struct timespec *timeout_ts(struct timespec *ts, uint64_t now, uint64_t t)
{
	if (t == UINT64_MAX)
		return NULL;
	uint64_t d = t > now ? t - now : 0;
	ts->tv_sec = (time_t)(d / 1000000000u);
	ts->tv_nsec = (long)(d % 1000000000u);
	return ts;
}

/* Entries whose HUP waits for the end of their hold in IN (hup.h): passed
 * negated until then. */
#define SL_POLL_HELD 32
struct poll_held {
	unsigned n;
	uint32_t i[SL_POLL_HELD];
};

static bool poll_is_held(const struct poll_held *hd, uint32_t i)
{
	for (unsigned k = 0; k < hd->n; k++)
		if (hd->i[k] == i)
			return true;
	return false;
}

/* What the kernel reported, as the program may see it. The end-of-stream
 * bits (hup.h): an entry whose HUP waits for the end of its hold in IN is
 * not reported, and noted in hd (passed negated until then). An entry
 * reported ready whose next call would be refused for units is held back
 * and not reported (sl__nb_hold_unready); the clock is read at the first
 * entry that needs it (an fd whose direction passes needs none), after the
 * wait: a hold is timed from the instant of the question. Returns the
 * count still reported. rd: the wait's round (nb.h), NULL for one entry
 * reported (a constant there: poll_seen). */
static inline __attribute__((always_inline)) int
poll_seen_in(struct pollfd *fds, nfds_t n, int r, struct poll_held *hd, struct sl_nb_round *rd)
{
	uint64_t now = 0;
	for (nfds_t i = 0; i < n && r > 0; i++) {
		uint32_t rev = (uint16_t)fds[i].revents;
		const int fd = fds[i].fd;
		if (rev == 0 || fd < 0)
			continue;
		if (rev & SL_HUP_BITS) {
			if (hd->n < SL_POLL_HELD &&
			    sl__hup_held(fd, rev, (uint16_t)fds[i].events)) {
				fds[i].revents = 0;
				hd->i[hd->n++] = (uint32_t)i;
				r--;
				continue;
			}
			rev = sl__hup_filter(fd, rev);
			fds[i].revents = (short)rev;
		}
		if (rev & POLLNVAL)
			continue;
		uint32_t drop = sl__nb_unready(fd, rev, &now, rd);
		if (drop == 0)
			continue;
		rev &= ~drop;
		if (rev == 0)
			r--;
		fds[i].revents = (short)rev;
	}
	return r;
}

/* poll_seen_in, compiled apart for one entry reported (no round: the
 * common case pays nothing for it) and for more. */
static int poll_seen(struct pollfd *fds, nfds_t n, int r, struct poll_held *hd)
{
	if (r == 1)
		return poll_seen_in(fds, n, 1, hd, NULL);
	struct sl_nb_round round;
	return poll_seen_in(fds, n, r, hd, sl__nb_round_begin(&round, r));
}

/* The entries of fds with something hidden at now (sl__ready_hidden) are
 * changed for the kernel, and noted in ed: a direction that is throttled is
 * taken out of the events, an fd with nothing left to wait for (or held for
 * its HUP, hd) is passed negated. *next is lowered to the earliest instant
 * one of them changes. Returns the count noted. Out of line: while nothing
 * is held (sl__ready_none_hidden) it is not called. */
static __attribute__((noinline)) unsigned poll_hide(struct pollfd *fds, nfds_t n, uint64_t now,
						    uint64_t *next, struct poll_edit *ed,
						    const struct poll_held *hd)
{
	unsigned ne = 0;
	for (nfds_t i = 0; i < n && ne < SL_POLL_EDITS; i++) {
		int fd = fds[i].fd;
		uint32_t h = fd >= 0 ? sl__ready_hidden(fd, now, next) : 0;
		if (h == 0 || (h != SL_HIDE_ALL && ((uint32_t)fds[i].events & h) == 0))
			continue;
		ed[ne] = (struct poll_edit){.i = (uint32_t)i, .events = fds[i].events};
		if (h == SL_HIDE_ALL || ((uint32_t)fds[i].events & SL_POLL_EVBITS & ~h) == 0 ||
		    ((h & SL_HIDE_IN) && poll_is_held(hd, (uint32_t)i))) {
			fds[i].fd = ~fd;
			ed[ne].negated = true;
		} else {
			fds[i].events = (short)((uint32_t)fds[i].events & ~h);
		}
		ne++;
	}
	return ne;
}

/* The instant the next held connection is due (acchold.c), or now if one
 * on a listener of fds is due already. */
static __attribute__((noinline)) uint64_t poll_held_next(const struct pollfd *fds, nfds_t n,
							 uint64_t now, uint64_t next)
{
	next = sl__ah_next(now, next);
	/* One already due: report it now, do not wait. */
	for (nfds_t i = 0; i < n && next > now; i++)
		if (fds[i].fd >= 0 && (fds[i].events & POLLIN) && sl__ah_due(fds[i].fd, now))
			next = now;
	return next;
}

/* The wait loop of poll and ppoll: span is the caller's timeout in ns
 * (UINT64_MAX: none) from the call.
 *
 * The clock is read only when something needs the instant: a deadline
 * ahead, an instant armed in the ready timer, a held connection, a hold
 * that may not have ended (sl__ready_quiet_ns). A poll (span 0) or an
 * endless wait with none of them waits 0 or without end whatever now is,
 * and reads it not at all (the entries the kernel reports read it for
 * themselves: poll_seen). */
static int poll_loop(struct pollfd *fds, nfds_t n, uint64_t span, const sigset_t *mask)
{
	struct poll_edit ed[SL_POLL_EDITS];
	struct poll_held hd;
	hd.n = 0; /* hd.i is read below hd.n only */
	/* The caller's timeout has passed already (a timeout of 0): a wait
	 * that finds nothing is the answer, with no second clock reading. Its
	 * deadline is the first reading, if one is taken (0 until then:
	 * passed, whatever now is). */
	const bool past = span == 0;
	const struct sl_wait_start ws = sl__ready_wait_start(span);
	uint64_t now = ws.now, deadline = ws.deadline;
	bool have_now = ws.have_now;
	for (;;) {
		/* seq_cst, as sl__ready_tick's own (ready.h). */
		uint64_t next = atomic_load(&sl__ready_next);
		const bool held = sl__ah_on(); /* held connections (acchold.c) */
		const uint64_t quiet = sl__ready_quiet();
		if (!have_now && (next != UINT64_MAX || held || quiet != 0)) {
			now = sl__clock_ns();
			have_now = true;
			deadline = past ? now : deadline;
		}
		if (next <= now) /* sl__ready_tick's part for what is due */
			next = sl__ready_tick_due(now);
		if (held)
			next = poll_held_next(fds, n, now, next);
		/* Looked up fd by fd only while a hold may not have ended
		 * (sl__ready_none_hidden); now is 0 only if quiet is. */
		const unsigned ne = now >= quiet ? 0 : poll_hide(fds, n, now, &next, ed, &hd);
		struct timespec ts;
		/* t is UINT64_MAX, or the clock was read, or past (0 then). */
		int r = SL_REAL(ppoll)(fds, n,
				       timeout_ts(&ts, now, deadline < next ? deadline : next),
				       mask);
		int e = errno;
		for (unsigned k = 0; k < ne; k++) {
			struct pollfd *p = &fds[ed[k].i];
			if (ed[k].negated)
				p->fd = ~p->fd;
			p->events = ed[k].events;
		}
		if (r > 0)
			r = poll_seen(fds, n, r, &hd);
		/* A listener with a held connection due is readable
		 * (acchold.c), whatever the kernel says of its backlog. */
		for (nfds_t i = 0; r >= 0 && sl__ah_on() && i < n; i++)
			if (fds[i].fd >= 0 && (fds[i].events & POLLIN) &&
			    sl__ah_due(fds[i].fd, sl__clock_ns())) {
				r += fds[i].revents == 0;
				fds[i].revents |= POLLIN;
			}
		errno = e;
		if (r != 0 || past)
			return r;
		now = sl__clock_ns();
		have_now = true;
		if (now >= deadline)
			return r;
	}
}

/* The real poll, for a call the wrapper does not look into. Out of line (a
 * tail call): the wrapper's own path keeps no stack frame for SL_REAL's
 * first-use resolution. */
static __attribute__((noinline)) int poll_real(struct pollfd *fds, nfds_t n, int timeout)
{
	return SL_REAL(poll)(fds, n, timeout);
}

SL_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (sl__busy || !sl__ready_on())
		return poll_real(fds, n, timeout);
	return poll_loop(fds, n, timeout < 0 ? UINT64_MAX : (uint64_t)timeout * 1000000u, NULL);
}

SL_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
	if (sl__busy || !sl__ready_on() ||
	    (ts != NULL && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)))
		return SL_REAL(ppoll)(fds, n, ts, mask);
	return poll_loop(fds, n, ts == NULL ? UINT64_MAX : span_ns(ts->tv_sec, ts->tv_nsec), mask);
}

/* The three sets of a select call: the caller's, and the copies given to the
 * kernel. */
struct fd_sets {
	fd_set *user[3];
	fd_set k[3];
};

/* The wait loop of select and pselect: now is a clock reading taken at the
 * call, deadline absolute (UINT64_MAX: none). */
static int select_loop(int nfds, struct fd_sets *s, uint64_t now, uint64_t deadline,
		       const sigset_t *mask)
{
	for (;; now = sl__clock_ns()) {
		uint64_t next = sl__ready_tick(now);
		if (sl__ah_on()) { /* held connections (acchold.c) */
			next = sl__ah_next(now, next);
			/* One already due: report it now, do not wait. */
			for (int fd = 0; s->user[0] != NULL && fd < nfds && next > now; fd++)
				if (FD_ISSET(fd, s->user[0]) && sl__ah_due(fd, now))
					next = now;
		}
		for (int j = 0; j < 3; j++)
			if (s->user[j] != NULL)
				s->k[j] = *s->user[j];
		/* Looked up one by one only while an fd may be hidden. */
		const bool look = !sl__ready_none_hidden(now);
		for (int fd = 0; look && fd < nfds; fd++) {
			bool in = (s->user[0] && FD_ISSET(fd, s->user[0])) ||
				  (s->user[2] && FD_ISSET(fd, s->user[2]));
			bool out = s->user[1] && FD_ISSET(fd, s->user[1]);
			uint32_t h = in || out ? sl__ready_hidden(fd, now, &next) : 0;
			if (h & SL_HIDE_IN) {
				FD_CLR(fd, &s->k[0]);
				FD_CLR(fd, &s->k[2]);
			}
			if (h & SL_HIDE_OUT)
				FD_CLR(fd, &s->k[1]);
		}
		struct timespec ts;
		int r = SL_REAL(pselect)(nfds, s->user[0] ? &s->k[0] : NULL,
					 s->user[1] ? &s->k[1] : NULL, s->user[2] ? &s->k[2] : NULL,
					 timeout_ts(&ts, now, deadline < next ? deadline : next),
					 mask);
		if (r < 0)
			return r;
		/* Ready, but its next call would be refused for units: held back
		 * (sl__nb_hold_unready), not reported. */
		const uint64_t at = r > 0 ? sl__clock_ns() : 0;
		struct sl_nb_round round, *rd = sl__nb_round_begin(&round, r);
		for (int fd = 0; r > 0 && fd < nfds; fd++) {
			bool in = (s->user[0] && FD_ISSET(fd, &s->k[0])),
			     out = (s->user[1] && FD_ISSET(fd, &s->k[1]));
			if (!in && !out)
				continue;
			uint32_t drop = sl__nb_hold_unready(fd,
							    (in ? POLLIN : 0u) |
								    (out ? POLLOUT : 0u),
							    at, rd);
			if ((drop & SL_HIDE_IN) && in) {
				FD_CLR(fd, &s->k[0]);
				r--;
			}
			if ((drop & SL_HIDE_OUT) && out) {
				FD_CLR(fd, &s->k[1]);
				r--;
			}
		}
		/* A listener with a held connection due is readable. */
		for (int fd = 0; sl__ah_on() && s->user[0] != NULL && fd < nfds; fd++)
			if (FD_ISSET(fd, s->user[0]) && !FD_ISSET(fd, &s->k[0]) &&
			    sl__ah_due(fd, sl__clock_ns())) {
				FD_SET(fd, &s->k[0]);
				r++;
			}
		if (r > 0 || sl__clock_ns() >= deadline) {
			for (int j = 0; j < 3; j++)
				if (s->user[j] != NULL)
					*s->user[j] = s->k[j];
			return r;
		}
	}
}

/* Is this a select call the wrappers can look into? */
static bool select_ours(int nfds)
{
	return !sl__busy && sl__ready_on() && nfds >= 0 && nfds <= FD_SETSIZE;
}

SL_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *x, struct timeval *tv)
{
	if (!select_ours(nfds) ||
	    (tv != NULL && (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000)))
		return SL_REAL(select)(nfds, r, w, x, tv);
	struct fd_sets s = {.user = {r, w, x}};
	uint64_t now = sl__clock_ns();
	uint64_t deadline = tv == NULL ? UINT64_MAX
				       : deadline_ns(now, (uint64_t)tv->tv_sec,
						     (uint64_t)tv->tv_usec * 1000u);
	int res = select_loop(nfds, &s, now, deadline, NULL);
	if (tv != NULL) { /* Linux reports the time left */
		int e = errno;
		uint64_t t = sl__clock_ns(), left = deadline > t ? deadline - t : 0;
		tv->tv_sec = (time_t)(left / 1000000000u);
		tv->tv_usec = (suseconds_t)(left % 1000000000u / 1000u);
		errno = e;
	}
	return res;
}

SL_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *x, const struct timespec *ts,
		      const sigset_t *mask)
{
	if (!select_ours(nfds) ||
	    (ts != NULL && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)))
		return SL_REAL(pselect)(nfds, r, w, x, ts, mask);
	struct fd_sets s = {.user = {r, w, x}};
	uint64_t now = sl__clock_ns();
	return select_loop(nfds, &s, now,
			   ts == NULL
				   ? UINT64_MAX
				   : deadline_ns(now, (uint64_t)ts->tv_sec, (uint64_t)ts->tv_nsec),
			   mask);
}
