/* SPDX-License-Identifier: MIT */
/*
 * client.c - conns:adaptive on the connections a supervised program opens
 * (connect): its requests are turns, as the preload counts them
 * (shim/turn.c), only the means differ.
 *
 * A connect a conns:adaptive rule matches (its address, port and family
 * filters, as for any conns rule) takes no slot and never waits for one
 * (sock.c leaves adaptive rules out of its admission): once it goes on in
 * the kernel, its connection is registered here as a client's, keyed by
 * its socket's inode in the table of turn_tab.c, and followed by conns.c's
 * liveness checks (sl_sup_conns_follow) until every supervised process
 * closed it. Its socket was placed high when it was made (sock.c), so its
 * sends and receives are trapped.
 *
 * A send on such a connection with no turn running (and whose connect
 * succeeded or is in progress: the supervisor lets the connect continue in
 * the kernel, unaware of its outcome, and looks at the send) is a request: its turn takes one slot of each of its rules' client limit
 * before the send goes on, and its latency starts then. A send while the
 * turn runs is more of the same request. The turn ends at the answer's
 * first byte (turn.c, sl_sup_turn_step_recv), its latency a sample to the
 * controller, or, at the connection's close, without one.
 *
 * The client limits are apart from the server ones (slots SL_SUP_CLIENT +
 * i, turn_state.h): a proxy's upstream requests must not wait for the
 * slots its own server turns hold. One limiter and one controller per
 * rule for the whole supervised tree, as on the server side.
 */
#include "client.h"
#include "conns.h"
#include "filter.h"
#include "notif.h"
#include "state.h"
#include "turn_state.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include "adaptive.h"
#include "decide.h"
#include "match.h"

uint32_t sl_sup_client_rules(const struct sl_sup *s, unsigned fam, unsigned type)
{
	return fam != 0 && type == SL_TYPE_STREAM
		       ? sl_match_socket(&s->policy, fam, type) & s->traps.turns
		       : 0;
}

struct sl_limiter *sl_sup_client_lim(struct sl_sup *s, unsigned i, uint64_t now_ns)
{
	return i < SL_MAX_RULES ? sl_sup_adapt_slot(s, SL_SUP_CLIENT + i, now_ns) : NULL;
}

const struct sl_adapt *sl_sup_client_adapt(const struct sl_sup *s, unsigned i)
{
	return i < SL_MAX_RULES && sl_sup_slot_made(s->turns, SL_SUP_CLIENT + i)
		       ? &s->turns->adapt[SL_SUP_CLIENT + i]
		       : NULL;
}

void sl_sup_client_connected(struct sl_sup *s, struct sl_sup_proc *p, int fd, ino_t ino,
			     uint32_t rules, uint64_t now_ns)
{
	if (ino == 0 || !sl_sup_traps_fd(&s->traps, fd))
		return; /* its sends and receives pass unseen: not followed */
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1)
		if (sl_sup_client_lim(s, (unsigned)__builtin_ctz(rest), now_ns) == NULL)
			rules &= ~(rest & -rest); /* no memory: not limited */
	if (rules == 0)
		return;
	struct turn *e = sl_sup_turn_find(s->turns, ino);
	/* A connect again on the same socket (the first one failed): it is
	 * followed already. */
	const bool followed = e != NULL && e->client;
	if (e == NULL && (e = sl_sup_turn_claim(s->turns, ino)) == NULL)
		return;
	sl_sup_turn_end(s, e, now_ns, false); /* an inode used again: its turn never ended */
	e->client = true;
	e->rules = rules;
	if (!followed && !sl_sup_conns_follow(s, p, fd, ino))
		sl_sup_turn_erase(s->turns, e);
}

/* Whether the socket's connect succeeded or is in progress (TCP: not
 * closed; another stream socket: a peer), as the preload registers only
 * such connections: a send on one whose connect failed is the kernel's to
 * fail, no request. */
static bool connected(int fd)
{
	struct tcp_info ti;
	socklen_t til = sizeof(ti);
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &til) == 0)
		return ti.tcpi_state != TCP_CLOSE && ti.tcpi_state != TCP_LISTEN;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	return getpeername(fd, (struct sockaddr *)&ss, &sl) == 0;
}

/* Client turns left unanswered for sl_adapt_stale_ns (their connections
 * only send: a log stream, an upload whose answer is far off) give their
 * slots back, without a sample, and those connections are followed no
 * more, as in the preload (shim/turnclose.c): true if any did. Looked for
 * when a client's limit is full, at most every SL_SUP_SWEEP_NS. */
static bool expire(struct sl_sup *s, uint64_t now)
{
	static uint64_t last; /* the supervisor's one thread */
	struct sl_sup_turns *t = s->turns;
	if (t == NULL || (last != 0 && now - last < SL_SUP_SWEEP_NS))
		return false;
	last = now;
	bool freed = false;
	for (size_t k = 0; k < t->cap; k++) {
		struct turn *e = &t->tab[k];
		if (e->ino == 0 || !e->client || e->quiet || !e->running || e->first_ns == 0 ||
		    now < e->first_ns)
			continue;
		uint64_t stale = SL_ADAPT_STALE_MIN_NS;
		for (uint64_t rest = e->rules; rest != 0; rest &= rest - 1) {
			const uint64_t w = sl_adapt_stale_ns(
				sl_sup_client_adapt(s, (unsigned)__builtin_ctzll(rest)));
			stale = w > stale ? w : stale;
		}
		if (now - e->first_ns < stale)
			continue;
		e->quiet = true;
		sl_sup_turn_end(s, e, now, false);
		freed = true;
	}
	return freed;
}

enum sl_sup_turn_step sl_sup_client_step_send(struct sl_sup *s, struct sl_sup_call *c,
					      uint64_t now_ns)
{
	struct turn *e = sl_sup_turn_find(s->turns, c->turn_ino);
	/* Forgotten meanwhile, another send started it, or one that only
	 * sends (expire). */
	if (e == NULL || !e->client || e->running || e->quiet)
		return sl_sup_turn_go(c);
	if (!c->turn_waiting) {
		if (!connected(c->dup))
			return sl_sup_turn_go(c); /* the kernel answers the send: no turn */
		c->turn_waiting = true;
		c->turn_until = sl_decide_add(now_ns, sl_sup_turn_wait(s, e));
		c->backoff_ns = SL_DECIDE_BACKOFF_NS;
	}
	if (sl_sup_turn_take(s, e, now_ns) ||
	    (expire(s, now_ns) && sl_sup_turn_take(s, e, now_ns))) {
		sl_sup_turn_run(s, e, now_ns); /* the latency from here */
		return sl_sup_turn_go(c);
	}
	if (c->nonblock)
		return sl_sup_turn_go(c); /* uncounted: an event loop must not stall */
	const uint64_t timeout_at = c->timeout_ns != 0 ? sl_decide_add(c->start_ns, c->timeout_ns)
						       : UINT64_MAX;
	if (now_ns >= timeout_at) {
		sl_sup_answer(s, c->req.id, 0, EAGAIN); /* SO_SNDTIMEO: the kernel's answer */
		return SL_SUP_TURN_DONE;
	}
	return sl_sup_turn_no_slot(s, c, e, now_ns,
				   c->turn_until < timeout_at ? c->turn_until : timeout_at);
}
