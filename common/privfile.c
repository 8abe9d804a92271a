/* SPDX-License-Identifier: MIT */
/*
 * privfile.c - opening the files sluice writes for a user (privfile.h).
 */
#include "privfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* glibc's own close, past the preload's wrappers (as segment.c). */
extern int __close(int fd);

void sl_file_close(int fd)
{
	__close(fd);
}

/* Why the file (fstat'ed into st) must not be written, or NULL. */
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

int sl_file_open_private(const char *path, char *why, size_t cap)
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
		sl_file_close(fd);
		errno = EACCES;
		return -1;
	}
	return fd;
}

int sl_file_check(const char *path, char *why, size_t cap)
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
		sl_file_close(fd);
	if (bad == NULL)
		return 0;
	snprintf(why, cap, "%s", bad);
	return -1;
}
