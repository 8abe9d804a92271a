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
#include "xfer_hot.h"
#include "xfer_recv.h"

const int sl__wrap_send_anchor = 1;

/* The description of a call of one buffer: a compound literal, so that
 * its declaration initializes the struct in place. */
#define SEND_IO(how_, fd_, buf_, n_, flags_, to_, tolen_)                                          \
	((struct sl_io){.how = (how_),                                                             \
			.fd = (fd_),                                                               \
			.buf = (char *)(buf_),                                                     \
			.total = (n_),                                                             \
			.flags = (flags_),                                                         \
			.addr = (struct sockaddr *)(to_),                                          \
			.addrlen = (tolen_)})

/* The call described for the engine; inlined into each full_NAME below.
 * rec: the fd's record if slow_NAME found it (sl__xfer_rec_hot), else NULL
 * (then the engine looks: sl__send). */
static inline __attribute__((always_inline)) ssize_t
send_buf(enum sl_io_how how, int fd, const void *buf, size_t n, int flags,
	 const struct sockaddr *to, socklen_t tolen, const struct sl_fdrec *rec)
{
	struct sl_io io = SEND_IO(how, fd, buf, n, flags, to, tolen);
	return rec != NULL ? sl__send_rec(&io, rec) : sl__send(&io);
}

/* The hot path (sl__send_hot; two: sl__send_hot2) of a call of one buffer
 * on rec's fd: true if it made the call (*r). */
static inline __attribute__((always_inline)) bool
send_hot(enum sl_io_how how, int fd, const void *buf, size_t n, int flags,
	 const struct sockaddr *to, socklen_t tolen, const struct sl_fdrec *rec, ssize_t *r,
	 bool two, bool raw)
{
	struct sl_io io = SEND_IO(how, fd, buf, n, flags, to, tolen);
	return two ? sl__send_hot2(&io, rec, r) : sl__send_hot(&io, rec, r, raw);
}

/*
 * Five functions per wrapper, each of the others a tail call:
 *   slow_NAME  what the shell calls: the fd's record from the bits the
 *              shell loaded, and its credit bits (sl__xfer_credit), with no
 *              register to save; on to hotr_NAME, hot_NAME, hot2_NAME or
 *              full_NAME;
 *   hot_NAME   the hot path of one rule's credit (xfer_hot.h), apart so
 *              that it saves few registers; on to full_NAME if it does not
 *              make the call;
 *   hotr_NAME  the same, making the system call itself (rawcall.h: a
 *              single-threaded process, the slot glibc's function);
 *   hot2_NAME  the same for two rules' credits (sl__send_hot2): all three
 *              are copies of hot_NAME_i (SL_HOT_PAIR);
 *   full_NAME  the whole decision (sl__send_rec, or sl__send if no record
 *              was found yet), which takes slices when a credit is short.
 */
static __attribute__((noinline)) ssize_t full_send(int fd, const void *buf, size_t n, int flags,
						   const struct sl_fdrec *rec)
{
	return send_buf(SL_IO_SEND, fd, buf, n, flags, NULL, 0, rec);
}

static inline __attribute__((always_inline)) ssize_t hot_send_i(int fd, const void *buf, size_t n,
								int flags,
								const struct sl_fdrec *rec,
								bool two, bool raw)
{
	ssize_t r;
	if (send_hot(SL_IO_SEND, fd, buf, n, flags, NULL, 0, rec, &r, two, raw))
		return r;
	return full_send(fd, buf, n, flags, rec);
}
SL_HOT_PAIR(send, (int fd, const void *buf, size_t n, int flags, const struct sl_fdrec *rec),
	    (fd, buf, n, flags, rec))

static __attribute__((noinline)) ssize_t slow_send(int fd, const void *buf, size_t n, int flags,
						   unsigned b)
{
	const struct sl_fdrec *rec;
	const int h = sl__xfer_credit(fd, SL_K_SEND, b, &rec);
	if (h == SL_HOT_ONE)
		return SL_RAW_OK(send) ? hotr_send(fd, buf, n, flags, rec)
				       : hot_send(fd, buf, n, flags, rec);
	if (h == SL_HOT_TWO)
		return hot2_send(fd, buf, n, flags, rec);
	return full_send(fd, buf, n, flags, rec);
}

static __attribute__((noinline)) ssize_t full_sendto(int fd, const void *buf, size_t n, int flags,
						     const struct sockaddr *to, socklen_t tolen,
						     const struct sl_fdrec *rec)
{
	ssize_t r = send_buf(SL_IO_SENDTO, fd, buf, n, flags, to, tolen, rec);
	if (flags & MSG_FASTOPEN) /* it connected the socket: classify it again */
		sl__fd_invalidate(fd);
	return r;
}

static inline __attribute__((always_inline)) ssize_t
hot_sendto_i(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to,
	     socklen_t tolen, const struct sl_fdrec *rec, bool two, bool raw)
{
	ssize_t r;
	if (send_hot(SL_IO_SENDTO, fd, buf, n, flags, to, tolen, rec, &r, two, raw))
		return r;
	return full_sendto(fd, buf, n, flags, to, tolen, rec);
}
SL_HOT_PAIR(sendto,
	    (int fd, const void *buf, size_t n, int flags, const struct sockaddr *to,
	     socklen_t tolen, const struct sl_fdrec *rec),
	    (fd, buf, n, flags, to, tolen, rec))

static __attribute__((noinline)) ssize_t slow_sendto(int fd, const void *buf, size_t n, int flags,
						     const struct sockaddr *to, socklen_t tolen,
						     unsigned b)
{
	const struct sl_fdrec *rec;
	const int h = sl__xfer_credit(fd, SL_K_SEND, b, &rec);
	if (h == SL_HOT_ONE && !(flags & MSG_FASTOPEN))
		return SL_RAW_OK(sendto) ? hotr_sendto(fd, buf, n, flags, to, tolen, rec)
					 : hot_sendto(fd, buf, n, flags, to, tolen, rec);
	if (h == SL_HOT_TWO && !(flags & MSG_FASTOPEN))
		return hot2_sendto(fd, buf, n, flags, to, tolen, rec);
	return full_sendto(fd, buf, n, flags, to, tolen, rec);
}

static __attribute__((noinline)) ssize_t full_sendmsg(int fd, const struct msghdr *msg, int flags,
						      const struct sl_fdrec *rec)
{
	ssize_t r;
	/* The record first: msg is read only for a socket a rule may match. */
	if (rec == NULL)
		rec = sl__xfer_rec(fd, SL_K_SEND);
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

static inline __attribute__((always_inline)) ssize_t hot_sendmsg_i(int fd, const struct msghdr *msg,
								   int flags,
								   const struct sl_fdrec *rec,
								   bool two, bool raw)
{
	ssize_t r;
	if (sl__bad_msg(msg))
		return full_sendmsg(fd, msg, flags, rec);
	const struct sl_io io = {.how = SL_IO_SENDMSG,
				 .fd = fd,
				 .msg = (struct msghdr *)msg,
				 .total = sl__iov_total(msg->msg_iov, msg->msg_iovlen),
				 .flags = flags};
	if (two ? sl__send_hot2(&io, rec, &r) : sl__send_hot(&io, rec, &r, raw))
		return r;
	return full_sendmsg(fd, msg, flags, rec);
}
SL_HOT_PAIR(sendmsg, (int fd, const struct msghdr *msg, int flags, const struct sl_fdrec *rec),
	    (fd, msg, flags, rec))

static __attribute__((noinline)) ssize_t slow_sendmsg(int fd, const struct msghdr *msg, int flags,
						      unsigned b)
{
	const struct sl_fdrec *rec;
	const int h = sl__xfer_credit(fd, SL_K_SEND, b, &rec);
	if (h == SL_HOT_ONE && !(flags & MSG_FASTOPEN))
		return SL_RAW_OK(sendmsg) ? hotr_sendmsg(fd, msg, flags, rec)
					  : hot_sendmsg(fd, msg, flags, rec);
	if (h == SL_HOT_TWO && !(flags & MSG_FASTOPEN))
		return hot2_sendmsg(fd, msg, flags, rec);
	return full_sendmsg(fd, msg, flags, rec);
}

static __attribute__((noinline)) ssize_t full_write(int fd, const void *buf, size_t n,
						    const struct sl_fdrec *rec)
{
	return send_buf(SL_IO_WRITE, fd, buf, n, 0, NULL, 0, rec);
}

static inline __attribute__((always_inline)) ssize_t
hot_write_i(int fd, const void *buf, size_t n, const struct sl_fdrec *rec, bool two, bool raw)
{
	ssize_t r;
	if (send_hot(SL_IO_WRITE, fd, buf, n, 0, NULL, 0, rec, &r, two, raw))
		return r;
	return full_write(fd, buf, n, rec);
}
SL_HOT_PAIR(write, (int fd, const void *buf, size_t n, const struct sl_fdrec *rec),
	    (fd, buf, n, rec))

static __attribute__((noinline)) ssize_t slow_write(int fd, const void *buf, size_t n, unsigned b)
{
	const struct sl_fdrec *rec;
	const int h = sl__xfer_credit(fd, SL_K_SEND, b, &rec);
	if (h == SL_HOT_ONE)
		return SL_RAW_OK(write) ? hotr_write(fd, buf, n, rec) : hot_write(fd, buf, n, rec);
	if (h == SL_HOT_TWO)
		return hot2_write(fd, buf, n, rec);
	return full_write(fd, buf, n, rec);
}

static __attribute__((noinline)) ssize_t full_writev(int fd, const struct iovec *iov, int cnt,
						     const struct sl_fdrec *rec)
{
	return sl__xfer_vec(SL_IO_WRITEV, fd, iov, cnt, rec);
}

static inline __attribute__((always_inline)) ssize_t hot_writev_i(int fd, const struct iovec *iov,
								  int cnt,
								  const struct sl_fdrec *rec,
								  bool two, bool raw)
{
	ssize_t r;
	if (sl__vec_hot(SL_IO_WRITEV, fd, iov, cnt, rec, &r, two, raw))
		return r;
	return full_writev(fd, iov, cnt, rec);
}
SL_HOT_PAIR(writev, (int fd, const struct iovec *iov, int cnt, const struct sl_fdrec *rec),
	    (fd, iov, cnt, rec))

static __attribute__((noinline)) ssize_t slow_writev(int fd, const struct iovec *iov, int cnt,
						     unsigned b)
{
	const struct sl_fdrec *rec;
	const int h = sl__xfer_credit(fd, SL_K_SEND, b, &rec);
	if (h == SL_HOT_ONE)
		return SL_RAW_OK(writev) ? hotr_writev(fd, iov, cnt, rec)
					 : hot_writev(fd, iov, cnt, rec);
	if (h == SL_HOT_TWO)
		return hot2_writev(fd, iov, cnt, rec);
	return full_writev(fd, iov, cnt, rec);
}

/* sendfile and sendfile64: one shape, declared for both names. */
#define SLOW_SENDFILE(name, kind)                                                                  \
	static __attribute__((noinline))                                                           \
	ssize_t slow_##name(int out, int in, off_t *offset, size_t n, unsigned b)                  \
	{                                                                                          \
		(void)b;                                                                           \
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
#include "wrap_gen.h"

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
