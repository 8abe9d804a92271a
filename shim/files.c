/* SPDX-License-Identifier: MIT */
/*
 * files.c - SLUICE_STATS and SLUICE_LOG_FILE, opened so that another local
 * user cannot make the shim write into a file of their choosing or read
 * what it writes.
 *
 * Every open is O_WRONLY|O_APPEND|O_CREAT|O_NOFOLLOW|O_CLOEXEC|O_NOCTTY|
 * O_NONBLOCK, mode 0600 for a new file (a planted symbolic link fails with
 * ELOOP, a FIFO without reader with ENXIO, a terminal never becomes the
 * controlling one), then fstat: the file must be a regular file owned by
 * the effective user with a single link (a hard link planted in a sticky
 * directory such as /tmp would otherwise lead to a file of the user that
 * lives elsewhere). A refused file is never written. At start each path is
 * checked the same way without creating anything (O_PATH): a refusal is a
 * configuration error (exit 2; SLUICE_CONFIG_ERROR=warn: a warning, and
 * that output is dropped), whose message names the variable, the path and
 * the reason. Only the last component is protected by O_NOFOLLOW: a
 * directory on the way that another user controls is out of reach of any
 * check here, hence the documented advice to use a private directory
 * ($XDG_RUNTIME_DIR) or "%p" names.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "log.h"
#include "real.h"
#include "stats.h"

/* Why the file open as fd (fstat'ed into st) must not be written, or NULL. */
static const char *file_refusal(const struct stat *st, char *buf, size_t cap)
{
	if (S_ISLNK(st->st_mode))
		return "is a symbolic link";
	if (!S_ISREG(st->st_mode))
		return "is not a regular file";
	if (st->st_uid != geteuid()) {
		snprintf(buf, cap, "belongs to user %u, not to you (user %u)", (unsigned)st->st_uid,
			 (unsigned)geteuid());
		return buf;
	}
	if (st->st_nlink > 1)
		return "has other hard links";
	return NULL;
}

int sl__file_open_private(const char *path, char *why, size_t cap)
{
	int fd = open(path,
		      O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY |
			      O_NONBLOCK,
		      0600);
	if (fd < 0) {
		int e = errno;
		snprintf(why, cap, "%s", e == ELOOP ? "is a symbolic link" : strerror(e));
		errno = e;
		return -1;
	}
	struct stat st;
	char buf[96];
	const char *bad = fstat(fd, &st) != 0 ? strerror(errno)
					      : file_refusal(&st, buf, sizeof(buf));
	if (bad != NULL) {
		snprintf(why, cap, "%s", bad);
		SL_REAL(close)(fd);
		errno = EACCES;
		return -1;
	}
	return fd;
}

/* Check one path without creating it: 0 if it may be used. */
static int file_check(const char *var, char *path_field, const char *path, bool warn)
{
	int fd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	char buf[96];
	const char *bad = NULL;
	if (fd < 0)
		bad = errno == ENOENT ? NULL : strerror(errno);
	else
		bad = fstat(fd, &st) != 0 ? strerror(errno) : file_refusal(&st, buf, sizeof(buf));
	if (fd >= 0)
		SL_REAL(close)(fd);
	if (bad == NULL)
		return 0;
	sl__log_write(warn ? SL_LOG_WARN : SL_LOG_ERROR,
		      "%s=%s: the file %s; refusing to write there (use a path in a directory only "
		      "you can write, such as $XDG_RUNTIME_DIR, or a name with %%p)%s",
		      var, path, bad, warn ? "; it is not written (SLUICE_CONFIG_ERROR=warn)" : "");
	path_field[0] = '\0';
	return -1;
}

int sl__files_check_unsync(struct sl_policy *p)
{
	bool warn = p->config_error == SL_CONFIG_ERROR_WARN;
	char stats[SL_PATH_MAX + 32];
	sl__stats_path(p->stats_file, stats, sizeof(stats));
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
