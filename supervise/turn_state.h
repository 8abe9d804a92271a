/* SPDX-License-Identifier: MIT */
/*
 * turn_state.h - what turn.c (the turns of connections), client.c (a
 * client's turns), gate.c (system protection's gates) and turn_tab.c (the
 * table of connections) share: the limiters and controllers of a turn's
 * slots, the host's figures, the connections.
 *
 * A turn's slots are numbered b: b < SL_MAX_RULES, one of adaptive rule
 * b's server limit (turn.c); SL_SUP_GATE + i, one of rule i's gate
 * (gate.c); SL_SUP_CLIENT + i, one of adaptive rule i's client limit
 * (client.c). Each slot is one tunable concurrency limiter and its
 * controller (engine/adaptive.h) for the whole supervised tree, made on
 * first use. A server connection's turn holds the slots of its mask's bits
 * (b < SL_SUP_CLIENT); a client connection's mask has bit i for slot
 * SL_SUP_CLIENT + i.
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_TURN_STATE_H
#define SLUICE_SUPERVISE_TURN_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "adaptive.h"
#include "policy.h"
#include "sluice_core.h"

struct sl_sup;
struct sl_sup_call;

#define SL_SUP_CLIENT (2 * SL_MAX_RULES) /* the first client slot */
#define SL_SUP_SLOTS (3 * SL_MAX_RULES)

/* One connection with turns. */
struct turn {
	ino_t ino;         /* its socket's inode, 0: a free entry */
	uint64_t rules;    /* slots a running turn holds (the mask, above) */
	bool client;       /* opened by connect: its turns are requests */
	bool quiet;        /* a client's that only sends: no more turns */
	bool running;      /* a turn runs: it holds one slot of each rule */
	uint64_t first_ns; /* the running turn's start (server: its first
			    * bytes), 0: none yet */
};

struct sl_sup_turns {
	struct sl_tunable lim[SL_SUP_SLOTS];
	struct sl_adapt adapt[SL_SUP_SLOTS];
	uint64_t init;        /* slots below SL_SUP_CLIENT made, by bit */
	uint32_t client_init; /* client slots made, bit i: SL_SUP_CLIENT + i */
	/* The host's figures (gate.c, host.c): when last read (0: never),
	 * what was read (UINT64_MAX: unknown), the last /proc/stat reading
	 * (cpu_total 0: none). */
	uint64_t host_ns, load1, cpu;
	uint64_t cpu_busy, cpu_total;
	struct turn *tab; /* open addressing on ino, linear probing */
	size_t cap, n;    /* cap: a power of two, or 0 */
};

/* s->turns, made (zeroed, the host's figures unknown) on first use; NULL
 * without memory (turn_tab.c). */
struct sl_sup_turns *sl_sup_turns_of(struct sl_sup *s);
/* The table (turn_tab.c): ino's entry or NULL; ino's entry, made (zeroed)
 * if new, NULL without memory; remove an entry. */
struct turn *sl_sup_turn_find(const struct sl_sup_turns *t, ino_t ino);
struct turn *sl_sup_turn_claim(struct sl_sup_turns *t, ino_t ino);
void sl_sup_turn_erase(struct sl_sup_turns *t, struct turn *e);

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

/* Whether slot b's limiter and controller are made. */
static inline bool sl_sup_slot_made(const struct sl_sup_turns *t, unsigned b)
{
	if (t == NULL || b >= SL_SUP_SLOTS)
		return false;
	return b < SL_SUP_CLIENT ? (t->init >> b) & 1 : (t->client_init >> (b - SL_SUP_CLIENT)) & 1;
}

/* Turns of a connection (turn.c), its mask read as above: */
/* slot b of an adaptive rule (b < SL_MAX_RULES, or a client slot), made at
 * now with the rule's initial limit if new; NULL without memory; */
struct sl_limiter *sl_sup_adapt_slot(struct sl_sup *s, unsigned b, uint64_t now_ns);
/* take one slot of each now, or none (a refusal tells its controller the
 * limit binds); */
bool sl_sup_turn_take(struct sl_sup *s, const struct turn *e, uint64_t now_ns);
/* a turn of e now runs, from now (the controllers see how many run); */
void sl_sup_turn_run(struct sl_sup *s, struct turn *e, uint64_t now_ns);
/* how long a turn of e may wait for its slots (sl_adapt_wait_ns); */
uint64_t sl_sup_turn_wait(const struct sl_sup *s, const struct turn *e);
/* end e's running turn, if one runs: its slots go back; sample: its
 * latency counts; */
void sl_sup_turn_end(struct sl_sup *s, struct turn *e, uint64_t now_ns, bool sample);
/* the rules of e's mask; */
uint32_t sl_sup_turn_rules(const struct turn *e);
/* refuse the turn call c waits for: reset its connection (SO_LINGER 0,
 * shutdown), count a refusal for `rules`, answer ECONNRESET. */
void sl_sup_turn_reset(struct sl_sup *s, struct sl_sup_call *c, uint32_t rules);
/* The call c goes on (its turn's wait over); */
enum sl_sup_turn_step sl_sup_turn_go(struct sl_sup_call *c);
/* a turn of e that found no slot at now_ns: past c->turn_until refused
 * (its connection reset) unless a dry run, which goes on uncounted; the
 * peer gone, it goes on; else held until the next retry, by `until`. */
enum sl_sup_turn_step sl_sup_turn_no_slot(struct sl_sup *s, struct sl_sup_call *c,
					  const struct turn *e, uint64_t now_ns, uint64_t until);

#endif /* SLUICE_SUPERVISE_TURN_STATE_H */
