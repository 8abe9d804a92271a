/* SPDX-License-Identifier: MIT */
/*
 * state.c - the process's rules as the wrappers test them (struct sl_state,
 * built by init.c), how many fds are tracked, and each rule's limiter
 * parameters.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "clock.h"
#include "params.h"
#include "state.h"

struct sl_state sl__st;
uint32_t sl__fd_cap;

#define SL_FD_PROBE_BYTES 512u

void sl__fd_cap_init_unsync(void)
{
	if (sl__fd_cap != 0)
		return; /* the tables are sized by it: it never changes */
	struct rlimit rl;
	uint64_t cap = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_max : 0;
	cap = cap < SL_FD_MIN ? SL_FD_MIN : cap > SL_FD_LIMIT ? SL_FD_LIMIT : cap;
	cap = (cap + 63) / 64 * 64; /* whole words of ready.c's bitmap */
	/* The tables sized by the cap take about SL_FD_PROBE_BYTES per fd of
	 * address space (reserved, not resident; 348 at this writing): under
	 * a low RLIMIT_AS (ulimit -v) fall back to SL_FD_MIN entries, then to
	 * the soft RLIMIT_NOFILE (at least 1024), rather than fail. */
	uint64_t soft = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_cur : 0;
	soft = soft < 1024 ? 1024 : soft > SL_FD_MIN ? SL_FD_MIN : (soft + 63) / 64 * 64;
	const uint64_t tries[3] = {cap, SL_FD_MIN, soft};
	for (int t = 0; t < 3; t++) {
		if (tries[t] > cap)
			continue;
		cap = tries[t];
		void *probe = mmap(NULL, cap * SL_FD_PROBE_BYTES, PROT_NONE,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (probe != MAP_FAILED) {
			munmap(probe, cap * SL_FD_PROBE_BYTES);
			break;
		}
	}
	sl__fd_cap = (uint32_t)cap;
}

/* Limiter parameters of rule r. */
void sl__rule_params(const struct sl_rule *r, struct sl_params *p)
{
	sl_params_of(r, p);
}

/* (Re)initialise limiter l for rule i at now_ns. */
void sl__limiter_reset(struct sl_limiter *l, unsigned i, uint64_t now_ns)
{
	struct sl_params p;
	sl__rule_params(&sl__st.policy.rules[i], &p);
	sl_limiter_init(l, &p, now_ns);
}

/* From the limiter's current parameters: `sluice set` may have changed
 * them (engine/params.h). */
struct sl_params sl__rule_now(unsigned i)
{
	const struct sl_limiter *l = (sl__st.proc_rules >> i) & 1 ? sl__st.rule_lim[i] : NULL;
	return sl_params_now(&sl__st.policy.rules[i], l);
}

uint64_t sl__piece_max(unsigned i)
{
	const struct sl_params p = sl__rule_now(i);
	return sl_piece_max(&sl__st.policy.rules[i], &p);
}

static struct sl_params rule_now(void *ctx, unsigned i)
{
	(void)ctx;
	return sl__rule_now(i);
}

uint64_t sl__piece_of(uint32_t rules)
{
	return sl_piece_of(&sl__st.policy, rules, rule_now, NULL);
}

void sl__rules_reset_row(struct sl_limiter *row, enum sl_scope scope)
{
	uint64_t now = sl__clock_ns();
	for (unsigned i = 0; i < sl__st.policy.n_rules; i++)
		if (sl__st.policy.rules[i].scope == scope)
			sl__limiter_reset(&row[sl__st.scope_slot[i]], i, now);
}
