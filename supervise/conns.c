/* SPDX-License-Identifier: MIT */
/*
 * conns.c - conns rules (at most N connections open at once) for supervised
 * programs.
 *
 * A connect or accept that a conns rule matches takes one unit of the rule's
 * concurrency limiter (core/concurrency.c) before it proceeds; while the
 * limit is full, a delay rule holds the call and asks again as the engine
 * says (engine/decide.h: a backoff of 1 ms doubling to 50 ms, up to
 * max-delay, as the preload waits), a reject rule refuses it. A
 * non-blocking accept is held too, never answered EAGAIN while a connection
 * is pending: Go's edge-triggered poller would not hear of it again.
 *
 * The supervisor does not trap close (nor dup2, close_range, exec, exit):
 * it remembers each connection as (process, fd, socket inode) and gives the
 * slot back once /proc/TGID/fd/FD no longer names that inode, checked at
 * every retry of a waiting call and every sweep. So a slot comes back at
 * most one backoff (50 ms) after the close when a call waits for it. A
 * connection whose fd was passed to another process (fork, SCM_RIGHTS)
 * counts until the fd that opened it is closed.
 */
#include "conns.h"
#include "admit.h"
#include "state.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

struct sl_sup_hold {
	struct sl_sup_proc *proc;
	int fd;
	ino_t ino;
	uint32_t rules;
	struct sl_limiter *lim[SL_MAX_RULES];
};

/* The connections holding slots. */
static struct sl_sup_hold *holds;
static size_t n_holds, cap_holds;

static void release(struct sl_limiter *const *lim, uint32_t rules)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		if (lim[i] != NULL)
			sl_limiter_release(lim[i], 1);
	}
}

enum sl_sup_verdict sl_sup_conns_take(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns,
				      uint64_t *wait_ns, int *err)
{
	uint32_t taken = 0;
	if (c->conns_rules == 0 || c->conns_taken)
		return SL_SUP_GO;
	sl_sup_conns_sweep(s);
	for (uint32_t rest = c->conns_rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &s->policy.rules[i];
		struct sl_limiter *l = sl_sup_lim_of(s, c, i, now_ns);
		c->conns_lim[i] = l;
		if (l == NULL)
			continue;
		struct sl_decision d = sl_limiter_acquire(l, 1, now_ns, 0);
		if (d.verdict == SL_ADMIT) {
			taken |= 1u << i;
			continue;
		}
		uint64_t limit = sl_sup_limit(s, c, i);
		struct sl_answer a = sl_decide_rule(r, l, 1, now_ns, limit, d);
		if (a.step == SL_STEP_DRY) {
			sl_sup_settle(s, c, i, a, now_ns, limit, wait_ns, err);
			continue;
		}
		release(c->conns_lim, taken);
		return sl_sup_settle(s, c, i, a, now_ns, limit, wait_ns, err);
	}
	c->conns_held = taken;
	c->conns_taken = true;
	return SL_SUP_GO;
}

void sl_sup_conns_drop(struct sl_sup_call *c)
{
	release(c->conns_lim, c->conns_held);
	c->conns_held = 0;
}

void sl_sup_conns_hold(struct sl_sup_call *c, int fd)
{
	if (c->conns_held == 0)
		return;
	struct sl_sup_proc *p = c->th->proc;
	char name[16];
	struct stat st;
	snprintf(name, sizeof(name), "%d", fd);
	if (fd < 0 || p->fddir < 0 || fstatat(p->fddir, name, &st, 0) != 0) {
		sl_sup_conns_drop(c); /* gone already */
		return;
	}
	if (n_holds == cap_holds) {
		size_t n = cap_holds ? cap_holds * 2 : 64;
		struct sl_sup_hold *h = realloc(holds, n * sizeof(*h));
		if (h == NULL) {
			sl_sup_conns_drop(c);
			return;
		}
		holds = h;
		cap_holds = n;
	}
	struct sl_sup_hold *h = &holds[n_holds++];
	h->proc = p;
	h->fd = fd;
	h->ino = st.st_ino;
	h->rules = c->conns_held;
	for (unsigned i = 0; i < SL_MAX_RULES; i++)
		h->lim[i] = c->conns_lim[i];
	p->refs++; /* the limiters live in the process entry */
	c->conns_held = 0;
}

void sl_sup_conns_sweep(struct sl_sup *s)
{
	(void)s;
	for (size_t k = 0; k < n_holds;) {
		struct sl_sup_hold *h = &holds[k];
		char name[16];
		struct stat st;
		snprintf(name, sizeof(name), "%d", h->fd);
		if (h->proc->fddir >= 0 && fstatat(h->proc->fddir, name, &st, 0) == 0 &&
		    st.st_ino == h->ino) {
			k++;
			continue;
		}
		release(h->lim, h->rules);
		h->proc->refs--;
		holds[k] = holds[--n_holds];
	}
}

void sl_sup_conns_free(void)
{
	free(holds);
	holds = NULL;
	n_holds = cap_holds = 0;
}
