/* SPDX-License-Identifier: MIT */
/*
 * sandbox.h - programs that install a seccomp filter on themselves
 * (sandbox.c): sshd's pre-auth child, browsers' content processes, services
 * with a system call filter.
 *
 * Overview
 * --------
 * Such a filter kills (or fails) every system call its program did not
 * plan to make. Once one is installed, the shim makes none of its own but
 * the real call, the clock (the vDSO, no system call) and a sleep
 * (clock_nanosleep): no getsockopt, getsockname, getpeername, fcntl(F_GETFL),
 * TCP_INFO, fstat, sigaction, no file opened, no log line written. Sockets
 * are classified where they are made and inherited ones at start (fd.c), so
 * the fds a sandboxed child uses were classified before its filter; an fd
 * that is not passes through, counted as "unclassified".
 *
 * API: everything is thread-safe. sl__sandboxed() is one relaxed load.
 */
#ifndef SLUICE_SHIM_SANDBOX_H
#define SLUICE_SHIM_SANDBOX_H

#include "internal.h"
#include "sandboxed.h"

/* A seccomp filter (or strict mode) is about to be installed by the calling
 * thread, `how` naming the call (for a debugger: nothing is logged, see
 * sandbox.c). Returns what sl__sandbox_done needs. */
int sl__sandbox_enter(const char *how);
/* The call sl__sandbox_enter announced returned r: if it failed (r < 0),
 * the process is not sandboxed after all, unless it was before (was = the
 * value sl__sandbox_enter returned). Returns r; errno is kept. */
long sl__sandbox_done(int was, long r);
/* True if syscall(nr, a1, a2, ...) installs a seccomp filter or strict
 * mode (SYS_seccomp, or SYS_prctl with PR_SET_SECCOMP). */
bool sl__sandbox_syscall(long nr, long a1, long a2);
/* The child after fork keeps the flag (the filter is inherited); tests
 * clear it. */
void sl__sandbox_reset_unsync(void);

#endif /* SLUICE_SHIM_SANDBOX_H */
