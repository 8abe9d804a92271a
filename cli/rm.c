/* SPDX-License-Identifier: MIT */
/*
 * rm.c - `sluice rm [--force] shared:NAME`: remove a shared limiter.
 *
 * A shared limiter outlives its processes (that is how several runs share
 * it): removing it lets the next process that names shared=NAME create it
 * afresh from its own rule. While processes still map it (found through
 * /proc/PID/maps, shm.c) the command refuses and lists them; --force removes
 * the name anyway: the processes that map it keep drawing from the old
 * segment, now nameless, until they exit, while new processes get a new one.
 * A file that is not a valid segment (corrupt, another version) is removed
 * too: that is the remedy the shim's messages point to.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"
#include "segment.h"

static void rm_usage(FILE *out)
{
	fputs("Usage: sluice rm [--force] shared:NAME\n"
	      "Remove the shared limiter NAME (the segment shared-NAME of this user's private\n"
	      "directory), so that the next process naming shared=NAME creates it afresh from\n"
	      "its own rule. Refused while processes use it (they are listed) unless --force;\n"
	      "those processes then keep the old limiter until they exit.\n"
	      "\n"
	      "Examples: sluice rm shared:uploads\n"
	      "          sluice rm --force shared:uploads\n"
	      "Exit status: 0 when removed; 1 if there is no such limiter, it is in use\n"
	      "(without --force) or cannot be removed; 2 on a usage error.\n",
	      out);
}

int sl__cli_rm(int argc, char **argv)
{
	bool force = false;
	const char *target = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--force") == 0 || strcmp(argv[i], "-f") == 0) {
			force = true;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			rm_usage(stdout);
			return 0;
		} else if (target == NULL && argv[i][0] != '-') {
			target = argv[i];
		} else {
			rm_usage(stderr);
			return 2;
		}
	}
	if (target == NULL || strncmp(target, "shared:", 7) != 0) {
		if (target != NULL)
			fprintf(stderr, "sluice rm: '%s': expected shared:NAME\n", target);
		rm_usage(stderr);
		return 2;
	}
	const char *name = target + 7;
	struct sl_policy p;
	char err[SL_ERR_MAX], rule[SL_RULE_TEXT_MAX + 32];
	sl_policy_init(&p);
	snprintf(rule, sizeof(rule), "send:1/s,shared=%s", name);
	if (sl_policy_parse_var(&p, "SLUICE_RULES", rule, err, sizeof(err)) != 0) {
		fprintf(stderr,
			"sluice rm: '%s': not a shared limiter name (1 to %d of A-Z a-z 0-9 "
			". _ -)\n",
			name, SL_SHARED_NAME_MAX - 1);
		return 2;
	}
	char seg_name[64], path[SL_SEG_PATH_MAX];
	snprintf(seg_name, sizeof(seg_name), SL_SHM_SHARED_NAME, name);
	sl_seg_path(seg_name, path, sizeof(path));
	int *pids = NULL;
	int n = sl__cli_shared_holders(name, &pids);
	if (n < 0) {
		fprintf(stderr, "sluice rm: shared limiter '%s': no such shared limiter (%s)\n",
			name, path);
		return 1;
	}
	if (n > 0 && !force) {
		fprintf(stderr, "sluice rm: shared limiter '%s' is used by %d process%s:", name, n,
			n == 1 ? "" : "es");
		for (int i = 0; i < n; i++)
			fprintf(stderr, " %d", pids[i]);
		fprintf(stderr, "\n  (--force removes it anyway: they keep the old limiter until "
				"they exit)\n");
		free(pids);
		return 1;
	}
	free(pids);
	if (sl_seg_unlink(seg_name) != 0) {
		fprintf(stderr, "sluice rm: %s: %s\n", path, strerror(errno));
		return 1;
	}
	printf("removed shared limiter %s (%s)%s\n", name, path,
	       n > 0 ? "; the processes using it keep it until they exit" : "");
	return 0;
}
