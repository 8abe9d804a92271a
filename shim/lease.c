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
 * lease_cur[i]: the bank while Redis answers; while it does not (connect
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
#include "lease_pool.h"
#include "lease_share.h"
#include "log.h"
#include "shm.h"
#include "state.h"
#include "redis.h"
#include "redis_link.h"

#define SL_LEASE_POLL_MIN_NS 1000000ull       /* 1 ms */
#define SL_LEASE_POLL_MAX_NS 50000000ull      /* 50 ms */
#define SL_LEASE_TTL_MIN_NS 100000000ull      /* 100 ms */
#define SL_LEASE_TTL_MAX_NS 2000000000ull     /* 2 s */
#define SL_LEASE_RETRY_MIN_NS 100000ull       /* 100 us */
#define SL_LEASE_BACKOFF_MIN_NS 50000000ull   /* 50 ms */
#define SL_LEASE_BACKOFF_MAX_NS 1000000000ull /* 1 s */
#define SL_LEASE_TIMEOUT_NS 250000000ull      /* connect and each command */
#define SL_LEASE_FIRST_WAIT_NS 300000000ull   /* a call waiting for a first lease */
#define SL_LEASE_IDLE_NS 1000000000ull        /* the thread wakes at least this often */
#define SL_LEASE_HINT_MIN_NS 200000ull        /* retry hint for a call the bank refused */
#define SL_LEASE_HINT_MAX_NS 5000000ull
#define SL_LEASE_STALE_MIN_NS 20000000ull  /* a pool renewer's silence before takeover */
#define SL_LEASE_SHARE_MIN_NS 250000000ull /* a share bucket: 1/8 of its window */
#define SL_LEASE_SHARE_MAX_NS 1000000000ull

struct lease_rule {
	struct sl_limiter bank; /* concurrency limiter: free slots = units in hand */
	/* The bank in use: &bank, or a host pool's in its shared segment. */
	struct sl_limiter *bk;
	struct sl_shm_shared *pool; /* shared=NAME with redis=KEY, else NULL */
	uint64_t stale_ns;          /* a pool renewer silent this long is replaced */
	bool renewing;              /* thread only: this process renews the pool */
	uint64_t cap;               /* L */
	uint64_t poll_ns, ttl_ns, hint_ns;
	uint64_t worth_ns;               /* time the server's rate takes to make L units */
	double t_us, tau_us;             /* the server's GCRA: us per unit, burst tolerance */
	char key[SL_REDIS_KEY_MAX + 16]; /* "sluice:{KEY}" */
	/* Renewal thread only. */
	uint64_t retry_at_ns, last_grant_ns, last_use_ns, last_level;
	struct sl_share share; /* what Redis granted lately */
	/* on-error=local: the share this process falls back to (lease_share.c);
	 * tunable, since calls may still be in it when it is retuned. */
	struct sl_tunable share_lim;
	uint64_t burst; /* the rule's */
};

static struct lease_rule leases[SL_MAX_RULES];
/* The limiter each Redis rule uses now: &bank, a fallback, or &lim_dormant. */
static struct sl_limiter *_Atomic lease_cur[SL_MAX_RULES];
static struct sl_limiter lim_open;    /* admits everything */
static struct sl_limiter lim_closed;  /* kind NONE: every acquire is SL_NEVER */
static struct sl_limiter lim_dormant; /* a marker, never acquired from */
static uint32_t lease_rules;          /* rules with redis=KEY; init only */
static struct sl_redis lease_cfg;

/* The thread's life: mutex and condition variable, never held across
 * anything slow. */
static pthread_mutex_t lease_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lease_cv;
static bool lease_once;
static bool lease_running, lease_stop; /* under lease_mu */
static pthread_t lease_tid;
static _Atomic uint32_t lease_wanted; /* dormant rules a call woke */
static struct sl_rlink *lease_conn;   /* the thread's; the fork child's */
static int lease_state;               /* thread only: 0 unknown, 1 up, -1 down */

static uint64_t clamp_u64(uint64_t v, uint64_t lo, uint64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Empty a bank: take every unit in it. */
static void bank_drain(struct sl_limiter *b)
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
static void lease_set(unsigned i, struct sl_limiter *l)
{
	atomic_store_explicit(&lease_cur[i], l, memory_order_release);
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
	struct lease_rule *ls = &leases[i];
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
		return &lim_open;
	case SL_ON_ERROR_CLOSED:
		return &lim_closed;
	default:
		return lease_share(i, now);
	}
}

/* Redis does not answer: every rule to its on-error mode (a rule already on
 * it stays, so a share is measured once per outage). */
static void lease_down(const char *why)
{
	uint64_t now = sl__clock_ns();
	for (uint32_t rest = lease_rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		/* Relaxed: only this thread stores lease_cur. */
		struct sl_limiter *cur = atomic_load_explicit(&lease_cur[i], memory_order_relaxed);
		if (leases[i].pool != NULL && leases[i].renewing)
			/* Release: the pool's spenders switch on it. */
			atomic_store_explicit(&leases[i].pool->state, SL_POOL_DOWN,
					      memory_order_release);
		if (cur != leases[i].bk && cur != &lim_dormant)
			continue;
		lease_set(i, lease_fallback(i, now));
		if (lease_state >= 0)
			sl_log(SL_LOG_WARN, "redis: %s: rule %u falls back to on-error=%s", why,
			       i + 1,
			       sl_on_error_name((enum sl_on_error)sl__st.policy.rules[i].on_error));
	}
	lease_state = -1;
}

/*
 * Rule i is a host pool: is this process its renewer at now (lease_pool.c)?
 * If not, follow the renewer's view of Redis: the pool's bank while it is
 * up, the rule's on-error fallback while it is down; and come back within
 * a poll, to take over if the renewer goes silent. A pool never expires
 * (its units are every local process's): at most one lease per host sits
 * unspent.
 */
static _Atomic bool lease_exiting; /* at exit: renew no pool */

static bool lease_pool_renewer(unsigned i, uint64_t now, struct sl_limiter *cur, uint64_t *next)
{
	struct lease_rule *ls = &leases[i];
	bool took = false;
	/* Relaxed: a flag; at worst one more pass renews before it is seen. */
	bool mine = !atomic_load_explicit(&lease_exiting, memory_order_relaxed) &&
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
			lease_set(i, want);
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
	struct lease_rule *ls = &leases[i];
	/* Relaxed: only this thread stores lease_cur. */
	struct sl_limiter *cur = atomic_load_explicit(&lease_cur[i], memory_order_relaxed);
	if (cur == &lim_dormant && !wanted)
		return 0;
	if (ls->pool != NULL && !lease_pool_renewer(i, now, cur, next))
		return 0; /* another process renews the host pool */
	uint64_t level = sl_limiter_available(ls->bk, now);
	if (level < ls->last_level || wanted)
		ls->last_use_ns = now;
	if (ls->pool == NULL && cur == ls->bk && now - ls->last_use_ns >= ls->ttl_ns &&
	    now - ls->last_grant_ns >= ls->ttl_ns) {
		/* Unused for a TTL: the units expire, the rule sleeps. */
		lease_set(i, &lim_dormant);
		bank_drain(ls->bk);
		ls->last_level = 0;
		sl_log(SL_LOG_DEBUG, "redis: rule %u idle: lease expired", i + 1);
		return 0;
	}
	if (level * 2 <= ls->cap && now >= ls->retry_at_ns) {
		uint64_t want = ls->cap - level, got = 0, wait_ns = 0;
		if (sl__rlink_take(lease_conn, ls->key, ls->t_us, ls->tau_us, want, &got, &wait_ns,
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
		ls->retry_at_ns = got < want ? now + clamp_u64(more < (double)most ? (uint64_t)more
										   : most,
							       SL_LEASE_RETRY_MIN_NS, most)
					     : 0;
		if (got < want && ls->retry_at_ns < *next)
			*next = ls->retry_at_ns;
		level = sl_limiter_available(ls->bk, now);
	}
	if (cur != ls->bk)
		lease_set(i, ls->bk); /* woken, or Redis is back */
	ls->last_level = level;
	if (now + ls->poll_ns < *next)
		*next = now + ls->poll_ns;
	return 0;
}

static void lease_wait_until(uint64_t t_ns)
{
	struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000u),
			      .tv_nsec = (long)(t_ns % 1000000000u)};
	pthread_cond_timedwait(&lease_cv, &lease_mu, &ts);
}

static void *lease_main(void *arg)
{
	(void)arg;
	sl__busy = 1; /* nothing this thread does is throttled */
	char why[192];
	uint64_t backoff = SL_LEASE_BACKOFF_MIN_NS, reconnect_at = 0;
	pthread_mutex_lock(&lease_mu);
	while (!lease_stop) {
		pthread_mutex_unlock(&lease_mu);
		uint64_t now = sl__clock_ns(), next = now + SL_LEASE_IDLE_NS;
		/* Relaxed: the bits carry no data; the mutex orders the wakeup. */
		uint32_t wanted = atomic_exchange_explicit(&lease_wanted, 0, memory_order_relaxed);
		if (lease_conn == NULL && now >= reconnect_at) {
			lease_conn = sl__rlink_open(&lease_cfg, SL_LEASE_TIMEOUT_NS, why,
						    sizeof(why));
			if (lease_conn == NULL)
				lease_down(why);
		}
		for (uint32_t rest = lease_conn != NULL ? lease_rules : 0; rest != 0;
		     rest &= rest - 1) {
			unsigned i = (unsigned)__builtin_ctz(rest);
			if (lease_tend(i, now, (wanted >> i) & 1u, &next, why, sizeof(why)) < 0) {
				sl__rlink_close(lease_conn);
				lease_conn = NULL;
				lease_down(why);
				break;
			}
		}
		if (lease_conn != NULL) {
			if (lease_state != 1) {
				char where[SL_REDIS_TEXT_MAX + SL_PATH_MAX];
				sl_redis_format(&lease_cfg, where, sizeof(where));
				sl_log(SL_LOG_INFO, "redis: leasing from %s", where);
			}
			lease_state = 1;
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
		pthread_mutex_lock(&lease_mu);
		/* Relaxed: re-checked under the mutex that wakers signal with. */
		if (!lease_stop && atomic_load_explicit(&lease_wanted, memory_order_relaxed) == 0)
			lease_wait_until(next);
	}
	pthread_mutex_unlock(&lease_mu);
	sl__rlink_close(lease_conn);
	lease_conn = NULL;
	return NULL;
}

/* Start the thread if it is not running. Call with lease_mu held. The
 * thread blocks every signal: they belong to the program's threads. */
static void lease_start_locked(void)
{
	if (lease_running || lease_stop)
		return;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int e = pthread_create(&lease_tid, NULL, lease_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e != 0) {
		sl_log(SL_LOG_ERROR, "redis: cannot start the lease thread: %s", strerror(e));
		return;
	}
	lease_running = true;
}

/* Tell the thread that rule i wants units now (starting it if needed). */
static void lease_kick(unsigned i)
{
	/* Relaxed: the mutex below orders it with the thread's check. */
	atomic_fetch_or_explicit(&lease_wanted, 1u << i, memory_order_relaxed);
	pthread_mutex_lock(&lease_mu);
	lease_start_locked();
	pthread_cond_signal(&lease_cv);
	pthread_mutex_unlock(&lease_mu);
}

/* A call found rule i dormant: wake (or start) the thread and wait a
 * little for a lease. Returns the limiter to use. */
static struct sl_limiter *lease_wake(unsigned i)
{
	lease_kick(i);
	uint64_t end = sl__clock_ns() + SL_LEASE_FIRST_WAIT_NS;
	struct sl_limiter *l;
	/* Acquire: pairs with lease_set's release. */
	while ((l = atomic_load_explicit(&lease_cur[i], memory_order_acquire)) == &lim_dormant &&
	       sl__clock_ns() < end) {
		struct timespec ts = {.tv_sec = 0, .tv_nsec = 200000};
		nanosleep(&ts, NULL);
	}
	return l == &lim_dormant ? leases[i].bk : l;
}

struct sl_limiter *sl__lease_limiter(unsigned i)
{
	/* Acquire: pairs with lease_set's release, so the limiter found
	 * (and a bank's deposit) is complete. */
	struct sl_limiter *l = atomic_load_explicit(&lease_cur[i], memory_order_acquire);
	if (__builtin_expect(l == &lim_dormant, 0))
		l = lease_wake(i);
	return l;
}

uint64_t sl__lease_retry_ns(unsigned i)
{
	lease_kick(i);
	return leases[i].hint_ns;
}

/* Stop and join the thread (re-init only). */
static void lease_stop_thread(void)
{
	pthread_mutex_lock(&lease_mu);
	bool running = lease_running;
	lease_stop = true;
	pthread_cond_signal(&lease_cv);
	pthread_mutex_unlock(&lease_mu);
	if (running)
		pthread_join(lease_tid, NULL);
	pthread_mutex_lock(&lease_mu);
	lease_running = false;
	lease_stop = false;
	pthread_mutex_unlock(&lease_mu);
}

/* Every rule dormant with an empty bank. */
static void lease_reset_banks(void)
{
	for (uint32_t rest = lease_rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		if (leases[i].pool == NULL) /* a pool's units are the host's */
			bank_drain(&leases[i].bank);
		leases[i].last_level = 0;
		leases[i].renewing = false;
		leases[i].retry_at_ns = 0;
		lease_set(i, &lim_dormant);
	}
}

/* The condition variable waits on CLOCK_MONOTONIC, like sl__clock_ns. */
static void lease_cv_init(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&lease_cv, &a);
	pthread_condattr_destroy(&a);
}

static void lease_atfork_prepare(void)
{
	pthread_mutex_lock(&lease_mu);
}

static void lease_atfork_parent(void)
{
	pthread_mutex_unlock(&lease_mu);
}

/* The child: no thread, not the parent's connection, not its units. */
static void lease_atfork_child(void)
{
	lease_running = false;
	lease_stop = false;
	sl__rlink_abandon(lease_conn);
	lease_conn = NULL;
	lease_state = 0;
	atomic_store_explicit(&lease_wanted, 0, memory_order_relaxed);
	lease_reset_banks();
	/* The parent's thread may have been waiting on the condition
	 * variable: the child's copy counts a waiter that does not exist
	 * here, so both are made anew rather than reused. */
	pthread_mutex_init(&lease_mu, NULL);
	lease_cv_init();
}

/* This process stops renewing its host pools, so that another takes over
 * at once instead of after stale_ns. */
static void lease_resign(void)
{
	for (uint32_t rest = lease_rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		if (leases[i].pool != NULL)
			sl__pool_resign(leases[i].pool, (uint32_t)getpid());
	}
}

void sl__lease_stop_unsync(void)
{
	lease_stop_thread();
	lease_resign();
	for (uint32_t rest = lease_rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		leases[i].pool = NULL; /* its segment is about to be unmapped */
		leases[i].bk = &leases[i].bank;
		lease_set(i, &lim_dormant);
	}
}

/* At exit: the lease thread may still run (it is never joined at exit),
 * so only the election word is touched. */
static void lease_atexit(void)
{
	/* Relaxed: see lease_pool_renewer. */
	atomic_store_explicit(&lease_exiting, true, memory_order_relaxed);
	lease_resign();
}

int sl__lease_init_unsync(const struct sl_policy *p)
{
	lease_stop_thread();
	sl__rlink_close(lease_conn);
	lease_conn = NULL;
	lease_state = 0;
	lease_rules = 0;
	lease_cfg = p->redis;
	for (uint32_t i = 0; i < p->n_rules && i < SL_MAX_RULES; i++) {
		const struct sl_rule *r = &p->rules[i];
		if (r->redis_key[0] == '\0')
			continue;
		struct lease_rule *ls = &leases[i];
		memset(ls, 0, sizeof(*ls));
		ls->cap = r->lease > r->burst ? r->lease : r->burst;
		struct sl_params prm = {.kind = SL_KIND_CONC, .amount = ls->cap};
		if (sl_limiter_init(&ls->bank, &prm, 0) != SL_OK)
			return -1;
		ls->bk = &ls->bank;
		if (r->shared[0] != '\0') {
			/* The host pool in shared=NAME's segment (init.c opened it). */
			ls->pool = sl__shm_shared_seg(i);
			if (ls->pool == NULL)
				return -1;
			ls->bk = &ls->pool->bank;
		}
		/* Worth of the lease in ns, and the server's GCRA in us. */
		unsigned __int128 lease_ns = (unsigned __int128)ls->cap * r->period_ns / r->amount;
		uint64_t worth = lease_ns > UINT64_MAX ? UINT64_MAX : (uint64_t)lease_ns;
		ls->worth_ns = worth;
		ls->poll_ns = clamp_u64(worth / 4, SL_LEASE_POLL_MIN_NS, SL_LEASE_POLL_MAX_NS);
		ls->ttl_ns = clamp_u64(worth > UINT64_MAX / 10 ? UINT64_MAX : worth * 10,
				       SL_LEASE_TTL_MIN_NS, SL_LEASE_TTL_MAX_NS);
		ls->hint_ns = clamp_u64(r->period_ns / r->amount, SL_LEASE_HINT_MIN_NS,
					SL_LEASE_HINT_MAX_NS);
		ls->stale_ns = worth > SL_LEASE_STALE_MIN_NS ? worth : SL_LEASE_STALE_MIN_NS;
		ls->t_us = (double)r->period_ns / 1000.0 / (double)r->amount;
		ls->tau_us = (double)(r->burst > ls->cap ? r->burst : ls->cap) * ls->t_us;
		ls->burst = r->burst;
		sl__share_init(&ls->share,
			       clamp_u64(worth > UINT64_MAX / 32 ? UINT64_MAX : worth * 32,
					 SL_LEASE_SHARE_MIN_NS, SL_LEASE_SHARE_MAX_NS));
		struct sl_params whole = {.kind = SL_KIND_TOKEN,
					  .amount = r->amount,
					  .period_ns = r->period_ns,
					  .burst = r->burst};
		if (sl_tunable_init(&ls->share_lim, &whole, sl__clock_ns()) != SL_OK)
			return -1;
		snprintf(ls->key, sizeof(ls->key), "sluice:{%s}", r->redis_key);
		lease_rules |= 1u << i;
	}
	lease_reset_banks();
	if (lease_rules == 0)
		return 0;
	if (sl__redis_load() != 0)
		return -1;
	if (!lease_once) {
		lease_cv_init();
		struct sl_params open = {.kind = SL_KIND_CONC, .amount = UINT64_MAX / 2};
		sl_limiter_init(&lim_open, &open, 0);
		pthread_atfork(lease_atfork_prepare, lease_atfork_parent, lease_atfork_child);
		atexit(lease_atexit);
		lease_once = true;
	}
	return 0;
}
