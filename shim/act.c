/* SPDX-License-Identifier: MIT */
/*
 * act.c - the decision loop: ask the limiters, then wait, refuse or proceed.
 *
 * Waiting: every sleep is clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) to
 * the instant the limiter named, so oversleeping one slot shortens the wait
 * for the next instead of accumulating into rate error. Limiters that can
 * reserve (token, leaky, fixed) hand out a slot and its time at once; those
 * that cannot (sliding window, concurrency) are retried at their hint, or
 * with a backoff of 1 ms doubling to 50 ms when they give none (a conns slot
 * frees only on a close).
 *
 * Limits on waiting (max-delay, the socket's timeout, signals): wait.c.
 *
 * Non-blocking calls (nb.c): a delay rule with nonblock=eagain does not
 * wait on a call that must not block (c->nb_rules): it polices, and its
 * refusal is EAGAIN with the instant it would have waited for left in
 * c->ready_ns. A deferred connect (c->defer) reserves its slot like a
 * blocking one but leaves the waiting to ready.c. Whether the fd is
 * non-blocking is asked only when a rule would wait (sl__call_nb), like
 * the socket's timeout.
 *
 * Before a rule makes a call wait, refuses it or cuts it short, the fd's
 * identity is checked once per call (sl__fd_same, one fstat): an fd that changed behind
 * the wrappers' back (fd.c) is not held back for the socket it no longer
 * is; the call passes through from then on (c->passing), with what it was
 * charged for the wait given back. A sleep that fails (a seccomp filter
 * that refuses clock_nanosleep with ENOSYS or EPERM) does the same. In a
 * sandbox (sandbox.h) the socket's timeout and the signal dispositions are
 * not read: no timeout applies, and an interrupted wait is resumed.
 *
 * Actions: delay waits as above; reject refuses at once (max_wait 0); dry-run
 * never waits or refuses: it takes what is available, counts the calls that
 * would have been delayed or refused, and logs them at info level.
 *
 * Several rules may match one call: each is charged in turn, the call waits
 * for the latest of their slots, and a refusal by any gives back what the
 * others took.
 */
#include <errno.h>
#include <signal.h>
#include <sys/time.h>

#include "rule_lim.h"
#include "act.h"
#include "record.h"
#include "clock.h"
#include "connfam.h"
#include "count.h"
#include "decide.h"
#include "fair.h"
#include "fd.h"
#include "fdscan.h"
#include "lease.h"
#include "log.h"
#include "nb.h"
#include "real.h"
#include "sandboxed.h"
#include "scope.h"
#include "shm.h"
#include "state.h"
#include "turn.h"
#include "wait.h"

__thread int sl__call_refused __attribute__((tls_model("initial-exec")));

void sl__call_begin(struct sl_call *c, int fd, enum sl_op op, const struct sl_addr *peer,
		    int timeout_opt)
{
	sl__call_begin_at(c, fd, op, peer, timeout_opt, sl__clock_ns());
}

void sl__call_begin_at(struct sl_call *c, int fd, enum sl_op op, const struct sl_addr *peer,
		       int timeout_opt, uint64_t now)
{
	c->fd = fd;
	c->op = op;
	c->peer = peer;
	c->start_ns = now;
	c->timeout_ns = UINT64_MAX;
	c->timeout_opt = timeout_opt;
	c->timeout_known = timeout_opt == 0 || sl__sandboxed(); /* no getsockopt there */
	c->start_fresh = true;
	c->defer = c->nb_partial = c->ident_checked = c->passing = false;
	c->delayed_rules = c->nb_rules = c->nb_maybe = c->pinned = c->credit_rules = c->nb_round = 0;
	c->waited_ns = c->nb_want = c->ready_ns = 0;
}

/* The instant of a decision of call c: its start for the first (no time has
 * passed since, see sl__call_begin), a new clock reading for the others. */
static uint64_t call_now(struct sl_call *c)
{
	if (c->start_fresh) {
		c->start_fresh = false;
		return c->start_ns;
	}
	return sl__clock_ns();
}

/* The instant past which rule r may not make call c wait. */
static uint64_t call_limit(struct sl_call *c, const struct sl_rule *r)
{
	return sl_decide_limit(r, c->start_ns, sl__call_timeout(c));
}

/* The errno of a refusal by rule r: EAGAIN when the socket timeout, not
 * max-delay, was the limit that bit. */
static int call_errno(struct sl_call *c, const struct sl_rule *r, bool never)
{
	if (never || r->action != SL_ACTION_DELAY) /* no timeout to read */
		return sl_rule_errno(r, c->op);
	return sl_decide_errno(r, c->op, c->start_ns, sl__call_timeout(c), never);
}

/* True if call c passes through from now on: checks once per call, when a
 * rule is about to make it wait or refuse it, that its fd still is the
 * socket it was classified as (sl__fd_same). */
static bool call_passes(struct sl_call *c)
{
	if (!c->ident_checked) {
		c->ident_checked = true;
		if (!sl__fd_same(c->fd))
			c->passing = true;
	}
	return c->passing;
}

static void dry_run_note(struct sl_call *c, unsigned i, bool refuse, uint64_t wait_ns)
{
	/* A would-be delay is counted once per call, by sl__call_end. */
	if (refuse)
		sl_count_refused(&sl__st.stats[i]);
	else
		c->delayed_rules |= (uint32_t)1 << i;
	sl_log(SL_LOG_INFO, "dry-run: rule %u would %s %s on fd %d (wait %llu us)", i + 1,
	       refuse ? "refuse" : "delay", sl_op_name(c->op), c->fd,
	       (unsigned long long)(wait_ns / 1000));
}

void sl__grant_refund(const struct sl_call *c, const struct sl_grant *g, uint64_t unused)
{
	(void)c;
	if (unused == 0)
		return;
	/* The slot's instant, not the clock now: a fixed window gives back
	 * only while the refund's now is in the window the units were taken
	 * in, and a slot reserved ahead may lie in a later one. */
	for (uint32_t rest = g->rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		sl_limiter_refund(g->lim[i], unused, g->at_ns[i]);
		sl__shm_hold(g->lim[i], -(int64_t)unused);
	}
}

/* Record that rule i's limiter l took the call's units for a slot at at_ns
 * (and count them for dead-holder recovery if l is a shared conns
 * limiter). */
static void grant_add(struct sl_grant *g, unsigned i, struct sl_limiter *l, uint64_t at_ns)
{
	g->rules |= (uint32_t)1 << i;
	g->lim[i] = l;
	g->at_ns[i] = at_ns;
	if (l->kind == SL_KIND_TUNABLE && l->params.kind == SL_KIND_CONC)
		sl__shm_hold(l, (int64_t)g->n);
}

/* How long a refused call should wait before it asks rule i again: the
 * limiter's hint, or for a redis=KEY rule whose bank of leased units is
 * empty (a concurrency limiter: no hint), the lease's retry time, after
 * kicking the renewal thread. */
static uint64_t refusal_wait(const struct sl_rule *r, unsigned i, struct sl_decision d)
{
	if (d.wait_ns == 0 && r->redis_key[0] != '\0')
		return sl__lease_retry_ns(i);
	return d.wait_ns;
}

/*
 * The rest of rule i's charge at instant now when policing (max_wait 0,
 * which takes nothing when it refuses) did not admit the call at once; d is
 * its answer. Returns 0, or an errno; *due is raised to the instant the
 * rule's slot starts when the call must wait for it.
 *
 * Only here is the limit on the wait computed, which needs the socket's
 * timeout (a getsockopt), and the reservation up to it asked for: a call
 * admitted at once never reads the timeout.
 */
static __attribute__((noinline)) int admit_slow(struct sl_call *c, unsigned i, struct sl_limiter *l,
						uint64_t n, struct sl_grant *g, uint64_t now,
						uint64_t *due, struct sl_decision d)
{
	const struct sl_rule *r = &sl__st.policy.rules[i];
	uint64_t backoff = SL_DECIDE_BACKOFF_NS;
	sl__rec_publish(); /* a fork child on its parent's sockets: visible now */
	if (d.verdict != SL_ADMIT && ((sl__st.adapt_rules >> i) & 1))
		sl__turn_bound(i, now); /* the adaptive limit binds */
	if (d.verdict != SL_ADMIT && r->action == SL_ACTION_DRYRUN) {
		struct sl_answer a = sl_decide_rule(r, l, n, now, now, d);
		dry_run_note(c, i, a.would_refuse, a.at_ns);
		return 0;
	}
	/* The rule is about to act: not on an fd that is no longer its
	 * socket. What d took is given back with the grant (sl__admit). */
	if (call_passes(c)) {
		if (d.verdict == SL_ADMIT)
			grant_add(g, i, l, sl__sat_add(now, d.wait_ns));
		return 0;
	}
	/* Non-blocking (nb.c): no wait, the refusal is EAGAIN. Only the
	 * first answer can be a refusal here: a retry below follows a sleep. */
	if (d.verdict == SL_REFUSE && !c->defer && sl__nb_has(c, i)) {
		if (c->op == SL_OP_SEND && !c->nb_partial && ((sl__st.byte_rules >> i) & 1))
			return SL_NB_PARTIAL;
		return sl__nb_refuse(c, i, now, refusal_wait(r, i, d));
	}
	for (;;) {
		/* The engine's answer (engine/decide.h); only the wait and the
		 * dead-holder recovery of shared conns limiters are ours. */
		uint64_t limit = d.verdict != SL_ADMIT && r->action == SL_ACTION_DELAY
					 ? call_limit(c, r)
					 : now;
		struct sl_answer a = sl_decide_rule(r, l, n, now, limit, d);
		if (a.step == SL_STEP_GO) {
			grant_add(g, i, l, a.at_ns);
			if (a.at_ns > now) {
				c->delayed_rules |= (uint32_t)1 << i;
				if (a.at_ns > *due)
					*due = a.at_ns;
			}
			return 0;
		}
		/* A conns limiter may be full of dead processes' slots, or of
		 * forked connections whose last holder ended unseen. */
		if (!a.never && (sl__shm_reclaim(l) || sl__fam_sweep(i, now) ||
				 (((sl__st.adapt_rules >> i) & 1) && sl__turn_sweep(now)))) {
			d = sl_limiter_acquire(l, n, now, 0);
			continue;
		}
		uint64_t at = UINT64_MAX;
		if (a.step == SL_STEP_RETRY) {
			d.wait_ns = a.at_ns;
			at = sl_decide_retry_at(now, refusal_wait(r, i, d), limit, &backoff);
		}
		if (at != UINT64_MAX) {
			c->delayed_rules |= (uint32_t)1 << i;
			if (sl__call_sleep(c, at) == EINTR)
				return EINTR;
			if (c->passing)
				return 0;
			now = sl__clock_ns();
			/* Ask again: a redis=KEY rule may have switched limiter
			 * (Redis failed or came back). */
			l = sl__limiter(c, i);
			d = sl_limiter_acquire(l, n, now, 0);
			continue;
		}
		sl_count_refused(&sl__st.stats[i]);
		sl_log(SL_LOG_DEBUG, "rule %u refuses %s on fd %d", i + 1, sl_op_name(c->op),
		       c->fd);
		return call_errno(c, r, a.never);
	}
}

int sl__admit(struct sl_call *c, uint32_t rules, uint64_t n, struct sl_grant *g)
{
	g->rules = 0;
	g->n = n;
	if (rules == 0 || c->passing) {
		c->start_fresh = false; /* the call's first decision, all the same */
		return 0;
	}
	uint64_t due = 0, now = call_now(c);
	int err = 0;
	for (uint32_t rest = rules; rest != 0 && err == 0; rest &= rest - 1) {
		/* Police every rule first: a call none of them delays ends here. */
		unsigned i = (unsigned)__builtin_ctz(rest);
		struct sl_limiter *l = sl__limiter(c, i);
		/* Units of the fd's reserved turn are taken already (fair.c):
		 * only the rest is asked for, and the turn's are used only if
		 * the call is admitted (a refused one keeps them). */
		uint64_t k = 0;
		if (__builtin_expect((c->credit_rules >> i) & 1, 0))
			k = c->credit[i] < n ? c->credit[i] : n;
		struct sl_decision d = k < n ? sl_limiter_acquire(l, n - k, now, 0)
					     : (struct sl_decision){.verdict = SL_ADMIT};
		if (__builtin_expect(d.verdict == SL_ADMIT && d.wait_ns == 0, 1))
			grant_add(g, i, l, now);
		else
			err = admit_slow(c, i, l, n - k, g, now, &due, d);
		if (k != 0 && err == 0)
			c->credit[i] -= k;
	}
	/* due stays 0 unless a rule must wait; call_sleep returns at once if
	 * the instant has passed. */
	if (err == 0 && due != 0) {
		if (c->defer && sl__call_nb(c) != 0)
			c->ready_ns = due;
		else
			err = sl__call_sleep(c, due);
	}
	if (err != 0 || c->passing) {
		sl__grant_refund(c, g, n);
		g->rules = 0;
	}
	return c->passing ? 0 : err;
}

uint64_t sl__available(struct sl_call *c, uint32_t rules, bool wait, int *err)
{
	*err = 0;
	for (;;) {
		if (c->passing)
			return UINT64_MAX;
		uint64_t now = call_now(c), avail = UINT64_MAX, at = 0;
		unsigned worst = 0;
		bool swept = false;
		for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
			unsigned i = (unsigned)__builtin_ctz(rest);
			const struct sl_rule *r = &sl__st.policy.rules[i];
			struct sl_limiter *l = sl__limiter(c, i);
			uint64_t a = sl_limiter_available(l, now), need = 1;
			/* Units of the fd's reserved turn are the call's (fair.c). */
			if ((c->credit_rules >> i) & 1)
				a = sl__sat_add(a, c->credit[i]);
			/* An nb rule needs sl__need units, never more than the
			 * call still wants: only when fewer are there is the
			 * fd's mode asked. A blocking wait for a delay rule
			 * gathers a few ms of the rate rather than one unit. */
			bool gather = false;
			if ((c->nb_want == 0 || a < c->nb_want) && sl__nb_has(c, i)) {
				need = sl__need(c, i, SL_NB_QUANTUM_NS);
				/* A turn of the fd's own is all its call needs:
				 * reported ready, it is not refused (a round's
				 * turns may be smaller than need: fair.c). */
				if (((c->credit_rules >> i) & 1) && c->credit[i] != 0 &&
				    c->credit[i] < need)
					need = c->credit[i];
			} else if (wait && r->action == SL_ACTION_DELAY &&
				   (r->algo == SL_ALGO_TOKEN || r->algo == SL_ALGO_LEAKY)) {
				/* Buckets only: a window's units come back at
				 * its next window, not 2 ms later. */
				need = sl__need(c, i, SL_WAIT_QUANTUM_NS);
				gather = need > 1;
			}
			/* A dry-run rule never shortens what the call moves. */
			bool dry = r->action == SL_ACTION_DRYRUN;
			if (a >= need) {
				avail = a < avail && !dry ? a : avail;
				continue;
			}
			/* Police `need` units only to learn when they would
			 * come: available() is exact, so this refuses and takes
			 * nothing unless units came back in between (another
			 * thread's refund); then they are given back at the
			 * acquire's own instant. */
			struct sl_decision d = sl_limiter_acquire(l, need, now, 0);
			if (gather && d.verdict != SL_ADMIT &&
			    (d.verdict == SL_NEVER ||
			     sl__sat_add(now, d.wait_ns) > call_limit(c, r))) {
				/* Gathering would outlast max-delay or the
				 * socket's timeout: wait for one unit, as the
				 * limit allows. */
				need = 1;
				d = sl_limiter_acquire(l, need, now, 0);
			}
			if (d.verdict == SL_ADMIT) {
				sl_limiter_refund(l, need, now);
				avail = need < avail && !dry ? need : avail;
				continue;
			}
			if (dry) {
				dry_run_note(c, i, d.verdict == SL_NEVER, d.wait_ns);
				continue;
			}
			/* Slots of forked connections that ended unseen: asked
			 * again at once. */
			if (((sl__st.conns_rules >> i) & 1) && sl__fam_sweep(i, now)) {
				swept = true;
				continue;
			}
			avail = 0;
			uint64_t t = sl__sat_add(now, d.wait_ns ? d.wait_ns : 1000000u);
			if (t > at) {
				at = t;
				worst = i;
			}
		}
		if (swept)
			continue;
		/* Fewer than the call wants cuts it short: that is acting too,
		 * as waiting is (see admit_slow). */
		if (avail > 0 && (avail >= c->nb_want || !call_passes(c)))
			return avail;
		if (call_passes(c))
			return UINT64_MAX;
		const struct sl_rule *r = &sl__st.policy.rules[worst];
		if (at != UINT64_MAX && sl__nb_has(c, worst)) {
			*err = sl__nb_refuse(c, worst, now, at - now);
			return 0;
		}
		/* at is UINT64_MAX when no wait helps (on-error=closed). */
		if (!wait || r->action == SL_ACTION_REJECT || at > call_limit(c, r) ||
		    at == UINT64_MAX) {
			sl_count_refused(&sl__st.stats[worst]);
			*err = call_errno(c, r, false);
			return 0;
		}
		c->delayed_rules |= (uint32_t)1 << worst;
		if (sl__call_sleep(c, at) == EINTR) {
			*err = EINTR;
			return 0;
		}
	}
}

void sl__charge(struct sl_call *c, uint32_t rules, uint64_t n)
{
	c->start_fresh = false;
	if (n == 0 || c->passing)
		return;
	uint64_t now = sl__clock_ns();
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		/* The units were already received: they go on the limiter's
		 * account as debt that later calls wait for, whatever it says
		 * (a policing acquire would drop a charge over the limit). The
		 * units of a reserved turn are taken already (fair.c). */
		uint64_t k = n;
		if ((c->credit_rules >> i) & 1) {
			uint64_t used = c->credit[i] < k ? c->credit[i] : k;
			c->credit[i] -= used;
			k -= used;
		}
		if (k != 0)
			sl_limiter_charge(sl__limiter(c, i), k, now);
	}
}

void sl__stats_bytes(uint32_t rules, uint64_t n)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1)
		sl_count_add(&sl__st.stats[__builtin_ctz(rest)].bytes, n);
}

void sl__call_end_bytes(struct sl_call *c, uint32_t rules, bool ok, uint64_t bytes)
{
	if (__builtin_expect(c->credit_rules != 0, 0)) /* a turn's units left */
		sl__fair_return(c);
	sl__stats_end(rules, ok, bytes);
	for (uint32_t rest = rules & c->delayed_rules; rest != 0; rest &= rest - 1)
		sl_count_delayed(&sl__st.stats[__builtin_ctz(rest)], c->waited_ns);
	/* Last, a tail call: the hot path (nothing pinned) stays a leaf. */
	if (c->pinned != 0) /* per=peer: the call is done with its limiters */
		sl__peer_unpin_call(c);
}

void sl__call_end(struct sl_call *c, uint32_t rules, bool ok)
{
	sl__call_end_bytes(c, rules, ok, 0);
}

/* Collect the conns limiters of a grant into lims; returns how many. */
unsigned sl__grant_conns(const struct sl_grant *g, struct sl_limiter **lims)
{
	unsigned n = 0;
	/* Not the adaptive rules': a turn holds their slots (turn.c). */
	for (uint32_t rest = g->rules & sl__st.conns_rules & ~sl__st.adapt_rules; rest != 0;
	     rest &= rest - 1)
		lims[n++] = g->lim[__builtin_ctz(rest)];
	return n;
}

/* Fail the call with err: stats, errno. Returns -1. */
int sl__call_fail(struct sl_call *c, uint32_t rules, int err)
{
	sl__call_refused = 1; /* a refusal by sluice, not the peer's failure */
	sl__call_end(c, rules, false);
	sl__busy = 0;
	errno = err;
	return -1;
}
