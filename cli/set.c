/* SPDX-License-Identifier: MIT */
/*
 * set.c - `sluice set PID|shared:NAME 'OP:SPEC'`: change a running limit in
 * place (live reconfiguration).
 *
 * The target is one rule of a running process (the one rule of that
 * process whose operation is OP; with several, the command lists them and
 * changes nothing) or the shared limiter NAME. SPEC uses the rule grammar;
 * only the limit (rate or count) and the burst may differ from the running
 * rule, since everything else was read once by the process. The limiter is
 * retuned with sl_tunable_retune: atomically, keeping its state (debt,
 * counted units, held slots), effective at the next call. Only the owner
 * can: the files are 0600 and must belong to the caller.
 *
 * Retunes of one limiter are serialised with flock() on its file and kept
 * SL_SHM_RETUNE_GAP_NS apart (the grace period core/tunable.c asks for).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Check that `want` changes only the limit of `cur`; on success, print the
 * change and retune t. Returns the exit status. fd is flock'ed meanwhile. */
static int retune(const char *what, const char *cur_text, struct sl_rule want, struct sl_tunable *t,
		  int fd)
{
	struct sl_rule cur;
	if (sl__cli_rule_of(cur_text, &cur) != 0) {
		fprintf(stderr, "sluice set: %s: cannot read its rule '%s'\n", what, cur_text);
		return 1;
	}
	memcpy(want.shared, cur.shared, sizeof(want.shared));
	struct sl_rule cmp = cur;
	cmp.amount = want.amount;
	cmp.period_ns = want.period_ns;
	cmp.burst = want.burst;
	if (!sl_rule_equal(&cmp, &want)) {
		fprintf(stderr,
			"sluice set: %s: only the limit and the burst can change while it "
			"runs (its rule is '%s')\n",
			what, cur_text);
		return 2;
	}
	struct sl_params p;
	sl_params_of(&want, &p);
	if (flock(fd, LOCK_EX) != 0) {
		fprintf(stderr, "sluice set: %s: cannot lock: %s\n", what, strerror(errno));
		return 1;
	}
	/* Relaxed: the time of the last retune, serialised by the lock. */
	uint64_t last = atomic_load_explicit(&t->head.u.tun.retune_ns, memory_order_relaxed);
	uint64_t now = mono_ns();
	if (last != 0 && now - last < SL_SHM_RETUNE_GAP_NS) {
		uint64_t w = SL_SHM_RETUNE_GAP_NS - (now - last);
		struct timespec ts = {(time_t)(w / 1000000000u), (long)(w % 1000000000u)};
		nanosleep(&ts, NULL);
		now = mono_ns();
	}
	char before[SL_RULE_TEXT_MAX], after[SL_RULE_TEXT_MAX];
	sl__cli_current_text(cur_text, &sl_tunable_current(t)->params, before, sizeof(before));
	enum sl_status st = sl_tunable_retune(t, &p, now);
	flock(fd, LOCK_UN);
	if (st != SL_OK) {
		fprintf(stderr, "sluice set: %s: the limiter refuses the new parameters: %s\n",
			what, sl_status_name(st));
		return 1;
	}
	sl_rule_format(&want, after, sizeof(after));
	printf("%s: %s -> %s\n", what, before, after);
	return 0;
}

/* The rule index of record r with operation op; -1 if none or several
 * (reported). */
static int pick_rule(const struct sl_shm_stat *r, int pid, enum sl_op op)
{
	int found = -1, count = 0;
	for (uint32_t i = 0; i < r->n_rules; i++) {
		struct sl_rule x;
		if (sl__cli_rule_of(sl_shm_stat_rule(r, i), &x) == 0 && x.op == op) {
			found = (int)i;
			count++;
		}
	}
	if (count == 1)
		return found;
	if (count == 0)
		fprintf(stderr, "sluice set: process %d has no %s rule\n", pid, sl_op_name(op));
	else
		fprintf(stderr,
			"sluice set: process %d has %d %s rules; cannot tell which to change\n",
			pid, count, sl_op_name(op));
	for (uint32_t i = 0; i < r->n_rules; i++)
		fprintf(stderr, "  rule %u: %s\n", i + 1, sl_shm_stat_rule(r, i));
	return -1;
}

static int set_pid(int pid, const struct sl_rule *want)
{
	const char *why;
	int fd = -1;
	struct sl_shm_stat *r = sl__cli_record_open(pid, true, &fd, &why);
	if (r == NULL) {
		fprintf(stderr, "sluice set: process %d: %s\n", pid,
			strcmp(why, "gone") == 0 ? "not running sluice (no record)" : why);
		return 1;
	}
	int rc = 2, i = pick_rule(r, pid, (enum sl_op)want->op);
	if (i >= 0) {
		struct sl_rule cur;
		char what[64];
		snprintf(what, sizeof(what), "process %d rule %d", pid, i + 1);
		struct sl_tunable *lim = &sl_shm_stat_lims(r)[i];
		const int parsed = sl__cli_rule_of(sl_shm_stat_rule(r, i), &cur);
		if (parsed == 0 && cur.adaptive)
			fprintf(stderr,
				"sluice set: %s is conns:adaptive: its limit is the library's to "
				"move (sluice stat shows it)\n",
				what);
		else if (parsed == 0 && cur.shared[0] != '\0')
			fprintf(stderr,
				"sluice set: %s uses shared limiter '%s': change it with "
				"sluice set shared:%s\n",
				what, cur.shared, cur.shared);
		else if (cur.scope != SL_SCOPE_PROCESS || !sl_tunable_validate(lim))
			fprintf(stderr,
				"sluice set: %s is per=%s: only per=process and shared "
				"limits can change while running\n",
				what, sl_scope_name((enum sl_scope)cur.scope));
		else
			rc = retune(what, sl_shm_stat_rule(r, i), *want, lim, fd);
	}
	sl__cli_record_close(r);
	close(fd);
	return rc;
}

static int set_shared(const char *name, const struct sl_rule *want)
{
	const char *why;
	int fd = -1;
	struct sl_shm_shared *s = sl__cli_shared_open(name, true, &fd, &why);
	if (s == NULL) {
		fprintf(stderr, "sluice set: shared limiter '%s': %s\n", name,
			strcmp(why, strerror(ENOENT)) == 0 ? "no such shared limiter" : why);
		return 1;
	}
	char what[64];
	snprintf(what, sizeof(what), "shared limiter '%s'", name);
	struct sl_rule cur;
	int rc = 1;
	if (sl__cli_rule_of(s->rule, &cur) == 0 && cur.adaptive)
		fprintf(stderr,
			"sluice set: %s is conns:adaptive: its limit is the library's to move "
			"(sluice stat shared:%s shows it)\n",
			what, name);
	else
		rc = retune(what, s->rule, *want, &s->lim, fd);
	if (rc == 0) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		/* Relaxed: a time shown in messages; no data hangs on it. */
		atomic_store_explicit(&s->set_ns,
				      (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
				      memory_order_relaxed);
	}
	munmap(s, sizeof(*s));
	close(fd);
	return rc;
}

int sl__cli_set(int argc, char **argv)
{
	bool help = argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0);
	if (help || argc != 3) {
		fputs("Usage: sluice set PID|shared:NAME 'OP:SPEC'\n"
		      "Change a limit while it runs: the OP rule of process PID (a per=process rule;\n"
		      "if PID has several OP rules, they are listed and nothing changes), or the\n"
		      "limiter of shared=NAME rules. SPEC is the running rule with another rate (or\n"
		      "count) or burst=; its other options must stay as they are. The change is\n"
		      "atomic, keeps the limiter's state (debt, window counts, held connections)\n"
		      "and applies from the next call. Only the owner of the process or limiter\n"
		      "can change it. sluice stat shows the rules as they run.\n"
		      "\n"
		      "Examples: sluice set 1234 'send:2MiB/s'\n"
		      "          sluice set 1234 'recv:10MiB/s,burst=256KiB'\n"
		      "          sluice set 1234 'connect:20/s,to=10.0.0.0/8'\n"
		      "          sluice set shared:uploads 'send:20MiB/s'\n"
		      "Exit status: 0 when changed; 1 if the process or limiter is not found or\n"
		      "refuses the change; 2 on a usage error or a SPEC that cannot apply.\n",
		      help ? stdout : stderr);
		return help ? 0 : 2;
	}
	struct sl_policy p;
	char err[SL_ERR_MAX];
	sl_policy_init(&p);
	/* Named as typed: OP:SPEC (the variable it would be is not the user's). */
	if (sl_rules_parse_text(&p, "OP:SPEC", argv[2], err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice set: %s\n", err);
		return 2;
	}
	if (p.n_rules != 1) {
		fprintf(stderr, "sluice set: expected one OP:SPEC rule, got %u\n", p.n_rules);
		return 2;
	}
	if (p.rules[0].adaptive) {
		fprintf(stderr, "sluice set: conns:adaptive: its limit is the library's to move "
				"(between min= and max=); sluice stat shows it\n");
		return 2;
	}
	if (strncmp(argv[1], "shared:", 7) == 0)
		return set_shared(argv[1] + 7, &p.rules[0]);
	char *end;
	long pid = strtol(argv[1], &end, 10);
	if (*end != '\0' || pid <= 0 || pid > 0x7fffffff) {
		fprintf(stderr, "sluice set: '%s': expected a PID or shared:NAME\n", argv[1]);
		return 2;
	}
	return set_pid((int)pid, &p.rules[0]);
}
