/* SPDX-License-Identifier: MIT */
/*
 * wake.c - the wake-up timer of threads blocked in epoll_wait (wake.h).
 *
 * One timerfd per process, CLOCK_MONOTONIC (the shim's clock runs on the
 * same line, clock.c), non-blocking, close-on-exec, moved to a high fd
 * number (a program hands out low ones) and marked "not a socket" in the fd
 * table. Each epoll set the program makes (epoll.c, ep_created) gets it,
 * edge-triggered, with a token epoll_wait drops (SL_EP_WAKE_TOKEN): each
 * expiry is one new event for each set, and it is never read (arming it
 * again resets its count).
 *
 * Arming: a counter of the threads inside a real wait (enter, leave); when
 * the ready timer is lowered (sl__ready_arm) while the counter is not 0,
 * the timer is armed at the new instant, unless it is armed earlier and
 * that instant is still to come. Both sides are seq_cst (the counter's RMW
 * and the timer's CAS, then each reads the other's): a waiter either sees
 * the lowered instant when it computes its timeout, or the lowering sees
 * the waiter and arms. One timerfd_settime per lowering that happens while
 * another thread waits; none at all in a single-threaded loop.
 *
 * If the program closes the number (close_range over everything, as
 * daemons do) the forget hook drops it: the sets made before lose their
 * wake-ups (their waiters wake at their own timeouts, as before), a set
 * made later gets a new timer. A fork child does not arm its parent's
 * timer (the file is shared): it makes its own for the sets it creates.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/timerfd.h>

#include "clock.h"
#include "fd.h"
#include "log.h"
#include "real.h"
#include "sandboxed.h"
#include "wake.h"

static _Atomic int wake_fd = -1;
static _Atomic uint32_t waiters;
static _Atomic uint64_t armed_at = UINT64_MAX;
_Atomic bool sl__wake_ever;
static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;

static void wake_forget(int fd)
{
	int w = fd;
	atomic_compare_exchange_strong(&wake_fd, &w, -1);
}

static void wake_after_fork(void)
{
	atomic_store(&wake_fd, -1);
	atomic_store(&waiters, 0);
	atomic_store(&armed_at, UINT64_MAX);
	pthread_mutex_init(&make_lock, NULL);
}

void sl__wake_init_unsync(void)
{
	sl__fd_on_forget_unsync(wake_forget);
	pthread_atfork(NULL, NULL, wake_after_fork);
}

/* The timer, made on first use: -1 if it cannot be. */
static int wake_get(void)
{
	int fd = atomic_load(&wake_fd);
	if (fd >= 0)
		return fd;
	pthread_mutex_lock(&make_lock);
	fd = atomic_load(&wake_fd);
	if (fd < 0) {
		int saved = errno;
		int t = SL_REAL(timerfd_create)(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (t >= 0) {
			/* High: above what a program hands out, below its limit
			 * and the fd table's. */
			struct rlimit rl;
			long lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long)rl.rlim_cur : 1024;
			lim = lim < (long)sl__fd_cap ? lim : (long)sl__fd_cap;
			int hi = lim > 64 ? SL_REAL(fcntl)(t, F_DUPFD_CLOEXEC,
							   (unsigned long)(lim - 64))
					  : -1;
			if (hi >= 0) {
				SL_REAL(close)(t);
				t = hi;
			}
			sl__fd_opened(t);
			fd = t;
			atomic_store(&wake_fd, fd);
		} else {
			sl_log(SL_LOG_WARN,
			       "no wake-up timer (timerfd_create: %s): a thread waiting "
			       "in epoll_wait wakes for another thread's hold only at "
			       "its own timeout",
			       strerror(errno));
		}
		errno = saved;
	}
	pthread_mutex_unlock(&make_lock);
	return fd;
}

void sl__wake_add(int epfd)
{
	/* In a seccomp sandbox no system call of ours is made (sandbox.h). */
	if (sl__sandboxed())
		return;
	int fd = wake_get();
	if (fd < 0)
		return;
	int saved = errno;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = SL_EP_WAKE_TOKEN};
	(void)SL_REAL(epoll_ctl)(epfd, EPOLL_CTL_ADD, fd, &ev);
	errno = saved;
}

void sl__wake_enter(void)
{
	atomic_fetch_add(&waiters, 1);
}

void sl__wake_leave(void)
{
	atomic_fetch_sub(&waiters, 1);
}

void sl__wake_fired(void)
{
	atomic_store(&armed_at, UINT64_MAX);
}

void sl__wake_lowered(uint64_t at)
{
	if (atomic_load(&waiters) == 0)
		return;
	int fd = atomic_load(&wake_fd);
	if (fd < 0 || sl__sandboxed())
		return;
	uint64_t cur = atomic_load(&armed_at);
	for (;;) {
		/* Armed earlier and still to come: that wake-up runs the timer,
		 * which finds this instant. */
		if (cur <= at && cur > sl__clock_ns())
			return;
		if (atomic_compare_exchange_weak(&armed_at, &cur, at))
			break;
	}
	if (!atomic_load_explicit(&sl__wake_ever, memory_order_relaxed))
		atomic_store_explicit(&sl__wake_ever, true, memory_order_relaxed);
	int saved = errno;
	struct itimerspec its = {.it_value = {.tv_sec = (time_t)(at / 1000000000u),
					      .tv_nsec = (long)(at % 1000000000u)}};
	if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
		its.it_value.tv_nsec = 1; /* 0 would disarm it */
	(void)timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL);
	errno = saved;
}
