/* SPDX-License-Identifier: MIT */
/*
 * ownfd.h - fds the library itself keeps open in a program (the Redis lease
 * link's sockets), out of the program's way (ownfd.c): at a high number,
 * close-on-exec, and never closed or replaced by the program's close,
 * close_range, dup2 or dup3, which would let the library write into a file
 * the program opens next on that number.
 *
 * API: thread-safe.
 */
#ifndef SLUICE_SHIM_OWNFD_H
#define SLUICE_SHIM_OWNFD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Entries in use (a relaxed load: the wrappers' test). */
extern _Atomic uint32_t sl__own_n;

/* Move *fdp (the library's own, just made) to a high close-on-exec number
 * and register it: *fdp is where its user keeps it, io the lock its user
 * holds while it uses it (a move takes it). Returns false, with *fdp
 * unchanged and unregistered, if the table is full or no high number is
 * free. */
bool sl__own_take(int *fdp, pthread_mutex_t *io);
/* Unregister fd before the library closes it itself. */
void sl__own_drop(int fd);
/* Whether fd is one of the library's (only when sl__own_n != 0). */
bool sl__own_is(int fd);
/* The program is about to dup2/dup3 onto fd: if it is the library's, move
 * it to another high number first (its user's copy follows). */
void sl__own_yield(int fd);
/* close_range(first, last, flags) as the program asked, skipping the
 * library's fds (several real calls). */
int sl__own_close_range(unsigned first, unsigned last, int flags);
/* In a fork child: the table's lock made anew (a parent's thread may have
 * held it at the fork). */
void sl__own_after_fork(void);

#endif /* SLUICE_SHIM_OWNFD_H */
