/* SPDX-License-Identifier: MIT */
/*
 * log.c - "sluice: ..." lines on stderr or in SLUICE_LOG_FILE.
 *
 * sl_log() (a macro in log.h) tests the level before anything is
 * formatted. A line is formatted into a stack buffer with vsnprintf (integer
 * and string conversions only, which need no malloc) and written with one
 * call of the real write(), so the shim never throttles or re-enters its own
 * logging and no stdio buffer or lock is involved. SLUICE_LOG_FILE is opened
 * (below: no links followed, owner checked, created 0600) with O_APPEND
 * for every line and closed again: the program may close or
 * reuse any descriptor we would keep open, and log lines are rare.
 *
 * log.c and real.c call each other, and must (see real.c): the real write
 * comes from real.c, which logs a symbol the C library lacks.
 *
 * SLUICE_LOG_FILE is opened as SLUICE_STATS is, by common/privfile.c, so
 * that another local user cannot make the shim write into a file of their
 * choosing or read what it writes; at start each path is checked the same
 * way without creating anything (init.c makes a refusal a configuration
 * error).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "privfile.h"
#include "sandboxed.h"
#include "real.h"

int sl__log_level = SL_LOG_ERROR;
static char log_path[SL_PATH_MAX];

/* Log to `path` ("" = stderr) from now on. Not thread-safe: init only. */
void sl__log_set_file(const char *path)
{
	size_t n = strlen(path);
	if (n >= sizeof(log_path))
		n = sizeof(log_path) - 1;
	memcpy(log_path, path, n);
	log_path[n] = '\0';
}

static const char *const level_names[] = {"error", "warning", "info", "debug", "note"};

/*
 * Format and write one line "sluice: LEVEL: message\n" (long messages are
 * truncated). errno is preserved. Thread-safe; async-signal-safe as far as
 * vsnprintf with integer conversions is. Level 4 is "note" (sl__log_note).
 */
static void log_vwrite(int level, const char *fmt, va_list ap)
{
	/* A sandboxed process may make no write of ours (sandbox.h). */
	if (sl__sandboxed())
		return;
	int saved = errno;
	char buf[1024];
	int busy = sl__busy;
	sl__busy = 1;
	int n = snprintf(buf, sizeof(buf), "sluice: %s: ",
			 level_names[level < 0   ? 0
				     : level > 4 ? 4
						 : level]);
	int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof(buf) - 2)
		len = sizeof(buf) - 2;
	buf[len++] = '\n';
	int fd = 2;
	char why[128];
	if (log_path[0] != '\0') {
		/* A refused file (above) is never written: stderr instead. */
		fd = sl_file_open_private(log_path, why, sizeof(why));
		if (fd < 0)
			fd = 2;
	}
	ssize_t w = SL_REAL(write)(fd, buf, len);
	(void)w;
	if (fd != 2)
		SL_REAL(close)(fd);
	sl__busy = busy;
	errno = saved;
}

void sl__log_write(int level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vwrite(level, fmt, ap);
	va_end(ap);
}

void sl__log_note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vwrite(4, fmt, ap);
	va_end(ap);
}

bool sl__log_first(_Atomic uint64_t *set, unsigned n, const char *key)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (const char *p = key; *p != '\0'; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	h |= 1; /* 0 is a free slot */
	for (unsigned i = 0; i < n; i++) {
		uint64_t cur = 0;
		/* Relaxed: a set of hashes, nothing else is published. */
		if (atomic_compare_exchange_strong_explicit(&set[i], &cur, h, memory_order_relaxed,
							    memory_order_relaxed))
			return true;
		if (cur == h)
			return false;
	}
	return false;
}
