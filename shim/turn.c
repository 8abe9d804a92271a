/* SPDX-License-Identifier: MIT */
/*
 * turn.c - conns:adaptive in the preload: a request is a turn on an
 * accepted connection, and a turn holds one slot of the rule's
 * concurrency limit, which the engine's controller (engine/adaptive.c)
 * moves by the turns' latency.
 *
 * A turn starts with the connection's accept (the slot taken there by
 * accept.c, as for any conns rule) or, on a connection that answered its
 * last request, with its next receive; its latency runs from the first
 * bytes received in it to its end, which is the connection's first send
 * after them, or its close. So a keep-alive connection counts one request
 * at a time, and an idle one counts nothing. A receive that would start a
 * turn on a blocking socket first waits, without a slot, for the data to be
 * there, then for a slot (the bytes stay in the kernel meanwhile) up to
 * the rule's max-delay (action=delay) or, with action=reject, up to the
 * no-load latency; past it the connection is reset (the client sees a
 * reset, never a hang) and the receive fails with ECONNRESET. A receive on
 * a non-blocking socket (or MSG_DONTWAIT) never waits: with no slot free
 * its turn runs uncounted (an event loop would otherwise spin or stall).
 *
 * The state of each connection with turns is an entry of a table in
 * memory a fork's children share (as are the per=process rules' limiter and
 * controller), keyed by the socket's inode: a fork-per-connection server's
 * child ends the turn its parent's accept began, and a prefork server's
 * workers count in one limit. A turn ends once (a CAS on the entry's
 * state); its entry is freed at the socket's last close: at once in a
 * process that never forked, else after the real close once the kernel
 * says no process holds the socket any more (sockalive.h).
 *
 * In a seccomp sandbox (sandbox.h) turns are not followed: no query of
 * ours may be made there.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "act.h"
#include "adaptive.h"
#include "decide.h"
#include "clock.h"
#include "conn.h"
#include "count.h"
#include "fd.h"
#include "log.h"
#include "real.h"
#include "sandboxed.h"
#include "shm.h"
#include "sockalive.h"
#include "turn.h"
#include "turn_tab.h"
#include "wait.h"

struct turn_fam *sl__turn_fam;
struct sl_adapt *sl__turn_adapt[TURN_SLOTS];

_Static_assert(TURN_GATE == SL_MAX_RULES && TURN_CLIENT == 2 * SL_MAX_RULES,
	       "turn_tab.h: slot indexes");

/* A receive's token (sl__turn_recv_end): the entry's index + 1, and ... */
#define TOK_STARTED ((uint64_t)1 << 32) /* ... a server's turn it started */
#define TOK_CLIENT ((uint64_t)1 << 33)  /* ... a client's turn it may end */

int sl__turn_init_unsync(struct sl_state *st, uint64_t now_ns)
{
	memset(sl__turn_adapt, 0, sizeof(sl__turn_adapt));
	if ((st->adapt_rules | st->sys_rules) == 0)
		return 0;
	if (sl__turn_fam == NULL) {
		void *m = mmap(NULL, sizeof(*sl__turn_fam), PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			return -1;
		sl__turn_fam = m;
	}
	memset(sl__turn_fam, 0, sizeof(*sl__turn_fam));
	sl__turn_forked_reset_unsync();
	for (uint32_t rest = st->adapt_rules; rest != 0; rest &= rest - 1) {
		const unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &st->policy.rules[i];
		if (r->shared[0] != '\0') {
			/* The shared file's limiter and controller (shm.c),
			 * one for every process of the host naming it. */
			struct sl_shm_shared *seg = sl__shm_shared_seg(i);
			if (seg == NULL || !sl_adapt_valid(&seg->adapt))
				return -1;
			sl__turn_adapt[i] = &seg->adapt;
			continue;
		}
		sl__turn_adapt[i] = &sl__turn_fam->adapt[i];
		sl_adapt_init_unsync(sl__turn_adapt[i], r, now_ns);
		struct sl_params p;
		sl__rule_params(r, &p);
		if (sl_tunable_init(&sl__turn_fam->lim[i], &p, now_ns) != SL_OK)
			return -1;
		st->rule_lim[i] = &sl__turn_fam->lim[i].head;
	}
	/* Each adaptive rule's client limit, the fork family's (also for a
	 * shared= rule: the shared file holds its server's). */
	for (uint32_t rest = st->adapt_rules; rest != 0; rest &= rest - 1) {
		const unsigned i = (unsigned)__builtin_ctz(rest), x = TURN_CLIENT + i;
		const struct sl_rule *r = &st->policy.rules[i];
		sl__turn_adapt[x] = &sl__turn_fam->adapt[x];
		sl_adapt_init_unsync(sl__turn_adapt[x], r, now_ns);
		struct sl_params p = {.kind = SL_KIND_CONC,
				      .amount = sl_adapt_limit(sl__turn_adapt[x])};
		if (sl_tunable_init(&sl__turn_fam->lim[x], &p, now_ns) != SL_OK)
			return -1;
	}
	for (uint32_t rest = st->sys_rules; rest != 0; rest &= rest - 1) {
		const unsigned b = TURN_GATE + (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &st->policy.rules[b - TURN_GATE];
		sl__turn_adapt[b] = &sl__turn_fam->adapt[b];
		sl_adapt_init_system_unsync(sl__turn_adapt[b], r, now_ns);
		/* A concurrency limit on the turns, open until a threshold
		 * is exceeded. */
		struct sl_params p = {.kind = SL_KIND_CONC,
				      .amount = sl_adapt_limit(sl__turn_adapt[b])};
		if (sl_tunable_init(&sl__turn_fam->lim[b], &p, now_ns) != SL_OK)
			return -1;
	}
	sl__turn_host(now_ns); /* the first reading: /proc/stat's shares need two */
	sl__fd_on_forget_unsync(sl__turn_forget);
	return 0;
}

static uint32_t ent_hash(uint64_t key)
{
	return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 40) % TURN_ENTS;
}

struct turn_ent *sl__turn_find(uint64_t ino)
{
	if (sl__turn_fam == NULL || ino == 0)
		return NULL;
	const uint64_t key = ino + 1;
	for (uint32_t p = 0, h = ent_hash(key); p < TURN_PROBES; p++) {
		struct turn_ent *e = &sl__turn_fam->ent[(h + p) % TURN_ENTS];
		if (atomic_load_explicit(&e->key, memory_order_acquire) == key)
			return e;
	}
	return NULL;
}

static struct turn_ent *ent_claim(uint64_t ino)
{
	const uint64_t key = ino + 1;
	for (uint32_t p = 0, h = ent_hash(key); p < TURN_PROBES; p++) {
		struct turn_ent *e = &sl__turn_fam->ent[(h + p) % TURN_ENTS];
		uint64_t k = atomic_load_explicit(&e->key, memory_order_relaxed);
		if (k == key)
			return e; /* a stale entry of an inode used again */
		if (k == 0 &&
		    atomic_compare_exchange_strong_explicit(&e->key, &k, key, memory_order_acquire,
							    memory_order_relaxed))
			return e;
	}
	return NULL;
}

/* The slot index of e's bit 0 (turn_tab.h). */
static unsigned base_of(const struct turn_ent *e)
{
	return atomic_load_explicit(&e->client, memory_order_relaxed) ? TURN_CLIENT : 0;
}

void sl__turn_end(struct turn_ent *e, uint64_t now)
{
	uint64_t s = atomic_load_explicit(&e->state, memory_order_acquire);
	do
		if ((s & 0xff) != TS_TURN)
			return;
	while (!atomic_compare_exchange_weak_explicit(&e->state, &s, ((s >> 8) + 1) << 8 | TS_IDLE,
						      memory_order_acq_rel, memory_order_acquire));
	const uint64_t start = atomic_exchange_explicit(&e->start_ns, 0, memory_order_relaxed);
	const uint64_t rules = atomic_load_explicit(&e->rules, memory_order_relaxed);
	const unsigned base = base_of(e);
	sl__turn_release(base, rules);
	for (uint64_t rest = rules; rest != 0; rest &= rest - 1)
		sl__turn_done(base + (unsigned)__builtin_ctzll(rest), start, now);
}

/* The rules of slot bits `slots`. */
static uint32_t rules_of(uint64_t slots)
{
	return (uint32_t)slots | (uint32_t)(slots >> TURN_GATE);
}

uint32_t sl__turn_of(uint64_t ino)
{
	const struct turn_ent *e = sl__turn_find(ino);
	return e != NULL ? rules_of(atomic_load_explicit(&e->rules, memory_order_relaxed)) : 0;
}

/* fd, just accepted, has turns of `rules`: its sends and receives leave
 * their fast paths and pass bits for the general paths (fd.h, turn). */
static void mark_fd(int fd, uint32_t rules)
{
	struct sl_fdrec r;
	if (!sl__fd_get(fd, &r))
		return;
	r.turn = rules;
	r.cand[SL_K_SEND] |= rules;
	r.cand[SL_K_RECV] |= rules;
	sl__fd_rewrite(fd, &r);
	atomic_fetch_and_explicit(&sl__fdbits[fd],
				  (uint8_t) ~(SL_FDB_PASS(SL_K_SEND) | SL_FDB_PASS(SL_K_RECV)),
				  memory_order_release);
}

/* Fd's entry (claimed, or NULL: not followed; errno kept), its stale turn
 * ended, made anew at now_ns: a server's (client 0) or a client's, holding
 * `rules`, in state TS_TURN from now_ns (the accept) or TS_IDLE. */
static struct turn_ent *ent_open(int fd, uint32_t client, uint64_t rules, bool turn,
				 uint64_t now_ns)
{
	struct turn_ent *e = NULL;
	if ((unsigned)fd < sl__fd_cap && sl__fdrecs != NULL && !sl__sandboxed())
		e = ent_claim(sl__fdrecs[fd].ino);
	if (e == NULL)
		return NULL;
	uint64_t s = atomic_load_explicit(&e->state, memory_order_relaxed);
	if ((s & 0xff) == TS_TURN) /* an inode used again, its turn never ended */
		sl__turn_end(e, now_ns);
	atomic_store_explicit(&e->client, client, memory_order_relaxed);
	atomic_store_explicit(&e->rules, rules, memory_order_relaxed);
	atomic_store_explicit(&e->epoch, sl__turn_epoch(), memory_order_relaxed);
	atomic_store_explicit(&e->start_ns, turn ? now_ns : 0, memory_order_relaxed);
	s = atomic_load_explicit(&e->state, memory_order_relaxed);
	atomic_store_explicit(&e->state, ((s >> 8) + 1) << 8 | (turn ? TS_TURN : TS_IDLE),
			      memory_order_release);
	mark_fd(fd, rules_of(rules));
	return e;
}

void sl__turn_accepted(int fd, uint64_t rules, uint64_t now_ns)
{
	const int saved = errno;
	/* The first request's latency from the accept: its bytes are there
	 * (or on their way) when the server takes the connection, and what
	 * the server does before it reads them (a fork) is its latency too. */
	if (ent_open(fd, 0, rules, true, now_ns) != NULL)
		sl__turn_started(0, rules);
	else /* not followed: the slots go back now, as if it answered */
		sl__turn_release(0, rules);
	errno = saved;
}

void sl__turn_connected(int fd, uint32_t rules, uint64_t now_ns)
{
	const int saved = errno;
	ent_open(fd, 1, rules, false, now_ns); /* NULL: its requests run uncounted */
	errno = saved;
}

/* Refuse the request waiting on fd, counted by `rules`: the connection
 * is reset. */
static int turn_refuse(int fd, uint32_t rules)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1)
		sl_count_refused(&sl__st.stats[__builtin_ctz(rest)]);
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	shutdown(fd, SHUT_RDWR);
	return ECONNRESET;
}

/* poll(2) on fd alone for `ev`, at most timeout_ms (-1: no limit):
 * its revents, 0 on timeout, -1 on error (errno). */
static int poll_one(int fd, short ev, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = ev};
	int r = SL_REAL(poll)(&p, 1, timeout_ms);
	return r > 0 ? p.revents : r;
}

/* sl__turn_take, and for a client's limit that is full once more after
 * its stale turns gave their slots back. */
static bool take_or_expire(unsigned base, uint64_t rules, uint64_t now)
{
	return sl__turn_take(base, rules, now) ||
	       (base == TURN_CLIENT && sl__turn_expire(now) && sl__turn_take(base, rules, now));
}

/* Take the slots `rules` (from index base) of a turn about to start on
 * fd, waiting for them as the engine says (how long, the retries, whether
 * a refusal resets the connection; c: the call, for its sleeps and the
 * socket's timeout): 0 with them taken; -1 when the call goes on without
 * them (non-blocking, a dry run, the peer gone, the fd passed on); or the
 * errno to fail with (a signal; the socket's timeout: EAGAIN; a refusal:
 * ECONNRESET, the connection reset). */
static int wait_slots(struct sl_call *c, int fd, unsigned base, uint64_t rules, bool nb)
{
	uint64_t now = sl__clock_ns();
	if (take_or_expire(base, rules, now))
		return 0;
	if (nb) /* uncounted: see the file comment */
		return -1;
	const uint64_t deadline = sl_decide_add(now, sl__turn_wait_ns(base, rules));
	const uint64_t timeout = sl__call_timeout(c);
	uint64_t backoff = SL_DECIDE_BACKOFF_NS;
	do {
		if (now >= timeout)
			return EAGAIN;
		if (now >= deadline) /* a dry run goes on, uncounted; else the reset */
			return sl_adapt_refuses(&sl__st.policy, rules_of(rules))
				       ? turn_refuse(fd, rules_of(rules))
				       : -1;
		const uint64_t until = deadline < timeout ? deadline : timeout;
		if (sl__call_sleep(c, sl_adapt_retry_at(now, until, &backoff)) == EINTR)
			return EINTR;
		/* The fd passed on, or the peer gone: its turn is no one's. */
		if (c->passing || poll_one(fd, POLLRDHUP, 0) > 0)
			return -1;
		now = sl__clock_ns();
	} while (!take_or_expire(base, rules, now));
	return 0;
}

/* Whether a call of `flags` on fd may not block. */
static bool call_nb(int fd, int flags)
{
	const int fl = (flags & MSG_DONTWAIT) ? O_NONBLOCK : fcntl(fd, F_GETFL);
	return fl >= 0 && (fl & O_NONBLOCK);
}

/* Start a turn on e (state s, TS_IDLE) holding `rules` from index base,
 * taken already: true; false if another thread started it first (the
 * slots then go back). */
static bool turn_start(struct turn_ent *e, uint64_t s, unsigned base, uint64_t rules,
		       uint64_t start_ns)
{
	uint64_t idle = s;
	if (!atomic_compare_exchange_strong_explicit(&e->state, &idle,
						     ((s >> 8) + 1) << 8 | TS_TURN,
						     memory_order_acq_rel, memory_order_acquire)) {
		sl__turn_release(base, rules);
		return false;
	}
	atomic_store_explicit(&e->start_ns, start_ns, memory_order_relaxed);
	sl__turn_started(base, rules);
	return true;
}

int sl__turn_recv_begin(int fd, const struct sl_fdrec *rec, int flags, uint64_t *tok)
{
	*tok = 0;
	if ((flags & (MSG_PEEK | MSG_ERRQUEUE)) || sl__sandboxed())
		return 0;
	struct turn_ent *e = sl__turn_find(rec->ino);
	if (e == NULL)
		return 0;
	const uint32_t idx = (uint32_t)(e - sl__turn_fam->ent) + 1;
	uint64_t s = atomic_load_explicit(&e->state, memory_order_acquire);
	if (atomic_load_explicit(&e->client, memory_order_relaxed)) {
		/* A client's: the answer's first bytes end its turn. */
		*tok = (s & 0xff) == TS_TURN ? idx | TOK_CLIENT : 0;
		return 0;
	}
	if ((s & 0xff) == TS_TURN) {
		*tok = idx;
		return 0;
	}
	const int saved = errno;
	const uint64_t rules = atomic_load_explicit(&e->rules, memory_order_relaxed);
	const bool nb = call_nb(fd, flags);
	struct sl_call c;
	sl__call_begin(&c, fd, SL_OP_RECV, NULL, SO_RCVTIMEO);
	if (!nb) {
		/* The request first: no slot is held while the connection
		 * is idle. The socket's timeout ends this wait as it would
		 * end the receive. */
		const uint64_t until = sl__call_timeout(&c);
		int ms = -1;
		if (until != UINT64_MAX) {
			const uint64_t now = sl__clock_ns();
			ms = until > now ? (int)((until - now + 999999) / 1000000) : 0;
		}
		int ev = poll_one(fd, POLLIN, ms);
		if (ev == 0) {
			errno = saved;
			return EAGAIN;
		}
		if (ev < 0) { /* a signal: the receive itself decides, uncounted */
			errno = saved;
			return 0;
		}
	}
	const int err = wait_slots(&c, fd, 0, rules, nb);
	if (err == 0) /* started here, or by another thread's receive */
		*tok = turn_start(e, s, 0, rules, 0) ? idx | TOK_STARTED : idx;
	errno = saved;
	return err > 0 ? err : 0;
}

void sl__turn_recv_end(uint64_t tok, ssize_t r)
{
	if (tok == 0 || sl__turn_fam == NULL)
		return;
	const int saved = errno;
	struct turn_ent *e = &sl__turn_fam->ent[(uint32_t)tok - 1];
	if (tok & TOK_CLIENT) {
		/* The answer's first bytes; or the end of the stream, an error:
		 * no answer, no sample. */
		const bool over = r == 0 || (r < 0 && saved != EAGAIN && saved != EWOULDBLOCK &&
					     saved != EINTR);
		if (over)
			atomic_store_explicit(&e->start_ns, 0, memory_order_relaxed);
		if (r > 0 || over)
			sl__turn_end(e, sl__clock_ns());
	} else if (r > 0) {
		uint64_t zero = 0;
		atomic_compare_exchange_strong_explicit(&e->start_ns, &zero, sl__clock_ns(),
							memory_order_relaxed, memory_order_relaxed);
	} else if (r < 0 && (tok & TOK_STARTED) && (saved == EAGAIN || saved == EWOULDBLOCK) &&
		   atomic_load_explicit(&e->start_ns, memory_order_relaxed) == 0) {
		/* Nothing came after all: no turn. */
		sl__turn_end(e, sl__clock_ns());
	}
	errno = saved;
}

int sl__turn_send(int fd, const struct sl_fdrec *rec, int flags)
{
	if (sl__sandboxed())
		return 0;
	struct turn_ent *e = sl__turn_find(rec->ino);
	if (e == NULL)
		return 0;
	const uint64_t s = atomic_load_explicit(&e->state, memory_order_acquire);
	const uint32_t role = atomic_load_explicit(&e->client, memory_order_relaxed);
	const bool client = role != 0;
	/* A client's request goes on; a connection that only sends is no
	 * longer followed (client_expire). */
	if (((s & 0xff) == TS_TURN) == client || role == 2)
		return 0;
	const int saved = errno;
	int err = 0;
	if (!client) { /* the answer: the server's turn ends */
		sl__turn_end(e, sl__clock_ns());
	} else { /* a request on an idle connection: a turn starts */
		const uint64_t rules = atomic_load_explicit(&e->rules, memory_order_relaxed);
		struct sl_call c;
		sl__call_begin(&c, fd, SL_OP_SEND, NULL, SO_SNDTIMEO);
		err = wait_slots(&c, fd, TURN_CLIENT, rules, call_nb(fd, flags));
		if (err == 0)
			turn_start(e, s, TURN_CLIENT, rules, sl__clock_ns());
	}
	errno = saved;
	return err > 0 ? err : 0;
}
