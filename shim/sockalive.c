/* SPDX-License-Identifier: MIT */
/*
 * sockalive.c - is a socket still held by some process? One exact request
 * to the kernel's socket diagnostics (common/sockdiag.c builds and reads
 * it): for TCP the answer names the socket's inode, 0 once no fd refers to
 * it (it is closing or in TIME_WAIT), or there is no such socket; a unix
 * stream is gone once freed. Made only for conns slots of connections a
 * fork shares (connfam.c), never on a call's hot path.
 */
#include <errno.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "real.h"
#include "sockalive.h"
#include "sockdiag.h"

bool sl__sockid_of(int fd, struct sl_sockid *id)
{
	memset(id, 0, sizeof(*id));
	struct stat st;
	int domain = 0, type = 0, proto = 0;
	socklen_t len = sizeof(int);
	if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) ||
	    SL_REAL(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
	    (len = sizeof(int), SL_REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &len)) != 0 ||
	    type != SOCK_STREAM)
		return false;
	id->ino = (uint64_t)st.st_ino;
	id->family = (uint16_t)domain;
	if (domain == AF_UNIX)
		return true;
	len = sizeof(int);
	if ((domain != AF_INET && domain != AF_INET6) ||
	    SL_REAL(getsockopt)(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 ||
	    proto != IPPROTO_TCP) {
		errno = EPROTONOSUPPORT;
		return false;
	}
	struct sockaddr_storage l, r;
	socklen_t ll = sizeof(l), rl = sizeof(r);
	return getsockname(fd, (struct sockaddr *)&l, &ll) == 0 &&
	       getpeername(fd, (struct sockaddr *)&r, &rl) == 0 &&
	       sl_sockdiag_inet_part(&l, id->laddr, &id->lport) &&
	       sl_sockdiag_inet_part(&r, id->raddr, &id->rport);
}

int sl__sock_alive(const struct sl_sockid *id)
{
	int nl = SL_REAL(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return -1;
	char q[SL_SOCKDIAG_REQ_MAX], buf[1024];
	size_t len = sl_sockdiag_request(q, id);
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	int ret = -1, e = 0;
	ssize_t n;
	if (SL_REAL(sendto)(nl, q, len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) ==
	    (ssize_t)len) {
		do
			n = SL_REAL(recv)(nl, buf, sizeof(buf), 0);
		while (n < 0 && errno == EINTR);
		e = errno;
		struct sl_sockdiag d;
		if (n >= 0)
			ret = sl_sockdiag_answer(buf, (size_t)n, id->family, &d, &e);
		/* A TCP socket no fd refers to has inode 0; the same four-tuple
		 * reused by a new connection has another inode. */
		if (ret == 1)
			ret = d.ino == id->ino;
	} else {
		e = errno;
	}
	SL_REAL(close)(nl);
	errno = e;
	return ret;
}
