/* SPDX-License-Identifier: MIT */
/*
 * turn.h - conns:adaptive in supervised mode (turn.c): a server's requests
 * as turns on its accepted connections, each holding one slot of the
 * rule's concurrency limit, their latency fed to the engine's controller
 * (engine/adaptive.h), which moves the limit; the same turns hold the
 * slots of system protection's gates (gate.h). A client's connections
 * (client.h) have turns of their own: from a request's send to the
 * answer's first byte.
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_TURN_H
#define SLUICE_SUPERVISE_TURN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct sl_sup;
struct sl_sup_call;
struct sl_limiter;
struct sl_adapt;

/* The limiter of adaptive rule i: one tunable concurrency limiter for the
 * whole supervised tree (a prefork or fork-per-connection server's
 * processes count in one limit), retuned by the rule's controller; made on
 * first use at now_ns. NULL without memory. */
struct sl_limiter *sl_sup_turn_lim(struct sl_sup *s, unsigned i, uint64_t now_ns);
/* The controller of adaptive rule i, or NULL before its first use (a
 * snapshot for `sluice stat` and the tests). */
const struct sl_adapt *sl_sup_turn_adapt(const struct sl_sup *s, unsigned i);
/* Adaptive rule i did not admit a connection or a turn at now_ns: its
 * limit binds. */
void sl_sup_turn_bound(struct sl_sup *s, unsigned i, uint64_t now_ns);

/* The connection of socket inode ino was accepted holding the slots
 * `rules` (bit i: adaptive rule i's; bit SL_SUP_GATE + i: rule i's gate,
 * gate.h): its first turn runs (it ends at the first send). False if it
 * cannot be followed (no memory): the caller gives the slots back. */
bool sl_sup_turn_accepted(struct sl_sup *s, ino_t ino, uint64_t rules, uint64_t now_ns);
/* The connection of ino is closed by every supervised process: a turn
 * still running gives its slots back (no sample: when it ended is not
 * known), and the connection is forgotten. */
void sl_sup_turn_gone(struct sl_sup *s, ino_t ino);
/* A send on socket ino is about to be made: on a server's connection, its
 * running turn ends (its latency, from the turn's first received bytes,
 * is a sample). True if the send must take a client's turn step first
 * (sl_sup_client_step_send: a client connection with no turn running). */
bool sl_sup_turn_send(struct sl_sup *s, ino_t ino, uint64_t now_ns);
/* Whether a receive on socket ino must take the turn step first (a
 * server's connection that is idle, or whose turn has not received yet; a
 * client's whose turn runs: the answer ends it). */
bool sl_sup_turn_wants(const struct sl_sup *s, ino_t ino);

enum sl_sup_turn_step {
	SL_SUP_TURN_GO = 0, /* go on with the call (its rules, or the kernel) */
	SL_SUP_TURN_HOLD,   /* held: stepped again at c->due_ns or on POLLIN */
	SL_SUP_TURN_DONE,   /* answered (ECONNRESET, the socket's timeout) */
};
/* The turn step of receive c (c->turn_ino set by describe). On a server's
 * connection: wait (held, no slot) for the request's bytes, then for a
 * slot of each of the connection's rules and gates, up to max-delay
 * (action=delay) or half the no-load latency (action=reject, and any
 * gate), else reset the connection and answer ECONNRESET (a dry-run rule's
 * turn goes on instead); a non-blocking receive never waits. On a client's
 * (client.h): the answer's first byte ends the running turn (a sample from
 * its request's send); a blocking receive with no data yet is held until
 * POLLIN (SO_RCVTIMEO honoured), a non-blocking one goes on; the end of
 * the stream or an error end it without a sample. On GO c->turn_ino is 0. */
enum sl_sup_turn_step sl_sup_turn_step_recv(struct sl_sup *s, struct sl_sup_call *c,
					    uint64_t now_ns);

/* Forget every connection and limiter (at the end). */
void sl_sup_turn_free(struct sl_sup *s);

#endif /* SLUICE_SUPERVISE_TURN_H */
