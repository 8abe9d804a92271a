/* SPDX-License-Identifier: MIT */
/*
 * shm_shared.c - opening or creating the segment of a shared=NAME limiter
 * (shared-NAME in the user's private directory, segment.h; layout in
 * shm_format.h). The preloaded library (shm.c) and the supervisor
 * (supervise/shared.c) both open limiters through it, so preloaded and
 * supervised processes naming NAME draw from one limiter.
 *
 * A new segment is built whole by sl_seg_open and linked into place (of
 * several creators exactly one wins). An existing one is checked (owner,
 * mode, size, magic, version, header, limiter) and must have been created by
 * the same rule but for the limit and the burst (what `sluice set` changes):
 * a process may join a limiter whose rate was retuned, and is refused, with
 * both rules named, by one made for another rule.
 *
 * Single-threaded callers only (init): the rule comparison uses a static
 * policy. Never allocates; no stdio.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "segment.h"
#include "shm_format.h"
#include "shm_shared.h"

struct shared_new {
	const struct sl_rule *r;
	const char *text;
	uint64_t now_ns;
};

/* Build a new segment for rule a->r (sl_seg_open's init). */
static int shared_init(void *map, size_t size, void *arg)
{
	const struct shared_new *a = arg;
	struct sl_shm_shared *s = map;
	struct sl_params p;
	(void)size;
	sl_params_of(a->r, &p);
	if (sl_tunable_init(&s->lim, &p, a->now_ns) != SL_OK)
		return -1;
	if (a->r->redis_key[0] != '\0') {
		/* A host pool (redis=): an empty bank of max(lease, burst) slots,
		 * as a process's own bank starts (lease.c, lease_pool.c). */
		struct sl_params bank = {.kind = SL_KIND_CONC,
					 .amount = a->r->lease > a->r->burst ? a->r->lease
									     : a->r->burst};
		if (sl_limiter_init(&s->bank, &bank, 0) != SL_OK ||
		    sl_limiter_acquire(&s->bank, bank.amount, 0, 0).verdict != SL_ADMIT)
			return -1;
	}
	if (a->r->adaptive)
		sl_adapt_init_unsync(&s->adapt, a->r, a->now_ns);
	s->magic = SL_SHM_MAGIC_SHARED;
	s->version = SL_SHM_VERSION;
	s->size = sizeof(*s);
	s->uid = (uint32_t)geteuid();
	snprintf(s->name, sizeof(s->name), "%s", a->r->shared);
	snprintf(s->rule, sizeof(s->rule), "%s", a->text);
	return 0;
}

/* Whether rule r may use a segment created by rule text `made`: the same
 * rule but for the limit and the burst (what `sluice set` changes). */
static bool shared_compatible(const struct sl_rule *r, const char *made)
{
	static struct sl_policy p; /* single-threaded callers only: keeps 13 KB off the stack */
	char err[SL_ERR_MAX];
	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, "SLUICE_RULES", made, err, sizeof(err)) != 0 || p.n_rules != 1)
		return false;
	struct sl_rule cmp = p.rules[0];
	cmp.amount = r->amount;
	cmp.period_ns = r->period_ns;
	cmp.burst = r->burst;
	return sl_rule_equal(&cmp, r);
}

struct sl_shm_shared *sl_shm_shared_open(const struct sl_rule *r, uint64_t now_ns, bool *created,
					 char *err, size_t errlen)
{
	char name[64], path[SL_SEG_PATH_MAX], text[SL_RULE_TEXT_MAX], why[SL_ERR_MAX];
	snprintf(name, sizeof(name), SL_SHM_SHARED_NAME, r->shared);
	sl_seg_path(name, path, sizeof(path));
	sl_rule_format(r, text, sizeof(text));
	struct shared_new arg = {r, text, now_ns};
	struct sl_seg seg;
	int rc = sl_seg_open(name, SL_SEG_WRITE | SL_SEG_CREATE, sizeof(struct sl_shm_shared),
			     shared_init, &arg, &seg, why, sizeof(why));
	if (rc < 0) {
		/* A refused file: its reason after "PATH: "; else the directory's
		 * message, which names its own remedy. */
		size_t n = strlen(path);
		if (strncmp(why, path, n) == 0 && strncmp(why + n, ": ", 2) == 0)
			snprintf(err, errlen,
				 "shared limiter '%s' (%s): %s; remove it with sluice rm "
				 "shared:%s (or rm %s) to start afresh",
				 r->shared, path, why + n + 2, r->shared, path);
		else
			snprintf(err, errlen, "shared limiter '%s': %s", r->shared, why);
		return NULL;
	}
	*created = rc == 1;
	struct sl_shm_shared *s = seg.map;
	const char *bad = sl_shm_check_shared(s, (unsigned)geteuid(), r->shared, NULL);
	if (bad != NULL) {
		snprintf(err, errlen,
			 "shared limiter '%s' (%s): %s; remove it with sluice rm "
			 "shared:%s (or rm %s) to start afresh",
			 r->shared, path, bad, r->shared, path);
		sl_seg_close(&seg);
		return NULL;
	}
	if (strcmp(s->rule, text) != 0 && !shared_compatible(r, s->rule)) {
		snprintf(err, errlen,
			 "shared limiter '%s' (%s) was created by rule '%.200s', not "
			 "'%s': its users may differ only in the limit and the burst; use another "
			 "name, or remove it with sluice rm shared:%s once no process uses it",
			 r->shared, path, s->rule, text, r->shared);
		sl_seg_close(&seg);
		return NULL;
	}
	return s;
}
