/* SPDX-License-Identifier: MIT */
/*
 * sandbox.c - noticing a seccomp filter: the prctl(PR_SET_SECCOMP) and
 * seccomp() wrappers (syscall(SYS_seccomp) and syscall(SYS_prctl) come here
 * from wrap_fd.c), the flag the rest of the shim tests, and the count of fds
 * a sandboxed process used unclassified.
 *
 * The flag is set before the real call, not after: from the instant the
 * kernel installs the filter, any query could be the one that kills the
 * process. Right before it, the sockets a connect left to be classified on
 * their next call are classified (the shim's last queries). A call that fails clears it again (nothing was installed). A
 * filter installed by some other route (a raw system call instruction, a
 * filter inherited through exec from a process without the shim) is not
 * seen; the README says so.
 *
 * The count lives in the live stats record (shm_format.h), which was mapped
 * before the filter: a sandboxed process cannot open or write a file at exit,
 * so `sluice stat` is where it shows.
 */
#include <errno.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fd.h"
#include "real.h"
#include "record.h"
#include "sandbox.h"
#include "state.h"

int sl__sandbox_enter(const char *how)
{
	/* Not logged, not even here, before the filter: a sandboxing program
	 * limits more than system calls (sshd's pre-auth child sets
	 * RLIMIT_FSIZE to 0 first, so a log line written to a file would kill
	 * it with SIGXFSZ). The stats record says it (sluice stat). */
	(void)how;
	/* The last queries: sockets a connect left for later (fd.h). */
	sl__fdtab_classify_pending();
	/* Relaxed: see sl__sandboxed. */
	int was = atomic_exchange_explicit(&sl__sandbox_on, 1, memory_order_relaxed);
	if (sl__st.rec != NULL)
		atomic_store_explicit(&sl__st.rec->sandboxed, 1, memory_order_relaxed);
	return was;
}

long sl__sandbox_done(int was, long r)
{
	if (r >= 0 || was)
		return r;
	const int e = errno;
	atomic_store_explicit(&sl__sandbox_on, 0, memory_order_relaxed);
	if (sl__st.rec != NULL)
		atomic_store_explicit(&sl__st.rec->sandboxed, 0, memory_order_relaxed);
	errno = e;
	return r;
}

void sl__sandbox_reset_unsync(void)
{
	atomic_store_explicit(&sl__sandbox_on, 0, memory_order_relaxed);
	sl__rec_unclassified_reset_unsync();
}

/* True if prctl(option, arg2) installs a filter or strict mode. */
static bool prctl_sandboxes(int option, unsigned long arg2)
{
	return option == PR_SET_SECCOMP &&
	       (arg2 == SECCOMP_MODE_FILTER || arg2 == SECCOMP_MODE_STRICT);
}

/* prctl is variadic; like musl, its four optional arguments travel as
 * unsigned longs, which hold an int or a pointer on every Linux ABI. */
SL_EXPORT int prctl(int option, ...)
{
	va_list ap;
	va_start(ap, option);
	unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long),
		      a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
	va_end(ap);
	if (!prctl_sandboxes(option, a2))
		return SL_REAL(prctl)(option, a2, a3, a4, a5);
	int was = sl__sandbox_enter("prctl(PR_SET_SECCOMP)");
	return (int)sl__sandbox_done(was, SL_REAL(prctl)(option, a2, a3, a4, a5));
}

/* glibc has no seccomp(): programs and libseccomp use syscall(), which
 * wrap_fd.c checks with sl__sandbox_syscall. This one is for a program
 * that calls a seccomp() of some other library: it is the system call. */
SL_EXPORT int seccomp(unsigned int op, unsigned int flags, void *args);
SL_EXPORT int seccomp(unsigned int op, unsigned int flags, void *args)
{
	int was = sl__sandbox_enter("seccomp()");
	return (int)sl__sandbox_done(was, SL_REAL(syscall)(SYS_seccomp, (long)op, (long)flags,
							   (long)args, 0L, 0L, 0L));
}

bool sl__sandbox_syscall(long nr, long a1, long a2)
{
	if (nr == SYS_seccomp)
		return a1 == SECCOMP_SET_MODE_FILTER || a1 == SECCOMP_SET_MODE_STRICT;
	return nr == SYS_prctl && prctl_sandboxes((int)a1, (unsigned long)a2);
}
