/* SPDX-License-Identifier: MIT */
/*
 * peer.c - who is at the other end of a loopback TCP connection: the owner
 * of the peer's socket, asked of the kernel's socket diagnostics by its
 * four-tuple seen from its side (as identd answers), for `sluice stat
 * --listen` (metrics_http.c). A dual-stack listener's IPv4-mapped peer is
 * looked for as the IPv4 socket it most likely is, then as an IPv6 one.
 */
#include "internal.h"
#include "sockdiag.h"

#include <errno.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Ask for id; 1 (found: *uid), 0 (none), -1 (errno). */
static int ask(const struct sl_sockid *id, uint32_t *uid)
{
	int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return -1;
	char q[SL_SOCKDIAG_REQ_MAX], buf[1024];
	size_t len = sl_sockdiag_request(q, id);
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	struct timeval tv = {1, 0}; /* the kernel answers at once; never hang */
	setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	int ret = -1, err = errno;
	ssize_t n = -1;
	if (sendto(nl, q, len, 0, (struct sockaddr *)&kernel, sizeof(kernel)) == (ssize_t)len)
		n = recv(nl, buf, sizeof(buf), 0);
	err = errno;
	struct sl_sockdiag d;
	if (n >= 0)
		ret = sl_sockdiag_answer(buf, (size_t)n, id->family, &d, &err);
	close(nl);
	if (ret == 1)
		*uid = d.uid;
	errno = err;
	return ret;
}

static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int sl__cli_peer_uid(int fd, uint32_t *uid)
{
	struct sockaddr_storage me, peer;
	socklen_t ml = sizeof(me), pl = sizeof(peer);
	struct sl_sockid id;
	memset(&id, 0, sizeof(id));
	if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
	    getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
		return -1;
	/* The peer's socket: its local end is our peer, its remote end us. */
	if (!sl_sockdiag_inet_part(&peer, id.laddr, &id.lport) ||
	    !sl_sockdiag_inet_part(&me, id.raddr, &id.rport)) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	id.family = me.ss_family;
	if (id.family == AF_INET6 && memcmp(id.laddr, mapped, 12) == 0 &&
	    memcmp(id.raddr, mapped, 12) == 0) {
		struct sl_sockid v4 = id;
		v4.family = AF_INET;
		memmove(v4.laddr, id.laddr + 12, 4);
		memset(v4.laddr + 4, 0, 12);
		memmove(v4.raddr, id.raddr + 12, 4);
		memset(v4.raddr + 4, 0, 12);
		int r = ask(&v4, uid);
		if (r != 0)
			return r == 1 ? 0 : -1;
	}
	int r = ask(&id, uid);
	if (r == 0)
		errno = ENOENT;
	return r == 1 ? 0 : -1;
}
