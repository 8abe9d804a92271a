/*
 * internal.h - helpers shared by the files of the `sluice` launcher.
 *
 * Overview
 * --------
 * The launcher is split by idea: sluice.c parses the command line and execs
 * the program, env.c finds libsluice.so and edits LD_PRELOAD, and elf.c reads
 * an executable's ELF headers to tell whether a preloaded library can
 * throttle it at all. stat.c and set.c are the `sluice stat` and `sluice set`
 * subcommands, over shm.c, which maps the shim's files in /dev/shm. None of these files keeps global state; every function
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

/*
 * Find libsluice.so: $SLUICE_LIBRARY if set, else beside the running
 * executable (build tree), else ../lib/sluice/ relative to it (installed
 * tree). Never looks in the current directory. The absolute, canonical path
 * is written to out. Returns 0, or -1 with a one-line reason in err.
 */
int sl__cli_find_library(const char *override, char *out, size_t outlen, char *err,
			 size_t errlen);

/*
 * Put `lib` in front of the LD_PRELOAD list `old` (may be NULL or empty;
 * entries separated by spaces or colons), unless an entry already names the
 * same file. The result goes to out. Returns 0, or -1 if out is too small.
 */
int sl__cli_preload_join(const char *old, const char *lib, char *out, size_t outlen);

/* ---- shm.c: the shim's /dev/shm files (layout in shim/shm_format.h) ---- */

/* Map a file of `size` bytes after checking owner, mode and size. NULL with
 * a reason in *why. With fdp, the fd stays open in *fdp (for flock). */
void *sl__cli_shm_map(const char *path, size_t size, bool writable, int *fdp, const char **why);
/* The stats record of pid, checked; a record of a dead process is removed
 * (why = "gone"). */
struct sl_shm_stat *sl__cli_record_open(int pid, bool writable, int *fdp, const char **why);
void sl__cli_record_close(struct sl_shm_stat *r);
/* Pids that have a record file of this user, ascending; returns the count. */
int sl__cli_record_pids(int *pids, int max);
/* The shared limiter NAME, checked. */
struct sl_shm_shared *sl__cli_shared_open(const char *name, bool writable, int *fdp,
					  const char **why);
/* Parse one canonical rule text; 0 or -1. */
int sl__cli_rule_of(const char *text, struct sl_rule *r);
/* Rule text with the limit of `cur` (after a `sluice set`). */
void sl__cli_current_text(const char *text, const struct sl_params *cur, char *out, size_t len);

/* The subcommands: argv[0] is "stat" or "set". Return the exit status. */
int sl__cli_stat(int argc, char **argv);
int sl__cli_set(int argc, char **argv);

#endif /* SLUICE_CLI_INTERNAL_H */
