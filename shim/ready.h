/* SPDX-License-Identifier: MIT */
/*
 * ready.h - when each held-back fd is ready again, deferred connects, and
 * the timer that wakes event loops (ready.c).
 *
 * API: thread-safe, except the _unsync calls (init).
 */
#ifndef SLUICE_SHIM_READY_H
#define SLUICE_SHIM_READY_H

#include <poll.h>
#include <sys/socket.h>

#include "call.h"
#include "clock.h"
#include "internal.h"

/* Directions an fd can be held back in: IN (recv, accept), OUT (send,
 * connect). */
enum sl_dir { SL_DIR_IN = 0, SL_DIR_OUT = 1 };

/* poll/epoll bits a held-back direction hides (the values are the same for
 * poll and epoll on Linux); SL_HIDE_ALL: the fd is hidden whole (a deferred
 * connect: the socket is not connecting yet). */
#define SL_HIDE_IN (POLLIN | POLLPRI | POLLRDNORM | POLLRDBAND | POLLRDHUP)
#define SL_HIDE_OUT (POLLOUT | POLLWRNORM | POLLWRBAND)
#define SL_HIDE_ALL 0xffffffffu

/* Map (once) and clear the tables, note which rules are nonblock=eagain
 * delay rules (sl__st.eagain_rules). Init only (init.c then starts
 * connwait.c, acchold.c and fair.c, which build on it). Returns 0 or -1. */
int sl__ready_init_unsync(void);
/* Set at init: the policy has a delay rule with nonblock=eagain. */
extern _Atomic bool sl__ready_eagain_on;
/* True once the policy has a delay rule with nonblock=eagain: only then do
 * the wait wrappers do anything but call libc. Inline (every wait wrapper
 * asks first): one relaxed load, set once at init before the program runs,
 * and the state's active flag. */
static inline bool sl__ready_on(void)
{
	return atomic_load_explicit(&sl__ready_eagain_on, memory_order_relaxed) && sl__st.active;
}
/* The module that mirrors readiness into the kernel (epoll.c) registers
 * what to do when what is hidden of an fd changes: the hook brings the
 * fd's registrations in line and returns true if it has any (then it has
 * also re-armed the timer for what is still hidden). Init only. */
void sl__ready_on_change_unsync(bool (*hook)(int fd));
/* Connects that wait elsewhere (connwait.c: for a conns slot) register how
 * to ask about theirs: asked first by sl__ready_hidden, sl__connect_again
 * and sl__connect_soerror, with the same arguments; false / 0 when fd is
 * not theirs. Init only. */
struct sl_ready_waiters {
	uint32_t (*hidden)(int fd, uint64_t now, uint64_t *until);
	bool (*again)(int fd, int *ret);
	int (*soerror)(int fd, int *err);
};
void sl__ready_on_waiters_unsync(const struct sl_ready_waiters *w);

/* What is hidden of fd changed (not through sl__ready_hold): bring its
 * epoll registrations in line. */
void sl__ready_changed(int fd);
/* Hold fd back in dir until the instant t (now < t): poll and epoll do not
 * report that direction before it. Returns the instant it was held back
 * until before (0: never; the stats count only the extension). */
uint64_t sl__ready_hold(int fd, enum sl_dir dir, uint64_t t);
/* poll bits of fd hidden at now (0, SL_HIDE_* or SL_HIDE_ALL); *until gets
 * the earliest instant that changes (left alone if nothing is hidden). */
uint32_t sl__ready_hidden(int fd, uint64_t now, uint64_t *until);
/* The instant from which sl__ready_hidden finds nothing hidden of any fd:
 * the latest end of any hold made (raised before each hold is stored),
 * UINT64_MAX once a connect was deferred or while connects may wait
 * elsewhere (sl__ready_on_waiters_unsync). Never lowered, but by init. */
extern _Atomic uint64_t sl__ready_quiet_ns;
/* sl__ready_quiet_ns, and whether sl__ready_hidden(fd, now, ...) would
 * return 0 for every fd: the wait wrappers then skip asking it fd by fd.
 * A hold made by another thread at the same time may be missed, as
 * sl__ready_hidden's own relaxed load of it may miss it; one that happens
 * before this call (in this thread, or published to it by the program's
 * own synchronisation) is seen: its raise of the instant comes first.
 * Relaxed: a timestamp, nothing hangs on it. */
static inline uint64_t sl__ready_quiet(void)
{
	return atomic_load_explicit(&sl__ready_quiet_ns, memory_order_relaxed);
}
static inline bool sl__ready_none_hidden(uint64_t now)
{
	return now >= sl__ready_quiet();
}
/* The timer's next instant (UINT64_MAX: nothing armed); ready.c's. */
extern _Atomic uint64_t sl__ready_next;
/* sl__ready_tick's part for an instant that is due: out of line, so the
 * wrappers' inline test keeps no registers for the scan. */
uint64_t sl__ready_tick_due(uint64_t now);
/* Do what is due at now (bring epoll registrations back, start deferred
 * connects) and return the next instant something is due (UINT64_MAX:
 * nothing). One load when nothing is due. */
static inline uint64_t sl__ready_tick(uint64_t now)
{
	/* seq_cst (a plain load on x86-64): after a waiter's sl__wake_enter,
	 * either this sees an instant lowered by another thread, or that
	 * thread sees the waiter and arms the wake-up (wake.h). */
	const uint64_t next = atomic_load(&sl__ready_next);
	return now < next ? next : sl__ready_tick_due(now);
}
/* Make the timer run sl__ready_tick for fd at `at` (epoll.c calls it when it
 * hides bits of a registration). */
void sl__ready_arm(int fd, uint64_t at);

/* A non-blocking connect whose rate slot starts at c->ready_ns: remember it,
 * hold the socket back, and connect for real when the slot comes. Returns
 * true if deferred (the caller returns EINPROGRESS). */
bool sl__connect_defer(struct sl_call *c, const struct sockaddr *sa, socklen_t len);
/* connect() on an fd whose connect is deferred: EALREADY until its slot,
 * then the real connect's answer. Returns false if fd has none. */
bool sl__connect_again(int fd, const struct sockaddr *sa, socklen_t len, int *ret);
/* SO_ERROR of fd if it has a deferred connect (wrap_sockopt.c): returns 1
 * with *err (0: in progress, or the real connect's error, once), else 0. */
int sl__connect_soerror(int fd, int *err);

/* The start of a wait of span ns in a wait wrapper (0: a poll, which
 * cannot block; UINT64_MAX: no end): its deadline, and the clock's reading
 * only when the deadline needs one (have_now). A poll's deadline has
 * passed (0) whatever now is. */
struct sl_wait_start {
	uint64_t now, deadline;
	bool have_now;
};
static inline struct sl_wait_start sl__ready_wait_start(uint64_t span)
{
	struct sl_wait_start w = {0, span == 0 ? 0 : UINT64_MAX, false};
	if (span != 0 && span != UINT64_MAX) {
		w.now = sl__clock_ns();
		w.have_now = true;
		w.deadline = sl__sat_add(w.now, span);
	}
	return w;
}

#endif /* SLUICE_SHIM_READY_H */
