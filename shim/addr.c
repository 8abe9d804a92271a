/* SPDX-License-Identifier: MIT */
/*
 * addr.c - a socket address as rules see it.
 */
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

#include "addr.h"

/* An sl_addr from a sockaddr: IPv4-mapped IPv6 addresses count as IPv4,
 * AF_UNIX as family 1 with no address. False for other families. */
bool sl__addr_from(struct sl_addr *a, const struct sockaddr *sa, socklen_t len)
{
	memset(a, 0, sizeof(*a));
	if (sa == NULL || len < (socklen_t)sizeof(sa_family_t))
		return false;
	if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		a->family = 4;
		a->port = ntohs(in->sin_port);
		memcpy(a->addr, &in->sin_addr, 4);
		return true;
	}
	if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		a->port = ntohs(in6->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			a->family = 4;
			memcpy(a->addr, &in6->sin6_addr.s6_addr[12], 4);
		} else {
			a->family = 6;
			memcpy(a->addr, &in6->sin6_addr, 16);
		}
		return true;
	}
	if (sa->sa_family == AF_UNIX) {
		a->family = 1;
		return true;
	}
	return false;
}
