/* SPDX-License-Identifier: MIT */
/*
 * fair.h - fair shares among the non-blocking fds that wait for one byte
 * limiter (fair.c).
 *
 * API: thread-safe, except the _unsync call (init).
 */
#ifndef SLUICE_SHIM_FAIR_H
#define SLUICE_SHIM_FAIR_H

#include "call.h"
#include "internal.h"
#include "ready.h"
#include "state.h"

/* Map (once) and clear the table, register the forget hook. Init only
 * (after the eagain rules are known). Returns 0 or -1. */
int sl__fair_init_unsync(void);
/* Reserve, for the nb receive c that was cut short or refused, its next
 * turn: sl__need units of each of its nb byte rules whose limiter can
 * reserve (token and leaky buckets, delay, not per=peer or redis=KEY),
 * kept on (fd, dir) until its next call there (first giving back what c
 * did not use of its own turn). Returns the instant the fd is held back
 * until: the turn's (the last of its rules'), later if a rule without turns
 * refused c until later; a call before its kept turn gets that turn's
 * instant; 0 if nothing was reserved. */
uint64_t sl__fair_reserve(struct sl_call *c, enum sl_dir dir, uint64_t now);
/* The part of sl__fair_settle past its test. */
void sl__fair_settle_slow(struct sl_call *c, enum sl_dir dir);
/* Give back the units of c's turn that it did not use (c->credit). */
void sl__fair_return(struct sl_call *c);
/* The rules whose turns are reserved (token and leaky byte rules with
 * nonblock=eagain, not per=peer or redis=KEY). */
uint32_t sl__fair_rules(void);
/* True if (fd, dir) has a turn reserved or being settled: its next call owns
 * units the limiter no longer shows (sl__nb_probe asks). */
bool sl__fair_has(int fd, enum sl_dir dir);
/* Reservations kept now (any fd), a hint: sl__st.fair_kept (state.h). */
/* A call c on (fd, dir) begins: the units of the fd's reserved turn become
 * the call's (c->credit: sl__available counts them, sl__charge uses them
 * first, sl__call_end gives back the rest). Nothing if none is kept. */
static inline void sl__fair_settle(struct sl_call *c, enum sl_dir dir)
{
	/* Relaxed: a hint; the fd's own record is exchanged. */
	if (__builtin_expect(atomic_load_explicit(&sl__st.fair_kept, memory_order_relaxed) != 0, 0))
		sl__fair_settle_slow(c, dir);
}

#endif /* SLUICE_SHIM_FAIR_H */
