/* SPDX-License-Identifier: MIT */
/*
 * turn.h - conns:adaptive in the preload (turn.c): a server's requests as
 * turns on its accepted connections, their latency fed to the engine's
 * controller (engine/adaptive.h), which moves the rule's concurrency limit;
 * and system protection (load1=, cpu=, rt= on accept and conns), a second
 * such limit on the same turns.
 *
 * API: every function may be called from any thread; init and the fork
 * handlers are _unsync.
 */
#ifndef SLUICE_SHIM_TURN_H
#define SLUICE_SHIM_TURN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "fd.h"
#include "state.h"

/* Map (once) and fill the limiters and controllers of the adaptive rules
 * (sl__st.adapt_rules): per=process ones in memory a fork's children
 * share, rule_lim[i] pointing there. Returns 0 or -1 (errno). */
int sl__turn_init_unsync(struct sl_state *st, uint64_t now_ns);
/* pthread_atfork prepare and child: a new epoch on each side, so that a
 * connection accepted before the fork is no longer closed for good by
 * either process's close alone (turnclose.c). */
void sl__turn_forking(void);
void sl__turn_fork_child(void);
/* A new state (init): a new epoch. */
void sl__turn_forked_reset_unsync(void);

/* System protection (load1=, cpu=, rt=) of a connection just accepted:
 * one slot of the protection of each rule in `sys` (sl__st.sys_rules),
 * never waited for. Returns the slot bits taken (turn_tab.h, TURN_GATE +
 * i) for sl__turn_accepted; *refused is -1, or the rule whose protection
 * refuses (then none is held: the connection is to be refused). A dry-run
 * rule's refusal is counted and logged, and the connection goes on
 * without its slot. */
uint64_t sl__turn_gates(uint32_t sys, uint64_t now_ns, int *refused);
/* Connection fd was just accepted holding the slots `rules`: bit i, one of
 * adaptive rule i (sl__st.adapt_rules); bit 32 + i, one of rule i's
 * system protection (sl__turn_gates). Its first turn has begun. */
void sl__turn_accepted(int fd, uint64_t rules, uint64_t now_ns);
/* Connection fd was opened (connect) under the conns:adaptive rules
 * `rules`: its requests are turns of their client limits, from a send on
 * the idle connection to the answer's first bytes received. */
void sl__turn_connected(int fd, uint32_t rules, uint64_t now_ns);
/* A limit is full: ask the kernel (at most every 100 ms) about the
 * connections whose last known holder was another process (a fork child,
 * an exec'd program); those gone give their slots back. True if any did. */
bool sl__turn_sweep(uint64_t now_ns);
/* Slot bit b (adaptive rule b, or rule b - 32's system protection)
 * refused a turn or a connection at now_ns: its limit binds. */
void sl__turn_bound(unsigned i, uint64_t now_ns);

/* A receive of `flags` on fd (rec: its record, rec->turn != 0) is about to
 * be made: an idle connection's turn starts (a blocking socket waits here
 * for its data, then for a slot: the bytes stay in the kernel meanwhile).
 * Returns 0, or the errno the receive fails with (a signal, the socket's
 * timeout, a connection reset because no slot came). *tok is for
 * sl__turn_recv_end. */
int sl__turn_recv_begin(int fd, const struct sl_fdrec *rec, int flags, uint64_t *tok);
/* The receive returned r: the turn's first bytes start its latency (a
 * server's), or end the turn (a client's: the answer). */
void sl__turn_recv_end(uint64_t tok, ssize_t r);
/* A send of `flags` on fd (rec->turn != 0) is about to be made: on an
 * accepted connection the turn, if one is running, ends (the answer); on
 * one the program opened, an idle connection's turn starts (the request),
 * first waiting for its slots as a keep-alive receive does. Returns 0, or
 * the errno the send fails with (a signal, the socket's timeout, a
 * connection reset because no slot came). */
int sl__turn_send(int fd, const struct sl_fdrec *rec, int flags);
/* After the real close of fds the forget hook looked at. */
void sl__turn_after_close(void);

#endif /* SLUICE_SHIM_TURN_H */
