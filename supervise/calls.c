/* SPDX-License-Identifier: MIT */
/*
 * calls.c - the slots of held calls (at most SL_SUP_CALLS_MAX, one per
 * trapped thread): a new one, zeroed; its release, which gives back the
 * grant and conns slots it still holds and counts its end as the preload
 * counts a call's (engine/count.h).
 */
#include "calls.h"
#include "admit.h"
#include "conns.h"
#include "notif.h"
#include "stat.h"
#include "state.h"

#include <stddef.h>
#include <string.h>
#include <unistd.h>

struct sl_sup_call *sl_sup_call_new(struct sl_sup *s, const struct seccomp_notif *req,
				    struct sl_sup_thread *th)
{
	struct sl_sup_call *c = NULL;
	for (unsigned i = 0; i < s->calls_hi; i++)
		if (!s->calls[i].used) {
			c = &s->calls[i];
			break;
		}
	if (c == NULL && s->calls_hi < SL_SUP_CALLS_MAX)
		c = &s->calls[s->calls_hi++];
	if (c == NULL) {
		if (!s->full_warned)
			sl_sup_warn("%d calls are held at once: further calls pass unthrottled "
				    "until some end",
				    SL_SUP_CALLS_MAX);
		s->full_warned = true;
		return NULL;
	}
	memset(c, 0, offsetof(struct sl_sup_call, riov));
	c->used = true;
	c->dup = -1;
	c->src_fd = -1;
	c->dst_pipe = -1;
	c->wait_fd = -1;
	c->req = *req;
	c->th = th;
	c->start_ns = sl_sup_now_ns();
	c->due_ns = UINT64_MAX;
	c->backoff_ns = SL_DECIDE_BACKOFF_NS;
	th->refs++;
	s->n_calls++;
	return c;
}

void sl_sup_call_free(struct sl_sup *s, struct sl_sup_call *c)
{
	/* The call's end, counted as the preload counts it (engine/count.h). */
	sl_sup_stat_end(c->th->proc, c->rules | c->conns_rules, !c->refused, c->delayed_rules,
			c->waited_ns);
	if (c->granted)
		sl_sup_refund(s, c, UINT64_MAX);
	sl_sup_conns_drop(s, c);
	if (c->dup >= 0)
		close(c->dup);
	if (c->src_fd >= 0)
		close(c->src_fd);
	if (c->dst_pipe >= 0)
		close(c->dst_pipe);
	c->dup = -1;
	c->src_fd = -1;
	c->dst_pipe = -1;
	c->used = false;
	c->th->refs--;
	s->n_calls--;
	while (s->calls_hi > 0 && !s->calls[s->calls_hi - 1].used)
		s->calls_hi--;
}

bool sl_sup_call_wait(struct sl_sup_call *c, enum sl_sup_verdict v, uint64_t now_ns,
		      uint64_t wait_ns)
{
	c->due_ns = now_ns + wait_ns;
	c->wait = SL_SUP_WAIT_TIME;
	if (v != SL_SUP_GO)
		return false;
	c->go_ns = c->due_ns;
	return wait_ns == 0;
}
