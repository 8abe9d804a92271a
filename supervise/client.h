/* SPDX-License-Identifier: MIT */
/*
 * client.h - conns:adaptive on a client's connections in supervised mode
 * (client.c): a request is a turn from its send to the answer's first
 * byte, holding one slot of the rule's client limit (one per rule for the
 * supervised tree, apart from the server's of turn.h), whose controller
 * (engine/adaptive.h) moves it by the turns' latency.
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_CLIENT_H
#define SLUICE_SUPERVISE_CLIENT_H

#include <stdint.h>
#include <sys/types.h>

#include "turn.h"

struct sl_sup;
struct sl_sup_call;
struct sl_sup_proc;
struct sl_limiter;
struct sl_adapt;

/* The conns:adaptive rules that may give a socket of this family and type
 * client turns once it connects: a stream socket they may match is placed
 * high when it is made (sock.c), where its sends and receives are
 * trapped. */
uint32_t sl_sup_client_rules(const struct sl_sup *s, unsigned fam, unsigned type);

/* The client limiter of adaptive rule i, made on first use at now_ns;
 * NULL without memory. Its controller, or NULL before its first use. */
struct sl_limiter *sl_sup_client_lim(struct sl_sup *s, unsigned i, uint64_t now_ns);
const struct sl_adapt *sl_sup_client_adapt(const struct sl_sup *s, unsigned i);

/* Process p let a connect of its fd (socket inode ino) go on, matched by
 * the adaptive rules `rules`: the connection has client turns, followed
 * until it is closed (conns.c), if its sends and receives are trapped
 * where fd is. No slot is taken here. */
void sl_sup_client_connected(struct sl_sup *s, struct sl_sup_proc *p, int fd, ino_t ino,
			     uint32_t rules, uint64_t now_ns);

/* The turn step of send c on a client connection with no turn running
 * (c->turn_ino set by describe, sl_sup_turn_send): a request, whose turn
 * takes one client slot of each of the connection's rules before the send
 * goes on. With none free a blocking send is held, retried with the
 * engine's backoff up to the rules' least sl_adapt_wait_ns (and the
 * socket's SO_SNDTIMEO: EAGAIN), then its connection is reset and it is
 * answered ECONNRESET (a dry-run rule's send goes on, uncounted); a
 * non-blocking one goes on at once, uncounted. On GO c->turn_ino is 0. */
enum sl_sup_turn_step sl_sup_client_step_send(struct sl_sup *s, struct sl_sup_call *c,
					      uint64_t now_ns);

#endif /* SLUICE_SUPERVISE_CLIENT_H */
