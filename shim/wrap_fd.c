/* SPDX-License-Identifier: MIT */
/*
 * wrap_fd.c - the calls that hand out an fd number, and libc's syscall().
 *
 * Every libc call that returns a new fd makes the number forget what it
 * meant before (fd.c): a number is reused at once after a close, and a
 * socket's classification must never outlive the socket. The calls that
 * never make a socket (open, openat, creat and their 64 and fortified forms,
 * pipe, pipe2, eventfd, timerfd_create, signalfd, memfd_create, inotify_init,
 * inotify_init1, fanotify_init) are generated from the NEWFD shapes of
 * SL_REAL_LIST (real.h) and mark the fd "not a socket" with no system call;
 * socket, socketpair, accept, dup and fcntl(F_DUPFD) are in wrap_sock.c,
 * epoll_create in epoll.c.
 *
 * syscall() is how libuv (Node.js) closes fds, and how libseccomp installs
 * a filter: for the numbers that change what an fd is it does the same
 * bookkeeping as the wrappers of the same calls, around the real syscall()
 * (so its errno is the caller's); every other number goes straight to the
 * real syscall(). The numbers of the throttled calls (send*, recv*, read,
 * write and their vector forms, connect, accept*, sendfile, splice) are
 * made through the wrapper of the call of the same name, so the rules
 * apply to them as to the libc calls (wrap_raw.c, reached through the
 * route the constructor registers: this file names no wrapper).
 */
#undef _FORTIFY_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "anchors.h"
#include "connwait.h"
#include "fd.h"
#include "real.h"
#include "sandbox.h"
#include "vfork.h"
#include "wrap_raw.h"

const int sl__wrap_fd_anchor = 1;

/* The call returned r: if it is an fd, it is new and not a socket. */
static int newfd_done(int r)
{
	if (r >= 0 && !sl__vm_child())
		sl__fd_opened(r);
	return r;
}

/* pipe and pipe2 returned r, filling fd[0..1]. */
static int newfd_pair_done(int r, const int *fd)
{
	if (r == 0 && !sl__vm_child()) {
		sl__fd_opened(fd[0]);
		sl__fd_opened(fd[1]);
	}
	return r;
}

/* An exported definition of name, declared first: glibc declares some of
 * these calls, not all. */
#define EXPORT_DEF(ret, name, params)                                                              \
	SL_EXPORT ret name params;                                                                 \
	SL_EXPORT ret name params
#define WRAP_NEWFD(ret, name, params, args, fd)                                                    \
	EXPORT_DEF(ret, name, params)                                                              \
	{                                                                                          \
		return newfd_done(SL_REAL(name) args);                                             \
	}
/* open's and openat's mode is there only when flags create a file
 * (O_CREAT, O_TMPFILE: glibc's __OPEN_NEEDS_MODE), as glibc reads it. */
#define WRAP_NEWFD_MODE(ret, name, params, args, fd)                                               \
	EXPORT_DEF(ret, name, params)                                                              \
	{                                                                                          \
		mode_t mode = 0;                                                                   \
		if (__OPEN_NEEDS_MODE(flags)) {                                                    \
			va_list ap;                                                                \
			va_start(ap, flags);                                                       \
			mode = (mode_t)va_arg(ap, int);                                            \
			va_end(ap);                                                                \
		}                                                                                  \
		return newfd_done(SL_REAL(name) args);                                             \
	}
#define WRAP_NEWFD_PAIR(ret, name, params, args, fd)                                               \
	EXPORT_DEF(ret, name, params)                                                              \
	{                                                                                          \
		return newfd_pair_done(SL_REAL(name) args, fd);                                    \
	}
#include "wrap_gen.h"

/* The real syscall() with the caller's six arguments. */
static long raw(long nr, const long *a)
{
	return SL_REAL(syscall)(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* The bookkeeping after a raw system call nr with arguments a returned r
 * (r < 0: failed, errno set; nothing to do). errno is preserved. */
static long raw_done(long nr, const long *a, long r)
{
	if (r < 0 || sl__vm_child())
		return r;
	switch (nr) {
	case SYS_socket:
	case SYS_accept:
	case SYS_accept4:
	case SYS_pidfd_getfd: /* may be a socket */
		sl__fd_created((int)r);
		break;
	case SYS_socketpair:
		sl__fd_created(((int *)a[3])[0]);
		sl__fd_created(((int *)a[3])[1]);
		break;
	case SYS_connect: /* its peer changed: classify again on next use */
		sl__fd_invalidate((int)a[0]);
		break;
#ifdef SYS_open
	case SYS_open:
#endif
#ifdef SYS_creat
	case SYS_creat:
#endif
#ifdef SYS_eventfd
	case SYS_eventfd:
#endif
#ifdef SYS_signalfd
	case SYS_signalfd:
#endif
#ifdef SYS_epoll_create
	case SYS_epoll_create:
#endif
#ifdef SYS_inotify_init
	case SYS_inotify_init:
#endif
	case SYS_openat:
	case SYS_openat2:
	case SYS_open_by_handle_at:
	case SYS_eventfd2:
	case SYS_signalfd4:
	case SYS_timerfd_create:
	case SYS_memfd_create:
	case SYS_epoll_create1:
	case SYS_inotify_init1:
	case SYS_fanotify_init:
	case SYS_userfaultfd:
	case SYS_perf_event_open:
	case SYS_pidfd_open:
	case SYS_io_uring_setup:
		sl__fd_opened((int)r);
		break;
#ifdef SYS_pipe
	case SYS_pipe:
#endif
	case SYS_pipe2:
		sl__fd_opened(((int *)a[0])[0]);
		sl__fd_opened(((int *)a[0])[1]);
		break;
	default:
		break;
	}
	return r;
}

/* The raw I/O numbers' route (wrap_raw.c, registered by the constructor):
 * NULL until then, and those numbers go straight to the kernel. */
static bool (*raw_io)(long nr, const long *a, long *r);

void sl__wrap_fd_on_io_unsync(bool (*route)(long nr, const long *a, long *r))
{
	raw_io = route;
}

/*
 * syscall(nr, ...): six long arguments are read whatever nr takes (as glibc
 * and musl do: a system call has at most six, and reading a missing one
 * reads a register or stack slot the call ignores). close and close_range
 * forget before the call, like their wrappers (after it, another thread may
 * already have the numbers again); a seccomp filter is noted before it is
 * installed; the rest after the call. errno is the real syscall()'s.
 */
SL_EXPORT long syscall(long nr, ...)
{
	long a[6];
	va_list ap;
	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	switch (nr) {
	case SYS_close: /* the wrappers: the library's own fds, the tables */
		return close((int)a[0]);
	case SYS_close_range:
		return close_range((unsigned)a[0], (unsigned)a[1], (int)a[2]);
#ifdef SYS_dup2
	case SYS_dup2:
		return dup2((int)a[0], (int)a[1]);
#endif
	case SYS_dup3:
		return dup3((int)a[0], (int)a[1], (int)a[2]);
	case SYS_dup:
		return dup((int)a[0]);
	case SYS_fcntl: /* F_DUPFD: a dup */
		return fcntl((int)a[0], (int)a[1], (unsigned long)a[2]);
#ifdef SYS_vfork
	case SYS_vfork: /* (from C, only a child that execs at once survives it) */
		sl__vm_note_clone(CLONE_VM);
		return raw(nr, a);
#endif
	case SYS_clone: /* flags: the first argument on every ABI but s390 */
		sl__vm_note_clone((unsigned long)a[0]);
		return raw(nr, a);
	case SYS_clone3: /* struct clone_args: its flags come first */
		if (a[0] != 0)
			sl__vm_note_clone(*(const unsigned long long *)a[0]);
		return raw(nr, a);
	case SYS_seccomp:
	case SYS_prctl:
		if (sl__sandbox_syscall(nr, a[0], a[1])) {
			int was = sl__sandbox_enter(nr == SYS_seccomp ? "syscall(SYS_seccomp)"
								      : "syscall(SYS_prctl)");
			return sl__sandbox_done(was, raw(nr, a));
		}
		return raw(nr, a);
	default: {
		long r;
		if (!sl__busy && raw_io != NULL && raw_io(nr, a, &r))
			return r;
		return raw_done(nr, a, raw(nr, a));
	}
	}
}
