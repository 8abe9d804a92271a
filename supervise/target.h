/* SPDX-License-Identifier: MIT */
/*
 * target.h - the supervised processes and threads: pidfds, fds, memory (target.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_TARGET_H
#define SLUICE_SUPERVISE_TARGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "state.h"

/* The thread that made a notification, and its process; NULL if it is
 * gone (the notification is then dead too). */
struct sl_sup_thread *sl_sup_thread_of(struct sl_sup *s, pid_t tid);
/* The thread the supervisor knows as tid, without checking that it still
 * lives (the fast send checks it with a lookup in its fddir), or NULL. */
struct sl_sup_thread *sl_sup_thread_peek(struct sl_sup *s, pid_t tid);
/* The thread's /proc/TGID/task/TID/fd, opened on first use (call it only
 * while the thread is known to live: its tid then names it), or -1. A
 * lookup in it fails once the thread has exited, whatever reuses its tid. */
int sl_sup_thread_fddir(struct sl_sup_thread *t);
/* The class entry of fd in p, or NULL (make: grow the table). */
struct sl_sup_fdclass *sl_sup_fdclass_of(struct sl_sup_proc *p, int fd, bool make);
/* The live process tgid, if the supervisor has met it, or NULL. */
struct sl_sup_proc *sl_sup_proc_find(struct sl_sup *s, pid_t tgid);
/* Forget threads and processes that have exited (the sweep calls it). */
void sl_sup_target_sweep(struct sl_sup *s);
/* Free every thread, process and peer entry (at the end). */
void sl_sup_target_free(struct sl_sup *s);
/* A duplicate of the target's fd (close it after the answer), or -errno.
 * EPERM marks the process unreachable and warns once. */
int sl_sup_getfd(struct sl_sup *s, struct sl_sup_thread *t, int fd);
/* Mark a process the supervisor has no ptrace access to; warn once. */
void sl_sup_unreachable(struct sl_sup_proc *p, const char *what, int err);
/* Copy from / to the target's memory: bytes copied, or -errno. */
ssize_t sl_sup_mem_read(pid_t tid, uint64_t addr, void *buf, size_t len);
ssize_t sl_sup_mem_readv(pid_t tid, const struct iovec *remote, int n, void *buf, size_t len);
ssize_t sl_sup_mem_writev(pid_t tid, const struct iovec *remote, int n, const void *buf,
			  size_t len);
ssize_t sl_sup_mem_write(pid_t tid, uint64_t addr, const void *buf, size_t len);

/* Whether thread tid has a signal pending that it catches and does not
 * block: one that would interrupt a blocking call natively. */
bool sl_sup_signal_waiting(pid_t tid);

#endif /* SLUICE_SUPERVISE_TARGET_H */
