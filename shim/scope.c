/* SPDX-License-Identifier: MIT */
/*
 * scope.c - which limiter each rule uses for one call (per=).
 *
 * Scopes:
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
 *   peer     a bounded table of SL_PEER_SLOTS (rule, remote address)
 *            entries, the port left out; which entry a peer uses and which
 *            one a newcomer takes over (clock-style, never a pinned one)
 *            is engine/peers.c's, as in the supervisor. With every
 *            candidate pinned, the process limiter serves the call.
 *
 * Pins: an entry's limiter is used outside the lock (a call sleeps on it,
 * holds a grant it may refund, a connection holds a conns slot of it), so
 * every user counts itself in the entry's `pins`: a call from its first
 * lookup to sl__call_end (the call remembers the entry, and asks the table
 * only once per rule), a connection from sl__fd_set_conn until its slot is
 * given back. Only an entry with no pin (and no slot held) is re-keyed and
 * re-initialised, so nobody reads it while the lock holder writes it.
 *
 * The peer table's lock is a spinlock held for a few probes and never
 * across a sleep or a call into libc; pthread_atfork takes it around fork so
 * the child never inherits it locked.
 */
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

#include "call.h"
#include "clock.h"
#include "log.h"
#include "peers.h"
#include "scope.h"
#include "state.h"

struct peer_ent {
	struct sl_limiter lim;    /* first: sl__peer_pin finds the entry from it */
	_Atomic uint32_t pins;    /* calls, connections and fds using lim */
	_Atomic uint32_t fdpins;  /* of which fds (sl__peer_fd_lim) */
	struct sl_peer_slot slot; /* the key and clock bit (engine/peers.h) */
};

static struct peer_ent *peers; /* [SL_PEER_SLOTS] */
_Static_assert(sizeof(struct peer_ent) == SL_PEER_ENT_BYTES, "scope.h: sl__peer_fd_cached");
/* The entries fds pin for the fast paths: see sl__peer_fd_lim. */
#define FD_PIN_MAX (SL_PEER_SLOTS / 2)
_Atomic uint32_t *sl__fd_peer;
char *sl__peer_base;
static size_t fd_peer_bytes;
static _Atomic uint32_t fd_pinned;
_Static_assert(SL_PEER_SLOTS < SL_PIN_NONE, "sl_call.pin holds an entry's index");
static atomic_flag peer_lock = ATOMIC_FLAG_INIT;
static pthread_key_t tslot_key;
static bool scope_once;
static _Atomic uint64_t tslot_used[SL_THREAD_SLOTS / 64];
__thread int sl__tslot __attribute__((tls_model("initial-exec"))); /* slot + 1 */
static _Atomic int tslot_full_logged;

static void peer_lock_take(void)
{
	/* Acquire pairs with the release in peer_lock_drop: the table's
	 * contents written by the previous holder are visible. */
	while (atomic_flag_test_and_set_explicit(&peer_lock, memory_order_acquire))
		;
}

static void peer_lock_drop(void)
{
	atomic_flag_clear_explicit(&peer_lock, memory_order_release);
}

static void tslot_free(void *v)
{
	unsigned s = (unsigned)(uintptr_t)v - 1;
	/* Release: this thread's last uses of the slot happen before the next
	 * owner's (acquire in tslot_get). */
	atomic_fetch_and_explicit(&tslot_used[s / 64], ~((uint64_t)1 << (s % 64)),
				  memory_order_release);
}

/* Allocate the tables and register the fork and thread-exit handlers (once);
 * clear the tables. Not thread-safe: init only. Returns 0 or -1. */
int sl__scope_init_unsync(void)
{
	/* The fds' per=peer pins, sized by the rules (a re-init, in tests,
	 * maps them anew). */
	size_t want = (size_t)sl__fd_cap * sl__st.n_peer_rules * sizeof(*sl__fd_peer);
	if (sl__fd_peer != NULL && want != fd_peer_bytes) {
		munmap((void *)sl__fd_peer, fd_peer_bytes);
		sl__fd_peer = NULL;
	}
	if (want != 0 && sl__fd_peer == NULL) {
		sl__fd_peer = sl__map(want);
		if (sl__fd_peer == NULL)
			return -1;
		fd_peer_bytes = want;
	} else if (sl__fd_peer != NULL) {
		memset((void *)sl__fd_peer, 0, fd_peer_bytes);
	}
	atomic_store_explicit(&fd_pinned, 0, memory_order_relaxed);
	if (!scope_once) {
		peers = sl__map(sizeof(struct peer_ent) * SL_PEER_SLOTS);
		sl__peer_base = (char *)peers;
		if (peers == NULL || pthread_key_create(&tslot_key, tslot_free) != 0)
			return -1;
		pthread_atfork(peer_lock_take, peer_lock_drop, peer_lock_drop);
		scope_once = true;
		return 0; /* a fresh mapping and untouched slots: zero already */
	}
	sl__scope_reset_unsync();
	return 0;
}

void sl__scope_reset_unsync(void)
{
	if (peers != NULL)
		memset(peers, 0, sizeof(struct peer_ent) * SL_PEER_SLOTS);
	for (size_t i = 0; i < SL_THREAD_SLOTS / 64; i++)
		atomic_store_explicit(&tslot_used[i], 0, memory_order_relaxed);
	sl__tslot = 0;
}

void sl__scope_after_fork_unsync(void)
{
	/* Only the forking thread lives on in the child: the other threads'
	 * slots would never be freed (their thread-exit handlers never run). */
	for (size_t i = 0; i < SL_THREAD_SLOTS / 64; i++) {
		uint64_t own = sl__tslot != 0 && (size_t)(sl__tslot - 1) / 64 == i
				       ? (uint64_t)1 << ((sl__tslot - 1) % 64)
				       : 0;
		atomic_store_explicit(&tslot_used[i], own, memory_order_relaxed);
	}
}

/* This thread's slot of the per-thread pool, or -1 if the pool is full. */
static int tslot_get(void)
{
	if (sl__tslot != 0)
		return sl__tslot - 1;
	for (unsigned w = 0; w < SL_THREAD_SLOTS / 64; w++) {
		uint64_t used = atomic_load_explicit(&tslot_used[w], memory_order_relaxed);
		while (~used != 0) {
			unsigned b = (unsigned)__builtin_ctzll(~used);
			/* Acquire pairs with the release in tslot_free. */
			if (!atomic_compare_exchange_weak_explicit(&tslot_used[w], &used,
								   used | ((uint64_t)1 << b),
								   memory_order_acquire,
								   memory_order_relaxed))
				continue;
			int s = (int)(w * 64 + b);
			sl__rules_reset_row(&sl__st.thread_lims[(size_t)s * sl__st.n_thread_rules],
					    SL_SCOPE_THREAD);
			sl__tslot = s + 1;
			pthread_setspecific(tslot_key, (void *)(uintptr_t)(s + 1));
			return s;
		}
	}
	if (!atomic_exchange_explicit(&tslot_full_logged, 1, memory_order_relaxed))
		sl_log(SL_LOG_WARN,
		       "more than %d threads with per=thread rules: the rest share "
		       "per-process limiters",
		       SL_THREAD_SLOTS);
	return -1;
}

/* True if e may be in use outside the lock: pinned, or holding conns
 * slots. Under the lock. */
static bool peer_pinned(const struct peer_ent *e)
{
	/* Acquire pairs with the release in peer_unpin_ent: the last
	 * user's accesses to e->lim happen before it is re-initialised. */
	return atomic_load_explicit(&e->pins, memory_order_acquire) != 0 ||
	       (e->lim.kind == SL_KIND_CONC && sl_conc_held(&e->lim.u.conc) != 0);
}

static void peer_unpin_ent(struct peer_ent *e)
{
	/* Release: this user's accesses to e->lim happen before an evictor's
	 * re-initialisation (acquire in peer_pinned). */
	atomic_fetch_sub_explicit(&e->pins, 1, memory_order_release);
}

/* Drop a pin an fd held (sl__peer_fd_lim), and its count among the entries
 * fds pin. */
static void peer_fd_unpin(struct peer_ent *e)
{
	if (atomic_fetch_sub_explicit(&e->fdpins, 1, memory_order_relaxed) == 1)
		atomic_fetch_sub_explicit(&fd_pinned, 1, memory_order_relaxed);
	peer_unpin_ent(e);
}

/* The entry whose limiter is l, or NULL if l is not in the peer table. */
static struct peer_ent *peer_of(struct sl_limiter *l)
{
	uintptr_t off = (uintptr_t)l - (uintptr_t)peers;
	if (peers == NULL || off >= sizeof(struct peer_ent) * SL_PEER_SLOTS)
		return NULL;
	return (struct peer_ent *)l; /* lim is the first member */
}

void sl__peer_pin(struct sl_limiter *l)
{
	struct peer_ent *e = peer_of(l);
	/* Relaxed, outside the lock: the caller's own pin keeps the count
	 * above zero, so no evictor can be deciding on this entry. */
	if (e != NULL)
		atomic_fetch_add_explicit(&e->pins, 1, memory_order_relaxed);
}

void sl__peer_unpin(struct sl_limiter *l)
{
	struct peer_ent *e = peer_of(l);
	if (e != NULL)
		peer_unpin_ent(e);
}

void sl__peer_unpin_call(struct sl_call *c)
{
	for (uint32_t rest = c->pinned; rest != 0; rest &= rest - 1) {
		uint16_t p = c->pin[__builtin_ctz(rest)];
		if (p != SL_PIN_NONE)
			peer_unpin_ent(&peers[p]);
	}
	c->pinned = 0;
}

/* The entry of rule i for the peer address `addr` (its port left out),
 * found or made (evicting one clock-style), pinned once more; NULL if every
 * entry around the address's home is pinned. */
static bool peer_busy(const void *e, void *ctx)
{
	(void)ctx;
	return peer_pinned(e);
}

static struct peer_ent *peer_find_pin(unsigned i, const struct sl_addr *addr)
{
	const struct sl_peer_table t = {.base = peers,
					.n = SL_PEER_SLOTS,
					.stride = sizeof(struct peer_ent),
					.slot_off = offsetof(struct peer_ent, slot),
					.busy = peer_busy};
	bool fresh;
	peer_lock_take();
	const long k = sl_peer_find(&t, i, 0, addr, &fresh);
	struct peer_ent *found = k >= 0 ? &peers[k] : NULL;
	if (fresh) /* unpinned: no other thread reads it (see the file comment) */
		sl__limiter_reset(&found->lim, i, sl__clock_ns());
	if (found != NULL)
		/* Relaxed: under the lock, which every evictor takes. */
		atomic_fetch_add_explicit(&found->pins, 1, memory_order_relaxed);
	peer_lock_drop();
	return found;
}

/* The per-peer limiter of rule i for call c's peer, its entry pinned for
 * the call; the rule's process limiter if the table is full of pinned
 * entries around the peer's home (for the rest of the call too). */
static struct sl_limiter *peer_get(struct sl_call *c, unsigned i)
{
	if ((c->pinned >> i) & 1)
		return c->pin[i] != SL_PIN_NONE ? &peers[c->pin[i]].lim : sl__st.rule_lim[i];
	struct peer_ent *found = peer_find_pin(i, c->peer);
	c->pinned |= (uint32_t)1 << i;
	c->pin[i] = found != NULL ? (uint16_t)(found - peers) : SL_PIN_NONE;
	return found != NULL ? &found->lim : sl__st.rule_lim[i];
}

/*
 * The fast paths' per=peer limiters (xfer.h): each connected fd keeps the
 * entry of each per=peer rule pinned in sl__fd_peer ([sl__fd_cap][n_peer_rules],
 * entry index + 1, 0: none yet), from its first fast call until its record
 * is rewritten or it is closed (sl__peer_fd_drop), so that a call finds its
 * limiter with one load, never hashing the address. At most FD_PIN_MAX
 * distinct entries are pinned that way (entries with fd pins, fd_pinned):
 * past it calls take the general path, whose per-call pins leave the rest
 * of the table to eviction as before. A program that closes an fd while
 * another thread sends on it may have that call charge an entry evicted
 * meanwhile (once, the accounting only: the memory stays the table's).
 */

struct sl_limiter *sl__peer_fd_lim(int fd, unsigned i, const struct sl_addr *peer)
{
	if (sl__fd_peer == NULL || peer->family == 0)
		return NULL;
	struct sl_limiter *l = sl__peer_fd_cached(fd, i);
	if (__builtin_expect(l != NULL, 1))
		return l;
	_Atomic uint32_t *slot =
		&sl__fd_peer[(size_t)fd * sl__st.n_peer_rules + sl__st.scope_slot[i]];
	if (atomic_load_explicit(&fd_pinned, memory_order_relaxed) >= FD_PIN_MAX)
		return NULL;
	struct peer_ent *found = peer_find_pin(i, peer);
	if (found == NULL)
		return NULL;
	if (atomic_fetch_add_explicit(&found->fdpins, 1, memory_order_relaxed) == 0)
		atomic_fetch_add_explicit(&fd_pinned, 1, memory_order_relaxed);
	uint32_t none = 0;
	const uint32_t mine = (uint32_t)(found - peers) + 1;
	/* Release: publishes the pin. Acquire: if the 0 was a record
	 * rewrite's second drop (fd.c: rec_rewrite), the new record is
	 * visible below. Another thread may have attached the fd first: then
	 * its entry serves, and this pin goes. */
	if (!atomic_compare_exchange_strong_explicit(slot, &none, mine, memory_order_acq_rel,
						     memory_order_acquire)) {
		peer_fd_unpin(found);
		return &peers[none - 1].lim;
	}
	/* The record rewritten meanwhile (a connect elsewhere moved the fd
	 * to another peer): the pin is not the fd's; the general path
	 * decides this call. */
	struct sl_addr now_peer = *peer;
	now_peer.port = 0;
	if (memcmp(&now_peer, &found->slot.key, sizeof(now_peer)) != 0) {
		uint32_t expect = mine;
		if (atomic_compare_exchange_strong_explicit(slot, &expect, 0, memory_order_acq_rel,
							    memory_order_relaxed))
			peer_fd_unpin(found);
		return NULL;
	}
	return &found->lim;
}

void sl__peer_fd_drop(int fd)
{
	if (sl__fd_peer == NULL || (unsigned)fd >= sl__fd_cap)
		return;
	for (uint32_t k = 0; k < sl__st.n_peer_rules; k++) {
		_Atomic uint32_t *slot = &sl__fd_peer[(size_t)fd * sl__st.n_peer_rules + k];
		/* Relaxed test first: most fds pin nothing. */
		if (atomic_load_explicit(slot, memory_order_relaxed) == 0)
			continue;
		uint32_t e = atomic_exchange_explicit(slot, 0, memory_order_acq_rel);
		if (e != 0)
			peer_fd_unpin(&peers[e - 1]);
	}
}

/* sl__limiter for the scopes other than process (not redis=KEY rules). */
struct sl_limiter *sl__limiter_scoped(struct sl_call *c, unsigned i)
{
	int fd = c->fd;
	const struct sl_rule *r = &sl__st.policy.rules[i];
	struct sl_limiter *l = NULL;
	switch (r->scope) {
	case SL_SCOPE_THREAD: {
		if (tslot_get() >= 0)
			l = sl__thread_lim(i);
		break;
	}
	case SL_SCOPE_FD:
		if (r->op != SL_OP_CONNS && (unsigned)fd < sl__fd_cap && sl__st.fd_lims != NULL)
			l = sl__fd_lim(fd, i);
		break;
	case SL_SCOPE_PEER:
		if (c->peer != NULL && c->peer->family != 0)
			return peer_get(c, i);
		break;
	default:
		break;
	}
	return l != NULL ? l : sl__st.rule_lim[i];
}
