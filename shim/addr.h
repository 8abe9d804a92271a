/* SPDX-License-Identifier: MIT */
/*
 * addr.h - a socket address as rules see it (addr.c).
 *
 * API: pure, any thread.
 */
#ifndef SLUICE_SHIM_ADDR_H
#define SLUICE_SHIM_ADDR_H

#include <sys/socket.h>

#include "internal.h"

/* family: 0 unknown, 4, 6, or 1 (AF_UNIX, no address). IPv4-mapped IPv6
 * addresses count as IPv4. */
struct sl_addr {
	uint8_t family;
	uint8_t pad;
	uint16_t port; /* host order */
	uint8_t addr[16];
};

/* Convert a sockaddr to an sl_addr; false if the family is not known. */
bool sl__addr_from(struct sl_addr *a, const struct sockaddr *sa, socklen_t len);

#endif /* SLUICE_SHIM_ADDR_H */
