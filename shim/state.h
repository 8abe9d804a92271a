/* SPDX-License-Identifier: MIT */
/*
 * state.h - the process's rules and what the hot path tests (state.c).
 *
 * API: sl__st and sl__fd_cap are written only by sl__state_init_unsync
 * (init.h: the constructor; tests call it between cases, with no wrapper
 * running) and read by every
 * wrapper without synchronisation. The rule-parameter functions may be
 * called from any thread.
 */
#ifndef SLUICE_SHIM_STATE_H
#define SLUICE_SHIM_STATE_H

#include "internal.h"
#include "shm_format.h"

/* fds are tracked below sl__fd_cap: the RLIMIT_NOFILE hard limit at the
 * first init, at least SL_FD_MIN and at most SL_FD_LIMIT; calls on larger
 * fds pass through. When the address space for the tables of that cap
 * cannot be reserved (a low RLIMIT_AS), SL_FD_MIN, or if that fails too the
 * soft RLIMIT_NOFILE (at least 1024). */
#define SL_FD_MIN 65536u
#define SL_FD_LIMIT (1u << 20)
extern uint32_t sl__fd_cap;
/* Set sl__fd_cap, once, before the first table is mapped (state init). */
void sl__fd_cap_init_unsync(void);

#define SL_THREAD_SLOTS 256 /* threads with per=thread limiters at once (scope.c) */

/* How the fast paths (xfer.h) reach a fast rule's limiter (sl_fast_rule). */
enum sl_fast_how {
	SL_FAST_NO = 0,        /* not a fast rule */
	SL_FAST_PROC_BUCKET,   /* rule_lim[i]: a tunable head with bucket slots */
	SL_FAST_PROC_FIXED,    /* rule_lim[i]: a tunable head with fixed-window slots */
	SL_FAST_PROC_SLIDING,  /* rule_lim[i]: a tunable head with sliding-window slots */
	SL_FAST_PROC_TUNABLE,  /* rule_lim[i]: a tunable head of another kind */
	SL_FAST_FD_BUCKET,     /* the fd's per=fd token or leaky bucket */
	SL_FAST_THREAD_BUCKET, /* the thread's per=thread token or leaky bucket */
	SL_FAST_PEER_BUCKET,   /* the fd's per=peer token or leaky bucket (scope.h) */
	SL_FAST_PEER,          /* the fd's per=peer entry of another kind */
	SL_FAST_OTHER,         /* any other kind in these scopes: sl__fast_lim */
};

/* What the fast paths need of fast rule i, on one line of its own
 * (sl__st.fast[i], read-only after init). */
struct sl_fast_rule {
	uint8_t how; /* enum sl_fast_how */
	uint8_t pad[7];
	struct sl_limiter *lim;  /* per=process: rule_lim[i] */
	struct sl_rstats *stats; /* &stats[i] */
	uint8_t pad2[SL_CACHELINE - 24];
};

struct sl_state {
	struct sl_policy policy;
	bool active;                     /* rules apply to this process */
	bool ready;                      /* sl__state_init_unsync has run */
	uint32_t kind_rules[SL_K_COUNT]; /* rules that may apply to each kind */
	uint32_t byte_rules;             /* rules counting bytes */
	uint32_t reject_rules;           /* action == reject */
	uint32_t conns_rules;            /* op == conns */
	uint32_t sys_rules;              /* system protection: load1=, cpu=, rt= (turn.c) */
	uint32_t sys_load1_rules;        /* ... with load1= */
	uint32_t sys_cpu_rules;          /* ... with cpu= */
	uint32_t adapt_rules;            /* conns:adaptive (turn.c; accept only: their
	                          limit follows the latency of a server's turns) */
	uint32_t proc_rules;             /* per=process rules whose limiter is always
	                         rule_lim[i] (not redis=KEY: see lease.c) */
	uint32_t lease_rules;            /* redis=KEY rules (per=process; lease.c says
	                         which limiter each uses now) */
	uint32_t fast_rules;             /* rules whose limiter the fast paths (xfer.h)
	                         find inline: per=process (not redis=KEY),
	                         per=fd, per=thread and per=peer rules counting
	                         calls or bytes, any algorithm and action. A
	                         transfer they all admit at once takes the fast
	                         path */
	uint32_t fd_rules;               /* per=fd rules (not conns) */
	uint32_t thread_rules;           /* per=thread rules (not conns) */
	uint32_t peer_rules;             /* per=peer rules (not conns) */
	uint32_t credit_rules;           /* token and leaky bucket rules, per=process
	                         fixed windows: they may take thread-local
	                         credit (credit.h); a call of one of them alone
	                         tries it first */
	uint32_t credit_in_rules;        /* credit_rules that count bytes: a receive's credit */
	uint32_t keyed_rules;            /* credit_rules whose credit is keyed to an fd
	                         (per=fd, per=peer: sl__fast_keyed) */
	uint32_t mcredit_rules;          /* credit_rules that are buckets (not windows): a
	                         call under two or more, all of them, spends
	                         each one's credit (fd.h: SL_FDR_MCREDIT) */
	uint32_t late_rules;             /* sliding windows: the fast path polices at most one,
	                         last (its refund rounds down what its acquire
	                         rounded up, so it is never given back for
	                         another rule's refusal) */
	uint32_t eagain_rules;           /* delay rules with nonblock=eagain (set by
	                          sl__ready_init_unsync once its tables exist) */
	uint32_t probe_rules;            /* eagain_rules but per=thread ones: what the
	                          wait wrappers ask of a ready fd (nb.h) */
	uint32_t rest_rules;             /* probe_rules with a per=process token or leaky
	                          bucket (a tunable head): a limiter at rest
	                          answers the question at once
	                          (sl__nb_hold_unready) */
	uint32_t hard_rules;             /* probe_rules but rest_rules */
	uint32_t round_rules;            /* probe_rules with turns (fair.c): a wait's
	                          round reserves them from its second fd
	                          (sl__nb_round, nb.h) */
	uint32_t n_fd_rules, n_thread_rules, n_peer_rules;
	uint64_t piece_min; /* smallest sl__piece_max of the byte rules (not dry-run) at init:
	                       a transfer no larger is never split, unless
	                       `sluice set` lowered a burst since (then the fast
	                       path's police fails and the general path splits) */
	uint8_t scope_slot[SL_MAX_RULES]; /* index among rules of its scope */
	/* Each rule's per=process limiter (a tunable one in rec, or the
	 * shared one); the fallback of other scopes. */
	struct sl_limiter *rule_lim[SL_MAX_RULES];
	struct sl_limiter *fd_lims;     /* [sl__fd_cap][n_fd_rules], mmap'd */
	struct sl_limiter *thread_lims; /* [SL_THREAD_SLOTS][n_thread_rules] */
	struct sl_rstats *stats;        /* [n_rules], in rec */
	struct sl_shm_stat *rec;        /* the live status record (record.c) */
	_Alignas(SL_CACHELINE) struct sl_fast_rule fast[SL_MAX_RULES];
	/* Turns kept now, any fd (fair.c), a hint the fast paths read
	 * relaxed: while it is not 0 they leave every call to the general
	 * path, which settles the fd's own turn. In sl__st, so that the fast
	 * paths reach it from the base they hold already (one compare), on a
	 * line of its own: every reserve and settle writes it, and the fields
	 * above are read-only after init. */
	_Alignas(SL_CACHELINE) _Atomic uint32_t fair_kept;
	uint8_t pad_kept[SL_CACHELINE - sizeof(uint32_t)];
};
extern struct sl_state sl__st;

/* Whether fast rule d's thread-local credit is keyed to an fd (credit.h):
 * a per=fd or per=peer bucket. */
static inline bool sl__fast_keyed(const struct sl_fast_rule *d)
{
	return d->how == SL_FAST_FD_BUCKET || d->how == SL_FAST_PEER_BUCKET;
}

/* Limiter parameters of a rule; (re)initialise limiter l for rule i. */
void sl__rule_params(const struct sl_rule *r, struct sl_params *p);
void sl__limiter_reset(struct sl_limiter *l, unsigned i, uint64_t now_ns);
/* Rule i's amount, period and burst now: the rule's, or the ones `sluice
 * set` gave its limiter since (per=process and shared= rules; the limiters
 * of other scopes never change). */
struct sl_params sl__rule_now(unsigned i);
/* Units one piece of a split transfer may take under byte rule i. */
uint64_t sl__piece_max(unsigned i);
/* The largest piece of a transfer under `rules` (engine/params.h:
 * sl_piece_of, with each rule's parameters now). */
uint64_t sl__piece_of(uint32_t rules);
/* Reset the limiters of every rule of `scope` in one row of a scope table
 * (a thread's or an fd's), indexed by scope_slot. */
void sl__rules_reset_row(struct sl_limiter *row, enum sl_scope scope);

#endif /* SLUICE_SHIM_STATE_H */
