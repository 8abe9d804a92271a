/* SPDX-License-Identifier: MIT */
/*
 * wrap_send.c - the exported send family: send, sendto, sendmsg, write,
 * writev, sendfile, sendfile64 (generated from SL_REAL_LIST, real.h) and
 * sendmmsg.
 *
 * A generated wrapper's fast path is the fd's pass bit and a tail call to
 * libc; past it, slow_NAME below describes the call in a struct sl_io for
 * sl__send (xfer.h), whose file comment (xfer.c) gives the semantics.
 * sendto and sendmsg with MSG_FASTOPEN always come here (their shape is
 * SEND_TFO): such a call connects the socket, which is then classified
 * again (connect rules and conns do not see such a connection).
 */
#undef _FORTIFY_SOURCE
#include <limits.h>
#include <unistd.h>

#include "anchors.h"
#include "fd.h"
#include "real.h"
#include "xfer.h"

const int sl__wrap_send_anchor = 1;

static __attribute__((noinline)) ssize_t slow_send(int fd, const void *buf, size_t n, int flags)
{
	struct sl_io io = {.how = SL_IO_SEND,
			   .fd = fd,
			   .buf = (char *)buf,
			   .total = n,
			   .flags = flags};
	return sl__send(&io);
}

static __attribute__((noinline)) ssize_t slow_sendto(int fd, const void *buf, size_t n, int flags,
						     const struct sockaddr *to, socklen_t tolen)
{
	struct sl_io io = {.how = SL_IO_SENDTO,
			   .fd = fd,
			   .buf = (char *)buf,
			   .total = n,
			   .flags = flags,
			   .addr = (struct sockaddr *)to,
			   .addrlen = tolen};
	ssize_t r = sl__send(&io);
	if (flags & MSG_FASTOPEN) /* it connected the socket: classify it again */
		sl__fd_invalidate(fd);
	return r;
}

static __attribute__((noinline)) ssize_t slow_sendmsg(int fd, const struct msghdr *msg, int flags)
{
	ssize_t r;
	/* The record first: msg is read only for a socket a rule may match. */
	const struct sl_fdrec *rec = sl__xfer_rec(fd, SL_K_SEND);
	if (rec == NULL || sl__bad_msg(msg)) {
		r = SL_REAL(sendmsg)(fd, msg, flags);
	} else {
		struct sl_io io = {.how = SL_IO_SENDMSG,
				   .fd = fd,
				   .msg = (struct msghdr *)msg,
				   .total = sl__iov_total(msg->msg_iov, msg->msg_iovlen),
				   .flags = flags};
		r = sl__send_rec(&io, rec);
	}
	if (flags & MSG_FASTOPEN) /* it connected the socket: classify it again */
		sl__fd_invalidate(fd);
	return r;
}

static __attribute__((noinline)) ssize_t slow_write(int fd, const void *buf, size_t n)
{
	struct sl_io io = {.how = SL_IO_WRITE, .fd = fd, .buf = (char *)buf, .total = n};
	return sl__send(&io);
}

static __attribute__((noinline)) ssize_t slow_writev(int fd, const struct iovec *iov, int cnt)
{
	/* The record first: iov is read only for a socket a rule may match. */
	const struct sl_fdrec *rec = sl__xfer_rec(fd, SL_K_SEND);
	if (rec == NULL || sl__bad_iov(iov, cnt))
		return SL_REAL(writev)(fd, iov, cnt);
	struct sl_io io = {.how = SL_IO_WRITEV,
			   .fd = fd,
			   .iov = iov,
			   .iovcnt = cnt,
			   .total = sl__iov_total(iov, (size_t)cnt)};
	return sl__send_rec(&io, rec);
}

/* sendfile and sendfile64: one shape, declared for both names. */
#define SLOW_SENDFILE(name, kind)                                                                  \
	static __attribute__((noinline))                                                           \
	ssize_t slow_##name(int out, int in, off_t *offset, size_t n)                              \
	{                                                                                          \
		struct sl_io io = {.how = kind,                                                    \
				   .fd = out,                                                      \
				   .in_fd = in,                                                    \
				   .offset = offset,                                               \
				   .total = n};                                                    \
		return sl__send(&io);                                                              \
	}
SLOW_SENDFILE(sendfile, SL_IO_SENDFILE)
SLOW_SENDFILE(sendfile64, SL_IO_SENDFILE64)

/* The exported shells of the SEND and SEND_TFO shapes. */
#define WRAP_SEND(ret, name, params, args, fd)                                                     \
	SL_WRAP_SHELL(ret, name, params, args, fd, SL_K_SEND, true)
#define WRAP_SEND_TFO(ret, name, params, args, fd)                                                 \
	SL_WRAP_SHELL(ret, name, params, args, fd, SL_K_SEND, !(flags & MSG_FASTOPEN))
#define WRAP_RECV(ret, name, params, args, fd)
#define WRAP_OWN(ret, name, params, args, fd)
#define WRAP_NEWFD(ret, name, params, args, fd)
#define WRAP_NEWFD_MODE(ret, name, params, args, fd)
#define WRAP_NEWFD_PAIR(ret, name, params, args, fd)
#define WRAP(ret, name, params, args, shape, fd) WRAP_##shape(ret, name, params, args, fd)
SL_REAL_LIST(WRAP)

/* sendmmsg sends one message per real call (through sendmsg above) so that
 * each can be charged and waited for. Returns the messages sent, or -1 if
 * none was. */
SL_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	if (sl__fd_pass(fd, SL_K_SEND) || sl__busy)
		return SL_REAL(sendmmsg)(fd, vec, vlen, flags);
	unsigned int i;
	for (i = 0; i < vlen; i++) {
		ssize_t r = sendmsg(fd, &vec[i].msg_hdr, flags);
		if (r < 0)
			break;
		vec[i].msg_len = (unsigned int)r;
	}
	return i > 0 || vlen == 0 ? (int)i : -1;
}
