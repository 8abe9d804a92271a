/* SPDX-License-Identifier: MIT */
/*
 * privfile.h - the files sluice writes for a user (SLUICE_LOG_FILE,
 * SLUICE_STATS), opened so that another local user cannot make sluice write
 * into a file of their choosing or read what it writes (privfile.c).
 *
 * Every open is O_WRONLY|O_APPEND|O_CREAT|O_NOFOLLOW|O_CLOEXEC|O_NOCTTY|
 * O_NONBLOCK, mode 0600 for a new file (a planted symbolic link fails with
 * ELOOP, a FIFO without reader with ENXIO, a terminal never becomes the
 * controlling one), then fstat: the file must be a regular file owned by
 * the effective user with a single link (a hard link planted in a sticky
 * directory such as /tmp would otherwise lead to a file of the user that
 * lives elsewhere). A refused file is never written. The reason of a
 * refusal goes to the caller's buffer: nothing is logged. Only the last
 * component is protected by O_NOFOLLOW: a directory on the way that another
 * user controls is out of reach of any check here, hence the documented
 * advice to use a private directory ($XDG_RUNTIME_DIR) or "%p" names.
 *
 * API: any thread; the preload, the supervisor and the launcher link it.
 */
#ifndef SLUICE_COMMON_PRIVFILE_H
#define SLUICE_COMMON_PRIVFILE_H

#include <stddef.h>

/* Open path for appending, safely: the fd, or -1 with the reason in why. */
int sl_file_open_private(const char *path, char *why, size_t cap);
/* Whether path may be opened so, without creating it: 0 (it may, or it does
 * not exist yet), or -1 with the reason in why. */
int sl_file_check(const char *path, char *why, size_t cap);
/* Close an fd of ours past any preloaded close() wrapper. */
void sl_file_close(int fd);

#endif /* SLUICE_COMMON_PRIVFILE_H */
