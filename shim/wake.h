/* SPDX-License-Identifier: MIT */
/*
 * wake.h - waking a thread blocked in epoll_wait when a hold made by
 * another thread ends before that thread's timeout (wake.c).
 *
 * A wait wrapper caps its timeout at the ready timer's next instant
 * (ready.c) when it starts. A hold made afterwards by another thread (its
 * send got EAGAIN; gRPC's poller thread waits while the writer thread
 * sends) takes the fd's bits out of the kernel's registrations, and nobody
 * would give them back before the waiter's own timeout: 5 s for gRPC. So
 * every epoll set the shim sees made holds one more registration: a timerfd
 * of the shim's, armed at the new instant whenever the timer is lowered
 * while some thread waits. Its event wakes the waiters, which run the timer
 * and wait again; the program never sees it. poll and select need none:
 * a call in progress waits for the kernel's readiness of every fd it was
 * given, and a hold made meanwhile is applied when it reports one.
 *
 * API: thread-safe, except the _unsync call.
 */
#ifndef SLUICE_SHIM_WAKE_H
#define SLUICE_SHIM_WAKE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* The token of the wake-up timer's registration in every epoll set: the
 * epoll mirror's magic with slot 0xffff (epoll.c drops its events). */
#define SL_EP_WAKE_TOKEN ((0x51ceull << 48) | (0xffffull << 32))

/* Register the forget hook and the fork handler. Init only. */
void sl__wake_init_unsync(void);
/* Add the wake-up timer to the new epoll set epfd (made once, on the first
 * set: a timerfd at a high fd number, close-on-exec). */
void sl__wake_add(int epfd);
/* A thread starts (enter) or ends (leave) a real wait of a wait wrapper.
 * enter is a full barrier: a timer lowered after it sees the waiter, one
 * lowered before it is seen by the waiter's read of the ready timer. */
void sl__wake_enter(void);
void sl__wake_leave(void);
/* The ready timer was lowered to `at` (ready.c): arm the wake-up at it if a
 * thread waits now and it is not armed earlier already. */
void sl__wake_lowered(uint64_t at);
/* The wake-up timer's event was delivered: it is no longer armed. */
void sl__wake_fired(void);
/* True once a wake-up timer was armed in this process (wake.c): only then
 * can its event be among a wait's (epwait.c looks for it in a full one). */
extern _Atomic bool sl__wake_ever;
static inline bool sl__wake_maybe(void)
{
	/* Relaxed: a hint; set before the timer is armed, by the thread that
	 * arms it, so a wait that gets the event after it sees it set (the
	 * kernel's wait orders the two). */
	return atomic_load_explicit(&sl__wake_ever, memory_order_relaxed);
}

#endif /* SLUICE_SHIM_WAKE_H */
