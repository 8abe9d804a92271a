/* SPDX-License-Identifier: MIT */
/*
 * addr.c - a socket address as rules see it.
 */
#include <netinet/in.h>
#include <string.h>

#include "addr.h"
#include "policy.h"

bool sl_addr_from(struct sl_addr *a, const struct sockaddr *sa, socklen_t len)
{
	memset(a, 0, sizeof(*a));
	if (sa == NULL || len < (socklen_t)sizeof(sa_family_t))
		return false;
	if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
		a->family = 4;
		a->port = ntohs(in->sin_port);
		memcpy(a->addr, &in->sin_addr, 4);
		return true;
	}
	if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
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

unsigned sl_addr_fam_bit(int domain)
{
	return domain == AF_INET    ? SL_FAM_INET
	       : domain == AF_INET6 ? SL_FAM_INET6
	       : domain == AF_UNIX  ? SL_FAM_UNIX
				    : 0;
}

unsigned sl_addr_type_bit(int type)
{
	type &= 0xf; /* without SOCK_NONBLOCK, SOCK_CLOEXEC */
	return type == SOCK_STREAM ? SL_TYPE_STREAM : type == SOCK_DGRAM ? SL_TYPE_DGRAM : 0;
}
