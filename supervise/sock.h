/* SPDX-License-Identifier: MIT */
/*
 * sock.h - socket, connect, accept: sockets placed at fd >= SL_SUP_FD_BASE (sock.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_SOCK_H
#define SLUICE_SUPERVISE_SOCK_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/seccomp.h>

#include "addr.h"
struct sl_sup;
struct sl_sup_call;
struct sl_sup_thread;

/* A new notification: answer it now or hold it (a call slot). */
void sl_sup_on_socket(struct sl_sup *s, const struct seccomp_notif *req);
void sl_sup_on_connect(struct sl_sup *s, const struct seccomp_notif *req);
void sl_sup_on_accept(struct sl_sup *s, const struct seccomp_notif *req);
/* dup, dup2, dup3, fcntl(F_DUPFD*) of an fd >= SL_SUP_FD_BASE: the call
 * continues; warned of once per process when it moves a throttled socket
 * where its I/O is not trapped. */
void sl_sup_on_dup(struct sl_sup *s, const struct seccomp_notif *req);
/* Advance a held connect or accept (sl_sup_step): true when it is done. */
bool sl_sup_step_connect(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);
bool sl_sup_step_accept(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);
/* The socket's address family bits, type bits and peer (getpeername). */
void sl_sup_classify(int fd, unsigned *fam, unsigned *type, struct sl_addr *peer);

#endif /* SLUICE_SUPERVISE_SOCK_H */
