/* SPDX-License-Identifier: MIT */
/*
 * connwait.h - non-blocking connects that wait for a conns slot without
 * blocking (connwait.c).
 *
 * API: thread-safe, except the _unsync call (init).
 */
#ifndef SLUICE_SHIM_CONNWAIT_H
#define SLUICE_SHIM_CONNWAIT_H

#include <sys/socket.h>

#include "call.h"
#include "internal.h"

/* Map (once) and clear the table, register the hooks of fd.c. Init only
 * (after sl__ready_init_unsync). Returns 0 or -1. */
int sl__cw_init_unsync(void);
/* The child after fork: a record another thread was starting waits again
 * (that thread is gone). */
void sl__cw_after_fork_unsync(void);
/* True if a connect may wait for every conns rule in `conns` without
 * blocking: delay with nonblock=eagain, per=process (not redis=KEY),
 * shared= or per=fd (on an O_NONBLOCK socket). */
bool sl__cw_may_defer(uint32_t conns);
/* A connect whose conns slots are full: keep it in a connection record of
 * fd (a dup shares it), return EINPROGRESS, take the slots when they free
 * (in the order the connects waited) and connect then, not before
 * c->ready_ns (a rate slot reserved for it); past max-delay or SO_SNDTIMEO
 * it fails (SO_ERROR: the rule's errno, or ETIMEDOUT). False if it cannot
 * be kept (the caller waits in place). */
bool sl__cw_defer(struct sl_call *c, uint32_t conns, const struct sockaddr *sa, socklen_t len);
/* For ready.c: SL_HIDE_ALL if fd's connect waits for a slot (*until: when
 * it is looked at again), else 0; starts it first if it is due. */
uint32_t sl__cw_hidden(int fd, uint64_t now, uint64_t *until);
/* connect() on fd: true if its connection waits or waited here, with the
 * answer in *ret and errno (EALREADY; its error once; then the kernel's). */
bool sl__cw_again(int fd, int *ret);
/* getsockopt(SO_ERROR) on fd: 1 with *err if fd's connect waits (0) or
 * failed here (its error, once), else 0. */
int sl__cw_soerror(int fd, int *err);

/* The part of sl__cw_after_close that starts the waiting connects. */
void sl__cw_handoff(void);
/* After the real close of an fd whose slots this thread gave back: start
 * the connects that wait for them, in the order they waited (a slot is
 * handed over only once the connection that held it is closed). */
static inline void sl__cw_after_close(void)
{
	extern __thread bool sl__cw_handoff_due __attribute__((tls_model("initial-exec")));
	if (__builtin_expect(sl__cw_handoff_due, 0))
		sl__cw_handoff();
}

#endif /* SLUICE_SHIM_CONNWAIT_H */
