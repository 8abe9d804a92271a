/* SPDX-License-Identifier: MIT */
/*
 * io.h - the send and receive families, performed by the supervisor (io.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_IO_H
#define SLUICE_SUPERVISE_IO_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/seccomp.h>

struct sl_sup;
struct sl_sup_call;

/* A new notification of the send or receive family: answer it now or hold
 * it (a call slot). */
void sl_sup_on_send(struct sl_sup *s, const struct seccomp_notif *req);
void sl_sup_on_recv(struct sl_sup *s, const struct seccomp_notif *req);
/* Advance a held transfer (sl_sup_step): true when it is done. */
bool sl_sup_step_send(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);
bool sl_sup_step_recv(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);

/* End the socket wait of held call c (SL_SUP_WAIT_IO) whose thread has a
 * signal to handle: a transfer that moved bytes is answered with their
 * count; any other call continues in the kernel, which meets the signal
 * and returns EINTR or restarts the call (SA_RESTART) as it would have
 * natively. Always true (the call is done). */
bool sl_sup_interrupt(struct sl_sup *s, struct sl_sup_call *c);

#endif /* SLUICE_SUPERVISE_IO_H */
