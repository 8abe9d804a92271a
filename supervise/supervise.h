/* SPDX-License-Identifier: MIT */
/*
 * supervise.h - supervised mode, as the launcher sees it.
 *
 * sl_supervise_run() runs a program with its network calls throttled by a
 * seccomp user-notification supervisor (the calling process) instead of a
 * preloaded library: for static binaries and Go programs, which make their
 * system calls without libc. See internal.h for the design.
 */
#ifndef SLUICE_SUPERVISE_H
#define SLUICE_SUPERVISE_H

#include <stdbool.h>

struct sl_policy;

/*
 * Check the kernel, run argv[0] (resolved through PATH like execvp) with
 * argv under the filter, supervise it and all its descendants until the
 * last exits, and return the exit status the launcher should exit with:
 * the program's own (128 + N after death by signal N, the signal being
 * raised again where it can be), 2 when supervised mode cannot start (the
 * reason printed on stderr), 126/127 when the program cannot be run.
 * Not thread-safe; call it once, from the launcher's main thread.
 */
struct sl_supervise_opts {
	bool verbose;
	bool trap_stdio; /* trap the sends and receives of fds 0-2 too */
};
int sl_supervise_run(char *const *argv, const struct sl_policy *p,
		     const struct sl_supervise_opts *o);

/* The reason supervised mode cannot run here, or NULL if it can (a cheap
 * check for --check and -v). */
const char *sl_supervise_unavailable(char *buf, unsigned len);

#endif /* SLUICE_SUPERVISE_H */
