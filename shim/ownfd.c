/* SPDX-License-Identifier: MIT */
/*
 * ownfd.c - the library's own fds in a program, kept out of its way.
 *
 * A daemon that calls close_range(3, ~0U, 0) and then opens a data file
 * got the lease link's number for it: the lease thread wrote `*7 $7
 * EVALSHA ...` into the file and later closed it under the program. So the
 * library's fds sit high (below the soft RLIMIT_NOFILE, above what a
 * program hands out), close-on-exec, and are registered here: the
 * program's close of one is EBADF (as if it were not open, which for the
 * program it is not), close_range closes around them, and dup2/dup3 onto
 * one first moves it to another high number under its user's lock, so that
 * its user never makes a call on a number that is no longer its own.
 *
 * Trade-offs: SL_OWN_MAX fds at once (the lease link of a Redis Cluster has
 * one per node); past it an fd stays where it is, unprotected, as before. A
 * raw system call that closes one (not through libc's close) is not seen.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fd.h"
#include "ownfd.h"
#include "real.h"

#define SL_OWN_MAX 64

struct own {
	_Atomic int fd; /* -1: free */
	int *fdp;
	pthread_mutex_t *io;
};

static struct own own[SL_OWN_MAX];
static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;
_Atomic uint32_t sl__own_n;

/* A free number at or above the high base, close-on-exec, the same file
 * as fd; -1 if none. */
static int high_dup(int fd)
{
	struct rlimit rl;
	long lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long)rl.rlim_cur : 1024;
	lim = lim < (long)sl__fd_cap ? lim : (long)sl__fd_cap;
	/* The wake-up timer (wake.c) takes the lowest at lim - 64. */
	return lim > 256 ? SL_REAL(fcntl)(fd, F_DUPFD_CLOEXEC, (unsigned long)(lim - 192)) : -1;
}

static struct own *find(int fd)
{
	for (unsigned i = 0; i < SL_OWN_MAX; i++)
		if (atomic_load_explicit(&own[i].fd, memory_order_relaxed) == fd + 1)
			return &own[i];
	return NULL;
}

bool sl__own_take(int *fdp, pthread_mutex_t *io)
{
	int saved = errno;
	pthread_mutex_lock(&own_lock);
	struct own *o = find(-1);
	int hi = o != NULL ? high_dup(*fdp) : -1;
	if (hi >= 0) {
		SL_REAL(close)(*fdp);
		sl__fd_forget(*fdp);
		*fdp = hi;
		o->fdp = fdp;
		o->io = io;
		atomic_store_explicit(&o->fd, hi + 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&sl__own_n, 1, memory_order_relaxed);
		/* Release: as a classification, "pass every call" (fd.h). */
		if ((unsigned)hi < sl__fd_cap)
			atomic_store_explicit(&sl__fdbits[hi],
					      (uint8_t)(SL_FDB_READY | SL_FDB_PASS_ALL),
					      memory_order_release);
	}
	pthread_mutex_unlock(&own_lock);
	errno = saved;
	return hi >= 0;
}

void sl__own_drop(int fd)
{
	/* No lock: a fork child drops what its parent's threads may have held
	 * own_lock for (lease.c abandons the link there). */
	struct own *o = fd >= 0 ? find(fd) : NULL;
	int expect = fd + 1;
	if (o != NULL &&
	    atomic_compare_exchange_strong_explicit(&o->fd, &expect, 0, memory_order_relaxed,
						    memory_order_relaxed))
		atomic_fetch_sub_explicit(&sl__own_n, 1, memory_order_relaxed);
}

void sl__own_after_fork(void)
{
	pthread_mutex_init(&own_lock, NULL);
}

bool sl__own_is(int fd)
{
	return fd >= 0 && find(fd) != NULL;
}

void sl__own_yield(int fd)
{
	if (fd < 0 || find(fd) == NULL)
		return;
	int saved = errno;
	pthread_mutex_lock(&own_lock);
	struct own *o = find(fd);
	if (o != NULL) {
		/* Its user is not between a load of *fdp and a call on it
		 * while we hold its lock. */
		pthread_mutex_lock(o->io);
		int hi = high_dup(fd);
		if (hi >= 0) {
			*o->fdp = hi;
			atomic_store_explicit(&o->fd, hi + 1, memory_order_relaxed);
			if ((unsigned)hi < sl__fd_cap)
				atomic_store_explicit(&sl__fdbits[hi],
						      (uint8_t)(SL_FDB_READY | SL_FDB_PASS_ALL),
						      memory_order_release);
		} else { /* no number left: the program's call wins, ours is lost */
			*o->fdp = -1;
			atomic_store_explicit(&o->fd, 0, memory_order_relaxed);
			atomic_fetch_sub_explicit(&sl__own_n, 1, memory_order_relaxed);
		}
		SL_REAL(close)(fd);
		pthread_mutex_unlock(o->io);
	}
	pthread_mutex_unlock(&own_lock);
	errno = saved;
}

int sl__own_close_range(unsigned first, unsigned last, int flags)
{
	/* The library's fds in [first, last], in order. */
	int mine[SL_OWN_MAX];
	unsigned n = 0;
	for (unsigned i = 0; i < SL_OWN_MAX; i++) {
		int f = atomic_load_explicit(&own[i].fd, memory_order_relaxed) - 1;
		if (f >= 0 && (unsigned)f >= first && (unsigned)f <= last) {
			unsigned at = n++;
			while (at > 0 && mine[at - 1] > f) {
				mine[at] = mine[at - 1];
				at--;
			}
			mine[at] = f;
		}
	}
	int r = 0;
	unsigned from = first;
	for (unsigned k = 0; k <= n && r == 0; k++) {
		unsigned to = k < n ? (unsigned)mine[k] : last;
		if (k < n && to == from) {
			from = to + 1;
			continue;
		}
		if (k < n)
			to--;
		if (from <= to)
			r = SL_REAL(close_range)(from, to, flags);
		if (k < n)
			from = (unsigned)mine[k] + 1;
	}
	return r;
}
