/* SPDX-License-Identifier: MIT */
/*
 * match.h - which rules of a policy fit a call (match.c).
 *
 * A rule fits a socket when its family= and type= bits include the
 * socket's (0 means any); it fits an address when to=CIDR and port=/:PORT
 * include it. The address is the destination for connect, the listening
 * socket's local address for accept (to=/port= name what is listened on),
 * and the peer for send/recv. An unknown address (an unconnected datagram
 * socket that receives; NULL here) fits only rules without an address
 * filter.
 *
 * API: pure functions of the policy, any thread.
 */
#ifndef SLUICE_ENGINE_MATCH_H
#define SLUICE_ENGINE_MATCH_H

#include "addr.h"
#include "policy.h"

/* Rules in mask `cand` fitting a socket of these SL_FAM_*, SL_TYPE_* bits
 * and address a (NULL: unknown). */
uint32_t sl_match(const struct sl_policy *p, uint32_t cand, unsigned family, unsigned type,
		  const struct sl_addr *a);
/* Rules (any operation) whose family= and type= filters fit. */
uint32_t sl_match_socket(const struct sl_policy *p, unsigned family, unsigned type);
/* Rules of operation op. */
uint32_t sl_match_op(const struct sl_policy *p, enum sl_op op);
/* Whether a rule of op needs the remote address to decide (to=, port=,
 * per=peer). */
bool sl_match_needs_addr(const struct sl_policy *p, enum sl_op op);

#endif /* SLUICE_ENGINE_MATCH_H */
