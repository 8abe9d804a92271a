/* SPDX-License-Identifier: MIT */
/*
 * wrap_recv.c - the exported receive family: recv, recvfrom, recvmsg, read,
 * readv, the fortified __read_chk, __recv_chk, __recvfrom_chk (generated
 * from SL_REAL_LIST, real.h), and recvmmsg.
 *
 * A generated wrapper's fast path is the fd's pass bit and a tail call to
 * libc; past it, slow_NAME below describes the call in a struct sl_io for
 * sl__recv (xfer.c), whose file comment gives the receive semantics. recvmmsg receives at most as
 * many messages as message rules allow now (waiting for one, or, on a
 * non-blocking call, EAGAIN with the fd held back until it is there) and
 * charges the bytes after the fact.
 */
#undef _FORTIFY_SOURCE
#include <errno.h>
#include <limits.h>
#include <unistd.h>

#include "anchors.h"
#include "act.h"
#include "fd.h"
#include "nb.h"
#include "real.h"
#include "xfer.h"
#include "xfer_hot.h"
#include "xfer_recv.h"

const int sl__wrap_recv_anchor = 1;

/* The description of a call of one buffer (as SEND_IO, wrap_send.c). */
#define RECV_IO(how_, fd_, buf_, n_, buflen_, flags_, from_, fromlen_)                             \
	((struct sl_io){.how = (how_),                                                             \
			.fd = (fd_),                                                               \
			.buf = (buf_),                                                             \
			.total = (n_),                                                             \
			.buflen = (buflen_),                                                       \
			.flags = (flags_),                                                         \
			.addr = (from_),                                                           \
			.addrlenp = (fromlen_)})

/* The call described for the engine; inlined into each full_NAME below
 * (rec as in wrap_send.c: NULL, and sl__recv looks). */
static inline __attribute__((always_inline)) ssize_t
recv_buf(enum sl_io_how how, int fd, void *buf, size_t n, size_t buflen, int flags,
	 struct sockaddr *from, socklen_t *fromlen, const struct sl_fdrec *rec)
{
	struct sl_io io = RECV_IO(how, fd, buf, n, buflen, flags, from, fromlen);
	return rec != NULL ? sl__recv_rec(&io, rec) : sl__recv(&io);
}

/* The hot path (sl__recv_hot; two: sl__recv_hot2) of a call of one buffer
 * on rec's fd: true if it made the call (*r). */
static inline __attribute__((always_inline)) bool
recv_hot(enum sl_io_how how, int fd, void *buf, size_t n, int flags, struct sockaddr *from,
	 socklen_t *fromlen, const struct sl_fdrec *rec, ssize_t *r, bool two, bool raw)
{
	const struct sl_io io = RECV_IO(how, fd, buf, n, 0, flags, from, fromlen);
	return two ? sl__recv_hot2(&io, rec, r) : sl__recv_hot(&io, rec, r, raw);
}

/* slow_NAME, hot_NAME and full_NAME: as in wrap_send.c. */
static __attribute__((noinline)) ssize_t full_recv(int fd, void *buf, size_t n, int flags,
						   const struct sl_fdrec *rec)
{
	return recv_buf(SL_IO_RECV, fd, buf, n, 0, flags, NULL, NULL, rec);
}

static inline __attribute__((always_inline)) ssize_t
hot_recv_i(int fd, void *buf, size_t n, int flags, const struct sl_fdrec *rec, bool two, bool raw)
{
	ssize_t r;
	if (recv_hot(SL_IO_RECV, fd, buf, n, flags, NULL, NULL, rec, &r, two, raw))
		return r;
	return full_recv(fd, buf, n, flags, rec);
}
SL_HOT_PAIR(recv, (int fd, void *buf, size_t n, int flags, const struct sl_fdrec *rec),
	    (fd, buf, n, flags, rec))

static __attribute__((noinline)) ssize_t slow_recv(int fd, void *buf, size_t n, int flags,
						   unsigned b)
{
	const struct sl_fdrec *rec;
	const int h = sl__xfer_credit(fd, SL_K_RECV, b, &rec);
	if (h == SL_HOT_ONE)
		return SL_RAW_OK(recv) ? hotr_recv(fd, buf, n, flags, rec)
				       : hot_recv(fd, buf, n, flags, rec);
	if (h == SL_HOT_TWO)
		return hot2_recv(fd, buf, n, flags, rec);
	return full_recv(fd, buf, n, flags, rec);
}

static __attribute__((noinline)) ssize_t full_recvfrom(int fd, void *buf, size_t n, int flags,
						       struct sockaddr *from, socklen_t *fromlen,
						       const struct sl_fdrec *rec)
{
	return recv_buf(SL_IO_RECVFROM, fd, buf, n, 0, flags, from, fromlen, rec);
}

static inline __attribute__((always_inline)) ssize_t
hot_recvfrom_i(int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *fromlen,
	       const struct sl_fdrec *rec, bool two, bool raw)
{
	ssize_t r;
	if (recv_hot(SL_IO_RECVFROM, fd, buf, n, flags, from, fromlen, rec, &r, two, raw))
		return r;
	return full_recvfrom(fd, buf, n, flags, from, fromlen, rec);
}
SL_HOT_PAIR(recvfrom,
	    (int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *fromlen,
	     const struct sl_fdrec *rec),
	    (fd, buf, n, flags, from, fromlen, rec))

static __attribute__((noinline)) ssize_t slow_recvfrom(int fd, void *buf, size_t n, int flags,
						       struct sockaddr *from, socklen_t *fromlen,
						       unsigned b)
{
	const struct sl_fdrec *rec;
	const int h = sl__xfer_credit(fd, SL_K_RECV, b, &rec);
	if (h == SL_HOT_ONE)
		return SL_RAW_OK(recvfrom) ? hotr_recvfrom(fd, buf, n, flags, from, fromlen, rec)
					   : hot_recvfrom(fd, buf, n, flags, from, fromlen, rec);
	if (h == SL_HOT_TWO)
		return hot2_recvfrom(fd, buf, n, flags, from, fromlen, rec);
	return full_recvfrom(fd, buf, n, flags, from, fromlen, rec);
}

static __attribute__((noinline)) ssize_t slow_recvmsg(int fd, struct msghdr *msg, int flags,
						      unsigned b)
{
	(void)b;
	/* The record first: msg is read only for a socket a rule may match. */
	const struct sl_fdrec *rec = sl__xfer_rec(fd, SL_K_RECV);
	if (rec == NULL || sl__bad_msg(msg))
		return SL_REAL(recvmsg)(fd, msg, flags);
	struct sl_io io = {.how = SL_IO_RECVMSG,
			   .fd = fd,
			   .msg = msg,
			   .flags = flags,
			   .total = sl__iov_total(msg->msg_iov, msg->msg_iovlen)};
	return sl__recv_rec(&io, rec);
}

static __attribute__((noinline)) ssize_t full_read(int fd, void *buf, size_t n,
						   const struct sl_fdrec *rec)
{
	return recv_buf(SL_IO_READ, fd, buf, n, 0, 0, NULL, NULL, rec);
}

static inline __attribute__((always_inline)) ssize_t
hot_read_i(int fd, void *buf, size_t n, const struct sl_fdrec *rec, bool two, bool raw)
{
	ssize_t r;
	if (recv_hot(SL_IO_READ, fd, buf, n, 0, NULL, NULL, rec, &r, two, raw))
		return r;
	return full_read(fd, buf, n, rec);
}
SL_HOT_PAIR(read, (int fd, void *buf, size_t n, const struct sl_fdrec *rec), (fd, buf, n, rec))

static __attribute__((noinline)) ssize_t slow_read(int fd, void *buf, size_t n, unsigned b)
{
	const struct sl_fdrec *rec;
	const int h = sl__xfer_credit(fd, SL_K_RECV, b, &rec);
	if (h == SL_HOT_ONE)
		return SL_RAW_OK(read) ? hotr_read(fd, buf, n, rec) : hot_read(fd, buf, n, rec);
	if (h == SL_HOT_TWO)
		return hot2_read(fd, buf, n, rec);
	return full_read(fd, buf, n, rec);
}

static __attribute__((noinline)) ssize_t full_readv(int fd, const struct iovec *iov, int cnt,
						    const struct sl_fdrec *rec)
{
	return sl__xfer_vec(SL_IO_READV, fd, iov, cnt, rec);
}

static inline __attribute__((always_inline)) ssize_t hot_readv_i(int fd, const struct iovec *iov,
								 int cnt,
								 const struct sl_fdrec *rec,
								 bool two, bool raw)
{
	ssize_t r;
	if (sl__vec_hot(SL_IO_READV, fd, iov, cnt, rec, &r, two, raw))
		return r;
	return full_readv(fd, iov, cnt, rec);
}
SL_HOT_PAIR(readv, (int fd, const struct iovec *iov, int cnt, const struct sl_fdrec *rec),
	    (fd, iov, cnt, rec))

static __attribute__((noinline)) ssize_t slow_readv(int fd, const struct iovec *iov, int cnt,
						    unsigned b)
{
	const struct sl_fdrec *rec;
	const int h = sl__xfer_credit(fd, SL_K_RECV, b, &rec);
	if (h == SL_HOT_ONE)
		return SL_RAW_OK(readv) ? hotr_readv(fd, iov, cnt, rec)
					: hot_readv(fd, iov, cnt, rec);
	if (h == SL_HOT_TWO)
		return hot2_readv(fd, iov, cnt, rec);
	return full_readv(fd, iov, cnt, rec);
}

/* The fortified calls: the real one when n is past the buffer (it aborts),
 * or for an fd no rule matches. */
static __attribute__((noinline)) ssize_t slow___read_chk(int fd, void *buf, size_t n, size_t buflen,
							 unsigned b)
{
	if ((b & SL_FDB_PASS(SL_K_RECV)) || n > buflen)
		return SL_REAL(__read_chk)(fd, buf, n, buflen);
	return recv_buf(SL_IO_READ_CHK, fd, buf, n, buflen, 0, NULL, NULL, NULL);
}

static __attribute__((noinline)) ssize_t slow___recv_chk(int fd, void *buf, size_t n, size_t buflen,
							 int flags, unsigned b)
{
	if ((b & SL_FDB_PASS(SL_K_RECV)) || n > buflen)
		return SL_REAL(__recv_chk)(fd, buf, n, buflen, flags);
	return recv_buf(SL_IO_RECV_CHK, fd, buf, n, buflen, flags, NULL, NULL, NULL);
}

static __attribute__((noinline)) ssize_t slow___recvfrom_chk(int fd, void *buf, size_t n,
							     size_t buflen, int flags,
							     struct sockaddr *from,
							     socklen_t *fromlen, unsigned b)
{
	if ((b & SL_FDB_PASS(SL_K_RECV)) || n > buflen)
		return SL_REAL(__recvfrom_chk)(fd, buf, n, buflen, flags, from, fromlen);
	return recv_buf(SL_IO_RECVFROM_CHK, fd, buf, n, buflen, flags, from, fromlen, NULL);
}

/* The exported shells of the RECV shape. */
#define WRAP_RECV(ret, name, params, args, fd)                                                     \
	SL_WRAP_SHELL(ret, name, params, args, fd, SL_K_RECV, true)
#include "wrap_gen.h"

/* At most as many messages as message rules allow now (waiting for one);
 * bytes are charged after the fact. */
SL_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags,
		       struct timespec *timeout)
{
	struct sl_fdrec rec;
	if (sl__fd_pass(fd, SL_K_RECV) || sl__busy || (flags & (MSG_PEEK | MSG_ERRQUEUE)) ||
	    !sl__fd_get(fd, &rec) || rec.match[SL_K_RECV] == 0)
		return SL_REAL(recvmmsg)(fd, vec, vlen, flags, timeout);
	int saved = errno, err = 0;
	sl__busy = 1;
	uint32_t rules = rec.match[SL_K_RECV], bytes = rules & sl__st.byte_rules;
	struct sl_call c;
	sl__call_begin(&c, fd, SL_OP_RECV, rec.peer.family != 0 ? &rec.peer : NULL, SO_RCVTIMEO);
	/* Non-blocking (nb.h): what the tokens allow now, or EAGAIN, and the
	 * fd held back until they are there. */
	sl__nb_begin(&c, flags, rules);
	uint64_t m = rules & ~bytes ? sl__available(&c, rules & ~bytes,
						    sl__rejecting(rules & ~bytes) == 0, &err)
				    : UINT64_MAX;
	if (err == 0 && bytes != 0)
		sl__available(&c, bytes, sl__rejecting(bytes) == 0, &err);
	if (err != 0) {
		sl__nb_end(&c, SL_DIR_IN, false, 0);
		return (int)sl__io_end(&c, rules, 0, -1, err, saved);
	}
	errno = saved;
	const unsigned want = vlen < m ? vlen : (unsigned)m;
	int r = SL_REAL(recvmmsg)(fd, vec, want, flags, timeout);
	int e = errno;
	size_t got = 0;
	for (int i = 0; i < r; i++)
		got += vec[i].msg_len;
	if (r > 0) {
		sl__charge(&c, rules & ~bytes, (uint64_t)r);
		sl__charge(&c, bytes, got);
	}
	sl__stats_bytes(rules, got);
	/* Cut short by a message rule: held back until its next unit. */
	sl__nb_end(&c, SL_DIR_IN, r > 0 && (unsigned)r == want && want < vlen, 0);
	sl__call_end(&c, rules, r >= 0);
	sl__busy = 0;
	errno = e;
	return r;
}
