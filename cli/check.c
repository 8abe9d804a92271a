/* SPDX-License-Identifier: MIT */
/*
 * check.c - find the program the launcher is about to exec and warn when
 * LD_PRELOAD cannot throttle it.
 *
 * sluice works only if the dynamic loader loads libsluice.so into the
 * program and the program then calls the C library's socket functions. Four
 * kinds of program defeat that, and each is recognised from the file, never
 * guessed from its name:
 *   - a static binary (no PT_INTERP): no loader runs, LD_PRELOAD is ignored;
 *   - a set-user-ID or set-group-ID binary that would change our identity,
 *     or one with file capabilities: the loader runs in secure mode and
 *     drops a preload given by path;
 *   - a Go binary: its runtime makes raw system calls, bypassing libc;
 *   - an ELF class or machine other than the library's: the loader cannot
 *     load the library and only prints an error.
 * A "#!" script is judged by its interpreter ("/usr/bin/env NAME" by NAME
 * found in PATH), up to four levels deep as the kernel allows. A warning
 * never stops the exec: the user may know better (a Go program built with
 * the netgo tag off still does DNS through libc, for instance).
 */
#include "internal.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define SCRIPT_DEPTH_MAX 4 /* the kernel's BINPRM_MAX_RECURSION */

/* 0 if path is an executable regular file, else 126 (found, unusable). */
static int check_executable(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return errno == ENOENT || errno == ENOTDIR ? 127 : 126;
	if (!S_ISREG(st.st_mode) || access(path, X_OK) != 0)
		return 126;
	return 0;
}

int sl__cli_resolve_program(const char *name, char *out, size_t outlen)
{
	if (name[0] == '\0')
		return 127;
	if (strchr(name, '/') != NULL) {
		if ((size_t)snprintf(out, outlen, "%s", name) >= outlen)
			return 126;
		return check_executable(out);
	}

	char defpath[PATH_MAX];
	const char *path = getenv("PATH");
	if (path == NULL) {
		size_t n = confstr(_CS_PATH, defpath, sizeof(defpath));
		path = n > 0 && n <= sizeof(defpath) ? defpath : "/bin:/usr/bin";
	}
	/* Like execvp: the first executable match wins; if none, 126 when a
	 * match existed that could not be executed, else 127. */
	int result = 127;
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		int dirlen = (int)(end - p);
		int n = dirlen == 0 ? snprintf(out, outlen, "%s", name)
				    : snprintf(out, outlen, "%.*s/%s", dirlen, p, name);
		if (n > 0 && (size_t)n < outlen) {
			int rc = check_executable(out);
			if (rc == 0)
				return 0;
			if (rc == 126)
				result = 126;
		}
		if (*end == '\0')
			break;
		p = end;
	}
	return result;
}

/* If path starts with "#!", write the interpreter to interp (resolving
 * "/usr/bin/env NAME" through PATH) and return true. */
static bool script_interpreter(const char *path, char *interp, size_t len)
{
	char line[256];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, line, sizeof(line));
	close(fd);
	char name[256];
	switch (n > 0 ? sl_elf_script(line, (size_t)n, name, sizeof(name)) : 0) {
	case 1:
		return (size_t)snprintf(interp, len, "%s", name) < len;
	case 2:
		return sl__cli_resolve_program(name, interp, len) == 0;
	default:
		return false;
	}
}

/* Whether exec of the file would change the user or group we run as. */
static bool sets_uid(const struct stat *st)
{
	return (st->st_mode & S_ISUID) && st->st_uid != geteuid();
}

static bool sets_gid(const struct stat *st)
{
	return (st->st_mode & S_ISGID) && (st->st_mode & S_IXGRP) && st->st_gid != getegid();
}

/* Warnings about privileges of the ELF file at path, named `label` in the
 * messages. Set-ID bits only matter when they would change the identity the
 * program runs as (that is what makes the loader enter secure mode), so a
 * set-user-ID file we own ourselves gives no warning. */
static int warn_privileges(FILE *out, const char *path, const char *label)
{
	struct stat st;
	char caps[64];
	int n = 0;

	if (stat(path, &st) != 0)
		return 0;
	if (sets_uid(&st)) {
		fprintf(out,
			"sluice: warning: %s cannot be throttled: it is set-user-ID "
			"(uid %u), so the loader ignores LD_PRELOAD\n",
			label, (unsigned)st.st_uid);
		n++;
	}
	if (sets_gid(&st)) {
		fprintf(out,
			"sluice: warning: %s cannot be throttled: it is set-group-ID "
			"(gid %u), so the loader ignores LD_PRELOAD\n",
			label, (unsigned)st.st_gid);
		n++;
	}
	if (getxattr(path, "security.capability", caps, sizeof(caps)) > 0) {
		fprintf(out,
			"sluice: warning: %s may not be throttled: it has file "
			"capabilities, so the loader may run it in secure mode and "
			"ignore LD_PRELOAD\n",
			label);
		n++;
	}
	return n;
}

/* Warnings from the ELF headers of path, compared with the library's. */
static int warn_elf(FILE *out, const char *path, const struct sl_elf_info *e, const char *lib)
{
	struct sl_elf_info l;
	int n = 0;

	if (!e->has_interp) {
		fprintf(out,
			"sluice: warning: %s cannot be throttled: it is statically "
			"linked, so no dynamic loader reads LD_PRELOAD\n",
			path);
		n++;
	}
	if (e->is_go) {
		fprintf(out,
			"sluice: warning: %s cannot be throttled: it is a Go binary, "
			"and the Go runtime makes raw system calls that bypass libc\n",
			path);
		n++;
	}
	if (e->has_interp && lib != NULL && sl__elf_inspect(lib, &l) == 0 &&
	    (l.elf_class != e->elf_class || l.machine != e->machine)) {
		fprintf(out,
			"sluice: warning: %s cannot be throttled: it is a %d-bit "
			"ELF for machine %u, %s is %d-bit for machine %u\n",
			path, e->elf_class == ELFCLASS64 ? 64 : 32, e->machine, lib,
			l.elf_class == ELFCLASS64 ? 64 : 32, l.machine);
		n++;
	}
	return n;
}

int sl__cli_warn_unthrottlable(FILE *out, const char *path, const char *lib)
{
	char cur[PATH_MAX];
	char next[PATH_MAX];
	int n = 0;

	char label[2 * PATH_MAX + 32];

	snprintf(cur, sizeof(cur), "%s", path);
	for (int depth = 0; depth <= SCRIPT_DEPTH_MAX; depth++) {
		struct sl_elf_info e;
		int rc = sl__elf_inspect(cur, &e);
		if (rc == 0) {
			/* Name the script too, so the user sees why its
			 * interpreter is being talked about. */
			if (depth == 0)
				snprintf(label, sizeof(label), "%s", cur);
			else
				snprintf(label, sizeof(label), "%s (interpreter of %s)", cur, path);
			n += warn_privileges(out, cur, label);
			return n + warn_elf(out, label, &e, lib);
		}
		/* The kernel ignores set-ID bits on scripts, so only the final
		 * ELF interpreter's are checked. */
		if (rc < 0 || !script_interpreter(cur, next, sizeof(next)))
			return n; /* unreadable, or run by the shell: nothing known */
		memcpy(cur, next, sizeof(cur));
	}
	return n;
}

const char *sl__cli_preload_blind(const char *path)
{
	char cur[PATH_MAX];
	char next[PATH_MAX];

	snprintf(cur, sizeof(cur), "%s", path);
	for (int depth = 0; depth <= SCRIPT_DEPTH_MAX; depth++) {
		struct sl_elf_info e;
		int rc = sl__elf_inspect(cur, &e);
		if (rc == 0)
			return e.is_go ? "a Go binary" : !e.has_interp ? "statically linked" : NULL;
		if (rc < 0 || !script_interpreter(cur, next, sizeof(next)))
			return NULL;
		memcpy(cur, next, sizeof(cur));
	}
	return NULL;
}

int sl__cli_warn_supervised(FILE *out, const char *path)
{
	struct stat st;
	char caps[64];
	const char *what = NULL;
	if (stat(path, &st) == 0 && (sets_uid(&st) || sets_gid(&st)))
		what = "is set-user-ID or set-group-ID";
	else if (getxattr(path, "security.capability", caps, sizeof(caps)) > 0)
		what = "has file capabilities";
	if (what == NULL)
		return 0;
	fprintf(out,
		"sluice: warning: %s %s: supervised mode runs it with no_new_privs, so it runs "
		"without those privileges (as you)\n",
		path, what);
	return 1;
}
