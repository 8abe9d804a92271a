/* SPDX-License-Identifier: MIT */
/*
 * cwrec.h - the records of the connects that wait for a conns slot, shared
 * by connwait.c (their states: made, started, failed, closed) and
 * cwlook.c (what poll, connect and getsockopt(SO_ERROR) see of them). The
 * states and their protocol are in connwait.c's comment.
 *
 * API: any thread; the table's slots change by CAS (connwait.c).
 */
#ifndef SLUICE_SHIM_CWREC_H
#define SLUICE_SHIM_CWREC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "conn.h"
#include "fd.h"
#include "internal.h"

/* A record being started by another thread hides its fd this much longer. */
#define CW_STARTING_NS 100000u

enum cw_state {
	CW_HELD, /* first: a zeroed record is held */
	CW_PENDING,
	CW_STARTING,
	CW_FAILED,
	CW_SPENT,
};

struct cw {
	_Atomic uint32_t state;    /* enum cw_state */
	_Atomic int32_t fd;        /* the fd to connect on; -1: closed (a dup
	                             connects when it is looked at) */
	_Atomic int32_t alt;       /* the last dup of it, or -1: fd once fd
	                             closes (its turn is kept) */
	_Atomic uint64_t retry_ns; /* looked at again then */
	int32_t err;               /* FAILED: its error */
	int32_t late_err;          /* the error once the deadline has passed */
	uint64_t start_ns;         /* not started before (its rate slot) */
	uint64_t deadline_ns;      /* max-delay or SO_SNDTIMEO */
	uint64_t ticket;           /* the order of waiting */
	uint32_t gen;              /* the process that made it (connwait.c) */
	uint32_t rules;            /* its conns rules (stats) */
	uint32_t n;
	struct sl_limiter *lims[SL_CONN_RULES];
	socklen_t len;
	struct sockaddr_storage addr;
};

extern struct cw *sl__cw_tab;        /* [sl__fd_cap], indexed like conn.c's records */
extern _Atomic uint32_t sl__cw_live; /* records not HELD */

/* The record fd refers to (index + 1), or 0; seq_cst (connwait.c). */
static inline uint32_t sl__cw_fd_conn(int fd)
{
	if ((unsigned)fd >= sl__fd_cap || sl__fdrecs == NULL)
		return 0;
	return atomic_load(&sl__fdrecs[fd].conn);
}

/* Whether any record is not HELD. Relaxed: a hint; a record is counted
 * before it is published. */
static inline bool sl__cw_any(void)
{
	return sl__cw_tab != NULL && atomic_load_explicit(&sl__cw_live, memory_order_relaxed) != 0;
}

/* When PENDING record w is looked at again. */
uint64_t sl__cw_next_look(struct cw *w, uint64_t now);
/* Start record k's connect on fd if it is due (or, if `handed`, a slot was
 * just given back). Returns the state it leaves. errno is preserved. */
uint32_t sl__cw_kick(uint32_t k, int fd, uint64_t now, bool handed);

#endif /* SLUICE_SHIM_CWREC_H */
