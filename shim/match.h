/* SPDX-License-Identifier: MIT */
/*
 * match.h - which rules fit a socket and an address (match.c).
 *
 * API: pure functions of sl__st.policy, any thread.
 */
#ifndef SLUICE_SHIM_MATCH_H
#define SLUICE_SHIM_MATCH_H

#include "addr.h"
#include "internal.h"

/* Rules in mask `cand` that match a socket of this family and type (SL_*
 * bits) talking to/listening on address a (NULL: unknown; rules with an
 * address filter do not match). */
uint32_t sl__match(uint32_t cand, unsigned family, unsigned type, const struct sl_addr *a);
/* Rules (any op) whose family and type filters fit. */
uint32_t sl__match_socket(unsigned family, unsigned type);

#endif /* SLUICE_SHIM_MATCH_H */
