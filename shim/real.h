/* SPDX-License-Identifier: MIT */
/*
 * real.h - the real libc functions behind every wrapper, and the one list
 * the table and the pass-through wrappers are generated from.
 *
 * API: SL_REAL(name) is the real function (resolved on first use, from any
 * thread); sl_real_resolve_all() fills the table (the constructor); tests
 * overwrite slots of sl__real with fakes after it.
 */
#ifndef SLUICE_SHIM_REAL_H
#define SLUICE_SHIM_REAL_H

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/*
 * Every intercepted symbol:
 *   X(return type, name, (parameters), (arguments), shape, fd)
 * The list only declares; real.c, the tests and the wrapper files expand
 * it. `shape` says how the exported wrapper is made:
 *   SEND, RECV  generated (wrap_send.c, wrap_recv.c): if the fd's pass bit
 *               for the kind is set and the pointer is resolved, a tail call
 *               to libc; otherwise the file's slow_NAME(arguments);
 *   SEND_TFO    the same, except that a call with MSG_FASTOPEN always takes
 *               the slow path: it connects the socket, which must then be
 *               classified again whatever its pass bits said;
 *   OWN         written by hand (connect, accept, close, dup, ...: each
 *               does something before or after the real call);
 *   NEWFD       generated (wrap_fd.c): a call that hands out a new fd that
 *               is never a socket: the real call, then sl__fd_opened on
 *               the fd it returns (what the number meant is forgotten);
 *   NEWFD_MODE  the same for open and openat, whose `mode` is variadic
 *               (read only when their `flags` need one);
 *   NEWFD_PAIR  the same for pipe and pipe2: both fds of the array `fd`.
 * `fd` names the parameter whose pass bit is tested (SEND/RECV shapes), or
 * the fd array (NEWFD_PAIR).
 */
#define SL_REAL_LIST(X)                                                                            \
	X(int, connect, (int fd, const struct sockaddr *sa, socklen_t len), (fd, sa, len), OWN,    \
	  fd)                                                                                      \
	X(int, accept, (int fd, struct sockaddr *sa, socklen_t *len), (fd, sa, len), OWN, fd)      \
	X(int, accept4, (int fd, struct sockaddr *sa, socklen_t *len, int flags),                  \
	  (fd, sa, len, flags), OWN, fd)                                                           \
	X(int, socket, (int domain, int type, int protocol), (domain, type, protocol), OWN, 0)     \
	X(int, socketpair, (int domain, int type, int protocol, int *sv),                          \
	  (domain, type, protocol, sv), OWN, 0)                                                    \
	X(ssize_t, send, (int fd, const void *buf, size_t n, int flags), (fd, buf, n, flags),      \
	  SEND, fd)                                                                                \
	X(ssize_t, sendto,                                                                         \
	  (int fd, const void *buf, size_t n, int flags, const struct sockaddr *to,                \
	   socklen_t tolen),                                                                       \
	  (fd, buf, n, flags, to, tolen), SEND_TFO, fd)                                            \
	X(ssize_t, sendmsg, (int fd, const struct msghdr *msg, int flags), (fd, msg, flags),       \
	  SEND_TFO, fd)                                                                            \
	X(int, sendmmsg, (int fd, struct mmsghdr *vec, unsigned int vlen, int flags),              \
	  (fd, vec, vlen, flags), OWN, fd)                                                         \
	X(ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n), SEND, fd)             \
	X(ssize_t, writev, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt), SEND, fd)   \
	X(ssize_t, sendfile, (int out, int in, off_t *offset, size_t n), (out, in, offset, n),     \
	  SEND, out)                                                                               \
	X(ssize_t, sendfile64, (int out, int in, off_t *offset, size_t n), (out, in, offset, n),   \
	  SEND, out)                                                                               \
	X(ssize_t, splice,                                                                         \
	  (int in, loff_t *off_in, int out, loff_t *off_out, size_t n, unsigned int flags),        \
	  (in, off_in, out, off_out, n, flags), OWN, 0)                                            \
	X(ssize_t, recv, (int fd, void *buf, size_t n, int flags), (fd, buf, n, flags), RECV, fd)  \
	X(ssize_t, recvfrom,                                                                       \
	  (int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *fromlen),     \
	  (fd, buf, n, flags, from, fromlen), RECV, fd)                                            \
	X(ssize_t, recvmsg, (int fd, struct msghdr *msg, int flags), (fd, msg, flags), RECV, fd)   \
	X(int, recvmmsg,                                                                           \
	  (int fd, struct mmsghdr *vec, unsigned int vlen, int flags, struct timespec *timeout),   \
	  (fd, vec, vlen, flags, timeout), OWN, fd)                                                \
	X(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n), RECV, fd)                    \
	X(ssize_t, readv, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt), RECV, fd)    \
	X(ssize_t, __read_chk, (int fd, void *buf, size_t n, size_t buflen), (fd, buf, n, buflen), \
	  RECV, fd)                                                                                \
	X(ssize_t, __recv_chk, (int fd, void *buf, size_t n, size_t buflen, int flags),            \
	  (fd, buf, n, buflen, flags), RECV, fd)                                                   \
	X(ssize_t, __recvfrom_chk,                                                                 \
	  (int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *from,           \
	   socklen_t *fromlen),                                                                    \
	  (fd, buf, n, buflen, flags, from, fromlen), RECV, fd)                                    \
	X(int, close, (int fd), (fd), OWN, fd)                                                     \
	X(int, close_range, (unsigned int first, unsigned int last, int flags),                    \
	  (first, last, flags), OWN, 0)                                                            \
	X(int, fclose, (FILE * fp), (fp), OWN, 0)                                                  \
	X(int, dup, (int fd), (fd), OWN, fd)                                                       \
	X(int, dup2, (int oldfd, int newfd), (oldfd, newfd), OWN, 0)                               \
	X(int, dup3, (int oldfd, int newfd, int flags), (oldfd, newfd, flags), OWN, 0)             \
	X(int, fcntl, (int fd, int cmd, ...), (fd, cmd), OWN, fd)                                  \
	X(int, fcntl64, (int fd, int cmd, ...), (fd, cmd), OWN, fd)                                \
	X(int, getsockopt, (int fd, int level, int name, void *val, socklen_t *len),               \
	  (fd, level, name, val, len), OWN, fd)                                                    \
	X(int, poll, (struct pollfd * fds, nfds_t n, int ms), (fds, n, ms), OWN, 0)                \
	X(int, ppoll,                                                                              \
	  (struct pollfd * fds, nfds_t n, const struct timespec *ts, const sigset_t *mask),        \
	  (fds, n, ts, mask), OWN, 0)                                                              \
	X(int, select, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv),               \
	  (n, r, w, e, tv), OWN, 0)                                                                \
	X(int, pselect,                                                                            \
	  (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts,                      \
	   const sigset_t *mask),                                                                  \
	  (n, r, w, e, ts, mask), OWN, 0)                                                          \
	X(int, execve, (const char *path, char *const *argv, char *const *envp),                   \
	  (path, argv, envp), OWN, 0)                                                              \
	X(int, execv, (const char *path, char *const *argv), (path, argv), OWN, 0)                 \
	X(int, execvp, (const char *file, char *const *argv), (file, argv), OWN, 0)                \
	X(int, execvpe, (const char *file, char *const *argv, char *const *envp),                  \
	  (file, argv, envp), OWN, 0)                                                              \
	X(int, posix_spawn,                                                                        \
	  (pid_t * pid, const char *path, const posix_spawn_file_actions_t *fa,                    \
	   const posix_spawnattr_t *attr, char *const *argv, char *const *envp),                   \
	  (pid, path, fa, attr, argv, envp), OWN, 0)                                               \
	X(int, posix_spawnp,                                                                       \
	  (pid_t * pid, const char *file, const posix_spawn_file_actions_t *fa,                    \
	   const posix_spawnattr_t *attr, char *const *argv, char *const *envp),                   \
	  (pid, file, fa, attr, argv, envp), OWN, 0)                                               \
	X(int, epoll_create, (int size), (size), OWN, 0)                                           \
	X(int, epoll_create1, (int flags), (flags), OWN, 0)                                        \
	X(int, epoll_ctl, (int epfd, int op, int fd, struct epoll_event *ev), (epfd, op, fd, ev),  \
	  OWN, 0)                                                                                  \
	X(int, epoll_wait, (int epfd, struct epoll_event *ev, int max, int ms),                    \
	  (epfd, ev, max, ms), OWN, 0)                                                             \
	X(int, epoll_pwait,                                                                        \
	  (int epfd, struct epoll_event *ev, int max, int ms, const sigset_t *mask),               \
	  (epfd, ev, max, ms, mask), OWN, 0)                                                       \
	X(int, epoll_pwait2,                                                                       \
	  (int epfd, struct epoll_event *ev, int max, const struct timespec *ts,                   \
	   const sigset_t *mask),                                                                  \
	  (epfd, ev, max, ts, mask), OWN, 0)                                                       \
	X(long, syscall, (long nr, ...), (nr), OWN, 0)                                             \
	X(int, prctl, (int option, ...), (option), OWN, 0)                                         \
	X(int, clone, (int (*fn)(void *), void *stack, int flags, void *arg, ...),                 \
	  (fn, stack, flags, arg), OWN, 0)                                                         \
	X(int, setuid, (uid_t uid), (uid), OWN, 0)                                                 \
	X(int, seteuid, (uid_t uid), (uid), OWN, 0)                                                \
	X(int, setreuid, (uid_t ruid, uid_t euid), (ruid, euid), OWN, 0)                           \
	X(int, setresuid, (uid_t ruid, uid_t euid, uid_t suid), (ruid, euid, suid), OWN, 0)        \
	X(int, open, (const char *path, int flags, ...), (path, flags, mode), NEWFD_MODE, 0)       \
	X(int, open64, (const char *path, int flags, ...), (path, flags, mode), NEWFD_MODE, 0)     \
	X(int, openat, (int dir, const char *path, int flags, ...), (dir, path, flags, mode),      \
	  NEWFD_MODE, 0)                                                                           \
	X(int, openat64, (int dir, const char *path, int flags, ...), (dir, path, flags, mode),    \
	  NEWFD_MODE, 0)                                                                           \
	X(int, __open_2, (const char *path, int flags), (path, flags), NEWFD, 0)                   \
	X(int, __open64_2, (const char *path, int flags), (path, flags), NEWFD, 0)                 \
	X(int, __openat_2, (int dir, const char *path, int flags), (dir, path, flags), NEWFD, 0)   \
	X(int, __openat64_2, (int dir, const char *path, int flags), (dir, path, flags), NEWFD, 0) \
	X(int, creat, (const char *path, mode_t mode), (path, mode), NEWFD, 0)                     \
	X(int, creat64, (const char *path, mode_t mode), (path, mode), NEWFD, 0)                   \
	X(int, pipe, (int fd[2]), (fd), NEWFD_PAIR, fd)                                            \
	X(int, pipe2, (int fd[2], int flags), (fd, flags), NEWFD_PAIR, fd)                         \
	X(int, eventfd, (unsigned int initval, int flags), (initval, flags), NEWFD, 0)             \
	X(int, timerfd_create, (int clockid, int flags), (clockid, flags), NEWFD, 0)               \
	X(int, signalfd, (int fd, const sigset_t *mask, int flags), (fd, mask, flags), NEWFD, 0)   \
	X(int, memfd_create, (const char *name, unsigned int flags), (name, flags), NEWFD, 0)      \
	X(int, inotify_init, (void), (), NEWFD, 0)                                                 \
	X(int, inotify_init1, (int flags), (flags), NEWFD, 0)                                      \
	X(int, fanotify_init, (unsigned int flags, unsigned int event_flags),                      \
	  (flags, event_flags), NEWFD, 0)

enum sl_real_slot {
#define SL_REAL_ENUM(ret, name, params, args, shape, fd) SL_REAL_##name,
	SL_REAL_LIST(SL_REAL_ENUM)
#undef SL_REAL_ENUM
		SL_REAL_COUNT
};

/* One atomic pointer per symbol; NULL until resolved, except in the
 * SEND, SEND_TFO and RECV shapes, whose slots start as lazy stubs that
 * resolve the symbol on their first call (SL_REAL_SET, real.c). Tests overwrite the
 * pointers with fakes (after sl_real_resolve_all, so nothing overwrites
 * them back). Then what rawcall.h reads beside a slot, on the same page
 * (real.c aligns the table to its size): the glibc function the slot was
 * resolved to, if its bare system call may stand for it, and glibc's
 * __libc_single_threaded. */
struct sl_real {
#define SL_REAL_FIELD(ret, name, params, args, shape, fd) ret(*_Atomic name) params;
	SL_REAL_LIST(SL_REAL_FIELD)
#undef SL_REAL_FIELD
	_Atomic(void *) libc[SL_REAL_COUNT];
	const char *single;
};
#define SL_REAL_ALIGN 2048
/* Whether this build makes a transfer's system call itself (rawcall.h). */
#if defined(__x86_64__) && defined(__GLIBC__) && !defined(SL_NO_RAWCALL)
#define SL_RAWCALL 1
#else
#define SL_RAWCALL 0
#endif
_Static_assert(sizeof(struct sl_real) <= SL_REAL_ALIGN, "real.h: the table fits its alignment");
extern struct sl_real sl__real;

/* The lazy stub slot starts with (NULL: it starts empty); for tests. */
void *sl__real_lazy_of(enum sl_real_slot slot);
/* Resolve every slot that is still empty or a lazy stub (the constructor
 * calls it). */
void sl_real_resolve_all(void);
/* Resolve one slot now and publish it; a symbol that does not exist gets a
 * stub that fails with ENOSYS (and logs once). Returns what the slot holds
 * (a caller keeps no pointer to sl__real live across it). */
void *sl__real_resolve(enum sl_real_slot slot);

/* The real function `name`, resolving it on first use: one load and one
 * (predicted) branch. Acquire pairs with the release store in
 * sl__real_resolve, so whatever dlsym set up before publishing is seen. */
#define SL_REAL(name)                                                                              \
	__extension__({                                                                            \
		SL_REAL_TYPE(name) sl_fn_ = SL_REAL_LOAD(name);                                    \
		if (__builtin_expect(sl_fn_ == NULL, 0))                                           \
			sl_fn_ = (SL_REAL_TYPE(name))sl__real_resolve(SL_REAL_##name);             \
		sl_fn_;                                                                            \
	})
/* The real function of a SEND, SEND_TFO or RECV slot: never NULL (a lazy
 * stub until resolved), so one load. */
#define SL_REAL_SET(name) SL_REAL_LOAD(name)
/* The pointer type of slot `name`, and its current value (NULL if not yet
 * resolved). Wrappers whose fast path is a bare tail call use these and
 * leave resolution to their slow path. */
#define SL_REAL_TYPE(name) __typeof__(atomic_load_explicit(&sl__real.name, memory_order_relaxed))
#define SL_REAL_LOAD(name) atomic_load_explicit(&sl__real.name, memory_order_acquire)

/*
 * The shell of a generated wrapper (see the list's shapes): it declares the
 * whole exported function, whose fast path is the pass bit of `kind` on
 * `fd` and `also` (an extra condition), then a tail call through the slot
 * (SL_REAL_SET: never NULL); anything else goes to slow_NAME, which the including file defines,
 * with the fd's bits as loaded here as a last argument (every pass bit for
 * an fd past the table): its own hot path does not load them again.
 */
#define SL_WRAP_ARGS(...) __VA_ARGS__
#define SL_WRAP_SHELL(ret, name, params, args, fd, kind, also)                                     \
	SL_EXPORT ret name params                                                                  \
	{                                                                                          \
		if (__builtin_expect((unsigned)(fd) < SL_FD_LIMIT, 1)) {                           \
			const unsigned sl_b_ = atomic_load_explicit(&sl__fdbits[fd],               \
								    memory_order_relaxed);         \
			if (__builtin_expect((sl_b_ & SL_FDB_PASS(kind)) && (also), 1))            \
				return SL_REAL_SET(name) args;                                     \
			return slow_##name(SL_WRAP_ARGS args, sl_b_);                              \
		}                                                                                  \
		return slow_##name(SL_WRAP_ARGS args, SL_FDB_PASS_ALL);                            \
	}

#endif /* SLUICE_SHIM_REAL_H */
