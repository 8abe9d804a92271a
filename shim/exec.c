/* SPDX-License-Identifier: MIT */
/*
 * exec.c - execve, execv, execvp, execvpe, posix_spawn and posix_spawnp: a
 * warning when a preloaded process is about to run a program the shim
 * cannot throttle.
 *
 * The launcher checks only the program it execs itself; `sluice -- sh -c
 * './go-client'` would run the Go program unthrottled without a word. So
 * before the real call these wrappers look at the file (a "#!" script by its
 * interpreter, up to four levels as the kernel does) and, when it is
 * statically linked, a Go binary, set-user-ID or set-group-ID to another
 * identity, carries file capabilities, or is an ELF of another class or
 * machine, write one line naming the program and the reasons:
 *
 *   sluice: warning: ./go-client cannot be throttled (a Go binary: raw system
 *   calls bypass libc); it runs unthrottled
 *
 * once per program per process (the first 16 programs), whatever
 * SLUICE_LOG says (to SLUICE_LOG_FILE if set). The checks are the
 * launcher's (policy/elfinfo.c decodes the file); nothing here allocates or
 * uses stdio, since a process may exec between fork and exec; the file is
 * read with pread and closed with the real close, with sl__busy set. The
 * call itself, its arguments and errno are never changed. Only with rules
 * in force (a process with none warns about nothing). execl, execlp and
 * execle are the shim's: glibc's build their vector and call its internal
 * execve, which no preload sees; these build it the same way (on the stack,
 * as glibc does) and go through execv, execvp and execve.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "elfinfo.h"
#include "log.h"
#include "real.h"
#include "sandboxed.h"
#include "state.h"

#define SL_EXEC_DEPTH 4   /* the kernel's BINPRM_MAX_RECURSION */
#define SL_EXEC_WARNED 16 /* programs warned about, per process */

static _Atomic uint64_t warned[SL_EXEC_WARNED];

#if defined(__x86_64__)
#define SL_OWN_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define SL_OWN_MACHINE EM_AARCH64
#elif defined(__i386__)
#define SL_OWN_MACHINE EM_386
#else
#define SL_OWN_MACHINE 0 /* unknown: not compared */
#endif
#define SL_OWN_CLASS (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32)

static long read_fd(void *ctx, void *buf, size_t len, uint64_t off)
{
	for (;;) {
		ssize_t n = pread(*(int *)ctx, buf, len, (off_t)off);
		if (n >= 0 || errno != EINTR)
			return (long)n;
	}
}

/* Append s to the reasons in r (", " between). */
static void add(char *r, size_t len, const char *s)
{
	size_t n = strlen(r);
	if (n != 0 && n + 2 < len) {
		memcpy(r + n, ", ", 3);
		n += 2;
	}
	size_t k = strlen(s);
	if (n + k < len) {
		memcpy(r + n, s, k + 1);
	}
}

/* The first executable regular file for name in PATH (execvp's search), or
 * name itself if it has a slash. Returns false if none. */
static bool resolve(const char *name, char *out, size_t len)
{
	size_t nl = strlen(name);
	if (nl == 0 || nl >= len)
		return false;
	if (strchr(name, '/') != NULL) {
		memcpy(out, name, nl + 1);
		return true;
	}
	const char *path = getenv("PATH");
	if (path == NULL)
		path = "/bin:/usr/bin";
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		size_t dl = (size_t)(end - p);
		struct stat st;
		if (dl + 1 + nl < len) {
			size_t at = 0;
			if (dl != 0) {
				memcpy(out, p, dl);
				out[dl] = '/';
				at = dl + 1;
			}
			memcpy(out + at, name, nl + 1);
			if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
				return true;
		}
		if (*end == '\0')
			return false;
		p = end;
	}
}

/* Why the program at path cannot be throttled, into r (empty: it can, or
 * nothing is known). A script is judged by its interpreter, whose path goes
 * to interp (empty if path itself was judged). */
static void judge(const char *path, char *r, size_t rlen, char *interp, size_t ilen)
{
	char cur[PATH_MAX], name[256];
	r[0] = interp[0] = '\0';
	if (strlen(path) >= sizeof(cur))
		return;
	memcpy(cur, path, strlen(path) + 1);
	for (int depth = 0; depth <= SL_EXEC_DEPTH; depth++) {
		int fd = open(cur, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return;
		struct sl_elf_src src = {.read = read_fd, .ctx = &fd};
		struct sl_elf_info e;
		int rc = sl_elf_decode(&src, &e);
		if (rc == 0) {
			struct stat st;
			char caps[64];
			if (!e.has_interp)
				add(r, rlen, "statically linked: no loader reads LD_PRELOAD");
			if (e.is_go)
				add(r, rlen, "a Go binary: raw system calls bypass libc");
			if (fstat(fd, &st) == 0 && (st.st_mode & S_ISUID) && st.st_uid != geteuid())
				add(r, rlen, "set-user-ID: the loader ignores LD_PRELOAD");
			if (fstat(fd, &st) == 0 && (st.st_mode & S_ISGID) &&
			    (st.st_mode & S_IXGRP) && st.st_gid != getegid())
				add(r, rlen, "set-group-ID: the loader ignores LD_PRELOAD");
			if (fgetxattr(fd, "security.capability", caps, sizeof(caps)) > 0)
				add(r, rlen, "file capabilities: the loader may ignore LD_PRELOAD");
			if (e.has_interp && (e.elf_class != SL_OWN_CLASS ||
					     (SL_OWN_MACHINE != 0 && e.machine != SL_OWN_MACHINE)))
				add(r, rlen, "another ELF class or machine than libsluice.so");
			SL_REAL(close)(fd);
			if (depth > 0 && strlen(cur) < ilen)
				memcpy(interp, cur, strlen(cur) + 1);
			return;
		}
		ssize_t n = rc == 1 ? pread(fd, name, sizeof(name), 0) : -1;
		SL_REAL(close)(fd);
		char line[sizeof(name)];
		if (n <= 0)
			return;
		memcpy(line, name, (size_t)n);
		int k = sl_elf_script(line, (size_t)n, name, sizeof(name));
		if (k == 0 || (k == 1 && strlen(name) >= sizeof(cur)) ||
		    (k == 2 && !resolve(name, cur, sizeof(cur))))
			return;
		if (k == 1)
			memcpy(cur, name, strlen(name) + 1);
	}
}

/* The check before an exec or spawn of `file` (searched in PATH if
 * `search`). errno is left as it was. */
static void exec_check(const char *file, bool search)
{
	/* In a seccomp sandbox the check's open, fstat and pread are not ours to
	 * make. */
	if (sl__busy || file == NULL || !sl__st.active || sl__st.policy.n_rules == 0 ||
	    sl__sandboxed())
		return;
	int saved = errno;
	sl__busy = 1;
	char path[PATH_MAX], why[256], interp[PATH_MAX];
	if (search ? resolve(file, path, sizeof(path))
		   : strlen(file) < sizeof(path) && memcpy(path, file, strlen(file) + 1)) {
		judge(path, why, sizeof(why), interp, sizeof(interp));
		/* Whatever SLUICE_LOG says, as the launcher's warnings: a
		 * program that runs unthrottled is what the user must know. */
		if (why[0] != '\0' && sl__log_first(warned, SL_EXEC_WARNED, path))
			sl__log_write(SL_LOG_WARN,
				      "%s%s%s%s cannot be throttled (%s); it runs "
				      "unthrottled",
				      path, interp[0] != '\0' ? " (its interpreter " : "", interp,
				      interp[0] != '\0' ? ")" : "", why);
	}
	sl__busy = 0;
	errno = saved;
}

SL_EXPORT int execve(const char *path, char *const *argv, char *const *envp)
{
	exec_check(path, false);
	return SL_REAL(execve)(path, argv, envp);
}

SL_EXPORT int execv(const char *path, char *const *argv)
{
	exec_check(path, false);
	return SL_REAL(execv)(path, argv);
}

SL_EXPORT int execvp(const char *file, char *const *argv)
{
	exec_check(file, true);
	return SL_REAL(execvp)(file, argv);
}

SL_EXPORT int execvpe(const char *file, char *const *argv, char *const *envp)
{
	exec_check(file, true);
	return SL_REAL(execvpe)(file, argv, envp);
}

SL_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			  const posix_spawnattr_t *attr, char *const *argv, char *const *envp)
{
	exec_check(path, false);
	return SL_REAL(posix_spawn)(pid, path, fa, attr, argv, envp);
}

SL_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			   const posix_spawnattr_t *attr, char *const *argv, char *const *envp)
{
	exec_check(file, true);
	return SL_REAL(posix_spawnp)(pid, file, fa, attr, argv, envp);
}

/* The vector of an execl-family call: arg and the variadic pointers up to
 * the NULL, counted first (the caller's array is sized from it). */
static size_t execl_count(const char *arg, va_list ap)
{
	size_t n = 0;
	if (arg != NULL)
		for (n = 1; va_arg(ap, const char *) != NULL; n++)
			;
	return n;
}

static void execl_fill(char **argv, size_t n, const char *arg, va_list ap)
{
	argv[0] = (char *)arg;
	for (size_t i = 1; i < n; i++)
		argv[i] = va_arg(ap, char *);
	argv[n] = NULL;
}

/* Declares argv, the vector of an execl-family call whose last named
 * parameter is arg, on the stack (as glibc builds it), and ap_, left open
 * after the NULL that ends the arguments (execle reads envp from it). */
#define SL_EXECL_ARGV(argv, arg)                                                                   \
	va_list ap_;                                                                               \
	va_start(ap_, arg);                                                                        \
	const size_t n_ = execl_count(arg, ap_);                                                   \
	va_end(ap_);                                                                               \
	char *argv[n_ + 1];                                                                        \
	va_start(ap_, arg);                                                                        \
	execl_fill(argv, n_, arg, ap_)

SL_EXPORT int execl(const char *path, const char *arg, ...)
{
	SL_EXECL_ARGV(argv, arg);
	va_end(ap_);
	return execv(path, argv);
}

SL_EXPORT int execlp(const char *file, const char *arg, ...)
{
	SL_EXECL_ARGV(argv, arg);
	va_end(ap_);
	return execvp(file, argv);
}

SL_EXPORT int execle(const char *path, const char *arg, ...)
{
	SL_EXECL_ARGV(argv, arg);
	if (n_ != 0)
		(void)va_arg(ap_, char *); /* the NULL that ends the arguments */
	char *const *envp = va_arg(ap_, char *const *);
	va_end(ap_);
	return execve(path, argv, envp);
}
