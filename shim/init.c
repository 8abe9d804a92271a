/* SPDX-License-Identifier: MIT */
/*
 * init.c - the constructor: read SLUICE_* once, build the state and the
 * limiters (sl__state_init_unsync, which maps or clears every module's
 * tables); the destructor; the fork child's handler.
 *
 * The configuration is read once, at load, from environ with
 * sl_policy_parse_env (the variables propagate to child processes, which
 * read them again at their own load: `sluice ... -- sh -c 'curl ...'`
 * throttles curl, with its own buckets). A configuration error prints the
 * policy's message and exits with status 2, before the program runs
 * unthrottled; SLUICE_CONFIG_ERROR=warn prints a warning instead and runs
 * with no rules. SLUICE_CONFIG_ERROR is looked up first, on its own, so that
 * it applies whatever order the environment lists the variables in.
 *
 * SLUICE_ONLY and SLUICE_SKIP ('+'-separated) name programs by the basename
 * of /proc/self/exe or by program_invocation_short_name; either matching is
 * a match (a script run by python3.11 is both "python3.11" and "python3").
 *
 * After fork the child keeps every classification (its fds are the same;
 * the prepare handler first classifies the sockets a connect left for
 * later, so that a child that sandboxes itself knows them) and its own copy of the buckets; its SLUICE_STATS counters start at zero
 * so that no call is reported twice. shared=NAME rules keep the limiter of
 * the shared file (shm.c), in the child as in the parent. The state itself
 * is built by state.c.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "acchold.h"
#include "breaker.h"
#include "clock.h"
#include "connfam.h"
#include "credit.h"
#include "connwait.h"
#include "epoll.h"
#include "fd.h"
#include "fdscan.h"
#include "fair.h"
#include "init.h"
#include "lease.h"
#include "log.h"
#include "privfile.h"
#include "stats_json.h"
#include "ready.h"
#include "real.h"
#include "scope.h"
#include "sandbox.h"
#include "shm.h"
#include "state.h"
#include "stats.h"
#include "turn.h"
#include "vfork.h"
#include "wake.h"
#include "wrap_raw.h"

extern char **environ;

static size_t fd_lims_bytes, thread_lims_bytes;

/* Map n limiters, replacing an old mapping of *bytes. NULL if n == 0. */
static struct sl_limiter *remap(struct sl_limiter *old, size_t *bytes, size_t n)
{
	if (old != NULL)
		munmap(old, *bytes);
	*bytes = n * sizeof(struct sl_limiter);
	return n == 0 ? NULL : sl__map(*bytes);
}

/* How the fast paths reach fast rule i's limiter (state.h): buckets
 * directly, anything else through the generic inline take. A retune keeps
 * a tunable's kind. */
static uint8_t fast_how(unsigned i)
{
	const struct sl_state *st = &sl__st;
	struct sl_params prm;
	sl__rule_params(&st->policy.rules[i], &prm);
	const bool bucket = prm.kind == SL_KIND_TOKEN || prm.kind == SL_KIND_LEAKY;
	const struct sl_limiter *l = st->rule_lim[i];
	if ((st->proc_rules >> i) & 1) {
		if (l->kind != SL_KIND_TUNABLE)
			return SL_FAST_OTHER;
		const struct sl_limiter *s = sl_tunable_current(
			(const struct sl_tunable *)(const void *)l);
		if (s->kind != prm.kind)
			return SL_FAST_PROC_TUNABLE;
		return bucket                        ? SL_FAST_PROC_BUCKET
		       : prm.kind == SL_KIND_FIXED   ? SL_FAST_PROC_FIXED
		       : prm.kind == SL_KIND_SLIDING ? SL_FAST_PROC_SLIDING
						     : SL_FAST_PROC_TUNABLE;
	}
	if ((st->peer_rules >> i) & 1)
		return bucket ? SL_FAST_PEER_BUCKET : SL_FAST_PEER;
	if (!bucket)
		return SL_FAST_OTHER;
	return (st->fd_rules >> i) & 1 ? SL_FAST_FD_BUCKET : SL_FAST_THREAD_BUCKET;
}

/* The held-back fds (ready.c), then what builds on them: a per=peer accept
 * holding a connection (acchold.c), connects waiting for a conns slot
 * (connwait.c, which registers with ready.c), the fair turns (fair.c). */
static int ready_init_unsync(const struct sl_state *st)
{
	if (sl__ready_init_unsync() != 0)
		return -1;
	if (st->eagain_rules != 0)
		sl__ah_init_unsync();
	return sl__cw_init_unsync() != 0 || sl__fair_init_unsync() != 0 ? -1 : 0;
}

int sl__state_init_unsync(const struct sl_policy *p)
{
	struct sl_state *st = &sl__st;
	st->ready = false;
	sl__credit_reset_unsync();
	sl__sandbox_reset_unsync();
	sl__fd_cap_init_unsync();
	st->active = false;
	st->policy = *p;
	sl__log_level = (int)p->log_level;
	sl__log_set_file(p->log_file);
	memset(st->kind_rules, 0, sizeof(st->kind_rules));
	st->byte_rules = st->conns_rules = st->reject_rules = st->eagain_rules = 0;
	st->proc_rules = st->fast_rules = st->lease_rules = 0;
	st->fd_rules = st->thread_rules = st->peer_rules = st->late_rules = 0;
	st->credit_rules = st->credit_in_rules = st->mcredit_rules = st->keyed_rules = 0;
	st->adapt_rules = st->sys_rules = st->sys_load1_rules = st->sys_cpu_rules = 0;
	st->n_fd_rules = st->n_thread_rules = st->n_peer_rules = 0;
	static const uint32_t kinds[SL_OP_COUNT] = {
		[SL_OP_CONNECT] = 1u << SL_K_CONNECT,
		[SL_OP_ACCEPT] = 1u << SL_K_ACCEPT,
		[SL_OP_SEND] = 1u << SL_K_SEND,
		[SL_OP_RECV] = 1u << SL_K_RECV,
		[SL_OP_CONNS] = (1u << SL_K_CONNECT) | (1u << SL_K_ACCEPT),
	};
	uint64_t now = sl__clock_ns();
	sl__lease_stop_unsync(); /* before the pools' segments go */
	sl__shm_shared_close_all_unsync();
	if (sl__shm_rec_open_unsync(p->n_rules > 0 || p->n_breaks > 0) != 0) {
		sl_log(SL_LOG_ERROR, "cannot map memory for the limiters: %s", strerror(errno));
		return -1;
	}
	st->stats = sl_shm_stat_stats(st->rec);
	for (uint32_t i = 0; i < p->n_rules && i < SL_MAX_RULES; i++) {
		const struct sl_rule *r = &p->rules[i];
		uint32_t bit = (uint32_t)1 << i;
		for (int k = 0; k < SL_K_COUNT; k++)
			if (r->op < SL_OP_COUNT && (kinds[r->op] & (1u << k)))
				st->kind_rules[k] |= bit; /* adaptive on connect: turn.c */
		if (r->adaptive)
			st->adapt_rules |= bit;
		if (sl_rule_system(r))
			st->sys_rules |= bit;
		if (r->sys_load1 != 0)
			st->sys_load1_rules |= bit;
		if (r->sys_cpu != 0)
			st->sys_cpu_rules |= bit;
		if (r->op == SL_OP_CONNS)
			st->conns_rules |= bit;
		else if (r->unit == SL_UNIT_BYTES)
			st->byte_rules |= bit;
		if (r->action == SL_ACTION_REJECT)
			st->reject_rules |= bit;
		if (r->redis_key[0] != '\0')
			st->lease_rules |= bit;
		if (r->scope == SL_SCOPE_PROCESS && r->redis_key[0] == '\0')
			st->proc_rules |= bit;
		if (r->op != SL_OP_CONNS && r->scope == SL_SCOPE_FD)
			st->fd_rules |= bit;
		if (r->op != SL_OP_CONNS && r->scope == SL_SCOPE_THREAD)
			st->thread_rules |= bit;
		if (r->op != SL_OP_CONNS && r->scope == SL_SCOPE_PEER)
			st->peer_rules |= bit;
		memset(&st->fast[i], 0, sizeof(st->fast[i]));
		if (r->op != SL_OP_CONNS &&
		    ((st->proc_rules | st->fd_rules | st->thread_rules | st->peer_rules) & bit))
			st->fast_rules |= bit;
		if (r->algo == SL_ALGO_SLIDING)
			st->late_rules |= bit;
		if (r->scope == SL_SCOPE_FD)
			st->scope_slot[i] = (uint8_t)st->n_fd_rules++;
		else if (r->scope == SL_SCOPE_THREAD)
			st->scope_slot[i] = (uint8_t)st->n_thread_rules++;
		else if (r->scope == SL_SCOPE_PEER)
			st->scope_slot[i] = (uint8_t)st->n_peer_rules++;
		else
			st->scope_slot[i] = 0;
		if (r->shared[0] != '\0') {
			char err[SL_ERR_MAX];
			st->rule_lim[i] = sl__shm_shared_open_unsync(i, r, now, err, sizeof(err));
			if (st->rule_lim[i] == NULL) {
				sl_log(SL_LOG_ERROR, "rule %u: %s", i + 1, err);
				return -1;
			}
			continue;
		}
		struct sl_params prm;
		sl__rule_params(r, &prm);
		struct sl_tunable *lim = &sl_shm_stat_lims(st->rec)[i];
		st->rule_lim[i] = &lim->head;
		enum sl_status s = sl_tunable_init(lim, &prm, now);
		if (s != SL_OK) {
			char txt[SL_RULE_TEXT_MAX];
			sl_rule_format(r, txt, sizeof(txt));
			sl_log(SL_LOG_ERROR, "rule %u (%s): the limiter refuses its parameters: %s",
			       i + 1, txt, sl_status_name(s));
			return -1;
		}
	}
	if (sl__turn_init_unsync(st, now) != 0) {
		sl_log(SL_LOG_ERROR, "cannot map memory for the adaptive limits: %s",
		       strerror(errno));
		return -1;
	}
	for (uint32_t rest = st->fast_rules; rest != 0; rest &= rest - 1) {
		unsigned i = (unsigned)__builtin_ctz(rest);
		st->fast[i] = (struct sl_fast_rule){.how = fast_how(i),
						    .lim = st->rule_lim[i],
						    .stats = &st->stats[i]};
		if (SL_CREDIT_TSC && i < SL_CREDIT_RULES && sl__credit_lends(st->fast[i].how))
			st->credit_rules |= 1u << i;
	}
	st->credit_in_rules = st->credit_rules & st->byte_rules;
	st->mcredit_rules = st->keyed_rules = 0;
	for (uint32_t rest = st->credit_rules; rest != 0; rest &= rest - 1) {
		const struct sl_fast_rule *d = &st->fast[__builtin_ctz(rest)];
		if (!sl__credit_windowed(d->how))
			st->mcredit_rules |= 1u << __builtin_ctz(rest);
		if (sl__fast_keyed(d))
			st->keyed_rules |= 1u << __builtin_ctz(rest);
	}
	st->piece_min = sl__piece_of(st->byte_rules);
	st->fd_lims = remap(st->fd_lims, &fd_lims_bytes, (size_t)sl__fd_cap * st->n_fd_rules);
	st->thread_lims = remap(st->thread_lims, &thread_lims_bytes,
				(size_t)SL_THREAD_SLOTS * st->n_thread_rules);
	if ((st->n_fd_rules && !st->fd_lims) || (st->n_thread_rules && !st->thread_lims) ||
	    sl__fdtab_init_unsync() != 0 || sl__scope_init_unsync() != 0 ||
	    ready_init_unsync(st) != 0 || sl__ep_init_unsync(st->eagain_rules != 0) != 0 ||
	    sl__fam_init_unsync() != 0) {
		sl_log(SL_LOG_ERROR, "cannot map memory for the limiters: %s", strerror(errno));
		return -1;
	}
	sl__stats_on_write_unsync(sl__break_stats_json);
	if (sl__lease_init_unsync(p) != 0 || sl__break_init_unsync(p, now) != 0)
		return -1;
	sl__stats_reset();
	st->active = p->n_rules > 0 || p->n_breaks > 0;
	sl__shm_rec_fill_unsync(p, st->active);
	st->ready = true;
	return 0;
}

/* Whether SLUICE_ONLY / SLUICE_SKIP let the rules apply to this program. */
static bool program_selected(const struct sl_policy *p)
{
	if (p->only[0] == '\0' && p->skip[0] == '\0')
		return true;
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	const char *base = strrchr(exe, '/');
	base = base != NULL ? base + 1 : exe;
	return sl_policy_selects(p, base, program_invocation_short_name);
}

/* Before fork: sockets classified (fd.c), and conns slots that the child
 * will share moved where both see them (connfam.c). */
static void atfork_prepare(void)
{
	sl__fdtab_classify_pending();
	sl__turn_forking();
	if (sl__st.active && sl__fam_rules() != 0 && !sl__sandboxed())
		sl__fdtab_share_conns();
}

static void atfork_child(void)
{
	sl__clock_fork_child();
	/* A sandboxed process's child may open no record of its own
	 * (sandbox.h): it counts on in its parent's. */
	if (!sl__sandboxed()) {
		sl__shm_rec_fork_child();
		sl__stats_reset();
	}
	sl__credit_reset_unsync();
	sl__turn_fork_child();
	sl__fdtab_after_fork_unsync();
	sl__cw_after_fork_unsync();
	sl__scope_after_fork_unsync();
	sl__ep_after_fork_unsync();
}

/* Parse environ; on error decide between exit 2 and running unthrottled. */
static void init_policy(struct sl_policy *p)
{
	char err[SL_ERR_MAX];
	static const char key[] = "SLUICE_CONFIG_ERROR=";
	struct sl_policy scratch;
	sl_policy_init(&scratch);
	for (char **e = environ; e != NULL && *e != NULL; e++)
		if (strncmp(*e, key, sizeof(key) - 1) == 0)
			sl_policy_parse_var(&scratch, "SLUICE_CONFIG_ERROR", *e + sizeof(key) - 1,
					    err, sizeof(err));
	sl_policy_init(p);
	if (sl_policy_parse_env(p, (const char *const *)environ, err, sizeof(err)) == 0)
		return;
	if (scratch.config_error != SL_CONFIG_ERROR_WARN) {
		sl__log_write(SL_LOG_ERROR, "%s", err);
		sl__log_write(SL_LOG_ERROR, "configuration error: exiting with status 2 "
					    "(SLUICE_CONFIG_ERROR=warn runs unthrottled instead)");
		_exit(2);
	}
	sl__log_write(SL_LOG_WARN, "%s", err);
	sl__log_write(SL_LOG_WARN, "configuration error: running unthrottled "
				   "(SLUICE_CONFIG_ERROR=warn)");
	sl_policy_init(p);
}

/* Check one path of variable var at start (log.h), without creating it:
 * 0 if it may be used; else logged, the path cleared, -1. */
static int file_check(const char *var, char *path_field, const char *path, bool warn)
{
	char bad[128];
	if (sl_file_check(path, bad, sizeof(bad)) == 0)
		return 0;
	sl__log_write(warn ? SL_LOG_WARN : SL_LOG_ERROR,
		      "%s=%s: the file %s; refusing to write there (use a path in a directory only "
		      "you can write, such as $XDG_RUNTIME_DIR, or a name with %%p)%s",
		      var, path, bad, warn ? "; it is not written (SLUICE_CONFIG_ERROR=warn)" : "");
	path_field[0] = '\0';
	return -1;
}

/* Check both paths of p at start: 0, or -1 (exit 2; logged). Under
 * SLUICE_CONFIG_ERROR=warn a refused path is cleared and 0 returned. */
static int files_check_unsync(struct sl_policy *p)
{
	bool warn = p->config_error == SL_CONFIG_ERROR_WARN;
	char stats[SL_PATH_MAX + 32];
	sl_stats_path(p->stats_file, (int)getpid(), stats, sizeof(stats));
	int rc = 0;
	if (p->log_file[0] != '\0' && file_check("SLUICE_LOG_FILE", p->log_file, p->log_file, warn))
		rc = -1;
	if (p->stats_file[0] != '\0' && file_check("SLUICE_STATS", p->stats_file, stats, warn))
		rc = -1;
	if (rc != 0 && !warn)
		sl__log_write(SL_LOG_ERROR,
			      "configuration error: exiting with status 2 "
			      "(SLUICE_CONFIG_ERROR=warn runs without that file instead)");
	return warn ? 0 : rc;
}

__attribute__((constructor)) static void init(void)
{
	int saved = errno;
	sl__busy = 1;
	sl_real_resolve_all();
	sl__vfork_init_unsync();
	sl__wake_init_unsync();
	sl__wrap_fd_on_io_unsync(sl__wrap_raw_io);
	struct sl_policy p;
	init_policy(&p);
	if (files_check_unsync(&p) != 0)
		_exit(2);
	if (sl__state_init_unsync(&p) != 0) {
		sl__shm_rec_remove();
		if (p.config_error != SL_CONFIG_ERROR_WARN)
			_exit(2);
		sl_policy_init(&p);
		sl__state_init_unsync(&p);
	}
	sl__st.active = sl__st.active && program_selected(&p);
	if (!sl__st.active)
		sl__shm_rec_remove(); /* nothing to report or retune here */
	if (sl__st.active) {
		sl__clock_init();
		sl__fd_scan_unsync(); /* inherited sockets, before any filter */
	}
	if (sl__st.policy.n_rules > 0)
		pthread_atfork(atfork_prepare, NULL, atfork_child);
	sl_log(SL_LOG_DEBUG, "loaded: %u rules, %s", sl__st.policy.n_rules,
	       sl__st.active ? "active" : "inactive for this program");
	sl__busy = 0;
	errno = saved;
}

__attribute__((destructor)) static void fini(void)
{
	int saved = errno;
	sl__busy = 1;
	/* This thread's credit back to a limiter other processes may share
	 * (shared=): the other threads' is lost with them, a slice each. */
	if (sl__st.active)
		sl__credit_return_all(sl__clock_ns());
	/* In a sandbox no file may be written or removed (sandbox.h): the
	 * record stays until `sluice stat` finds its process gone. */
	if (!sl__sandboxed()) {
		sl__stats_write();
		sl__shm_rec_remove();
	}
	sl__busy = 0;
	errno = saved;
}
