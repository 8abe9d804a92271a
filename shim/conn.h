/* SPDX-License-Identifier: MIT */
/*
 * conn.h - connection records (conn.c): the conns slots one connection
 * holds, referred to by index + 1 from every fd of it (fd.h: sl_fdrec.conn).
 *
 * API: thread-safe (reference counts); _unsync: init only.
 */
#ifndef SLUICE_SHIM_CONN_H
#define SLUICE_SHIM_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

#define SL_CONN_RULES 8 /* conns rules one connection may hold a slot of */

/* Map (once; clear: zero it again) the records. 0 or -1. */
int sl__conn_init_unsync(bool clear);
bool sl__conn_mapped(void);
/* Claim a free record for fd's slots of lims (at most SL_CONN_RULES): index
 * + 1 with one reference, or 0 if none is free. */
uint32_t sl__conn_claim(int fd, struct sl_limiter *const *lims, unsigned n);
/* One more reference to record c if it is still some fd's (refs > 0):
 * true if taken. */
bool sl__conn_ref_live(uint32_t c);
/* Before a dup of oldfd: a reference to the connection record oldfd refers
 * to (index + 1), or 0, for sl__conn_dup. Taken before the real call, so
 * that a close of oldfd racing the dup in another thread cannot drop the
 * last reference, and with it a connect still waiting for its slot, while
 * the new fd exists without one. */
uint32_t sl__conn_dup_begin(int oldfd);
/* After it: newfd (r >= 0) now refers to the same socket as oldfd: the
 * classification (sl__fd_dup_class) and the connection c (the reference
 * sl__conn_dup_begin took, passed on to newfd; dropped if the dup failed,
 * r < 0). errno is preserved. */
void sl__conn_dup(int oldfd, int newfd, uint32_t c, long r);
/* Drop one reference to record c; the last gives back its slots. */
void sl__conn_put(uint32_t c);
/* fd stopped referring to record c (its close): the hooks, then the drop. */
void sl__conn_closing(int fd, uint32_t c);
/* Before fork: record c (fd refers to it) gets a family entry (connfam.h)
 * for its slots of the rules a fork shares. */
void sl__conn_share(int fd, uint32_t c);
/* Give back one slot of conns limiter l (uncounted if l is shared). */
void sl__conn_release(struct sl_limiter *l);
/* What the owner of deferred connects is told about connection records. */
struct sl_conn_hooks {
	/* fd stops referring to record c (its close): runs after fd's
	 * reference is cut (seq_cst), before it is dropped. */
	void (*closing)(int fd, uint32_t c);
	/* The last reference to record c is being dropped: true if its slots
	 * were taken (they are then given back). */
	bool (*last)(uint32_t c);
	/* Whether record c's slots are taken (not a connect still waiting). */
	bool (*holds)(uint32_t c);
	/* Slots were given back (a waiting connect may take them). */
	void (*released)(void);
	/* fd (a dup) now refers to record c too. */
	void (*duped)(int fd, uint32_t c);
};
/* Register them. Init only. */
void sl__fd_on_conn_unsync(const struct sl_conn_hooks *hooks);

#endif /* SLUICE_SHIM_CONN_H */
