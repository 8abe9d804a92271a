/* SPDX-License-Identifier: MIT */
/*
 * addr.h - a socket as rules see it: its family and type bits, its remote
 * (or listening) address (addr.c). The one place both front ends turn a
 * sockaddr into what the rules' to=, port= and family= filters test.
 *
 * API: pure, any thread.
 */
#ifndef SLUICE_ENGINE_ADDR_H
#define SLUICE_ENGINE_ADDR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* family: 0 unknown, 4, 6, or 1 (AF_UNIX, no address). IPv4-mapped IPv6
 * addresses (::ffff:a.b.c.d) count as IPv4: a rule with to=127.0.0.0/8
 * fits a connect over AF_INET6 to [::ffff:127.0.0.1]. */
struct sl_addr {
	uint8_t family;
	uint8_t pad;
	uint16_t port; /* host order */
	uint8_t addr[16];
};

/* *a from a sockaddr of len bytes; false (and *a zeroed: family 0) if the
 * family is not one rules know. */
bool sl_addr_from(struct sl_addr *a, const struct sockaddr *sa, socklen_t len);

/* The SL_FAM_* bit of a socket's domain (AF_INET, AF_INET6, AF_UNIX; 0 for
 * others: no rule fits it) and the SL_TYPE_* bit of its type (SOCK_STREAM,
 * SOCK_DGRAM; flags such as SOCK_NONBLOCK ignored; 0 for others). These
 * are the socket's own: family=inet6 fits an AF_INET6 socket whatever
 * address it talks to. */
unsigned sl_addr_fam_bit(int domain);
unsigned sl_addr_type_bit(int type);

#endif /* SLUICE_ENGINE_ADDR_H */
