/* SPDX-License-Identifier: MIT */
/*
 * sockdiag.c - is a socket still held by some process? One exact request
 * to the kernel's socket diagnostics: for TCP by four-tuple (the reply
 * names the socket's inode, 0 once no fd refers to it: it is closing or in
 * TIME_WAIT; ENOENT once it is gone), for a unix stream by inode (ENOENT
 * once it is freed). No privilege is needed. Made only for conns slots
 * of connections a fork shares (connfam.c), never on a call's hot path.
 */
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "real.h"
#include "sockdiag.h"

/* Copy the address and port of sa (AF_INET or AF_INET6) into addr, *port. */
static bool inet_part(const struct sockaddr_storage *sa, uint8_t addr[16], uint16_t *port)
{
	if (sa->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		memcpy(addr, &in->sin_addr, 4);
		*port = in->sin_port;
		return true;
	}
	if (sa->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		memcpy(addr, &in6->sin6_addr, 16);
		*port = in6->sin6_port;
		return true;
	}
	return false;
}

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
	       inet_part(&l, id->laddr, &id->lport) && inet_part(&r, id->raddr, &id->rport);
}

/* The request for id: an inet_diag_req_v2 or a unix_diag_req after h. */
union diag_req {
	struct {
		struct nlmsghdr h;
		struct inet_diag_req_v2 r;
	} in;
	struct {
		struct nlmsghdr h;
		struct unix_diag_req r;
	} un;
};

static size_t build(union diag_req *q, const struct sl_sockid *id)
{
	memset(q, 0, sizeof(*q));
	if (id->family == AF_UNIX) {
		q->un.r.sdiag_family = AF_UNIX;
		q->un.r.udiag_states = ~0u;
		q->un.r.udiag_ino = (uint32_t)id->ino;
		q->un.r.udiag_cookie[0] = q->un.r.udiag_cookie[1] = INET_DIAG_NOCOOKIE;
		q->un.h.nlmsg_len = sizeof(q->un);
	} else {
		q->in.r.sdiag_family = (uint8_t)id->family;
		q->in.r.sdiag_protocol = IPPROTO_TCP;
		q->in.r.idiag_states = ~0u;
		q->in.r.id.idiag_sport = id->lport;
		q->in.r.id.idiag_dport = id->rport;
		memcpy(q->in.r.id.idiag_src, id->laddr, 16);
		memcpy(q->in.r.id.idiag_dst, id->raddr, 16);
		q->in.r.id.idiag_cookie[0] = q->in.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
		q->in.h.nlmsg_len = sizeof(q->in);
	}
	q->in.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	q->in.h.nlmsg_flags = NLM_F_REQUEST;
	return q->in.h.nlmsg_len;
}

/* The answer in buf (n bytes) for id: 1, 0 or -1 (errno). */
static int answer(const char *buf, ssize_t n, const struct sl_sockid *id)
{
	const struct nlmsghdr *h = (const struct nlmsghdr *)buf;
	if (n < (ssize_t)sizeof(*h) || !NLMSG_OK(h, (size_t)n)) {
		errno = EPROTO;
		return -1;
	}
	if (h->nlmsg_type == NLMSG_ERROR) {
		const struct nlmsgerr *e = NLMSG_DATA(h);
		if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*e)) || e->error == 0) {
			errno = EPROTO;
			return -1;
		}
		if (e->error == -ENOENT)
			return 0;
		errno = -e->error;
		return -1;
	}
	if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) {
		errno = EPROTO;
		return -1;
	}
	uint64_t ino;
	if (id->family == AF_UNIX) {
		const struct unix_diag_msg *m = NLMSG_DATA(h);
		if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
			return (errno = EPROTO), -1;
		ino = m->udiag_ino;
	} else {
		const struct inet_diag_msg *m = NLMSG_DATA(h);
		if (h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
			return (errno = EPROTO), -1;
		ino = m->idiag_inode;
	}
	/* A TCP socket no fd refers to has inode 0; the same four-tuple
	 * reused by a new connection has another inode. */
	return ino == id->ino ? 1 : 0;
}

int sl__sock_alive(const struct sl_sockid *id)
{
	int nl = SL_REAL(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return -1;
	union diag_req q;
	size_t len = build(&q, id);
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	/* Aligned for the reply's headers. */
	char buf[1024] __attribute__((aligned(8)));
	int ret = -1;
	ssize_t n;
	if (SL_REAL(sendto)(nl, &q, len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) ==
	    (ssize_t)len) {
		do
			n = SL_REAL(recv)(nl, buf, sizeof(buf), 0);
		while (n < 0 && errno == EINTR);
		ret = n < 0 ? -1 : answer(buf, n, id);
	}
	int e = errno;
	SL_REAL(close)(nl);
	errno = e;
	return ret;
}
