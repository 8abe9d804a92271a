/* SPDX-License-Identifier: MIT */
/*
 * turn_state.h - what turn.c (the turns of connections) and gate.c (system
 * protection's gates) share: the limiters and controllers of a turn's
 * slots, the host's figures, the table of connections.
 *
 * A turn's slots are bits: bit b < SL_MAX_RULES, one of adaptive rule b's
 * limit (turn.c); bit SL_SUP_GATE + i, one of rule i's gate (gate.c). Each
 * slot is one tunable concurrency limiter and its controller
 * (engine/adaptive.h) for the whole supervised tree, made on first use.
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_TURN_STATE_H
#define SLUICE_SUPERVISE_TURN_STATE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptive.h"
#include "policy.h"
#include "sluice_core.h"

struct sl_sup;
struct turn; /* one connection with turns (turn.c) */

#define SL_SUP_SLOTS (2 * SL_MAX_RULES)

struct sl_sup_turns {
	struct sl_tunable lim[SL_SUP_SLOTS];
	struct sl_adapt adapt[SL_SUP_SLOTS];
	uint64_t init; /* slots whose limiter and controller are made */
	/* The host's figures (gate.c, host.c): when last read (0: never),
	 * what was read (UINT64_MAX: unknown), the last /proc/stat reading
	 * (cpu_total 0: none). */
	uint64_t host_ns, load1, cpu;
	uint64_t cpu_busy, cpu_total;
	struct turn *tab; /* open addressing on ino, linear probing */
	size_t cap, n;    /* cap: a power of two, or 0 */
};

/* s->turns, made (zeroed, the host's figures unknown) on first use; NULL
 * without memory (turn.c). */
struct sl_sup_turns *sl_sup_turns_of(struct sl_sup *s);

/* Slot b's limiter (made), its turns in flight. */
static inline struct sl_limiter *sl_sup_slot_lim(struct sl_sup_turns *t, unsigned b)
{
	return &t->lim[b].head;
}

static inline uint64_t sl_sup_slot_held(const struct sl_sup_turns *t, unsigned b)
{
	/* Relaxed: one thread; a figure for the controller. */
	return atomic_load_explicit(&t->lim[b].head.u.tun.held, memory_order_relaxed);
}

#endif /* SLUICE_SUPERVISE_TURN_STATE_H */
