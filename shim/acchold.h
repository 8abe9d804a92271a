/* SPDX-License-Identifier: MIT */
/*
 * acchold.h - accepted connections that a per=peer accept rule holds back
 * on a non-blocking listener (acchold.c).
 *
 * API: thread-safe.
 */
#ifndef SLUICE_SHIM_ACCHOLD_H
#define SLUICE_SHIM_ACCHOLD_H

#include <sys/socket.h>

#include "internal.h"

/* Connections held now (any listener); a hint. */
extern _Atomic uint32_t sl__ah_count;
static inline bool sl__ah_on(void)
{
	/* Relaxed: a hint; each entry is claimed with a CAS. */
	return atomic_load_explicit(&sl__ah_count, memory_order_relaxed) != 0;
}
/* Hold connection fd, accepted on listener lfd from (addr, len), until its
 * slot at due (ns); the listener is then reported readable (poll, epoll)
 * and the next accept on it returns fd. False if the table is full. */
bool sl__ah_hold(int lfd, int fd, uint64_t due, const struct sockaddr *addr, socklen_t len);
/* A held connection of lfd whose slot has come (the earliest), handed over
 * as accept4(lfd, sa, len, flags) would return it (flags < 0: accept), or
 * -1 if there is none. errno is preserved. */
int sl__ah_take(int lfd, uint64_t now, struct sockaddr *sa, socklen_t *len, int flags);
/* The earlier of `before` and the earliest instant after now a held
 * connection is due: the wait wrappers wake then, and report its listener
 * readable (one already due and not taken, its listener not in the set
 * waited on, does not make them spin). */
uint64_t sl__ah_next(uint64_t now, uint64_t before);
/* Whether lfd has a held connection due at now. */
bool sl__ah_due(int lfd, uint64_t now);
/* Register the forget hook (a closed listener closes what it held).
 * Init only. */
void sl__ah_init_unsync(void);

#endif /* SLUICE_SHIM_ACCHOLD_H */
