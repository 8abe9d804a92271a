/* SPDX-License-Identifier: MIT */
/*
 * filter.h - which system calls the filter hands to the supervisor (filter.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_FILTER_H
#define SLUICE_SUPERVISE_FILTER_H

#include <stdbool.h>

#include "policy.h"

/* Which groups of calls the filter hands to the supervisor. */
struct sl_sup_traps {
	bool place;     /* socket, accept, accept4 (fd placement) */
	bool connect;   /* connect */
	bool accept;    /* accept, accept4 (rate or conns) */
	bool send;      /* write, writev, send*, pwritev2, sendfile, splice: fd >= base */
	bool recv;      /* read, readv, recv*, preadv2, splice: fd >= base */
	bool stdio;     /* the send and receive calls above on fds 0-2 too
			 * (--trap-stdio: inetd-style servers move sockets there) */
	uint32_t turns; /* conns:adaptive rules (turn.c, client.c): the
			 * connections they accept and the stream sockets
			 * they may connect (socket() trapped for those) are
			 * placed at fd >= base, and the sends and receives
			 * there are trapped (their turns) */
	uint32_t gates; /* accept and conns rules with system protection
			 * (load1=, cpu=, rt=; turn.c): the same, for their
			 * gates' turns */
};

/* Whether connections have turns (turn.c) under traps t: conns:adaptive
 * or system protection. */
static inline bool sl_sup_traps_turns(const struct sl_sup_traps *t)
{
	return (t->turns | t->gates) != 0;
}

/* The handler a trapped call goes to (loop.c). */
enum sl_sup_on {
	SL_SUP_ON_NONE, /* not trapped: let it continue */
	SL_SUP_ON_SEND,
	SL_SUP_ON_RECV,
	SL_SUP_ON_SENDFILE, /* sendfile, splice */
	SL_SUP_ON_SOCKET,
	SL_SUP_ON_ACCEPT,
	SL_SUP_ON_CONNECT,
	SL_SUP_ON_DUP, /* dup, dup2, dup3, fcntl(F_DUPFD*) of an fd >= base */
};

/* The handler of system call nr, by the one table the filter is built
 * from. */
enum sl_sup_on sl_sup_on_of(long nr);

/* Whether the send and receive calls of fd are trapped: fd >= base, or
 * fds 0-2 under --trap-stdio. */
bool sl_sup_traps_fd(const struct sl_sup_traps *t, long fd);

/* The traps a policy needs. */
void sl_sup_traps_of(const struct sl_policy *p, struct sl_sup_traps *t);

/* Build the filter into prog (at most `max` instructions); returns the
 * number of instructions, or -1 if it does not fit. */
struct sock_filter;
int sl_sup_filter_build(const struct sl_sup_traps *t, struct sock_filter *prog, int max);

#endif /* SLUICE_SUPERVISE_FILTER_H */
