/* SPDX-License-Identifier: MIT */
/*
 * sockdiag.h - the kernel's socket diagnostics (NETLINK_SOCK_DIAG, what
 * ss(8) reads), one exact request and its answer (sockdiag.c): is a socket
 * still there, which inode, which owner. Pure: the caller makes the netlink
 * socket and moves the bytes (the preload through its real calls, the
 * launcher through libc's). Users: conns slots of forked connections
 * (shim/connfam.c) and the peer of `sluice stat --listen` (cli/peer.c).
 *
 * API: reentrant; no state.
 */
#ifndef SLUICE_COMMON_SOCKDIAG_H
#define SLUICE_COMMON_SOCKDIAG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A connected stream socket: for TCP its four-tuple as the socket itself
 * sees it (local first; addresses and ports in network order, an IPv4
 * address in the first 4 bytes), for a unix socket its inode. */
struct sl_sockid {
	uint64_t ino;
	uint16_t family; /* AF_INET, AF_INET6 (TCP) or AF_UNIX (stream) */
	uint16_t lport, rport;
	uint8_t laddr[16], raddr[16];
};

struct sockaddr_storage;
/* The address and port of sa (AF_INET or AF_INET6) into addr, *port, as
 * sl_sockid holds them; false for another family. */
bool sl_sockdiag_inet_part(const struct sockaddr_storage *sa, uint8_t addr[16], uint16_t *port);

/* The request for id into buf (room for SL_SOCKDIAG_REQ_MAX bytes); its
 * length. */
#define SL_SOCKDIAG_REQ_MAX 128
size_t sl_sockdiag_request(void *buf, const struct sl_sockid *id);

/* What the kernel said of the socket id asked for. */
struct sl_sockdiag {
	uint64_t ino; /* 0: no fd refers to it any more (TCP, closing) */
	uint32_t uid; /* its owner (the creator's fsuid) */
};
/* Read the answer buf[0..n) to a request for a socket of family `family`:
 * 1 (found, *out filled), 0 (no such socket), or -1 with *err (the
 * kernel's error, or EPROTO for an answer that is not one). */
int sl_sockdiag_answer(const void *buf, size_t n, uint16_t family, struct sl_sockdiag *out,
		       int *err);

#endif /* SLUICE_COMMON_SOCKDIAG_H */
