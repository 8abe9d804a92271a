/* SPDX-License-Identifier: MIT */
/*
 * gate.c - system protection (load1=, cpu=, rt= on accept and conns rules)
 * for supervised programs, as the preload does it (shim/turn.c): Sentinel's
 * SystemRule with its BBR check. Each such rule has a gate: a concurrency
 * limiter on the turns of the connections it accepts (turn.c: from the
 * accept or the next request's first bytes to the answer), and its
 * controller (engine/adaptive.c, SL_ADAPT_SYSTEM), which keeps it open
 * (SL_ADAPT_LIMIT_MAX) until a threshold is exceeded (the host's load or
 * CPU, or the turns' mean latency over a window), and then sets it to
 * max(1, R N) + 1, R the peak completion rate, N the no-load latency.
 *
 * An accept takes its gate slots after the rules' own decisions admitted
 * it (sock.c, after the real accept), never waiting, whatever the action
 * (Sentinel only sheds): a full gate is asked again after one liveness
 * sweep, then refuses, and the connection is reset; a dry-run rule's
 * connection goes on without that slot, counted as refused. The slots go
 * to the connection's first turn; a keep-alive request takes them with the
 * adaptive ones, waiting as a reject rule does (turn.c, sl_adapt_wait_ns).
 * At each gate turn's end the host's figures are read again (host.c) at
 * most every SL_ADAPT_HOST_EVERY_NS and handed to every gate, before its
 * controller's window is looked at.
 *
 * One gate per rule for the whole supervised tree, like the adaptive
 * limits (the preload shares its gates in a fork family).
 */
#include "gate.h"
#include "host.h"
#include "notif.h"
#include "stat.h"
#include "state.h"
#include "turn_state.h"

#include <stdio.h>
#include <string.h>

#include "params.h"

struct sl_limiter *sl_sup_gate_lim(struct sl_sup *s, unsigned i, uint64_t now_ns)
{
	struct sl_sup_turns *t = sl_sup_turns_of(s);
	if (t == NULL || i >= SL_MAX_RULES || !sl_rule_system(&s->policy.rules[i]))
		return NULL;
	const unsigned b = SL_SUP_GATE + i;
	const uint64_t bit = (uint64_t)1 << b;
	if (!(t->init & bit)) {
		const struct sl_rule *r = &s->policy.rules[i];
		struct sl_params p;
		sl_adapt_init_system_unsync(&t->adapt[b], r, now_ns);
		sl_adapt_host(&t->adapt[b], t->load1, t->cpu); /* as last read */
		/* A concurrency limit on the turns, open (SL_ADAPT_LIMIT_MAX)
		 * until a threshold is exceeded. */
		sl_params_of(r, &p);
		p.kind = SL_KIND_CONC;
		p.amount = sl_adapt_limit(&t->adapt[b]);
		if (sl_tunable_init(&t->lim[b], &p, now_ns) != SL_OK)
			return NULL;
		t->init |= bit;
		sl_sup_gate_host(s, now_ns); /* the first reading: CPU shares need two */
	}
	return sl_sup_slot_lim(t, b);
}

const struct sl_adapt *sl_sup_gate_adapt(const struct sl_sup *s, unsigned i)
{
	return s->turns != NULL && i < SL_MAX_RULES && ((s->turns->init >> (SL_SUP_GATE + i)) & 1)
		       ? &s->turns->adapt[SL_SUP_GATE + i]
		       : NULL;
}

/* One slot of rule i's gate now, or after one sweep (*swept: done). */
static bool take(struct sl_sup *s, unsigned i, uint64_t now, void (*sweep)(struct sl_sup *),
		 bool *swept)
{
	struct sl_limiter *l = sl_sup_slot_lim(s->turns, SL_SUP_GATE + i);
	if (sl_limiter_acquire(l, 1, now, 0).verdict == SL_ADMIT)
		return true;
	if (sweep != NULL && !*swept) {
		*swept = true;
		sweep(s);
		if (sl_limiter_acquire(l, 1, now, 0).verdict == SL_ADMIT)
			return true;
	}
	sl_adapt_refused(&s->turns->adapt[SL_SUP_GATE + i], now); /* the gate binds */
	return false;
}

uint32_t sl_sup_gates_take(struct sl_sup *s, struct sl_sup_proc *p, uint32_t rules, uint64_t now_ns,
			   void (*sweep)(struct sl_sup *s), int *refused)
{
	uint32_t got = 0;
	bool swept = false;
	*refused = -1;
	if (s->turns != NULL) /* a flood while open: the host over now */
		sl_sup_gate_host(s, now_ns);
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		const unsigned i = (unsigned)__builtin_ctz(rest);
		if (sl_sup_gate_lim(s, i, now_ns) == NULL)
			continue; /* no memory: not protected */
		if (take(s, i, now_ns, sweep, &swept)) {
			got |= (uint32_t)1 << i;
			continue;
		}
		if (!sl_adapt_refuses(&s->policy, (uint32_t)1 << i)) {
			/* Admitted without the slot, counted as a refusal
			 * would be; its turns are not this gate's. */
			sl_sup_stat_refused(p, i);
			continue;
		}
		sl_sup_gates_drop(s, got);
		*refused = (int)i;
		return 0;
	}
	return got;
}

void sl_sup_gates_drop(struct sl_sup *s, uint32_t gates)
{
	for (uint32_t rest = gates; s->turns != NULL && rest != 0; rest &= rest - 1)
		sl_limiter_release(sl_sup_slot_lim(s->turns, SL_SUP_GATE + __builtin_ctz(rest)), 1);
}

void sl_sup_gate_host(struct sl_sup *s, uint64_t now_ns)
{
	struct sl_sup_turns *t = s->turns;
	if (t->host_ns != 0 && now_ns - t->host_ns < SL_ADAPT_HOST_EVERY_NS)
		return;
	t->host_ns = now_ns != 0 ? now_ns : 1;
	bool load = false, cpu = false;
	for (uint32_t i = 0; i < s->policy.n_rules; i++) {
		load = load || s->policy.rules[i].sys_load1 != 0;
		cpu = cpu || s->policy.rules[i].sys_cpu != 0;
	}
	if (!load && !cpu)
		return;
	uint64_t v, busy, total;
	t->load1 = load && sl_sup_host_load1(&v) ? v : UINT64_MAX;
	t->cpu = UINT64_MAX;
	if (cpu && sl_sup_host_cpu(&busy, &total)) {
		if (t->cpu_total != 0) /* the share since the last reading */
			t->cpu = sl_adapt_cpu_permille(t->cpu_busy, t->cpu_total, busy, total);
		t->cpu_busy = busy;
		t->cpu_total = total;
	}
	for (uint64_t rest = t->init >> SL_SUP_GATE; rest != 0; rest &= rest - 1) {
		const unsigned b = SL_SUP_GATE + (unsigned)__builtin_ctzll(rest);
		uint64_t lim;
		sl_adapt_host(&t->adapt[b], t->load1, t->cpu);
		/* Over now: the limit at once, not at the next window's end
		 * (whose turns may be slow to come when a flood came in). */
		if (!sl_adapt_host_check(&t->adapt[b], now_ns, &lim))
			continue;
		struct sl_params p = sl_tunable_current(&t->lim[b])->params;
		p.amount = lim;
		const bool ok = sl_tunable_retune(&t->lim[b], &p, now_ns) == SL_OK;
		sl_adapt_unlock(&t->adapt[b]);
		if (!ok)
			sl_sup_warn("rule %u: the system protection limit %llu was refused",
				    b - SL_SUP_GATE + 1, (unsigned long long)lim);
		else if (s->verbose)
			sl_sup_gate_log(s, b, lim);
	}
}

void sl_sup_gate_log(struct sl_sup *s, unsigned b, uint64_t lim)
{
	static const char *const names[] = {"load1", "cpu", "rt"}; /* SL_ADAPT_OVER_* */
	struct sl_adapt_view v;
	sl_adapt_view(&s->turns->adapt[b], &v);
	char over[24] = "";
	for (unsigned k = 0; k < 3; k++)
		if (v.over & (1u << k)) {
			if (over[0] != '\0')
				strcat(over, "|");
			strcat(over, names[k]);
		}
	fprintf(stderr,
		"sluice: rule %u: system protection limit %llu (over: %s, peak %llu/s, "
		"no-load %.1f ms, %llu in flight%s)\n",
		b - SL_SUP_GATE + 1, (unsigned long long)lim, over[0] != '\0' ? over : "none",
		(unsigned long long)v.rate, (double)v.noload_ns / 1e6,
		(unsigned long long)sl_sup_slot_held(s->turns, b), v.probing ? ", probing" : "");
}
