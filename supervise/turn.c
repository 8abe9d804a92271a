/* SPDX-License-Identifier: MIT */
/*
 * turn.c - conns:adaptive for supervised programs: a request is a turn on
 * an accepted connection, and a turn holds one slot of the rule's
 * concurrency limit, which the engine's controller (engine/adaptive.c)
 * moves by the turns' latency. The semantics are the preload's
 * (shim/turn.c); only the means differ.
 *
 * A turn starts with the connection's accept (the slot taken there by
 * conns.c, as for any conns rule; sl_sup_turn_accepted) or, on a
 * connection that answered its last request, with its next receive; its
 * latency runs from the accept or the first bytes received in it to its
 * end, which is the connection's first send after them. A receive that would start a
 * turn on a blocking socket is held first, without a slot, until the data
 * is there (POLLIN, the socket's SO_RCVTIMEO honoured), then until a slot
 * is free (the bytes stay in the kernel meanwhile), retried with the
 * engine's backoff (1 ms doubling to 50 ms) up to the rule's max-delay
 * (action=delay) or, with action=reject, half the no-load latency (50 ms
 * before it is measured); past it the connection is reset (SO_LINGER 0,
 * shutdown: the client sees a reset, never a hang) and the receive fails
 * with ECONNRESET. A receive on a non-blocking socket (or MSG_DONTWAIT)
 * never waits: with no slot free its turn runs uncounted. Once the turn
 * runs, the receive goes on (its recv rules, or the kernel).
 *
 * The supervisor does not trap close: a connection whose last fd is gone
 * is found by conns.c's liveness checks (its hold carries the adaptive
 * rules in `turn`; they run every SL_SUP_SWEEP_NS and at each accept's
 * try for a slot, not at each retry of a waiting receive, of which there
 * may be many at once), and a turn it still ran gives its slots back
 * without a sample (sl_sup_turn_gone). A server closes a connection in a
 * turn only when it gives up on the request: it answers otherwise. A connection whose accepted fd could not be
 * placed where its sends and receives are trapped is not followed: its
 * slots go back at once, as if it had answered.
 *
 * One limiter and one controller per rule for the whole supervised tree
 * (as the preload shares them in a fork family): a prefork server's
 * workers and a fork-per-connection server's children count in one limit,
 * and the connections are keyed by their socket's inode, whichever process
 * sends or receives on them.
 *
 * System protection (load1=, cpu=, rt= on accept and conns rules, gate.c)
 * runs on the same turns: a turn holds slots by bit (turn_state.h), bit i
 * < 32 adaptive rule i's limit, bit SL_SUP_GATE + i rule i's gate, which
 * the accept took (sock.c) or a keep-alive request takes here, waiting as
 * a reject rule does (sl_adapt_wait_ns); a gate's turn ends as any, its
 * sample to the gate's controller.
 */
#include "turn.h"
#include "gate.h"
#include "notif.h"
#include "stat.h"
#include "state.h"
#include "turn_state.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "adaptive.h"
#include "decide.h"
#include "params.h"

_Static_assert(SL_SUP_GATE == SL_MAX_RULES && SL_SUP_SLOTS == 64, "turn.c: one bit per slot");

/* One connection with turns. */
struct turn {
	ino_t ino;         /* its socket's inode, 0: a free entry */
	uint64_t rules;    /* slots (turn_state.h) a running turn holds */
	bool running;      /* a turn runs: it holds one slot of each rule */
	uint64_t first_ns; /* the running turn's first bytes, 0: none yet */
};

static size_t slot_of(const struct sl_sup_turns *t, ino_t ino)
{
	return (size_t)(((uint64_t)ino * 0x9e3779b97f4a7c15ull) >> 32) & (t->cap - 1);
}

static struct turn *find(const struct sl_sup_turns *t, ino_t ino)
{
	if (t == NULL || t->cap == 0 || ino == 0)
		return NULL;
	for (size_t k = slot_of(t, ino);; k = (k + 1) & (t->cap - 1)) {
		if (t->tab[k].ino == ino)
			return &t->tab[k];
		if (t->tab[k].ino == 0)
			return NULL;
	}
}

/* ino's entry, made (zeroed) if new; NULL without memory. */
static struct turn *claim(struct sl_sup_turns *t, ino_t ino)
{
	struct turn *e = find(t, ino);
	if (e != NULL)
		return e;
	if (2 * (t->n + 1) > t->cap) { /* at most half full */
		size_t cap = t->cap != 0 ? 2 * t->cap : 64;
		struct turn *tab = calloc(cap, sizeof(*tab)), *old = t->tab;
		if (tab == NULL)
			return NULL;
		const size_t old_cap = t->cap;
		t->tab = tab;
		t->cap = cap;
		for (size_t k = 0; k < old_cap; k++) {
			if (old[k].ino == 0)
				continue;
			size_t j = slot_of(t, old[k].ino);
			while (tab[j].ino != 0)
				j = (j + 1) & (cap - 1);
			tab[j] = old[k];
		}
		free(old);
	}
	size_t k = slot_of(t, ino);
	while (t->tab[k].ino != 0)
		k = (k + 1) & (t->cap - 1);
	t->tab[k] = (struct turn){.ino = ino};
	t->n++;
	return &t->tab[k];
}

/* Remove entry e, shifting back the entries of its probe run. */
static void erase(struct sl_sup_turns *t, struct turn *e)
{
	const size_t mask = t->cap - 1;
	size_t hole = (size_t)(e - t->tab);
	for (size_t k = (hole + 1) & mask; t->tab[k].ino != 0; k = (k + 1) & mask) {
		const size_t home = slot_of(t, t->tab[k].ino);
		/* Movable into the hole unless its home lies in (hole, k]. */
		if (((k - home) & mask) >= ((k - hole) & mask)) {
			t->tab[hole] = t->tab[k];
			hole = k;
		}
	}
	t->tab[hole].ino = 0;
	t->n--;
}

struct sl_sup_turns *sl_sup_turns_of(struct sl_sup *s)
{
	if (s->turns == NULL) {
		/* The limiters are 64-byte aligned (core/sluice_core.h). */
		size_t size = (sizeof(*s->turns) + 63) & ~(size_t)63;
		s->turns = aligned_alloc(64, size);
		if (s->turns != NULL) {
			memset(s->turns, 0, size);
			s->turns->load1 = s->turns->cpu = UINT64_MAX;
		}
	}
	return s->turns;
}

/* The limiter of slot b (made). */
static struct sl_limiter *lim_of(const struct sl_sup *s, unsigned b)
{
	return sl_sup_slot_lim(s->turns, b);
}

/* The rule of slot b. */
static const struct sl_rule *rule_of(const struct sl_sup *s, unsigned b)
{
	return &s->policy.rules[b % SL_SUP_GATE];
}

/* The rules of slots `slots`. */
static uint32_t rules_of(uint64_t slots)
{
	return (uint32_t)slots | (uint32_t)(slots >> SL_SUP_GATE);
}

struct sl_limiter *sl_sup_turn_lim(struct sl_sup *s, unsigned i, uint64_t now_ns)
{
	struct sl_sup_turns *t = sl_sup_turns_of(s);
	if (t == NULL || i >= SL_MAX_RULES)
		return NULL;
	const uint64_t bit = (uint64_t)1 << i;
	if (!(t->init & bit)) {
		const struct sl_rule *r = &s->policy.rules[i];
		struct sl_params p;
		sl_adapt_init_unsync(&t->adapt[i], r, now_ns);
		sl_params_of(r, &p); /* a concurrency limit at the initial limit */
		p.amount = sl_adapt_limit(&t->adapt[i]);
		if (sl_tunable_init(&t->lim[i], &p, now_ns) != SL_OK)
			return NULL;
		t->init |= bit;
	}
	return &t->lim[i].head;
}

const struct sl_adapt *sl_sup_turn_adapt(const struct sl_sup *s, unsigned i)
{
	return s->turns != NULL && i < SL_MAX_RULES && ((s->turns->init >> i) & 1)
		       ? &s->turns->adapt[i]
		       : NULL;
}

static uint64_t held_of(const struct sl_sup_turns *t, unsigned b)
{
	return sl_sup_slot_held(t, b);
}

/* Slot b refused a connection or a turn at now: its limit binds. */
static void bound(struct sl_sup *s, unsigned b, uint64_t now_ns)
{
	if (s->turns != NULL && b < SL_SUP_SLOTS && ((s->turns->init >> b) & 1))
		sl_adapt_refused(&s->turns->adapt[b], now_ns);
}

void sl_sup_turn_bound(struct sl_sup *s, unsigned i, uint64_t now_ns)
{
	if (i < SL_MAX_RULES)
		bound(s, i, now_ns);
}

/* Give back one slot of each of `slots`. */
static void release_slots(struct sl_sup *s, uint64_t slots)
{
	for (uint64_t rest = slots; rest != 0; rest &= rest - 1)
		sl_limiter_release(lim_of(s, (unsigned)__builtin_ctzll(rest)), 1);
}

/* A turn of slot b ended at now (sample: its first bytes came at
 * first_ns, 0: none): feed the controller, and retune the limiter if it
 * asks for a new limit. */
static void rule_turn_done(struct sl_sup *s, unsigned b, uint64_t first_ns, uint64_t now)
{
	struct sl_sup_turns *t = s->turns;
	struct sl_adapt *a = &t->adapt[b];
	const bool gate = b >= SL_SUP_GATE;
	const unsigned i = b % SL_SUP_GATE;
	if (first_ns != 0 && now > first_ns)
		sl_adapt_sample(a, first_ns, now - first_ns);
	if (gate)
		sl_sup_gate_host(s, now);
	uint64_t lim;
	if (!sl_adapt_update(a, held_of(t, b), now, &lim))
		return;
	struct sl_params p = sl_tunable_current(&t->lim[b])->params;
	p.amount = lim;
	const bool ok = sl_tunable_retune(&t->lim[b], &p, now) == SL_OK;
	sl_adapt_unlock(a);
	if (!ok)
		sl_sup_warn("rule %u: the %s limit %llu was refused", i + 1,
			    gate ? "system protection" : "adaptive", (unsigned long long)lim);
	if (s->verbose && gate) {
		sl_sup_gate_log(s, b, lim);
	} else if (s->verbose) {
		struct sl_adapt_view v;
		sl_adapt_view(a, &v);
		fprintf(stderr,
			"sluice: rule %u: adaptive limit %llu (latency %.1f ms, no-load %.1f ms, "
			"%llu in flight%s)\n",
			i + 1, (unsigned long long)lim, (double)v.latency_ns / 1e6,
			(double)v.noload_ns / 1e6, (unsigned long long)held_of(t, b),
			v.probing ? ", probing" : "");
	}
}

/* End e's running turn, if one runs: its slots go back; sample: its
 * latency counts. */
static void turn_end(struct sl_sup *s, struct turn *e, uint64_t now, bool sample)
{
	if (!e->running)
		return;
	e->running = false;
	const uint64_t first = sample ? e->first_ns : 0;
	e->first_ns = 0;
	release_slots(s, e->rules);
	for (uint64_t rest = e->rules; rest != 0; rest &= rest - 1)
		rule_turn_done(s, (unsigned)__builtin_ctzll(rest), first, now);
}

static void started(struct sl_sup *s, uint64_t slots)
{
	for (uint64_t rest = slots; rest != 0; rest &= rest - 1) {
		const unsigned b = (unsigned)__builtin_ctzll(rest);
		sl_adapt_started(&s->turns->adapt[b], held_of(s->turns, b));
	}
}

bool sl_sup_turn_accepted(struct sl_sup *s, ino_t ino, uint64_t rules, uint64_t now_ns)
{
	struct sl_sup_turns *t = s->turns;
	struct turn *e = t != NULL && ino != 0 ? claim(t, ino) : NULL;
	if (e == NULL)
		return false;
	turn_end(s, e, now_ns, false); /* an inode used again: its turn never ended */
	e->rules = rules;
	e->running = true;
	/* The first request's latency from the accept, as in the preload
	 * (shim/turn.c): what the server does before it reads is its
	 * latency too. */
	e->first_ns = now_ns;
	started(s, rules);
	return true;
}

void sl_sup_turn_gone(struct sl_sup *s, ino_t ino)
{
	struct turn *e = find(s->turns, ino);
	if (e == NULL)
		return;
	turn_end(s, e, sl_sup_now_ns(), false);
	erase(s->turns, e);
}

void sl_sup_turn_send(struct sl_sup *s, ino_t ino, uint64_t now_ns)
{
	struct turn *e = find(s->turns, ino);
	if (e != NULL)
		turn_end(s, e, now_ns, true);
}

bool sl_sup_turn_wants(const struct sl_sup *s, ino_t ino)
{
	const struct turn *e = find(s->turns, ino);
	return e != NULL && !(e->running && e->first_ns != 0);
}

/* Take one slot of each of `slots` now, or none. */
static bool take_slots(struct sl_sup *s, uint64_t slots, uint64_t now)
{
	for (uint64_t rest = slots; rest != 0; rest &= rest - 1) {
		const unsigned b = (unsigned)__builtin_ctzll(rest);
		if (sl_limiter_acquire(lim_of(s, b), 1, now, 0).verdict == SL_ADMIT)
			continue;
		bound(s, b, now);
		release_slots(s, slots & (((uint64_t)1 << b) - 1));
		return false;
	}
	return true;
}

/* How long a turn of `slots` may wait for them (the engine's,
 * sl_adapt_wait_ns: the preload waits as long; a gate as reject does). */
static uint64_t wait_limit(const struct sl_sup *s, uint64_t slots)
{
	uint64_t lim = UINT64_MAX;
	for (uint64_t rest = slots; rest != 0; rest &= rest - 1) {
		const unsigned b = (unsigned)__builtin_ctzll(rest);
		const uint64_t w = sl_adapt_wait_ns(rule_of(s, b), &s->turns->adapt[b]);
		lim = w < lim ? w : lim;
	}
	return lim;
}

static enum sl_sup_turn_step go(struct sl_sup_call *c)
{
	c->turn_ino = 0;
	c->turn_waiting = false;
	c->backoff_ns = SL_DECIDE_BACKOFF_NS; /* the receive's own retries start afresh */
	return SL_SUP_TURN_GO;
}

/* Refuse the request waiting on c's connection: reset it (the program's
 * next calls on it fail too), answer ECONNRESET. */
static enum sl_sup_turn_step refuse(struct sl_sup *s, struct sl_sup_call *c, uint32_t rules)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	setsockopt(c->dup, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	shutdown(c->dup, SHUT_RDWR);
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) /* each rule once */
		sl_sup_stat_refused(c->th->proc, (unsigned)__builtin_ctz(rest));
	sl_sup_answer(s, c->req.id, 0, ECONNRESET);
	return SL_SUP_TURN_DONE;
}

enum sl_sup_turn_step sl_sup_turn_step_recv(struct sl_sup *s, struct sl_sup_call *c,
					    uint64_t now_ns)
{
	struct turn *e = find(s->turns, c->turn_ino);
	if (e == NULL || (e->running && e->first_ns != 0))
		return go(c); /* forgotten meanwhile, or another receive started it */
	if (!c->turn_waiting) {
		/* The request first: no slot is held while the connection is
		 * idle. */
		char b;
		const ssize_t r = recv(c->dup, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !c->nonblock) {
			const uint64_t until = c->timeout_ns != 0
						       ? sl_decide_add(c->start_ns, c->timeout_ns)
						       : UINT64_MAX;
			if (now_ns >= until) { /* SO_RCVTIMEO: the kernel's answer */
				sl_sup_answer(s, c->req.id, 0, EAGAIN);
				return SL_SUP_TURN_DONE;
			}
			c->wait = SL_SUP_WAIT_IO;
			c->wait_fd = -1;
			c->events = POLLIN;
			c->due_ns = until;
			return SL_SUP_TURN_HOLD;
		}
		/* Nothing to wait for (a non-blocking socket without data),
		 * the end of the stream, an error: the kernel answers, no
		 * turn. */
		if (r <= 0)
			return go(c);
		if (e->running) { /* the accept's turn: its first bytes */
			e->first_ns = now_ns;
			return go(c);
		}
		c->turn_waiting = true;
		c->turn_until = sl_decide_add(now_ns, wait_limit(s, e->rules));
		c->backoff_ns = SL_DECIDE_BACKOFF_NS;
	}
	if (take_slots(s, e->rules, now_ns)) {
		e->running = true;
		e->first_ns = now_ns;
		started(s, e->rules);
		return go(c);
	}
	if (c->nonblock)
		return go(c); /* uncounted: an event loop must not stall */
	if (now_ns >= c->turn_until)
		return sl_adapt_refuses(&s->policy, rules_of(e->rules))
			       ? refuse(s, c, rules_of(e->rules))
			       : go(c);
	/* The client may have given up meanwhile: its turn is no one's. */
	struct pollfd p = {.fd = c->dup, .events = POLLRDHUP};
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
		return go(c);
	c->wait = SL_SUP_WAIT_TIME;
	c->due_ns = sl_adapt_retry_at(now_ns, c->turn_until, &c->backoff_ns);
	return SL_SUP_TURN_HOLD;
}

void sl_sup_turn_free(struct sl_sup *s)
{
	if (s->turns == NULL)
		return;
	free(s->turns->tab);
	free(s->turns);
	s->turns = NULL;
}
