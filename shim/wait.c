/* SPDX-License-Identifier: MIT */
/*
 * wait.c - a call waiting for its slot: the sleep, to an absolute instant
 * (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME): oversleeping one slot
 * shortens the wait for the next instead of accumulating into rate error),
 * the socket's own timeout, and signals.
 *
 * Limits on waiting, whichever comes first:
 *   max-delay     the call fails with the rule's errno;
 *   SO_SNDTIMEO / SO_RCVTIMEO (read once per call, only if a wait is due:
 *                 every rule polices first, and only a refusal asks for
 *                 the limit of a reservation)
 *                 the call fails with EAGAIN, as the kernel's would;
 *   a signal      the wait is resumed, as the kernel restarts a socket
 *                 call, when (1) every handler the program has installed
 *                 for an asynchronous signal has SA_RESTART and (2) the
 *                 socket has no SO_SNDTIMEO/SO_RCVTIMEO for the call (the
 *                 kernel never restarts a socket call with a timeout).
 *                 Otherwise the reservation is given back and the call
 *                 fails with EINTR having transferred nothing (callers
 *                 return a partial count instead when an earlier piece went
 *                 out). Which signal interrupted the sleep cannot be known,
 *                 so (1) is judged on all of them: a program with any
 *                 non-restarting handler (a SIGALRM timeout, a shutdown
 *                 flag) may rely on EINTR, and keeps it; the price is that
 *                 it also sees EINTR for its SA_RESTART signals during a
 *                 wait. The dispositions are read (sigaction, about 64
 *                 calls) only after an EINTR; handlers of synchronous
 *                 signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
 *                 SIGSYS: sanitizers, crash reporters) are left out, as they
 *                 cannot interrupt a sleep.
 */
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "clock.h"
#include "real.h"
#include "sandboxed.h"
#include "wait.h"

/* The absolute instant the socket's own timeout expires (UINT64_MAX: none),
 * read on first need. errno is preserved. */
uint64_t sl__call_timeout(struct sl_call *c)
{
	if (!c->timeout_known) {
		c->timeout_known = true;
		struct timeval tv;
		socklen_t l = sizeof(tv);
		int saved = errno;
		if (SL_REAL(getsockopt)(c->fd, SOL_SOCKET, c->timeout_opt, &tv, &l) == 0 &&
		    (tv.tv_sec > 0 || tv.tv_usec > 0))
			c->timeout_ns = sl__sat_add(c->start_ns,
						    (uint64_t)tv.tv_sec * 1000000000u +
							    (uint64_t)tv.tv_usec * 1000u);
		errno = saved;
	}
	return c->timeout_ns;
}

/* True if every handler installed for an asynchronous signal has
 * SA_RESTART (see the file comment). */
static bool sig_all_restart(void)
{
	for (int s = 1; s < NSIG; s++) {
		struct sigaction sa;
		if (s == SIGSEGV || s == SIGBUS || s == SIGFPE || s == SIGILL || s == SIGTRAP ||
		    s == SIGSYS || sigaction(s, NULL, &sa) != 0)
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN &&
		    !(sa.sa_flags & SA_RESTART))
			return false;
	}
	return true;
}

/* True if a wait of call c that a signal interrupted is to be resumed, as
 * the kernel would restart the call. errno is preserved. */
static bool call_restarts(struct sl_call *c)
{
	if (sl__sandboxed()) /* sigaction is not ours to call there */
		return true;
	int saved = errno;
	bool r = sl__call_timeout(c) == UINT64_MAX && sig_all_restart();
	errno = saved;
	return r;
}

/* Sleep until t, counting the time slept. Returns 0 or EINTR. A sleep the
 * system refuses (a seccomp filter: ENOSYS, EPERM, EACCES) makes the call
 * pass through (c->passing) and returns 0. */
int sl__call_sleep(struct sl_call *c, uint64_t t)
{
	uint64_t before = sl__clock_ns();
	if (t <= before)
		return 0;
	int e;
	while ((e = sl__sleep_until(t)) == EINTR && call_restarts(c))
		;
	uint64_t after = sl__clock_ns();
	c->waited_ns += after > before ? after - before : 0;
	if (e != 0 && e != EINTR) {
		c->passing = true;
		e = 0;
	}
	return e;
}
