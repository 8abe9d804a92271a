/* SPDX-License-Identifier: MIT */
/*
 * lease_life.c - the life of redis=KEY leasing around the lease thread
 * (lease.c): each rule's bank and timings made at init from the rule, the
 * thread stopped and the banks emptied for a re-init or in a fork child
 * (which has no thread, not the parent's connection and not its units), host
 * pools resigned at exit so that another process takes over at once.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "lease.h"
#include "lease_pool.h"
#include "lease_state.h"
#include "ownfd.h"
#include "redis.h"

static void lease_stop_thread(void)
{
	pthread_mutex_lock(&sl__ls.mu);
	bool running = sl__ls.running;
	sl__ls.stop = true;
	pthread_cond_signal(&sl__ls.cv);
	pthread_mutex_unlock(&sl__ls.mu);
	if (running)
		pthread_join(sl__ls.tid, NULL);
	pthread_mutex_lock(&sl__ls.mu);
	sl__ls.running = false;
	sl__ls.stop = false;
	pthread_mutex_unlock(&sl__ls.mu);
}

/* Every rule dormant with an empty bank. */
static void lease_reset_banks(void)
{
	for (uint32_t rest = sl__ls.mask; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		if (sl__ls.rules[i].pool == NULL) /* a pool's units are the host's */
			sl__lease_bank_drain(&sl__ls.rules[i].bank);
		sl__ls.rules[i].last_level = 0;
		sl__ls.rules[i].renewing = false;
		sl__ls.rules[i].retry_at_ns = 0;
		sl__lease_set(i, &sl__ls.dormant);
	}
}

/* The condition variable waits on CLOCK_MONOTONIC, like sl__clock_ns. */
static void lease_cv_init(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&sl__ls.cv, &a);
	pthread_condattr_destroy(&a);
}

static void lease_atfork_prepare(void)
{
	pthread_mutex_lock(&sl__ls.mu);
}

static void lease_atfork_parent(void)
{
	pthread_mutex_unlock(&sl__ls.mu);
}

/* The child: no thread, not the parent's connection, not its units. */
static void lease_atfork_child(void)
{
	sl__ls.running = false;
	sl__ls.stop = false;
	/* The parent's thread may have been in a Redis command (redis_io
	 * held) or moving its fd (own_lock): the child's first lease would
	 * wait for them for ever. */
	sl__redis_after_fork();
	sl__own_after_fork();
	sl__rlink_abandon(sl__ls.conn);
	sl__ls.conn = NULL;
	sl__ls.state = 0;
	atomic_store_explicit(&sl__ls.wanted, 0, memory_order_relaxed);
	lease_reset_banks();
	/* The parent's thread may have been waiting on the condition
	 * variable: the child's copy counts a waiter that does not exist
	 * here, so both are made anew rather than reused. */
	pthread_mutex_init(&sl__ls.mu, NULL);
	lease_cv_init();
}

/* This process stops renewing its host pools, so that another takes over
 * at once instead of after stale_ns. */
static void lease_resign(void)
{
	for (uint32_t rest = sl__ls.mask; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		if (sl__ls.rules[i].pool != NULL)
			sl__pool_resign(sl__ls.rules[i].pool, (uint32_t)getpid());
	}
}

void sl__lease_stop_unsync(void)
{
	lease_stop_thread();
	lease_resign();
	for (uint32_t rest = sl__ls.mask; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		sl__ls.rules[i].pool = NULL; /* its segment is about to be unmapped */
		sl__ls.rules[i].bk = &sl__ls.rules[i].bank;
		sl__lease_set(i, &sl__ls.dormant);
	}
}

/* At exit: the lease thread may still run (it is never joined at exit),
 * so only the election word is touched. */
static void lease_atexit(void)
{
	/* Relaxed: see lease_pool_renewer. */
	atomic_store_explicit(&sl__ls.exiting, true, memory_order_relaxed);
	lease_resign();
}

int sl__lease_init_unsync(const struct sl_policy *p)
{
	lease_stop_thread();
	sl__rlink_close(sl__ls.conn);
	sl__ls.conn = NULL;
	sl__ls.state = 0;
	sl__ls.mask = 0;
	sl__ls.cfg = p->redis;
	for (uint32_t i = 0; i < p->n_rules && i < SL_MAX_RULES; i++) {
		const struct sl_rule *r = &p->rules[i];
		if (r->redis_key[0] == '\0')
			continue;
		struct sl_lease_rule *ls = &sl__ls.rules[i];
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
		ls->poll_ns = sl__lease_clamp(worth / 4, SL_LEASE_POLL_MIN_NS,
					      SL_LEASE_POLL_MAX_NS);
		ls->ttl_ns = sl__lease_clamp(worth > UINT64_MAX / 10 ? UINT64_MAX : worth * 10,
					     SL_LEASE_TTL_MIN_NS, SL_LEASE_TTL_MAX_NS);
		ls->hint_ns = sl__lease_clamp(r->period_ns / r->amount, SL_LEASE_HINT_MIN_NS,
					      SL_LEASE_HINT_MAX_NS);
		ls->stale_ns = worth > SL_LEASE_STALE_MIN_NS ? worth : SL_LEASE_STALE_MIN_NS;
		ls->t_us = (double)r->period_ns / 1000.0 / (double)r->amount;
		ls->tau_us = (double)(r->burst > ls->cap ? r->burst : ls->cap) * ls->t_us;
		ls->burst = r->burst;
		sl__share_init(&ls->share,
			       sl__lease_clamp(worth > UINT64_MAX / 32 ? UINT64_MAX : worth * 32,
					       SL_LEASE_SHARE_MIN_NS, SL_LEASE_SHARE_MAX_NS));
		struct sl_params whole = {.kind = SL_KIND_TOKEN,
					  .amount = r->amount,
					  .period_ns = r->period_ns,
					  .burst = r->burst};
		if (sl_tunable_init(&ls->share_lim, &whole, sl__clock_ns()) != SL_OK)
			return -1;
		snprintf(ls->key, sizeof(ls->key), "sluice:{%s}", r->redis_key);
		sl__ls.mask |= 1u << i;
	}
	lease_reset_banks();
	if (sl__ls.mask == 0)
		return 0;
	if (sl__redis_load() != 0)
		return -1;
	if (!sl__ls.once) {
		lease_cv_init();
		struct sl_params open = {.kind = SL_KIND_CONC, .amount = UINT64_MAX / 2};
		sl_limiter_init(&sl__ls.open, &open, 0);
		pthread_atfork(lease_atfork_prepare, lease_atfork_parent, lease_atfork_child);
		atexit(lease_atexit);
		sl__ls.once = true;
	}
	return 0;
}
