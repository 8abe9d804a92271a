/* SPDX-License-Identifier: MIT */
/*
 * hup.h - end-of-stream events of sockets whose reads a byte rule may cut
 * (hup.c).
 *
 * The kernel returns less than a stream read asked for only when the
 * socket's queue is empty, so a program that was told the peer closed
 * (EPOLLRDHUP/POLLRDHUP, or EPOLLHUP/POLLHUP) may take a short read as the
 * end of the stream and drop the connection: haproxy does. A receive byte
 * rule cuts reads short while data is still queued, so on such a socket
 * those bits would make the program lose what is still queued. The poll
 * and epoll wrappers therefore report them only where a read cannot follow
 * (an event without IN); the program learns of the end of the stream by
 * reading 0, as it must anyway. An event that carries HUP without IN
 * because IN is held back (ready.c) is not reported before the hold ends:
 * the program would read, be cut, and stop.
 *
 * API: any thread.
 */
#ifndef SLUICE_SHIM_HUP_H
#define SLUICE_SHIM_HUP_H

#include <poll.h>

#include "internal.h"

/* poll and epoll share these values on Linux. */
#define SL_HUP_BITS ((uint32_t)(POLLRDHUP | POLLHUP))

/* True if a receive byte rule may cut reads on fd (a stream socket it
 * matches); classifies fd if it is not yet. */
bool sl__hup_cuts(int fd);

/* The events rev reported for fd as the program may see them: RDHUP and
 * HUP taken out of an event that has IN, on an fd whose reads may be cut.
 * One test when rev has neither. */
static inline uint32_t sl__hup_filter(int fd, uint32_t rev)
{
	if (__builtin_expect((rev & SL_HUP_BITS) == 0 || (rev & POLLIN) == 0, 1))
		return rev;
	return sl__hup_cuts(fd) ? rev & ~SL_HUP_BITS : rev;
}

/* True if an event rev for fd, whose program asked for `asked` (IN among
 * them), must wait: HUP without IN, IN held back, and reads may be cut. */
bool sl__hup_held(int fd, uint32_t rev, uint32_t asked);

#endif /* SLUICE_SHIM_HUP_H */
