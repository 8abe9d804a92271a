/* SPDX-License-Identifier: MIT */
/*
 * sockdiag.c - one exact socket-diagnostics request and its answer. For
 * TCP the socket is found by four-tuple (inet_diag_req_v2 without a dump:
 * the kernel's exact lookup, which also finds closing and TIME_WAIT
 * sockets, whose inode is then 0); for a unix socket by inode. ENOENT in
 * the answer means there is no such socket. No privilege is needed.
 */
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "sockdiag.h"

bool sl_sockdiag_inet_part(const struct sockaddr_storage *sa, uint8_t addr[16], uint16_t *port)
{
	if (sa->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		memset(addr, 0, 16);
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
_Static_assert(sizeof(union diag_req) <= SL_SOCKDIAG_REQ_MAX, "SL_SOCKDIAG_REQ_MAX");

size_t sl_sockdiag_request(void *buf, const struct sl_sockid *id)
{
	union diag_req q;
	memset(&q, 0, sizeof(q));
	if (id->family == AF_UNIX) {
		q.un.r.sdiag_family = AF_UNIX;
		q.un.r.udiag_states = ~0u;
		q.un.r.udiag_ino = (uint32_t)id->ino;
		q.un.r.udiag_cookie[0] = q.un.r.udiag_cookie[1] = INET_DIAG_NOCOOKIE;
		q.un.h.nlmsg_len = sizeof(q.un);
	} else {
		q.in.r.sdiag_family = (uint8_t)id->family;
		q.in.r.sdiag_protocol = IPPROTO_TCP;
		q.in.r.idiag_states = ~0u;
		q.in.r.id.idiag_sport = id->lport;
		q.in.r.id.idiag_dport = id->rport;
		memcpy(q.in.r.id.idiag_src, id->laddr, 16);
		memcpy(q.in.r.id.idiag_dst, id->raddr, 16);
		q.in.r.id.idiag_cookie[0] = q.in.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
		q.in.h.nlmsg_len = sizeof(q.in);
	}
	q.in.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	q.in.h.nlmsg_flags = NLM_F_REQUEST;
	memcpy(buf, &q, q.in.h.nlmsg_len);
	return q.in.h.nlmsg_len;
}

int sl_sockdiag_answer(const void *buf, size_t n, uint16_t family, struct sl_sockdiag *out,
		       int *err)
{
	struct nlmsghdr h;
	*err = EPROTO;
	if (n < sizeof(h))
		return -1;
	memcpy(&h, buf, sizeof(h));
	if (h.nlmsg_len < sizeof(h) || h.nlmsg_len > n)
		return -1;
	const char *data = (const char *)buf + NLMSG_HDRLEN;
	const size_t len = h.nlmsg_len - NLMSG_HDRLEN;
	if (h.nlmsg_type == NLMSG_ERROR) {
		struct nlmsgerr e;
		if (len < sizeof(e))
			return -1;
		memcpy(&e, data, sizeof(e));
		if (e.error == -ENOENT)
			return 0;
		if (e.error < 0)
			*err = -e.error;
		return -1;
	}
	if (h.nlmsg_type != SOCK_DIAG_BY_FAMILY)
		return -1;
	if (family == AF_UNIX) {
		struct unix_diag_msg m;
		if (len < sizeof(m))
			return -1;
		memcpy(&m, data, sizeof(m));
		*out = (struct sl_sockdiag){.ino = m.udiag_ino, .uid = UINT32_MAX};
		return 1;
	}
	struct inet_diag_msg m;
	if (len < sizeof(m))
		return -1;
	memcpy(&m, data, sizeof(m));
	*out = (struct sl_sockdiag){.ino = m.idiag_inode, .uid = m.idiag_uid};
	return 1;
}
