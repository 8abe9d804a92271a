/*
 * match.c - which rules a call matches, and which limiter each one uses.
 *
 * Matching: a rule fits a socket when its family= and type= bits include the
 * socket's (0 means any); it fits an address when to=CIDR and port=/:PORT
 * include it. The address is the destination for connect, the listening
 * socket's local address for accept (to=/port= name what is listened on),
 * and the peer for send/recv. An unknown address (an unconnected datagram
 * socket that receives) fits only rules without an address filter.
 *
 * Scopes (per=):
 *   process  one limiter per rule, sl__st.rule_lim (in the stats record,
 *            or in a shared file for shared=NAME); a redis=KEY rule's comes
 *            from lease.c (units leased from Redis, or its on-error mode);
 *   thread   a slot of a pool of SL_THREAD_SLOTS, taken on a thread's first
 *            throttled call and given back by a pthread key destructor when
 *            the thread exits; with the pool exhausted, threads share the
 *            process limiter (logged once);
 *   fd       one limiter per fd and rule, reset when the fd is classified
 *            anew; conns rules have no per-fd meaning and use the process
 *            limiter;
 *   peer     a bounded hash table of SL_PEER_SLOTS (rule, remote address)
 *            entries, the port left out. Lookups probe 8 entries; a miss
 *            evicts, clock-style, an entry not used since the hand last
 *            passed, never a pinned one. With every candidate pinned, the
 *            process limiter serves the call. An evicted peer starts again
 *            with a full bucket, so eviction can only loosen the limit for
 *            peers beyond the table's size.
 *
 * Pins: an entry's limiter is used outside the lock (a call sleeps on it,
 * holds a grant it may refund, a connection holds a conns slot of it), so
 * every user counts itself in the entry's `pins`: a call from its first
 * lookup to sl__call_end (the call remembers the entry, and asks the table
 * only once per rule), a connection from sl__fd_set_conn until its slot is
 * given back. Only an entry with no pin (and no slot held) is re-keyed and
 * re-initialised, so nobody reads it while the lock holder writes it.
 *
 * The peer table has the shim's only lock, a spinlock held for a few probes
 * and never across a sleep or a call into libc; pthread_atfork takes it
 * around fork so the child never inherits it locked.
 */
#include <pthread.h>
#include <string.h>

#include "internal.h"

struct sl_peer_ent {
	struct sl_limiter lim; /* first: sl__peer_pin finds the entry from it */
	_Atomic uint32_t pins; /* calls and connections using lim */
	uint32_t rule_plus1; /* 0: empty */
	uint32_t ref;        /* clock bit */
	struct sl_addr key;  /* port zero */
};

static struct sl_peer_ent *sl_peers; /* [SL_PEER_SLOTS] */
_Static_assert(SL_PEER_SLOTS < SL_PIN_NONE, "sl_call.pin holds an entry's index");
static atomic_flag sl_peer_lock = ATOMIC_FLAG_INIT;
static pthread_key_t sl_tslot_key;
static bool sl_scope_once;
static _Atomic uint64_t sl_tslot_used[SL_THREAD_SLOTS / 64];
static __thread int sl_tslot __attribute__((tls_model("initial-exec"))); /* slot + 1 */
static _Atomic int sl_tslot_full_logged;

static void sl_peer_lock_take(void)
{
	/* Acquire pairs with the release in sl_peer_lock_drop: the table's
	 * contents written by the previous holder are visible. */
	while (atomic_flag_test_and_set_explicit(&sl_peer_lock, memory_order_acquire))
		;
}

static void sl_peer_lock_drop(void)
{
	atomic_flag_clear_explicit(&sl_peer_lock, memory_order_release);
}

static void sl_tslot_free(void *v)
{
	unsigned s = (unsigned)(uintptr_t)v - 1;
	/* Release: this thread's last uses of the slot happen before the next
	 * owner's (acquire in sl_tslot_get). */
	atomic_fetch_and_explicit(&sl_tslot_used[s / 64], ~((uint64_t)1 << (s % 64)),
				  memory_order_release);
}

/* Allocate the tables and register the fork and thread-exit handlers (once);
 * clear the tables. Not thread-safe: init only. Returns 0 or -1. */
int sl__scope_init_unsync(void)
{
	if (!sl_scope_once) {
		sl_peers = sl__map(sizeof(struct sl_peer_ent) * SL_PEER_SLOTS);
		if (sl_peers == NULL || pthread_key_create(&sl_tslot_key, sl_tslot_free) != 0)
			return -1;
		pthread_atfork(sl_peer_lock_take, sl_peer_lock_drop, sl_peer_lock_drop);
		sl_scope_once = true;
		return 0; /* a fresh mapping and untouched slots: zero already */
	}
	sl__scope_reset_unsync();
	return 0;
}

void sl__scope_reset_unsync(void)
{
	if (sl_peers != NULL)
		memset(sl_peers, 0, sizeof(struct sl_peer_ent) * SL_PEER_SLOTS);
	for (size_t i = 0; i < SL_THREAD_SLOTS / 64; i++)
		atomic_store_explicit(&sl_tslot_used[i], 0, memory_order_relaxed);
	sl_tslot = 0;
}

void sl__scope_after_fork_unsync(void)
{
	/* Only the forking thread lives on in the child: the other threads'
	 * slots would never be freed (their thread-exit handlers never run). */
	for (size_t i = 0; i < SL_THREAD_SLOTS / 64; i++) {
		uint64_t own = sl_tslot != 0 && (size_t)(sl_tslot - 1) / 64 == i
				       ? (uint64_t)1 << ((sl_tslot - 1) % 64)
				       : 0;
		atomic_store_explicit(&sl_tslot_used[i], own, memory_order_relaxed);
	}
}

/* Limiter parameters of rule r. */
void sl__rule_params(const struct sl_rule *r, struct sl_params *p)
{
	sl_shm_rule_params(r, p);
}

/* (Re)initialise limiter l for rule i at now_ns. */
void sl__limiter_reset(struct sl_limiter *l, unsigned i, uint64_t now_ns)
{
	struct sl_params p;
	sl__rule_params(&sl__st.policy.rules[i], &p);
	sl_limiter_init(l, &p, now_ns);
}

static bool sl_rule_fits(const struct sl_rule *r, unsigned family, unsigned type)
{
	return sl_rule_fits_socket(r, family, type);
}

static bool sl_rule_addr(const struct sl_rule *r, const struct sl_addr *a)
{
	static const uint8_t none[16];
	return a != NULL ? sl_rule_fits_addr(r, a->family, a->port, a->addr)
			 : sl_rule_fits_addr(r, 0, 0, none);
}

uint32_t sl__match_socket(unsigned family, unsigned type)
{
	uint32_t m = 0;
	for (uint32_t i = 0; i < sl__st.policy.n_rules; i++)
		if (sl_rule_fits(&sl__st.policy.rules[i], family, type))
			m |= (uint32_t)1 << i;
	return m;
}

uint32_t sl__match(uint32_t cand, unsigned family, unsigned type, const struct sl_addr *a)
{
	uint32_t m = 0;
	for (uint32_t rest = cand; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &sl__st.policy.rules[i];
		if (sl_rule_fits(r, family, type) && sl_rule_addr(r, a))
			m |= (uint32_t)1 << i;
	}
	return m;
}

/* Reset the limiters of every rule of `scope` in one row of a scope table
 * (a thread's or an fd's), indexed by scope_slot. */
static void sl_scope_reset(struct sl_limiter *row, enum sl_scope scope)
{
	uint64_t now = sl__clock_ns();
	for (unsigned i = 0; i < sl__st.policy.n_rules; i++)
		if (sl__st.policy.rules[i].scope == scope)
			sl__limiter_reset(&row[sl__st.scope_slot[i]], i, now);
}

/* This thread's slot of the per-thread pool, or -1 if the pool is full. */
static int sl_tslot_get(void)
{
	if (sl_tslot != 0)
		return sl_tslot - 1;
	for (unsigned w = 0; w < SL_THREAD_SLOTS / 64; w++) {
		uint64_t used = atomic_load_explicit(&sl_tslot_used[w], memory_order_relaxed);
		while (~used != 0) {
			unsigned b = (unsigned)__builtin_ctzll(~used);
			/* Acquire pairs with the release in sl_tslot_free. */
			if (!atomic_compare_exchange_weak_explicit(&sl_tslot_used[w], &used,
								   used | ((uint64_t)1 << b),
								   memory_order_acquire,
								   memory_order_relaxed))
				continue;
			int s = (int)(w * 64 + b);
			sl_scope_reset(&sl__st.thread_lims[(size_t)s * sl__st.n_thread_rules],
				       SL_SCOPE_THREAD);
			sl_tslot = s + 1;
			pthread_setspecific(sl_tslot_key, (void *)(uintptr_t)(s + 1));
			return s;
		}
	}
	if (!atomic_exchange_explicit(&sl_tslot_full_logged, 1, memory_order_relaxed))
		sl_log(SL_LOG_WARN, "more than %d threads with per=thread rules: the rest share "
				    "per-process limiters", SL_THREAD_SLOTS);
	return -1;
}

static uint32_t sl_peer_hash(unsigned rule, const struct sl_addr *k)
{
	uint32_t h = 2166136261u ^ rule;
	const uint8_t *p = (const uint8_t *)k;
	for (size_t i = 0; i < sizeof(*k); i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

/* True if e may be in use outside the lock: pinned, or holding conns
 * slots. Under the lock. */
static bool sl_peer_pinned(const struct sl_peer_ent *e)
{
	/* Acquire pairs with the release in sl_peer_unpin_ent: the last
	 * user's accesses to e->lim happen before it is re-initialised. */
	return atomic_load_explicit(&e->pins, memory_order_acquire) != 0 ||
	       (e->lim.kind == SL_KIND_CONC && sl_conc_held(&e->lim.u.conc) != 0);
}

static void sl_peer_unpin_ent(struct sl_peer_ent *e)
{
	/* Release: this user's accesses to e->lim happen before an evictor's
	 * re-initialisation (acquire in sl_peer_pinned). */
	atomic_fetch_sub_explicit(&e->pins, 1, memory_order_release);
}

/* The entry whose limiter is l, or NULL if l is not in the peer table. */
static struct sl_peer_ent *sl_peer_of(struct sl_limiter *l)
{
	uintptr_t off = (uintptr_t)l - (uintptr_t)sl_peers;
	if (sl_peers == NULL || off >= sizeof(struct sl_peer_ent) * SL_PEER_SLOTS)
		return NULL;
	return (struct sl_peer_ent *)l; /* lim is the first member */
}

void sl__peer_pin(struct sl_limiter *l)
{
	struct sl_peer_ent *e = sl_peer_of(l);
	/* Relaxed, outside the lock: the caller's own pin keeps the count
	 * above zero, so no evictor can be deciding on this entry. */
	if (e != NULL)
		atomic_fetch_add_explicit(&e->pins, 1, memory_order_relaxed);
}

void sl__peer_unpin(struct sl_limiter *l)
{
	struct sl_peer_ent *e = sl_peer_of(l);
	if (e != NULL)
		sl_peer_unpin_ent(e);
}

void sl__peer_unpin_call(struct sl_call *c)
{
	for (uint32_t rest = c->pinned; rest != 0; rest &= rest - 1) {
		uint16_t p = c->pin[__builtin_ctz(rest)];
		if (p != SL_PIN_NONE)
			sl_peer_unpin_ent(&sl_peers[p]);
	}
	c->pinned = 0;
}

/* The per-peer limiter of rule i for call c's peer, its entry pinned for
 * the call; the rule's process limiter if the table is full of pinned
 * entries around the peer's home (for the rest of the call too). */
static struct sl_limiter *sl_peer_get(struct sl_call *c, unsigned i)
{
	if ((c->pinned >> i) & 1)
		return c->pin[i] != SL_PIN_NONE ? &sl_peers[c->pin[i]].lim : sl__st.rule_lim[i];
	struct sl_addr key = *c->peer;
	key.port = 0;
	uint32_t h = sl_peer_hash(i, &key);
	struct sl_peer_ent *found = NULL, *victim = NULL;
	sl_peer_lock_take();
	for (unsigned pass = 0; pass < 2 && found == NULL && victim == NULL; pass++) {
		for (unsigned p = 0; p < 8; p++) {
			struct sl_peer_ent *e = &sl_peers[(h + p) % SL_PEER_SLOTS];
			if (e->rule_plus1 == i + 1 && memcmp(&e->key, &key, sizeof(key)) == 0) {
				found = e;
				break;
			}
			if (pass == 0 && e->rule_plus1 == 0 && victim == NULL)
				victim = e;
			else if (pass == 1 && victim == NULL && e->ref == 0 && !sl_peer_pinned(e))
				victim = e;
			else if (pass == 1)
				e->ref = 0; /* the clock hand passes: not used since */
		}
	}
	if (found == NULL && victim != NULL) {
		/* Unpinned: no other thread reads it (see the file comment). */
		victim->rule_plus1 = i + 1;
		victim->key = key;
		sl__limiter_reset(&victim->lim, i, sl__clock_ns());
		found = victim;
	}
	if (found != NULL) {
		found->ref = 1;
		/* Relaxed: under the lock, which every evictor takes. */
		atomic_fetch_add_explicit(&found->pins, 1, memory_order_relaxed);
	}
	sl_peer_lock_drop();
	c->pinned |= (uint32_t)1 << i;
	c->pin[i] = found != NULL ? (uint16_t)(found - sl_peers) : SL_PIN_NONE;
	return found != NULL ? &found->lim : sl__st.rule_lim[i];
}

/* sl__limiter for the scopes other than process. */
struct sl_limiter *sl__limiter_scoped(struct sl_call *c, unsigned i)
{
	int fd = c->fd;
	const struct sl_rule *r = &sl__st.policy.rules[i];
	struct sl_limiter *l = NULL;
	if (r->redis_key[0] != '\0')
		return sl__lease_limiter(i); /* per=process only */
	switch (r->scope) {
	case SL_SCOPE_THREAD: {
		int s = sl_tslot_get();
		if (s >= 0)
			l = &sl__st.thread_lims[(size_t)s * sl__st.n_thread_rules + sl__st.scope_slot[i]];
		break;
	}
	case SL_SCOPE_FD:
		if (r->op != SL_OP_CONNS && (unsigned)fd < sl__fd_cap && sl__st.fd_lims != NULL)
			l = &sl__st.fd_lims[(size_t)fd * sl__st.n_fd_rules + sl__st.scope_slot[i]];
		break;
	case SL_SCOPE_PEER:
		if (c->peer != NULL && c->peer->family != 0)
			return sl_peer_get(c, i);
		break;
	default:
		break;
	}
	return l != NULL ? l : sl__st.rule_lim[i];
}

/* Reset the per-fd limiters of fd (it is a new socket). */
void sl__scope_fd_reset(int fd)
{
	if ((unsigned)fd < sl__fd_cap && sl__st.fd_lims != NULL)
		sl_scope_reset(&sl__st.fd_lims[(size_t)fd * sl__st.n_fd_rules], SL_SCOPE_FD);
}

/*
 * The largest piece a split transfer may charge at once to byte rule i: the
 * burst for a token bucket; for a leaky bucket its capacity, or 10 ms worth
 * of bytes when the capacity is unbounded; the window's size for a fixed
 * window, 10 ms worth of a sliding one (at most N/32). From the limiter's
 * current parameters: `sluice set` may have changed them.
 */
struct sl_params sl__rule_now(unsigned i)
{
	const struct sl_rule *r = &sl__st.policy.rules[i];
	struct sl_params p = {.amount = r->amount, .period_ns = r->period_ns, .burst = r->burst};
	const struct sl_limiter *l = sl__st.rule_lim[i];
	if (((sl__st.proc_rules >> i) & 1) && l != NULL && l->kind == SL_KIND_TUNABLE)
		p = sl_tunable_current((const struct sl_tunable *)(const void *)l)->params;
	return p;
}

uint64_t sl__piece_max(unsigned i)
{
	const struct sl_rule *r = &sl__st.policy.rules[i];
	const struct sl_params p = sl__rule_now(i);
	uint64_t m;
	switch (r->algo) {
	case SL_ALGO_TOKEN:
		m = p.burst;
		break;
	case SL_ALGO_LEAKY:
		if (p.burst != 0) {
			m = p.burst;
		} else {
			unsigned __int128 b = (unsigned __int128)p.amount * 10000000u;
			m = p.period_ns ? (uint64_t)(b / p.period_ns) : p.amount;
		}
		break;
	case SL_ALGO_SLIDING: {
		/* A sliding window cannot reserve: a piece of p waits until the
		 * estimate is N - p, so the steady rate is (N - p) per window
		 * (p = N, half the rate: it waits for an empty estimate, two
		 * windows after a full one). 10 ms worth, at most N/32, keeps
		 * it within 1% (W = 1 s) to 3% (W <= 320 ms) of the rate. */
		unsigned __int128 b = (unsigned __int128)p.amount * 10000000u;
		uint64_t ten_ms = p.period_ns ? (uint64_t)(b / p.period_ns) : p.amount;
		m = p.amount / 32 < ten_ms ? p.amount / 32 : ten_ms;
		break;
	}
	default:
		m = p.amount;
		break;
	}
	return m == 0 ? 1 : m;
}
