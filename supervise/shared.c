/* SPDX-License-Identifier: MIT */
/*
 * shared.c - shared=NAME rules in supervised mode: the supervisor maps the
 * same shared-NAME segment the preloaded library uses (common/shm_shared.c
 * opens or creates it), so supervised and preloaded
 * processes naming NAME draw from one limiter, and `sluice stat` and
 * `sluice set shared:NAME` see and retune it.
 *
 * Segments are opened once, before the program starts (an error stops the
 * launcher with the reason, as the library stops a program); every
 * supervised process uses them for its shared= rules. A conns rule with
 * shared= is refused in supervised mode: the library's segment tracks
 * holders by pid, and connections a supervisor holds for many processes are
 * not one pid's.
 */
#include "shared.h"
#include "state.h"

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shm_shared.h"

int sl_sup_shared_open_all(struct sl_sup *s, uint64_t now_ns, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < s->policy.n_rules; i++) {
		const struct sl_rule *r = &s->policy.rules[i];
		if (r->shared[0] == '\0')
			continue;
		bool created;
		s->shared[i] = sl_shm_shared_open(r, now_ns, &created, err, errlen);
		if (s->shared[i] == NULL)
			return -1;
	}
	return 0;
}

struct sl_limiter *sl_sup_shared_lim(const struct sl_sup *s, unsigned i)
{
	return s->shared[i] != NULL ? &s->shared[i]->lim.head : NULL;
}

void sl_sup_shared_close_all(struct sl_sup *s)
{
	for (unsigned i = 0; i < SL_MAX_RULES; i++) {
		if (s->shared[i] != NULL)
			munmap(s->shared[i], sizeof(*s->shared[i]));
		s->shared[i] = NULL;
	}
}
