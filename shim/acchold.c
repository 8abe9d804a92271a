/* SPDX-License-Identifier: MIT */
/*
 * acchold.c - a per=peer accept rule on a non-blocking listener holds the
 * throttled peer's connection instead of sleeping in accept.
 *
 * A per=peer rule knows the peer only after the real accept. Sleeping there
 * stalled a single-threaded server (nginx, node) for every other client.
 * So accept.c hands such a connection here, with its slot reserved in the
 * peer's limiter, and goes on with the next one in the backlog: the program
 * gets a connection of another peer, or EAGAIN. When the held one's slot
 * comes, the ready timer (ready.c) wakes the program's wait, poll and epoll
 * report the listener readable (epoll.c and poll.c add the event: the
 * kernel's listener may have nothing queued), and the next accept on it
 * returns the held connection, with the flags that accept asks for
 * (SOCK_NONBLOCK, SOCK_CLOEXEC) and the peer's address.
 *
 * The table is small and global (SL_AH_MAX connections, few listeners hold
 * any at once); each entry goes FREE -> FILLING -> HELD -> TAKEN -> FREE by
 * CAS. A listener closed with connections still held closes them (the
 * clients see the connection closed, as if the server had dropped it); the
 * program never saw their fds. When the table is full the accept waits in
 * place, as before.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "acchold.h"
#include "clock.h"
#include "fd.h"
#include "log.h"
#include "ready.h"
#include "real.h"

#define SL_AH_MAX 256

enum { AH_FREE = 0, AH_FILLING = 1, AH_HELD = 2, AH_TAKEN = 3 };

struct held {
	_Atomic uint32_t state;
	int32_t lfd, fd;
	uint64_t due;
	socklen_t len;
	struct sockaddr_storage addr;
};

_Atomic uint32_t sl__ah_count;
static struct held tab[SL_AH_MAX];

static void forget(int fd)
{
	if (!sl__ah_on())
		return;
	for (unsigned i = 0; i < SL_AH_MAX; i++) {
		struct held *h = &tab[i];
		uint32_t st = AH_HELD;
		if (atomic_load_explicit(&h->state, memory_order_acquire) != AH_HELD ||
		    (h->lfd != fd && h->fd != fd) ||
		    !atomic_compare_exchange_strong(&h->state, &st, AH_TAKEN))
			continue;
		int saved = errno;
		int c = h->fd;
		/* The listener closes: its held connections go with it. The held
		 * number itself being closed or replaced (a program closing fds it
		 * does not know, closefrom): the entry goes, and the number is not
		 * ours to close any more. */
		if (c != fd) {
			sl__fd_forget(c);
			SL_REAL(close)(c);
		}
		errno = saved;
		atomic_fetch_sub_explicit(&sl__ah_count, 1, memory_order_relaxed);
		atomic_store_explicit(&h->state, AH_FREE, memory_order_release);
	}
}

void sl__ah_init_unsync(void)
{
	sl__fd_on_forget_unsync(forget);
}

bool sl__ah_hold(int lfd, int fd, uint64_t due, const struct sockaddr *addr, socklen_t len)
{
	if (len > (socklen_t)sizeof(struct sockaddr_storage))
		return false;
	for (unsigned i = 0; i < SL_AH_MAX; i++) {
		struct held *h = &tab[i];
		uint32_t st = AH_FREE;
		if (atomic_load_explicit(&h->state, memory_order_relaxed) != AH_FREE ||
		    !atomic_compare_exchange_strong_explicit(&h->state, &st, AH_FILLING,
							     memory_order_acquire,
							     memory_order_relaxed))
			continue;
		h->lfd = lfd;
		h->fd = fd;
		h->due = due;
		h->len = len;
		memcpy(&h->addr, addr, len);
		atomic_fetch_add_explicit(&sl__ah_count, 1, memory_order_relaxed);
		/* Release: the fields are complete before HELD is seen. */
		atomic_store_explicit(&h->state, AH_HELD, memory_order_release);
		sl__ready_arm(lfd, due);
		sl_log(SL_LOG_DEBUG, "fd %d: accepted connection %d held for %llu us", lfd, fd,
		       (unsigned long long)((due - sl__clock_ns()) / 1000));
		return true;
	}
	return false;
}

/* The index of lfd's earliest held connection due at now, or -1. */
static int earliest(int lfd, uint64_t now)
{
	int best = -1;
	for (unsigned i = 0; i < SL_AH_MAX; i++) {
		struct held *h = &tab[i];
		if (atomic_load_explicit(&h->state, memory_order_acquire) == AH_HELD &&
		    h->lfd == lfd && h->due <= now && (best < 0 || h->due < tab[best].due))
			best = (int)i;
	}
	return best;
}

uint64_t sl__ah_next(uint64_t now, uint64_t before)
{
	uint64_t t = before;
	for (unsigned i = 0; sl__ah_on() && i < SL_AH_MAX; i++)
		if (atomic_load_explicit(&tab[i].state, memory_order_acquire) == AH_HELD &&
		    tab[i].due > now && tab[i].due < t)
			t = tab[i].due;
	return t;
}

bool sl__ah_due(int lfd, uint64_t now)
{
	return sl__ah_on() && earliest(lfd, now) >= 0;
}

int sl__ah_take(int lfd, uint64_t now, struct sockaddr *sa, socklen_t *len, int flags)
{
	for (;;) {
		int i = earliest(lfd, now);
		if (i < 0)
			return -1;
		struct held *h = &tab[i];
		uint32_t st = AH_HELD;
		if (!atomic_compare_exchange_strong(&h->state, &st, AH_TAKEN))
			continue; /* another thread took it */
		int fd = h->fd, saved = errno;
		if (sa != NULL && len != NULL) {
			memcpy(sa, &h->addr, h->len < *len ? h->len : *len);
			*len = h->len;
		}
		/* As the accept that hands it over would have made it. */
		int fl = SL_REAL(fcntl)(fd, F_GETFL);
		if (fl >= 0) {
			int want = flags > 0 && (flags & SOCK_NONBLOCK) ? fl | O_NONBLOCK
									: fl & ~O_NONBLOCK;
			if (want != fl)
				SL_REAL(fcntl)(fd, F_SETFL, want);
		}
		SL_REAL(fcntl)(fd, F_SETFD, flags > 0 && (flags & SOCK_CLOEXEC) ? FD_CLOEXEC : 0);
		errno = saved;
		atomic_fetch_sub_explicit(&sl__ah_count, 1, memory_order_relaxed);
		atomic_store_explicit(&h->state, AH_FREE, memory_order_release);
		sl_log(SL_LOG_DEBUG, "fd %d: held connection %d handed over", lfd, fd);
		/* The timer has one instant per fd: wake the loop again for the
		 * next held connection of lfd. */
		int nx = earliest(lfd, UINT64_MAX);
		if (nx >= 0)
			sl__ready_arm(lfd, tab[nx].due);
		return fd;
	}
}
