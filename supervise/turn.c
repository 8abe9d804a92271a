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
 * end, which is the connection's first send after them. A receive that
 * would start a turn on a blocking socket is held first, without a slot, until the data
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
 * turn only when it gives up on the request: it answers otherwise. A
 * connection whose accepted fd could not be placed where its sends and
 * receives are trapped is not followed: its slots go back at once, as if
 * it had answered.
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
 *
 * A client's connections (connect, client.c) have turns too, of the same
 * rules' client limits (slots SL_SUP_CLIENT + i, turn_state.h): client.c
 * starts one at a request's send; it ends here, at the first byte of the
 * answer a receive finds (a blocking receive held until it is there).
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
#include <sys/socket.h>

#include "adaptive.h"
#include "decide.h"
#include "params.h"

_Static_assert(SL_SUP_GATE == SL_MAX_RULES && SL_SUP_CLIENT == 2 * SL_SUP_GATE &&
		       SL_MAX_RULES == 32,
	       "turn.c: a server turn's slots in 64 bits, a client's rules in 32");

/* The limiter of slot b (made). */
static struct sl_limiter *lim_of(const struct sl_sup *s, unsigned b)
{
	return sl_sup_slot_lim(s->turns, b);
}

/* The rule of slot b. */
static const struct sl_rule *rule_of(const struct sl_sup *s, unsigned b)
{
	return &s->policy.rules[b % SL_MAX_RULES];
}

/* The rules of a server turn's slots `slots`. */
static uint32_t rules_of(uint64_t slots)
{
	return (uint32_t)slots | (uint32_t)(slots >> SL_SUP_GATE);
}

uint32_t sl_sup_turn_rules(const struct turn *e)
{
	return e->client ? (uint32_t)e->rules : rules_of(e->rules);
}

/* The slot of bit k of e's mask. */
static unsigned slot_at(const struct turn *e, unsigned k)
{
	return e->client ? SL_SUP_CLIENT + k : k;
}

struct sl_limiter *sl_sup_adapt_slot(struct sl_sup *s, unsigned b, uint64_t now_ns)
{
	struct sl_sup_turns *t = sl_sup_turns_of(s);
	if (t == NULL || b >= SL_SUP_SLOTS || (b >= SL_MAX_RULES && b < SL_SUP_CLIENT))
		return NULL;
	if (!sl_sup_slot_made(t, b)) {
		const struct sl_rule *r = rule_of(s, b);
		struct sl_params p;
		sl_adapt_init_unsync(&t->adapt[b], r, now_ns);
		sl_params_of(r, &p); /* a concurrency limit at the initial limit */
		p.amount = sl_adapt_limit(&t->adapt[b]);
		if (sl_tunable_init(&t->lim[b], &p, now_ns) != SL_OK)
			return NULL;
		if (b < SL_SUP_CLIENT)
			t->init |= (uint64_t)1 << b;
		else
			t->client_init |= (uint32_t)1 << (b - SL_SUP_CLIENT);
	}
	return &t->lim[b].head;
}

struct sl_limiter *sl_sup_turn_lim(struct sl_sup *s, unsigned i, uint64_t now_ns)
{
	return i < SL_MAX_RULES ? sl_sup_adapt_slot(s, i, now_ns) : NULL;
}

const struct sl_adapt *sl_sup_turn_adapt(const struct sl_sup *s, unsigned i)
{
	return i < SL_MAX_RULES && sl_sup_slot_made(s->turns, i) ? &s->turns->adapt[i] : NULL;
}

static uint64_t held_of(const struct sl_sup_turns *t, unsigned b)
{
	return sl_sup_slot_held(t, b);
}

/* Slot b refused a connection or a turn at now: its limit binds. */
static void bound(struct sl_sup *s, unsigned b, uint64_t now_ns)
{
	if (sl_sup_slot_made(s->turns, b))
		sl_adapt_refused(&s->turns->adapt[b], now_ns);
}

void sl_sup_turn_bound(struct sl_sup *s, unsigned i, uint64_t now_ns)
{
	if (i < SL_MAX_RULES)
		bound(s, i, now_ns);
}

/* Give back one slot of each bit of e's mask. */
static void release_slots(struct sl_sup *s, const struct turn *e)
{
	for (uint64_t rest = e->rules; rest != 0; rest &= rest - 1)
		sl_limiter_release(lim_of(s, slot_at(e, (unsigned)__builtin_ctzll(rest))), 1);
}

/* A turn of slot b ended at now (sample: it started at first_ns, 0:
 * none): feed the controller, and retune the limiter if it asks for a new
 * limit. */
static void rule_turn_done(struct sl_sup *s, unsigned b, uint64_t first_ns, uint64_t now)
{
	struct sl_sup_turns *t = s->turns;
	struct sl_adapt *a = &t->adapt[b];
	const bool gate = b >= SL_SUP_GATE && b < SL_SUP_CLIENT;
	const unsigned i = b % SL_MAX_RULES;
	if (first_ns != 0 && now > first_ns)
		sl_adapt_sample(a, first_ns, now - first_ns);
	if (gate)
		sl_sup_gate_host(s, now);
	uint64_t lim;
	const uint64_t updates = atomic_load_explicit(&a->updates, memory_order_relaxed);
	const bool changed = sl_adapt_update(a, held_of(t, b), now, &lim);
	/* The views at each window (every record of the tree: not at each
	 * turn, as the preload's own). */
	if (atomic_load_explicit(&a->updates, memory_order_relaxed) != updates || changed)
		sl_sup_stat_adapt(s, b, a, held_of(t, b));
	if (!changed)
		return;
	struct sl_params p = sl_tunable_current(&t->lim[b])->params;
	p.amount = lim;
	const bool ok = sl_tunable_retune(&t->lim[b], &p, now) == SL_OK;
	sl_adapt_unlock(a);
	const char *what = gate                 ? "system protection"
			   : b >= SL_SUP_CLIENT ? "adaptive client"
						: "adaptive";
	if (!ok)
		sl_sup_warn("rule %u: the %s limit %llu was refused", i + 1, what,
			    (unsigned long long)lim);
	if (s->verbose && gate) {
		sl_sup_gate_log(s, b, lim);
	} else if (s->verbose) {
		struct sl_adapt_view v;
		sl_adapt_view(a, &v);
		fprintf(stderr,
			"sluice: rule %u: %s limit %llu (latency %.1f ms, no-load %.1f ms, "
			"%llu in flight%s)\n",
			i + 1, what, (unsigned long long)lim, (double)v.latency_ns / 1e6,
			(double)v.noload_ns / 1e6, (unsigned long long)held_of(t, b),
			v.probing ? ", probing" : "");
	}
}

void sl_sup_turn_end(struct sl_sup *s, struct turn *e, uint64_t now, bool sample)
{
	if (!e->running)
		return;
	e->running = false;
	const uint64_t first = sample ? e->first_ns : 0;
	e->first_ns = 0;
	release_slots(s, e);
	for (uint64_t rest = e->rules; rest != 0; rest &= rest - 1)
		rule_turn_done(s, slot_at(e, (unsigned)__builtin_ctzll(rest)), first, now);
}

void sl_sup_turn_run(struct sl_sup *s, struct turn *e, uint64_t now_ns)
{
	e->running = true;
	e->first_ns = now_ns;
	for (uint64_t rest = e->rules; rest != 0; rest &= rest - 1) {
		const unsigned b = slot_at(e, (unsigned)__builtin_ctzll(rest));
		sl_adapt_started(&s->turns->adapt[b], held_of(s->turns, b));
	}
}

bool sl_sup_turn_accepted(struct sl_sup *s, ino_t ino, uint64_t rules, uint64_t now_ns)
{
	struct sl_sup_turns *t = s->turns;
	struct turn *e = t != NULL && ino != 0 ? sl_sup_turn_claim(t, ino) : NULL;
	if (e == NULL)
		return false;
	sl_sup_turn_end(s, e, now_ns, false); /* an inode used again: its turn never ended */
	e->client = false;
	e->rules = rules;
	/* The first request's latency from the accept, as in the preload
	 * (shim/turn.c): what the server does before it reads is its
	 * latency too. */
	sl_sup_turn_run(s, e, now_ns);
	return true;
}

void sl_sup_turn_gone(struct sl_sup *s, ino_t ino)
{
	struct turn *e = sl_sup_turn_find(s->turns, ino);
	if (e == NULL)
		return;
	sl_sup_turn_end(s, e, sl_sup_now_ns(), false);
	sl_sup_turn_erase(s->turns, e);
}

bool sl_sup_turn_send(struct sl_sup *s, ino_t ino, uint64_t now_ns)
{
	struct turn *e = sl_sup_turn_find(s->turns, ino);
	if (e == NULL)
		return false;
	if (e->client) /* a request: it starts a turn if none runs (client.c) */
		return !e->running && !e->quiet;
	sl_sup_turn_end(s, e, now_ns, true); /* an answer */
	return false;
}

bool sl_sup_turn_wants(const struct sl_sup *s, ino_t ino)
{
	const struct turn *e = sl_sup_turn_find(s->turns, ino);
	if (e == NULL)
		return false;
	return e->client ? e->running : !(e->running && e->first_ns != 0);
}

bool sl_sup_turn_take(struct sl_sup *s, const struct turn *e, uint64_t now)
{
	for (uint64_t rest = e->rules; rest != 0; rest &= rest - 1) {
		const unsigned k = (unsigned)__builtin_ctzll(rest);
		const unsigned b = slot_at(e, k);
		if (sl_limiter_acquire(lim_of(s, b), 1, now, 0).verdict == SL_ADMIT)
			continue;
		bound(s, b, now);
		for (uint64_t back = e->rules & (((uint64_t)1 << k) - 1); back != 0;
		     back &= back - 1)
			sl_limiter_release(lim_of(s, slot_at(e, (unsigned)__builtin_ctzll(back))),
					   1);
		return false;
	}
	return true;
}

uint64_t sl_sup_turn_wait(const struct sl_sup *s, const struct turn *e)
{
	uint64_t lim = UINT64_MAX;
	for (uint64_t rest = e->rules; rest != 0; rest &= rest - 1) {
		const unsigned b = slot_at(e, (unsigned)__builtin_ctzll(rest));
		const uint64_t w = sl_adapt_wait_ns(rule_of(s, b), &s->turns->adapt[b]);
		lim = w < lim ? w : lim;
	}
	return lim;
}

enum sl_sup_turn_step sl_sup_turn_go(struct sl_sup_call *c)
{
	c->turn_ino = 0;
	c->turn_waiting = false;
	c->backoff_ns = SL_DECIDE_BACKOFF_NS; /* the call's own retries start afresh */
	return SL_SUP_TURN_GO;
}

enum sl_sup_turn_step sl_sup_turn_no_slot(struct sl_sup *s, struct sl_sup_call *c,
					  const struct turn *e, uint64_t now_ns, uint64_t until)
{
	const uint32_t rules = sl_sup_turn_rules(e);
	if (now_ns >= c->turn_until) {
		if (!sl_adapt_refuses(&s->policy, rules))
			return sl_sup_turn_go(c); /* a dry run: uncounted */
		sl_sup_turn_reset(s, c, rules);
		return SL_SUP_TURN_DONE;
	}
	/* The peer gave up or closed meanwhile: the turn is no one's (the
	 * kernel answers the call). */
	struct pollfd p = {.fd = c->dup, .events = POLLRDHUP};
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
		return sl_sup_turn_go(c);
	c->wait = SL_SUP_WAIT_TIME;
	c->due_ns = sl_adapt_retry_at(now_ns, until, &c->backoff_ns);
	return SL_SUP_TURN_HOLD;
}

void sl_sup_turn_reset(struct sl_sup *s, struct sl_sup_call *c, uint32_t rules)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	setsockopt(c->dup, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	shutdown(c->dup, SHUT_RDWR);
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) /* each rule once */
		sl_sup_stat_refused(c->th->proc, (unsigned)__builtin_ctz(rest));
	sl_sup_answer(s, c->req.id, 0, ECONNRESET);
}

/* A blocking receive c finds no data yet: held until POLLIN, up to its
 * socket's SO_RCVTIMEO (then the kernel's EAGAIN). */
static enum sl_sup_turn_step wait_data(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns)
{
	const uint64_t until = c->timeout_ns != 0 ? sl_decide_add(c->start_ns, c->timeout_ns)
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

/* A receive on a client connection whose turn runs (client.c started it
 * at the request's send): the answer's first byte ends the turn, its
 * latency from that send a sample. A blocking receive waits for it (held
 * until POLLIN), a non-blocking one just goes on. The end of the stream or
 * an error: no answer comes, the slots go back without a sample. */
static enum sl_sup_turn_step client_recv(struct sl_sup *s, struct sl_sup_call *c, struct turn *e,
					 uint64_t now_ns)
{
	if (!e->running)
		return sl_sup_turn_go(c);
	char b;
	const ssize_t r = recv(c->dup, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return c->nonblock ? sl_sup_turn_go(c) : wait_data(s, c, now_ns);
	sl_sup_turn_end(s, e, now_ns, r > 0);
	return sl_sup_turn_go(c);
}

enum sl_sup_turn_step sl_sup_turn_step_recv(struct sl_sup *s, struct sl_sup_call *c,
					    uint64_t now_ns)
{
	struct turn *e = sl_sup_turn_find(s->turns, c->turn_ino);
	if (e != NULL && e->client)
		return client_recv(s, c, e, now_ns);
	if (e == NULL || (e->running && e->first_ns != 0))
		return sl_sup_turn_go(c); /* forgotten meanwhile, or another receive started it */
	if (!c->turn_waiting) {
		/* The request first: no slot is held while the connection is
		 * idle. */
		char b;
		const ssize_t r = recv(c->dup, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !c->nonblock)
			return wait_data(s, c, now_ns);
		/* Nothing to wait for (a non-blocking socket without data),
		 * the end of the stream, an error: the kernel answers, no
		 * turn. */
		if (r <= 0)
			return sl_sup_turn_go(c);
		if (e->running) { /* the accept's turn: its first bytes */
			e->first_ns = now_ns;
			return sl_sup_turn_go(c);
		}
		c->turn_waiting = true;
		c->turn_until = sl_decide_add(now_ns, sl_sup_turn_wait(s, e));
		c->backoff_ns = SL_DECIDE_BACKOFF_NS;
	}
	if (sl_sup_turn_take(s, e, now_ns)) {
		sl_sup_turn_run(s, e, now_ns);
		return sl_sup_turn_go(c);
	}
	if (c->nonblock)
		return sl_sup_turn_go(c); /* uncounted: an event loop must not stall */
	return sl_sup_turn_no_slot(s, c, e, now_ns, c->turn_until);
}
