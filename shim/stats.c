/* SPDX-License-Identifier: MIT */
/*
 * stats.c - SLUICE_STATS=PATH: what each rule did, written at exit.
 *
 * Format (common/stats_json.h, shared with the supervisor): each process
 * appends exactly one line to PATH, a JSON object * with one entry per rule (and the breakers'). Several processes (a shell and its children) may share one PATH: the file is
 * opened with O_APPEND and the line is written with a single write(), so
 * lines never interleave. If PATH contains "%p", it is replaced by the pid
 * and every process gets its own file. The file is opened as
 * common/privfile.h says (no links followed, owner checked, created 0600). Processes to which SLUICE_ONLY or
 * SLUICE_SKIP do not apply write nothing; a process that ends with _exit or
 * a signal writes nothing either.
 *
 * Counters (struct sl_rstats), per rule, per process:
 *   calls     calls the rule matched;
 *   admitted  of those, calls that went through (after a wait or not);
 *   delayed   calls that waited (dry-run: would have waited);
 *   refused   calls refused (dry-run: would have been refused);
 *   delay_ns_total, delay_ns_max  time the delayed calls waited in the shim;
 *   bytes     bytes those calls transferred.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "privfile.h"
#include "real.h"
#include "state.h"
#include "stats.h"
#include "stats_json.h"

void sl__stats_reset(void)
{
	/* The record holds the counters of its rules only (record.c). */
	uint32_t n = sl__st.rec != NULL ? sl__st.rec->n_rules : 0;
	for (unsigned i = 0; i < n; i++) {
		struct sl_rstats *s = &sl__st.stats[i];
		/* Relaxed: counters only; the reset runs single-threaded (init,
		 * or the child after fork). */
		atomic_store_explicit(&s->calls, 0, memory_order_relaxed);
		atomic_store_explicit(&s->admitted, 0, memory_order_relaxed);
		atomic_store_explicit(&s->delayed, 0, memory_order_relaxed);
		atomic_store_explicit(&s->refused, 0, memory_order_relaxed);
		atomic_store_explicit(&s->delay_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&s->max_delay_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&s->bytes, 0, memory_order_relaxed);
		for (unsigned k = 0; k < SL_WAIT_BUCKETS; k++)
			atomic_store_explicit(&s->wait_le[k], 0, memory_order_relaxed);
		atomic_store_explicit(&s->redis_fallbacks, 0, memory_order_relaxed);
	}
	/* The per-thread counters (shm_format.h): the child's own. */
	if (n > 0)
		memset(sl_shm_stat_tcount(sl__st.rec, 0, 0), 0,
		       (size_t)SL_SHM_TSLOTS * sl_shm_stat_trules(n) * sizeof(struct sl_tcount));
}

/* More members of the JSON object (sl__stats_on_write_unsync). */
static size_t (*stats_extra)(char *buf, size_t len);

void sl__stats_on_write_unsync(size_t (*extra)(char *buf, size_t len))
{
	stats_extra = extra;
}

/*
 * Append this process's line to SLUICE_STATS (if set and the rules apply
 * here). Called by the destructor; safe to call again. Not thread-safe
 * (uses a static buffer): exit-time only.
 */
void sl__stats_write(void)
{
	static char buf[32768];
	static struct sl_rstats snap[SL_MAX_RULES];
	if (!sl__st.ready || !sl__st.active || sl__st.policy.stats_file[0] == '\0')
		return;
	const uint32_t n = sl__st.rec->n_rules;
	for (uint32_t i = 0; i < n; i++)
		sl_shm_stat_counts(sl__st.rec, i, &snap[i]);
	size_t len = sl_stats_json(buf, sizeof(buf) - 3, (int)getpid(),
				   program_invocation_short_name, &sl__st.policy, snap, n);
	if (stats_extra != NULL) /* ,"breakers":[...] (breaker.c, through init.c) */
		len += stats_extra(buf + len, sizeof(buf) - 2 - len);
	buf[len++] = '}';
	buf[len++] = '\n';
	char path[SL_PATH_MAX + 32];
	char why[128];
	sl_stats_path(sl__st.policy.stats_file, (int)getpid(), path, sizeof(path));
	int fd = sl_file_open_private(path, why, sizeof(why));
	if (fd < 0) {
		sl_log(SL_LOG_WARN, "SLUICE_STATS=%s: cannot write %s: %s",
		       sl__st.policy.stats_file, path, why);
		return;
	}
	if (SL_REAL(write)(fd, buf, len) != (ssize_t)len)
		sl_log(SL_LOG_WARN, "short write to SLUICE_STATS file '%s'", path);
	SL_REAL(close)(fd);
}
