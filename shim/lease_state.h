/* SPDX-License-Identifier: MIT */
/*
 * lease_state.h - what the lease thread (lease.c) and the lease's life
 * (lease_life.c: init, fork, exit) share: each redis=KEY rule's bank and
 * timings, the limiter each rule uses now, the thread's mutex and flags.
 *
 * API: sl__ls.mu guards running/stop; the rest as each field says.
 */
#ifndef SLUICE_SHIM_LEASE_STATE_H
#define SLUICE_SHIM_LEASE_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "lease_share.h"
#include "redis_link.h"
#include "shm.h"

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

struct sl_lease_rule {
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

struct sl_lease_state {
	struct sl_lease_rule rules[SL_MAX_RULES];
	/* The limiter each Redis rule uses now: &bank, a fallback, or &dormant. */
	struct sl_limiter *_Atomic cur[SL_MAX_RULES];
	struct sl_limiter open;    /* admits everything */
	struct sl_limiter closed;  /* kind NONE: every acquire is SL_NEVER */
	struct sl_limiter dormant; /* a marker, never acquired from */
	uint32_t mask;             /* rules with redis=KEY; init only */
	struct sl_redis cfg;
	/* The thread's life: mutex and condition variable, never held across
	 * anything slow. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool once;
	bool running, stop; /* under mu */
	pthread_t tid;
	_Atomic uint32_t wanted; /* dormant rules a call woke */
	struct sl_rlink *conn;   /* the thread's; the fork child's */
	int state;               /* thread only: 0 unknown, 1 up, -1 down */
	_Atomic bool exiting;    /* at exit: renew no pool */
};
extern struct sl_lease_state sl__ls;

static inline uint64_t sl__lease_clamp(uint64_t v, uint64_t lo, uint64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Empty a bank: take every unit in it. */
void sl__lease_bank_drain(struct sl_limiter *b);
/* Publish the limiter rule i uses from now on. Release: whatever the
 * thread did to it (a deposit) is visible to the calls that load it. */
void sl__lease_set(unsigned i, struct sl_limiter *l);

#endif /* SLUICE_SHIM_LEASE_STATE_H */
