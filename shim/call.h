/* SPDX-License-Identifier: MIT */
/*
 * call.h - one call in progress (struct sl_call) and what it is charged to
 * (struct sl_grant): plain types (the limiter each rule uses: rule_lim.h).
 * act.c acts on it; nb.c, ready.c and scope.c read it.
 *
 * API: a struct sl_call belongs to the thread making the call.
 */
#ifndef SLUICE_SHIM_CALL_H
#define SLUICE_SHIM_CALL_H

#include "addr.h"
#include "internal.h"
#include "state.h"

#define SL_PIN_NONE UINT16_MAX /* sl_call.pin: the rule uses its process limiter */

/* What one call is being charged to. */
struct sl_grant {
	uint32_t rules;                       /* rules charged */
	struct sl_limiter *lim[SL_MAX_RULES]; /* their limiters */
	uint64_t at_ns[SL_MAX_RULES];         /* the instant of each one's slot
	                                           (its refund's now) */
	uint64_t n;                           /* units charged to each */
};

/* One call in progress. */
struct sl_call {
	int fd;
	enum sl_op op;              /* for errnos and messages */
	const struct sl_addr *peer; /* per=peer key, may be NULL */
	uint64_t start_ns;
	uint64_t timeout_ns; /* absolute: SO_SNDTIMEO/SO_RCVTIMEO, UINT64_MAX: none */
	int timeout_opt;     /* SO_SNDTIMEO or SO_RCVTIMEO; 0: none applies */
	bool timeout_known;
	bool start_fresh;              /* start_ns not yet used by a decision */
	bool defer;                    /* connect: its nb rules reserve but do not sleep:
	                            ready_ns says until when */
	bool nb_partial;               /* a send whose nb byte rules now send what they
	                            allow (after an SL_NB_PARTIAL) */
	bool ident_checked;            /* the fd's identity was checked (sl__fd_same) */
	bool passing;                  /* the rest of the call passes through: the fd is
	                            no longer its socket, or a sleep failed */
	uint32_t delayed_rules;        /* rules that made this call wait */
	uint32_t nb_rules;             /* rules whose wait becomes EAGAIN (nb.h) */
	uint32_t nb_maybe;             /* nb_rules if the fd is O_NONBLOCK, not read yet */
	uint32_t pinned;               /* per=peer rules whose limiter the call chose */
	uint64_t waited_ns;            /* time slept so far */
	uint64_t nb_want;              /* units the call still wants (sizes an nb wait) */
	uint64_t ready_ns;             /* nb/defer: the instant the call would have waited for */
	uint16_t pin[SL_MAX_RULES];    /* per rule in `pinned`: the peer table entry
	                               the call pins (scope.c), or SL_PIN_NONE */
	uint32_t credit_rules;         /* rules in whose limiter this call has units
	                            already taken: the fd's reserved turn (fair.c) */
	uint32_t nb_round;             /* a turn reserved in a wait's round: the fds the
	                               wait reported (nb.h), each turn at most that
	                               share of a piece (fair.c); 0: none */
	uint64_t credit[SL_MAX_RULES]; /* per rule in credit_rules: those units */
};

#endif /* SLUICE_SHIM_CALL_H */
