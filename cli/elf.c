/* SPDX-License-Identifier: MIT */
/*
 * elf.c - read an executable for the launcher's checks (check.c): the file
 * is opened here and decoded by policy/elfinfo.c, which the shim shares.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static long read_fd(void *ctx, void *buf, size_t len, uint64_t off)
{
	for (;;) {
		ssize_t n = pread(*(int *)ctx, buf, len, (off_t)off);
		if (n >= 0 || errno != EINTR)
			return (long)n;
	}
}

int sl__elf_inspect(const char *path, struct sl_elf_info *info)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		memset(info, 0, sizeof(*info));
		return -1;
	}
	struct sl_elf_src src = {.read = read_fd, .ctx = &fd};
	errno = 0;
	int rc = sl_elf_decode(&src, info);
	int saved = rc < 0 && errno == 0 ? EINVAL : errno;
	close(fd);
	errno = saved;
	return rc;
}
