/* SPDX-License-Identifier: MIT */
/*
 * conns.h - conns rules: connection slots of supervised calls (conns.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_CONNS_H
#define SLUICE_SUPERVISE_CONNS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "admit.h"
struct sl_sup;
struct sl_sup_call;

/* Take a slot of each of the call's conns rules: GO, RETRY (ask again after
 * *wait_ns) or REFUSE (*err). */
enum sl_sup_verdict sl_sup_conns_take(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns,
				      uint64_t *wait_ns, int *err);
/* The connection (socket inode ino, or 0: the one fd names now) is open
 * at fd of the call's process: its slots stay taken until no supervised
 * process has an fd naming the socket; those of conns:adaptive rules and
 * the gate slots of an accept (c->gates_held) go to its first turn instead
 * (turn.c), which began at now_ns. */
void sl_sup_conns_hold(struct sl_sup *s, struct sl_sup_call *c, int fd, ino_t ino, uint64_t now_ns);
/* Follow the connection (socket inode ino) open at fd of process p, which
 * holds no slot: a client's connection with turns (client.c), forgotten by
 * sl_sup_turn_gone once it is closed. False without memory. */
bool sl_sup_conns_follow(struct sl_sup *s, struct sl_sup_proc *p, int fd, ino_t ino);
/* The inode of what fd of process p names now, or 0. */
ino_t sl_sup_fd_ino(const struct sl_sup_proc *p, int fd);
/* The call ends without a connection: give its slots back (gates too). */
void sl_sup_conns_drop(struct sl_sup *s, struct sl_sup_call *c);
/* Give back the slots of connections that were closed. */
void sl_sup_conns_sweep(struct sl_sup *s);
/* Forget every connection (at the end). */
void sl_sup_conns_free(void);

#endif /* SLUICE_SUPERVISE_CONNS_H */
