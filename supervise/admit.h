/* SPDX-License-Identifier: MIT */
/*
 * admit.h - which limiter each rule of a call uses; taking and giving back units over engine/ (admit.c).
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_ADMIT_H
#define SLUICE_SUPERVISE_ADMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "addr.h"
#include "decide.h"
#include "policy.h"
#include "sluice_core.h"
struct sl_sup;
struct sl_sup_call;
struct sl_sup_proc;

/* Rules of operation op (and of conns when `conns`) fitting the socket and
 * address. */
uint32_t sl_sup_match(const struct sl_sup *s, enum sl_op op, unsigned fam, unsigned type,
		      const struct sl_addr *a);
/* Whether any rule of op could apply to a socket of this family and type. */
bool sl_sup_may_match(const struct sl_sup *s, enum sl_op op, unsigned fam, unsigned type);

enum sl_sup_verdict {
	SL_SUP_GO = 0,    /* taken: act after *wait_ns */
	SL_SUP_RETRY = 1, /* nothing taken: ask again after *wait_ns */
	SL_SUP_REFUSE = 2 /* refused: *err is the errno */
};
/* Take `bytes` from the byte rules and `msgs` from the other rules of the
 * call's rules (c->rules) at now_ns, recording the grant in the call. */
enum sl_sup_verdict sl_sup_admit(struct sl_sup *s, struct sl_sup_call *c, uint64_t bytes,
				 uint64_t msgs, uint64_t now_ns, uint64_t *wait_ns, int *err);
/* The instant past which rule i may not make call c wait (max-delay from the
 * call's start, or the socket's timeout). */
uint64_t sl_sup_limit(const struct sl_sup *s, const struct sl_sup_call *c, unsigned i);
/* Act on rule i's answer a (engine/decide.h) that is not a grant: a dry-run
 * is noted and GO (go on); a retry within limit is RETRY with *wait_ns; else
 * REFUSE with *err. The call's end counts them (engine/count.h). */
enum sl_sup_verdict sl_sup_settle(struct sl_sup *s, struct sl_sup_call *c, unsigned i,
				  struct sl_answer a, uint64_t now_ns, uint64_t limit,
				  uint64_t *wait_ns, int *err);
/* Give back `bytes` of the call's grant (what the piece did not move), or the
 * whole grant (bytes = UINT64_MAX). */
void sl_sup_refund(struct sl_sup *s, struct sl_sup_call *c, uint64_t bytes);
/* Bytes a piece of call c may take at most under its rules (engine/params.h:
 * sl_piece_max), and never more than SL_SUP_PIECE_MAX. */
uint64_t sl_sup_piece_cap(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);
/* The limiter of rule i for call c (its scope), initialised on first use;
 * NULL without memory. */
struct sl_limiter *sl_sup_lim_of(struct sl_sup *s, struct sl_sup_call *c, unsigned i,
				 uint64_t now_ns);

/* Forget the per=fd limiters of fd in proc (a new socket took the number). */
void sl_sup_fd_reset(struct sl_sup_proc *p, int fd);
void sl_sup_proc_free_rows(struct sl_sup_proc *p);

#endif /* SLUICE_SUPERVISE_ADMIT_H */
