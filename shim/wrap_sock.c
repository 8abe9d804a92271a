/* SPDX-License-Identifier: MIT */
/*
 * wrap_sock.c - the exported wrappers that open, accept and close
 * connections (connect.c and accept.c decide), and the descriptor
 * bookkeeping calls: socket, socketpair, close, close_range, dup, dup2, dup3,
 * fcntl (F_DUPFD), fclose.
 *
 * What an fd number means is forgotten whenever it may stop meaning its
 * socket (fd.c): before close (after it, another thread may already have the
 * number again), on the new fds of socket, socketpair and accept (which are
 * classified at once), and on the target of dup2/dup3 (which shares its
 * original's classification). fclose forgets the stream's fd too: glibc closes it
 * with its internal close, which no preload sees, and the number's next
 * owner (a file, a pipe) would inherit the socket's rules.
 *
 * In a child that shares our memory (vfork.h: a vfork child before its
 * exec) each of them is the real call alone: the tables are the parent's.
 */
#undef _FORTIFY_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "anchors.h"
#include "accept.h"
#include "breaker.h"
#include "conn.h"
#include "connect.h"
#include "connwait.h"
#include "fd.h"
#include "ownfd.h"
#include "real.h"
#include "turn.h"
#include "vfork.h"

const int sl__wrap_sock_anchor = 1;

SL_EXPORT int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	if (sl__break_n != 0) /* circuit breakers (breaker.c) wrap the rules */
		return sl__break_connect(fd, sa, len);
	return sl__connect(fd, sa, len);
}

SL_EXPORT int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	return sl__accept(fd, sa, len, -1);
}

SL_EXPORT int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	if (flags < 0) /* invalid (EINVAL); negative means plain accept below */
		return SL_REAL(accept4)(fd, sa, len, flags);
	return sl__accept(fd, sa, len, flags);
}

/* New sockets are classified at once, whatever their fd number was used
 * for (fd.c: before any seccomp filter can forbid asking). */
SL_EXPORT int socket(int domain, int type, int protocol)
{
	int r = SL_REAL(socket)(domain, type, protocol);
	if (r >= 0 && !sl__vm_child())
		sl__fd_created(r);
	return r;
}

SL_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
	int r = SL_REAL(socketpair)(domain, type, protocol, sv);
	if (r == 0 && !sl__vm_child()) {
		sl__fd_created(sv[0]);
		sl__fd_created(sv[1]);
	}
	return r;
}

/* Whether fd is the library's own (ownfd.h): not the program's to close. */
static bool own(int fd)
{
	return __builtin_expect(atomic_load_explicit(&sl__own_n, memory_order_relaxed) != 0, 0) &&
	       sl__own_is(fd);
}

SL_EXPORT int close(int fd)
{
	/* As if it were not open, which for the program it is not (a vfork
	 * child's close would only touch its own fd table: it too is told
	 * EBADF, and exec closes the fd). */
	if (own(fd)) {
		errno = EBADF;
		return -1;
	}
	if (!sl__fd_known(fd) || sl__vm_child())
		return SL_REAL(close)(fd);
	sl__fd_forget(fd);
	int r = SL_REAL(close)(fd);
	sl__cw_after_close(); /* errno is preserved */
	sl__turn_after_close();
	return r;
}

SL_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	/* Forgotten before the real call, as close does: after it, another
	 * thread may already have the numbers again. */
	if (sl__vm_child())
		return SL_REAL(close_range)(first, last, flags);
	sl__fd_forget_range(first, last, flags);
	int r = atomic_load_explicit(&sl__own_n, memory_order_relaxed) != 0
			? sl__own_close_range(first, last, flags)
			: SL_REAL(close_range)(first, last, flags);
	sl__cw_after_close();
	sl__turn_after_close();
	return r;
}

/* The dups: the connection record's reference is taken before the real
 * call (sl__fd_dup_begin). Not from a vfork child: its fd table is its own,
 * our memory is not. */
SL_EXPORT int dup(int fd)
{
	const bool mine = !sl__vm_child();
	const uint32_t c = mine ? sl__conn_dup_begin(fd) : 0;
	int r = SL_REAL(dup)(fd);
	if (mine)
		sl__conn_dup(fd, r, c, r);
	return r;
}

SL_EXPORT int dup2(int oldfd, int newfd)
{
	const bool mine = oldfd != newfd && !sl__vm_child();
	if (mine && own(newfd))
		sl__own_yield(newfd);
	const uint32_t c = mine ? sl__conn_dup_begin(oldfd) : 0;
	int r = SL_REAL(dup2)(oldfd, newfd);
	if (mine)
		sl__conn_dup(oldfd, newfd, c, r);
	return r;
}

SL_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	const bool mine = oldfd != newfd && !sl__vm_child();
	if (mine && own(newfd))
		sl__own_yield(newfd);
	const uint32_t c = mine ? sl__conn_dup_begin(oldfd) : 0;
	int r = SL_REAL(dup3)(oldfd, newfd, flags);
	if (mine)
		sl__conn_dup(oldfd, newfd, c, r);
	return r;
}

/* fcntl's F_DUPFD makes a new fd for the same socket, as dup. */
static bool fcntl_dups(int cmd)
{
	return (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && !sl__vm_child();
}

/* fcntl, and fcntl64 (glibc's name for it under _FILE_OFFSET_BITS=64 on
 * 32-bit ABIs): one shape, declared for both names. The third argument is
 * an int or a pointer; like musl, pass it on as an unsigned long, which
 * holds either on every Linux ABI. */
#define WRAP_FCNTL(name)                                                                           \
	SL_EXPORT int name(int fd, int cmd, ...)                                                   \
	{                                                                                          \
		va_list ap;                                                                        \
		va_start(ap, cmd);                                                                 \
		unsigned long arg = va_arg(ap, unsigned long);                                     \
		va_end(ap);                                                                        \
		if (!fcntl_dups(cmd))                                                              \
			return SL_REAL(name)(fd, cmd, arg);                                        \
		const uint32_t c = sl__conn_dup_begin(fd);                                         \
		int r = SL_REAL(name)(fd, cmd, arg);                                               \
		sl__conn_dup(fd, r, c, r);                                                         \
		return r;                                                                          \
	}
WRAP_FCNTL(fcntl)
WRAP_FCNTL(fcntl64)

SL_EXPORT int fclose(FILE *fp)
{
	int fd = fp != NULL ? fileno(fp) : -1;
	if (sl__fd_known(fd) && sl__vm_child())
		return SL_REAL(fclose)(fp);
	if (sl__fd_known(fd))
		sl__fd_forget(fd);
	int r = SL_REAL(fclose)(fp);
	sl__cw_after_close();
	return r;
}
