/* SPDX-License-Identifier: MIT */
/*
 * place.h - where the supervisor installs a supervised program's sockets
 * (place.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_PLACE_H
#define SLUICE_SUPERVISE_PLACE_H

#include <stdbool.h>
#include <stdint.h>

struct sl_sup;
struct sl_sup_thread;

/* Install srcfd in the target at a free fd >= SL_SUP_FD_BASE and
 * answer the notification with its number: that number, or -errno. */
int sl_sup_place(struct sl_sup *s, struct sl_sup_thread *th, uint64_t id, int srcfd, bool cloexec);

#endif /* SLUICE_SUPERVISE_PLACE_H */
