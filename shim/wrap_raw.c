/* SPDX-License-Identifier: MIT */
/*
 * wrap_raw.c - the raw I/O system call numbers of libc's syscall() routed
 * to the wrappers of the calls of the same name (wrap_fd.c asks, through
 * the route init.c registers: sl__wrap_fd_on_io_unsync).
 */
#undef _FORTIFY_SOURCE
#include <stdbool.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fcntl.h>
#include "wrap_raw.h"

/*
 * A raw call of a number the wrappers throttle is made as the libc call of
 * the same name, through its wrapper (libuv sends and receives UDP with
 * syscall(SYS_sendmmsg) and syscall(SYS_recvmmsg)): the rules apply, the fd
 * is classified as by the call, and the result is the same -1 and errno.
 * An fd no rule matches goes on to libc's call of that name, which is the
 * same system call. Returns false for any other number.
 */
bool sl__wrap_raw_io(long nr, const long *a, long *r)
{
	const int fd = (int)a[0];
	switch (nr) {
	case SYS_sendto:
		*r = sendto(fd, (const void *)a[1], (size_t)a[2], (int)a[3],
			    (const struct sockaddr *)a[4], (socklen_t)a[5]);
		return true;
	case SYS_sendmsg:
		*r = sendmsg(fd, (const struct msghdr *)a[1], (int)a[2]);
		return true;
	case SYS_sendmmsg:
		*r = sendmmsg(fd, (struct mmsghdr *)a[1], (unsigned)a[2], (int)a[3]);
		return true;
	case SYS_recvfrom:
		*r = recvfrom(fd, (void *)a[1], (size_t)a[2], (int)a[3], (struct sockaddr *)a[4],
			      (socklen_t *)a[5]);
		return true;
	case SYS_recvmsg:
		*r = recvmsg(fd, (struct msghdr *)a[1], (int)a[2]);
		return true;
	case SYS_recvmmsg:
		*r = recvmmsg(fd, (struct mmsghdr *)a[1], (unsigned)a[2], (int)a[3],
			      (struct timespec *)a[4]);
		return true;
	case SYS_write:
		*r = write(fd, (const void *)a[1], (size_t)a[2]);
		return true;
	case SYS_writev:
		*r = writev(fd, (const struct iovec *)a[1], (int)a[2]);
		return true;
	case SYS_read:
		*r = read(fd, (void *)a[1], (size_t)a[2]);
		return true;
	case SYS_readv:
		*r = readv(fd, (const struct iovec *)a[1], (int)a[2]);
		return true;
	case SYS_connect:
		*r = connect(fd, (const struct sockaddr *)a[1], (socklen_t)a[2]);
		return true;
	case SYS_accept:
		*r = accept(fd, (struct sockaddr *)a[1], (socklen_t *)a[2]);
		return true;
	case SYS_accept4:
		*r = accept4(fd, (struct sockaddr *)a[1], (socklen_t *)a[2], (int)a[3]);
		return true;
	case SYS_sendfile:
		*r = sendfile(fd, (int)a[1], (off_t *)a[2], (size_t)a[3]);
		return true;
	case SYS_splice:
		*r = splice(fd, (loff_t *)a[1], (int)a[2], (loff_t *)a[3], (size_t)a[4],
			    (unsigned)a[5]);
		return true;
	default:
		return false;
	}
}
