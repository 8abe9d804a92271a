/* SPDX-License-Identifier: MIT */
/*
 * gate.h - system protection in supervised mode (gate.c): load1=, cpu=,
 * rt= on accept and conns rules. Each such rule has a gate, a concurrency
 * limit on the turns of the connections it accepts (turn.c), open until a
 * threshold is exceeded, then at the peak completion rate x the no-load
 * latency (engine/adaptive.h, SL_ADAPT_SYSTEM).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_GATE_H
#define SLUICE_SUPERVISE_GATE_H

#include <stdint.h>

struct sl_sup;
struct sl_sup_proc;
struct sl_limiter;
struct sl_adapt;

/* The bit of rule i's gate in a turn's slots: SL_SUP_GATE + i (the bits
 * below are the adaptive rules' limits, turn.c). */
#define SL_SUP_GATE 32u

/* The gate of rule i (sl_rule_system): a tunable concurrency limiter for
 * the whole supervised tree, retuned by its controller; made on first use
 * at now_ns. NULL for a rule without system protection, or without
 * memory. */
struct sl_limiter *sl_sup_gate_lim(struct sl_sup *s, unsigned i, uint64_t now_ns);
/* The controller of rule i's gate, or NULL before its first use. */
const struct sl_adapt *sl_sup_gate_adapt(const struct sl_sup *s, unsigned i);

/* An accept of process p that the rules' own decisions admitted takes one
 * slot of the gate of each rule in `rules` (rules with system protection),
 * never waiting. A full gate is asked again once after sweep(s) (conns.c's
 * liveness sweep: connections closed meanwhile give their slots back);
 * still full, it binds (its controller hears of it). Returns the rules
 * whose slot it took, *refused -1; or 0 (none held) with *refused the rule
 * that refuses the connection. A dry-run rule's refusal is counted and the
 * connection goes on without that slot. */
uint32_t sl_sup_gates_take(struct sl_sup *s, struct sl_sup_proc *p, uint32_t rules, uint64_t now_ns,
			   void (*sweep)(struct sl_sup *s), int *refused);
/* Give back one slot of the gate of each rule in `gates`. */
void sl_sup_gates_drop(struct sl_sup *s, uint32_t gates);

/* For turn.c, at the end of a gate's turn: the host's figures, read again
 * (host.c) if SL_ADAPT_HOST_EVERY_NS passed since the last reading and
 * some rule has load1= or cpu=, handed to every gate. */
void sl_sup_gate_host(struct sl_sup *s, uint64_t now_ns);
/* --verbose: gate slot b's new limit `lim`. */
void sl_sup_gate_log(struct sl_sup *s, unsigned b, uint64_t lim);

#endif /* SLUICE_SUPERVISE_GATE_H */
