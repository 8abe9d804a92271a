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

/* The end-of-stream bits of what the kernel reported (hup.h). Returns the
 * entries still reported. */
static int poll_hup(struct pollfd *fds, nfds_t n, int r, struct poll_held *hd)
{
	for (nfds_t i = 0; i < n && r > 0; i++) {
		uint32_t rev = (uint16_t)fds[i].revents;
		if ((rev & SL_HUP_BITS) == 0 || fds[i].fd < 0)
			continue;
		if (hd->n < SL_POLL_HELD && sl__hup_held(fds[i].fd, rev, (uint16_t)fds[i].events)) {
			fds[i].revents = 0;
			hd->i[hd->n++] = (uint32_t)i;
			r--;
		} else {
			fds[i].revents = (short)sl__hup_filter(fds[i].fd, rev);
		}
	}
	return r;
}

/* Entries reported ready whose next call would be refused for units are
 * held back and not reported (sl__nb_hold_unready). Returns the count still
 * reported. */
static int poll_probe(struct pollfd *fds, nfds_t n, int r)
{
	const uint64_t now = sl__clock_ns();
	for (nfds_t i = 0; i < n && r > 0; i++) {
		uint32_t rev = (uint16_t)fds[i].revents;
		if (rev == 0 || fds[i].fd < 0 || (rev & POLLNVAL))
			continue;
		uint32_t drop = sl__nb_hold_unready(fds[i].fd, rev, now);
		if (drop == 0)
			continue;
		rev &= ~drop;
		if (rev == 0)
			r--;
		fds[i].revents = (short)rev;
	}
	return r;
}

static int poll_loop(struct pollfd *fds, nfds_t n, uint64_t deadline, const sigset_t *mask)
{
	struct poll_edit ed[SL_POLL_EDITS];
	struct poll_held hd = {.n = 0};
	for (;;) {
		uint64_t now = sl__clock_ns(), next = sl__ready_tick(now);
		if (sl__ah_on()) { /* held connections (acchold.c) */
			next = sl__ah_next(now, next);
			/* One already due: report it now, do not wait. */
			for (nfds_t i = 0; i < n && next > now; i++)
				if (fds[i].fd >= 0 && (fds[i].events & POLLIN) &&
				    sl__ah_due(fds[i].fd, now))
					next = now;
		}
		unsigned ne = 0;
		for (nfds_t i = 0; i < n && ne < SL_POLL_EDITS; i++) {
			int fd = fds[i].fd;
			uint32_t h = fd >= 0 ? sl__ready_hidden(fd, now, &next) : 0;
			if (h == 0 || (h != SL_HIDE_ALL && ((uint32_t)fds[i].events & h) == 0))
				continue;
			ed[ne] = (struct poll_edit){.i = (uint32_t)i, .events = fds[i].events};
			if (h == SL_HIDE_ALL ||
			    ((uint32_t)fds[i].events & SL_POLL_EVBITS & ~h) == 0 ||
			    ((h & SL_HIDE_IN) && poll_is_held(&hd, (uint32_t)i))) {
				fds[i].fd = ~fd;
				ed[ne].negated = true;
			} else {
				fds[i].events = (short)((uint32_t)fds[i].events & ~h);
			}
			ne++;
		}
		struct timespec ts;
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
			r = poll_hup(fds, n, r, &hd);
		if (r > 0)
			r = poll_probe(fds, n, r);
		/* A listener with a held connection due is readable
		 * (acchold.c), whatever the kernel says of its backlog. */
		for (nfds_t i = 0; r >= 0 && sl__ah_on() && i < n; i++)
			if (fds[i].fd >= 0 && (fds[i].events & POLLIN) &&
			    sl__ah_due(fds[i].fd, sl__clock_ns())) {
				r += fds[i].revents == 0;
				fds[i].revents |= POLLIN;
			}
		errno = e;
		if (r != 0 || sl__clock_ns() >= deadline)
			return r;
	}
}

SL_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (sl__busy || !sl__ready_on())
		return SL_REAL(poll)(fds, n, timeout);
	uint64_t now = sl__clock_ns();
	return poll_loop(fds, n,
			 timeout < 0 ? UINT64_MAX
				     : deadline_ns(now, 0, 0) + (uint64_t)timeout * 1000000u,
			 NULL);
}

SL_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
	if (sl__busy || !sl__ready_on() ||
	    (ts != NULL && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)))
		return SL_REAL(ppoll)(fds, n, ts, mask);
	uint64_t now = sl__clock_ns();
	return poll_loop(fds, n,
			 ts == NULL ? UINT64_MAX
				    : deadline_ns(now, (uint64_t)ts->tv_sec, (uint64_t)ts->tv_nsec),
			 mask);
}

/* The three sets of a select call: the caller's, and the copies given to the
 * kernel. */
struct fd_sets {
	fd_set *user[3];
	fd_set k[3];
};

static int select_loop(int nfds, struct fd_sets *s, uint64_t deadline, const sigset_t *mask)
{
	for (;;) {
		uint64_t now = sl__clock_ns(), next = sl__ready_tick(now);
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
		for (int fd = 0; fd < nfds; fd++) {
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
		for (int fd = 0; r > 0 && fd < nfds; fd++) {
			bool in = (s->user[0] && FD_ISSET(fd, &s->k[0])),
			     out = (s->user[1] && FD_ISSET(fd, &s->k[1]));
			if (!in && !out)
				continue;
			uint32_t drop = sl__nb_hold_unready(fd,
							    (in ? POLLIN : 0u) |
								    (out ? POLLOUT : 0u),
							    at);
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
	int res = select_loop(nfds, &s, deadline, NULL);
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
	return select_loop(nfds, &s,
			   ts == NULL
				   ? UINT64_MAX
				   : deadline_ns(now, (uint64_t)ts->tv_sec, (uint64_t)ts->tv_nsec),
			   mask);
}
