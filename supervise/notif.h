/* SPDX-License-Identifier: MIT */
/*
 * notif.h - answering a notification: let it continue, answer it
 * with a value or an errno, ask whether it is still waiting; the clock and
 * the warnings (notif.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_NOTIF_H
#define SLUICE_SUPERVISE_NOTIF_H

#include <stdbool.h>
#include <stdint.h>

#include "state.h"

uint64_t sl_sup_now_ns(void);
/* Answer a notification: val or -err, or CONTINUE. 0, or -errno (ENOENT:
 * the call is gone). */
int sl_sup_answer(struct sl_sup *s, uint64_t id, int64_t val, int err);
int sl_sup_continue(struct sl_sup *s, uint64_t id);
/* Whether the notification is still waiting for its answer. */
bool sl_sup_valid(const struct sl_sup *s, uint64_t id);
/* Log once per message key (a small set of warnings). */
void sl_sup_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* SLUICE_SUPERVISE_NOTIF_H */
