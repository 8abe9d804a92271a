/* SPDX-License-Identifier: MIT */
/*
 * internal.h - helpers shared by the files of the `sluice` launcher.
 *
 * Overview
 * --------
 * The launcher is split by idea: sluice.c parses the command line and execs
 * the program, env.c finds libsluice.so and edits LD_PRELOAD, and elf.c reads
 * an executable's ELF headers to tell whether a preloaded library can
 * throttle it at all. stat.c and set.c are the `sluice stat` and `sluice set`
 * subcommands (and rm.c `sluice rm`), over shm.c, which maps the shim's
 * segments in the user's private directory (common/segment.c, linked in). None of these files keeps global state; every function
 * below is reentrant, and none is meant to be called from more than one
 * thread (the launcher has only one).
 */
#ifndef SLUICE_CLI_INTERNAL_H
#define SLUICE_CLI_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "elfinfo.h"
#include "shm_format.h"

/*
 * Read the ELF file at `path` into *info (policy/elfinfo.h decodes it). Returns 0
 * on success, 1 if the file is readable but is not an ELF file (a script,
 * for instance), -1 if it cannot be read or its headers are truncated or
 * inconsistent (errno is left as the failing call set it, or EINVAL).
 */
int sl__elf_inspect(const char *path, struct sl_elf_info *info);

/*
 * Resolve a program name like execvp(3) does: a name containing '/' is taken
 * as is, any other name is looked up in each PATH directory (an empty entry
 * meaning the current directory, an unset PATH meaning the C library's
 * default). On success the path is written to out (NUL-terminated) and 0 is
 * returned. Otherwise returns 127 (not found) or 126 (found but not an
 * executable regular file), the exit codes a shell uses.
 */
int sl__cli_resolve_program(const char *name, char *out, size_t outlen);

/*
 * Print "sluice: warning: ..." lines to `out` for every reason the program at
 * `path` (already resolved) cannot be throttled through LD_PRELOAD: a static
 * binary, a set-user-ID/set-group-ID or file-capability binary that the loader
 * runs in secure mode, a Go binary, or an ELF class or machine that differs
 * from the library's (`lib` may be NULL to skip that check). A "#!" script is
 * judged by its interpreter, following up to four levels like the kernel.
 * Returns the number of warnings printed.
 */
int sl__cli_warn_unthrottlable(FILE *out, const char *path, const char *lib);
/* The warning for a program supervised mode runs without its privileges
 * (set-ID bits, file capabilities: no_new_privs ignores them); 1 if
 * given, 0 if not. */
int sl__cli_warn_supervised(FILE *out, const char *path);

/*
 * Why LD_PRELOAD cannot reach the program at `path` (already resolved;
 * a "#!" script judged by its interpreter): "statically linked" or "a Go
 * binary", the cases supervised mode is for; NULL otherwise.
 */
const char *sl__cli_preload_blind(const char *path);

/*
 * Find libsluice.so: $SLUICE_LIBRARY if set, else beside the running
 * executable (build tree), else ../lib/sluice/ relative to it (installed
 * tree). Never looks in the current directory. The absolute, canonical path
 * is written to out. Returns 0, or -1 with a one-line reason in err.
 */
int sl__cli_find_library(const char *override, char *out, size_t outlen, char *err, size_t errlen);

/*
 * Put `lib` in front of the LD_PRELOAD list `old` (may be NULL or empty;
 * entries separated by spaces or colons), unless an entry already names the
 * same file. The result goes to out. Returns 0, or -1 if out is too small.
 */
int sl__cli_preload_join(const char *old, const char *lib, char *out, size_t outlen);

/* ---- shm.c: the shim's segments (common/segment.h, common/shm_format.h) ---- */

/* The breakers of pid (stat_break.c): its breaker segment (break-PID), checked,
 * or NULL if it has none; shown in each of stat's formats. */
struct sl_shm_break;
const struct sl_shm_break *sl__cli_break_open(int pid);
void sl__cli_break_close(const struct sl_shm_break *b);
void sl__cli_break_sweep(void);
void sl__cli_break_text(FILE *out, const struct sl_shm_break *b);
void sl__cli_break_json(FILE *out, const struct sl_shm_break *b);
void sl__cli_break_prom(FILE *out, int n, const int *pids, const char *const *programs,
			const struct sl_shm_break *const *brks);
/* The status record of pid, checked (unmap with sl__cli_record_close); a
 * record of a dead process is removed; why = "gone" if there is none. With
 * fdp, the fd stays open in *fdp (for flock). */
struct sl_shm_stat *sl__cli_record_open(int pid, bool writable, int *fdp, const char **why);
void sl__cli_record_close(struct sl_shm_stat *r);
/* Pids that have a record of this user, ascending, in a malloc'd array
 * (*pids, free it); returns the count. */
int sl__cli_record_pids(int **pids);
/* The shared limiter NAME, checked; why = strerror(ENOENT) if none. */
struct sl_shm_shared *sl__cli_shared_open(const char *name, bool writable, int *fdp,
					  const char **why);
/* Pids of the processes that map shared limiter NAME (malloc'd, ascending);
 * returns the count, or -1 if there is no such segment. */
int sl__cli_shared_holders(const char *name, int **pids);
/* One info line on stderr if files of the flat /dev/shm layout remain. */
void sl__cli_old_note(void);
/* Parse one canonical rule text; 0 or -1. */
int sl__cli_rule_of(const char *text, struct sl_rule *r);
/* Rule text with the limit of `cur` (after a `sluice set`). */
void sl__cli_current_text(const char *text, const struct sl_params *cur, char *out, size_t len);

/* The subcommands: argv[0] is "stat" or "set". Return the exit status. */
int sl__cli_stat(int argc, char **argv);
int sl__cli_set(int argc, char **argv);
int sl__cli_rm(int argc, char **argv);

/* ---- stat.c and metrics_http.c: sluice stat --listen ---- */

/* Write the `sluice stat --prometheus` text of every process of this user
 * to out. Returns 0, or -1 if writing failed. Not reentrant (stat.c's
 * buffers are static). */
int sl__cli_stat_prometheus(FILE *out);
/* The same for the page (dashboard.c): its data, {"time_ms", "host",
 * "processes" (as --json), "shared" (as stat --json shared:NAME, each)};
 * and its tables, one <section> per process. */
int sl__cli_stat_api(FILE *out);
int sl__cli_stat_html(FILE *out);
/* The page at / (dashboard.c): the tables, and a script that charts
 * /api/stat every second. 0, or -1 as above. */
int sl__cli_dashboard(FILE *out);

/* Who may scrape (metrics_http.c): this user, root, the --allow-user
 * uids; a non-loopback peer (--listen-any) only with the --token-file's
 * bearer token. */
struct sl_metrics_access {
	uint32_t allow[16];
	unsigned n_allow;
	char token[256]; /* "" : none */
};
/* --allow-user NAME (a user name or a uid) and --token-file FILE into acc:
 * 0, or 2 after a message on stderr. metrics_http.c. */
int sl__cli_access_user(struct sl_metrics_access *acc, const char *name);
int sl__cli_access_token(struct sl_metrics_access *acc, const char *path);
/* Serve GET /metrics on the --listen address `listen_text` (any: allow a
 * non-loopback one) until SIGINT or SIGTERM. Returns the exit status: 0
 * after a signal, 1 if the socket cannot be set up, 2 for a bad address. */
int sl__cli_metrics_serve(const char *listen_text, bool any, const struct sl_metrics_access *acc);
/* The uid owning the peer socket of TCP connection fd (a peer on this
 * host): 0, or -1 (errno) if the kernel cannot tell. peer.c. */
int sl__cli_peer_uid(int fd, uint32_t *uid);

#endif /* SLUICE_CLI_INTERNAL_H */
