/* SPDX-License-Identifier: MIT */
/*
 * kernel.h - the kernel's seccomp and pidfd features, checked at start, and
 * the /proc files the supervisor reads (kernel.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_KERNEL_H
#define SLUICE_SUPERVISE_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sl_sup_features {
	int major, minor;   /* uname release */
	bool wait_killable; /* SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (6.0) */
	bool sync_wakeup;   /* SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (6.6) */
	bool pidfd_thread;  /* pidfd_open(tid, PIDFD_THREAD) (6.9) */
};

/* Fill *f; 0, or -1 with a one-line reason in err (a kernel older than
 * 5.14, or user notification not available). */
int sl_sup_features_check(struct sl_sup_features *f, char *err, size_t errlen);

/* The text of /proc/PID/NAME (its first cap - 1 bytes), NUL-terminated in
 * buf; false if it cannot be read (the process is gone) or is empty. */
bool sl_sup_proc_text(pid_t pid, const char *name, char *buf, size_t cap);

#endif /* SLUICE_SUPERVISE_KERNEL_H */
