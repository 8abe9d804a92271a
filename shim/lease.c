/* SPDX-License-Identifier: MIT */
/*
 * lease.c - fleet-wide limits (redis=KEY): token leasing from Redis, the
 * background renewal thread, and the on-error modes.
 *
 * The authoritative token bucket of a redis=KEY rule lives on the Redis
 * server (redis_gcra.c). Asking it on every call would put a network round
 * trip on the hot path, so each process leases a batch of units and spends
 * it locally: the batch sits in a "bank", a core concurrency limiter of
 * capacity L (the rule's lease=, by default max(burst, 10 ms of the rate))
 * whose free slots are the units in hand. Spending is sl_limiter_acquire on
 * the bank, the same lock-free call (one CAS) as any local rule; depositing
 * a lease is a release. The bank never holds more than L, so
 *
 *   units admitted fleet-wide in any interval of length t
 *     <= rate * t + max(burst, L)       (the server's bucket)
 *      + N * L                          (what N processes held at its start)
 *
 * which is the precision traded for throughput: larger leases mean fewer
 * round trips (about rate / (L/2) per second across the fleet, since a bank
 * is topped up when half empty) and a looser short-term bound.
 *
 * The renewal thread (one per process, started on the first throttled call
 * of a Redis rule, so a program that never makes one never connects) tops
 * each bank up to L when it falls to L/2 or below, polling every quarter of
 * a lease's worth of time (1 ms to 50 ms). A partial grant (the server's
 * bucket is empty) is retried when the server says one more unit will be
 * there. Unused units expire: when a bank has been neither spent from nor
 * topped up for its TTL (ten leases' worth of time, 100 ms to 2 s), it is
 * emptied and the rule goes dormant, so an idle process hoards nothing; the
 * next call wakes the thread and waits (up to 300 ms) for a fresh lease.
 * A dying process takes at most L units with it, which the server's bucket
 * refills in L / rate.
 *
 * The hot path finds a rule's current limiter with one acquire load of
 * sl__ls.cur[i]: the bank while Redis answers; while it does not (connect
 * or command failed or took longer than 250 ms), the rule's on-error mode:
 *   local   the process's recent share (lease_share.c): a token bucket at
 *           what Redis granted it over the last 2 to 8 s, measured when the
 *           outage starts, so N processes stay near the fleet's rate rather
 *           than at N times it; sl__st.rule_lim[i] (the rule's whole rate)
 *           if no lease was ever granted, or for a host pool (the
 *           host-wide shared= limiter);
 *   open    a limiter that admits everything;
 *   closed  a limiter that refuses everything at once (SL_NEVER): calls
 *           fail with the rule's errno, whatever its action.
 * The thread reconnects with back-off (50 ms doubling to 1 s) and switches
 * back to the bank after its first successful lease.
 *
 * fork(): the child has no renewal thread and must not share the parent's
 * connection or its leased units. An atfork child handler closes the
 * child's copy of the socket, empties every bank and makes every rule
 * dormant; the child's first throttled call starts its own thread.
 *
 * A call that finds its bank empty kicks the thread (the top-up starts at
 * once rather than at the next poll) and retries after one unit's worth of
 * time (200 us to 5 ms), instead of act.c's generic doubling back-off.
 *
 * Host pools (shared=NAME with redis=KEY): the bank lives in the rule's
 * shared segment, and one process of the host, elected through the segment
 * (lease_pool.c), tends it for all; the others only spend from it and
 * follow the renewer's view of Redis (its state word) for on-error. A pool
 * never expires, and the bound above then counts hosts, not processes.
 *
 * The link to the server (redis_link.c) is one connection, a Redis
 * Cluster's nodes or a master found through Sentinel, as SLUICE_REDIS says.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "lease.h"
#include "lease_state.h"
#include "lease_pool.h"
#include "lease_share.h"
#include "log.h"
#include "shm.h"
#include "state.h"
#include "redis.h"
#include "record.h"
#include "redis_link.h"

struct sl_lease_state sl__ls = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Empty a bank: take every unit in it. */
void sl__lease_bank_drain(struct sl_limiter *b)
{
	for (;;) {
		uint64_t a = sl_limiter_available(b, 0);
		if (a == 0 || sl_limiter_acquire(b, a, 0, 0).verdict == SL_ADMIT)
			return;
	}
}

/* Put g leased units into a bank; what does not fit (the bank is full:
 * refunds raced the top-up) is dropped. */
static void bank_deposit(struct sl_limiter *b, uint64_t g)
{
	while (g > 0) {
		uint64_t held = sl_conc_held(&b->u.conc);
		uint64_t k = g < held ? g : held;
		if (k == 0 || sl_limiter_release(b, k) == SL_OK)
			return;
	}
}

/* Publish the limiter rule i uses from now on. Release: whatever the
 * thread did to it (a deposit) is visible to the calls that load it. */
void sl__lease_set(unsigned i, struct sl_limiter *l)
{
	atomic_store_explicit(&sl__ls.cur[i], l, memory_order_release);
	/* For `sluice stat`: on the fallback, or not (dormant counts as not:
	 * the next call asks Redis). Only into the published record: a private
	 * one is copied into the file by whichever thread publishes it
	 * (record.c), and a write here would race that copy; lease_main
	 * publishes before its first switch, so none is missed. Acquire:
	 * pairs with the publisher's release (the record as remapped).
	 * Relaxed: counters. */
	struct sl_rstats *s = sl__st.stats != NULL ? &sl__st.stats[i] : NULL;
	if (s == NULL || atomic_load_explicit(&sl__rec_state, memory_order_acquire) != SL_REC_FILE)
		return;
	const bool fb = l != sl__ls.rules[i].bk && l != &sl__ls.dormant;
	if (atomic_exchange_explicit(&s->redis_fallback, fb, memory_order_relaxed) != fb && fb)
		sl_count_add(&s->redis_fallbacks, 1);
}

/*
 * on-error=local: this process's recent share of the rate, from what Redis
 * granted it in the last window (2 to 8 s): units/window, burst at most a
 * lease. At least one lease per window, so that a process that was idle
 * can still make calls. It starts empty. With no grant yet (Redis never answered) there is
 * no share to go by: the rule's whole rate, its local limiter.
 */
static struct sl_limiter *lease_share(unsigned i, uint64_t now)
{
	struct sl_lease_rule *ls = &sl__ls.rules[i];
	if (ls->pool != NULL)
		/* A host pool: the host-wide limiter of shared=NAME, at the
		 * whole rate (the share of one process says nothing here). */
		return sl__st.rule_lim[i];
	uint64_t window_ns;
	uint64_t units = sl__share_recent(&ls->share, now, &window_ns);
	if (window_ns == 0)
		return sl__st.rule_lim[i];
	/* What is still in the bank was granted but not used (and is not
	 * spent during the outage): it is no part of the share. */
	uint64_t unused = sl_limiter_available(ls->bk, now);
	units = units > unused ? units - unused : 0;
	if (units < ls->cap)
		units = ls->cap;
	struct sl_params prm = {.kind = SL_KIND_TOKEN,
				.amount = units,
				.period_ns = window_ns,
				.burst = ls->burst < ls->cap ? ls->burst : ls->cap};
	/* Empty at the start: the units this process had in hand just before
	 * came from its bank, and the fleet bound has no room for a burst per
	 * process on top. */
	if (sl_tunable_retune(&ls->share_lim, &prm, now) != SL_OK ||
	    sl_limiter_charge(&ls->share_lim.head, prm.burst, now) != SL_OK)
		return sl__st.rule_lim[i];
	sl_log(SL_LOG_INFO,
	       "redis: rule %u: on-error=local at this process's share: %llu in "
	       "%llu ms",
	       i + 1, (unsigned long long)units, (unsigned long long)(window_ns / 1000000u));
	return &ls->share_lim.head;
}

static struct sl_limiter *lease_fallback(unsigned i, uint64_t now)
{
	switch (sl__st.policy.rules[i].on_error) {
	case SL_ON_ERROR_OPEN:
		return &sl__ls.open;
	case SL_ON_ERROR_CLOSED:
		return &sl__ls.closed;
	default:
		return lease_share(i, now);
	}
}

/* Redis does not answer: every rule to its on-error mode (a rule already on
 * it stays, so a share is measured once per outage). */
static void lease_down(const char *why)
{
	uint64_t now = sl__clock_ns();
	for (uint32_t rest = sl__ls.mask; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		/* Relaxed: only this thread stores sl__ls.cur. */
		struct sl_limiter *cur = atomic_load_explicit(&sl__ls.cur[i], memory_order_relaxed);
		if (sl__ls.rules[i].pool != NULL && sl__ls.rules[i].renewing)
			/* Release: the pool's spenders switch on it. */
			atomic_store_explicit(&sl__ls.rules[i].pool->state, SL_POOL_DOWN,
					      memory_order_release);
		if (cur != sl__ls.rules[i].bk && cur != &sl__ls.dormant)
			continue;
		sl__lease_set(i, lease_fallback(i, now));
		if (sl__ls.state >= 0)
			sl_log(SL_LOG_WARN, "redis: %s: rule %u falls back to on-error=%s", why,
			       i + 1,
			       sl_on_error_name((enum sl_on_error)sl__st.policy.rules[i].on_error));
	}
	sl__ls.state = -1;
}

/*
 * Rule i is a host pool: is this process its renewer at now (lease_pool.c)?
 * If not, follow the renewer's view of Redis: the pool's bank while it is
 * up, the rule's on-error fallback while it is down; and come back within
 * a poll, to take over if the renewer goes silent. A pool never expires
 * (its units are every local process's): at most one lease per host sits
 * unspent.
 */

static bool lease_pool_renewer(unsigned i, uint64_t now, struct sl_limiter *cur, uint64_t *next)
{
	struct sl_lease_rule *ls = &sl__ls.rules[i];
	bool took = false;
	/* Relaxed: a flag; at worst one more pass renews before it is seen. */
	bool mine = !atomic_load_explicit(&sl__ls.exiting, memory_order_relaxed) &&
		    sl__pool_renew_role(ls->pool, (uint32_t)getpid(), now, ls->stale_ns, &took);
	if (took)
		sl_log(SL_LOG_INFO, "redis: rule %u: this process renews the host pool", i + 1);
	else if (!mine && ls->renewing)
		sl_log(SL_LOG_INFO, "redis: rule %u: process %u renews the host pool now", i + 1,
		       sl__pool_renewer(ls->pool));
	ls->renewing = mine;
	if (!mine) {
		/* Acquire: pairs with the renewer's release store of state. */
		uint32_t st = atomic_load_explicit(&ls->pool->state, memory_order_acquire);
		struct sl_limiter *want = st == SL_POOL_DOWN ? lease_fallback(i, now) : ls->bk;
		if (cur != want)
			sl__lease_set(i, want);
		if (now + ls->poll_ns < *next)
			*next = now + ls->poll_ns;
	}
	return mine;
}

/*
 * Look after rule i's bank at now: expire it if idle, top it up if half
 * empty. `wanted`: a call found the rule dormant. Lowers *next to when the
 * rule wants the thread again. Returns -1 if Redis failed (reason in why).
 */
static int lease_tend(unsigned i, uint64_t now, bool wanted, uint64_t *next, char *why,
		      size_t whylen)
{
	struct sl_lease_rule *ls = &sl__ls.rules[i];
	/* Relaxed: only this thread stores sl__ls.cur. */
	struct sl_limiter *cur = atomic_load_explicit(&sl__ls.cur[i], memory_order_relaxed);
	if (cur == &sl__ls.dormant && !wanted)
		return 0;
	if (ls->pool != NULL && !lease_pool_renewer(i, now, cur, next))
		return 0; /* another process renews the host pool */
	uint64_t level = sl_limiter_available(ls->bk, now);
	if (level < ls->last_level || wanted)
		ls->last_use_ns = now;
	if (ls->pool == NULL && cur == ls->bk && now - ls->last_use_ns >= ls->ttl_ns &&
	    now - ls->last_grant_ns >= ls->ttl_ns) {
		/* Unused for a TTL: the units expire, the rule sleeps. */
		sl__lease_set(i, &sl__ls.dormant);
		sl__lease_bank_drain(ls->bk);
		ls->last_level = 0;
		sl_log(SL_LOG_DEBUG, "redis: rule %u idle: lease expired", i + 1);
		return 0;
	}
	if (level * 2 <= ls->cap && now >= ls->retry_at_ns) {
		uint64_t want = ls->cap - level, got = 0, wait_ns = 0;
		if (sl__rlink_take(sl__ls.conn, ls->key, ls->t_us, ls->tau_us, want, &got, &wait_ns,
				   why, whylen) < 0)
			return -1;
		now = sl__clock_ns();
		bank_deposit(ls->bk, got);
		if (ls->pool != NULL)
			/* Release: pairs with the spenders' acquire load. */
			atomic_store_explicit(&ls->pool->state, SL_POOL_UP, memory_order_release);
		if (got > 0) {
			ls->last_grant_ns = now;
			sl__share_add(&ls->share, now, got);
		}
		/* Short of units: come back when half a lease will be there
		 * (the first unit after wait_ns, the others one T apart), so
		 * that contention does not turn into one round trip per unit. */
		double more = (double)wait_ns +
			      (double)(ls->cap / 2 > 1 ? ls->cap / 2 - 1 : 0) * ls->t_us * 1000.0;
		uint64_t most = ls->worth_ns / 2 > ls->poll_ns ? ls->worth_ns / 2 : ls->poll_ns;
		ls->retry_at_ns = got < want ? now + sl__lease_clamp(more < (double)most
									     ? (uint64_t)more
									     : most,
								     SL_LEASE_RETRY_MIN_NS, most)
					     : 0;
		if (got < want && ls->retry_at_ns < *next)
			*next = ls->retry_at_ns;
		level = sl_limiter_available(ls->bk, now);
	}
	if (cur != ls->bk)
		sl__lease_set(i, ls->bk); /* woken, or Redis is back */
	ls->last_level = level;
	if (now + ls->poll_ns < *next)
		*next = now + ls->poll_ns;
	return 0;
}

static void lease_wait_until(uint64_t t_ns)
{
	struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000u),
			      .tv_nsec = (long)(t_ns % 1000000000u)};
	pthread_cond_timedwait(&sl__ls.cv, &sl__ls.mu, &ts);
}

static void *lease_main(void *arg)
{
	(void)arg;
	sl__busy = 1; /* nothing this thread does is throttled */
	/* The record is published before any switch this thread counts in it
	 * (sl__lease_set). */
	sl__rec_publish();
	char why[192];
	uint64_t backoff = SL_LEASE_BACKOFF_MIN_NS, reconnect_at = 0;
	pthread_mutex_lock(&sl__ls.mu);
	while (!sl__ls.stop) {
		pthread_mutex_unlock(&sl__ls.mu);
		uint64_t now = sl__clock_ns(), next = now + SL_LEASE_IDLE_NS;
		/* Relaxed: the bits carry no data; the mutex orders the wakeup. */
		uint32_t wanted = atomic_exchange_explicit(&sl__ls.wanted, 0, memory_order_relaxed);
		if (sl__ls.conn == NULL && now >= reconnect_at) {
			sl__ls.conn = sl__rlink_open(&sl__ls.cfg, SL_LEASE_TIMEOUT_NS, why,
						     sizeof(why));
			if (sl__ls.conn == NULL)
				lease_down(why);
		}
		for (uint32_t rest = sl__ls.conn != NULL ? sl__ls.mask : 0; rest != 0;
		     rest &= rest - 1) {
			unsigned i = (unsigned)__builtin_ctz(rest);
			if (lease_tend(i, now, (wanted >> i) & 1u, &next, why, sizeof(why)) < 0) {
				sl__rlink_close(sl__ls.conn);
				sl__ls.conn = NULL;
				lease_down(why);
				break;
			}
		}
		if (sl__ls.conn != NULL) {
			if (sl__ls.state != 1) {
				char where[SL_REDIS_TEXT_MAX + SL_PATH_MAX];
				sl_redis_format(&sl__ls.cfg, where, sizeof(where));
				sl_log(SL_LOG_INFO, "redis: leasing from %s", where);
			}
			sl__ls.state = 1;
			backoff = SL_LEASE_BACKOFF_MIN_NS;
		} else {
			if (now >= reconnect_at) {
				reconnect_at = sl__clock_ns() + backoff;
				backoff = backoff * 2 < SL_LEASE_BACKOFF_MAX_NS
						  ? backoff * 2
						  : SL_LEASE_BACKOFF_MAX_NS;
			}
			next = reconnect_at < next ? reconnect_at : next;
		}
		pthread_mutex_lock(&sl__ls.mu);
		/* Relaxed: re-checked under the mutex that wakers signal with. */
		if (!sl__ls.stop && atomic_load_explicit(&sl__ls.wanted, memory_order_relaxed) == 0)
			lease_wait_until(next);
	}
	pthread_mutex_unlock(&sl__ls.mu);
	sl__rlink_close(sl__ls.conn);
	sl__ls.conn = NULL;
	return NULL;
}

/* Start the thread if it is not running. Call with sl__ls.mu held. The
 * thread blocks every signal: they belong to the program's threads. */
static void lease_start_locked(void)
{
	if (sl__ls.running || sl__ls.stop)
		return;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int e = pthread_create(&sl__ls.tid, NULL, lease_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e != 0) {
		sl_log(SL_LOG_ERROR, "redis: cannot start the lease thread: %s", strerror(e));
		return;
	}
	sl__ls.running = true;
}

/* Tell the thread that rule i wants units now (starting it if needed). */
static void lease_kick(unsigned i)
{
	/* Relaxed: the mutex below orders it with the thread's check. */
	atomic_fetch_or_explicit(&sl__ls.wanted, 1u << i, memory_order_relaxed);
	pthread_mutex_lock(&sl__ls.mu);
	lease_start_locked();
	pthread_cond_signal(&sl__ls.cv);
	pthread_mutex_unlock(&sl__ls.mu);
}

/* A call found rule i dormant: wake (or start) the thread and wait a
 * little for a lease. Returns the limiter to use. */
static struct sl_limiter *lease_wake(unsigned i)
{
	lease_kick(i);
	uint64_t end = sl__clock_ns() + SL_LEASE_FIRST_WAIT_NS;
	struct sl_limiter *l;
	/* Acquire: pairs with lease_set's release. */
	while ((l = atomic_load_explicit(&sl__ls.cur[i], memory_order_acquire)) ==
		       &sl__ls.dormant &&
	       sl__clock_ns() < end) {
		struct timespec ts = {.tv_sec = 0, .tv_nsec = 200000};
		nanosleep(&ts, NULL);
	}
	return l == &sl__ls.dormant ? sl__ls.rules[i].bk : l;
}

struct sl_limiter *sl__lease_limiter(unsigned i)
{
	/* Acquire: pairs with lease_set's release, so the limiter found
	 * (and a bank's deposit) is complete. */
	struct sl_limiter *l = atomic_load_explicit(&sl__ls.cur[i], memory_order_acquire);
	if (__builtin_expect(l == &sl__ls.dormant, 0))
		l = lease_wake(i);
	return l;
}

uint64_t sl__lease_retry_ns(unsigned i)
{
	lease_kick(i);
	return sl__ls.rules[i].hint_ns;
}

/* Stop and join the thread (re-init only). */
