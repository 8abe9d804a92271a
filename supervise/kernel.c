/* SPDX-License-Identifier: MIT */
/*
 * kernel.c - what the kernel offers supervised mode, checked once at start.
 *
 * Required (refused with a message naming the version and the feature):
 *   5.0   SECCOMP_RET_USER_NOTIF, NEW_LISTENER, NOTIF_RECV/SEND/ID_VALID
 *   5.5   SECCOMP_USER_NOTIF_FLAG_CONTINUE (a throttled connect continues)
 *   5.6   pidfd_getfd (the supervisor's copy of a socket)
 *   5.9   SECCOMP_IOCTL_NOTIF_ADDFD (sockets placed at fd >= 512)
 *   5.14  SECCOMP_ADDFD_FLAG_SEND (place and answer in one step)
 * Used when present:
 *   6.0   SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV: a held call is not
 *         cancelled by the program's own signals, so a blocking send is
 *         completed in pieces inside one call; without it every piece is
 *         answered as a short count
 *   6.6   SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: answers wake the target on the
 *         supervisor's CPU (a trapped call costs ~8 us instead of 40+)
 *   6.9   PIDFD_THREAD: thread pidfds, cached per thread
 * The version is read from uname; user notification itself is probed with
 * SECCOMP_GET_ACTION_AVAIL, so a kernel built without it is named as such.
 */
#include "kernel.h"
#include "internal.h"
#include "supervise.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <unistd.h>

static bool at_least(const struct sl_sup_features *f, int major, int minor)
{
	return f->major > major || (f->major == major && f->minor >= minor);
}

int sl_sup_features_check(struct sl_sup_features *f, char *err, size_t errlen)
{
	struct utsname u;
	memset(f, 0, sizeof(*f));
	if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &f->major, &f->minor) != 2) {
		snprintf(err, errlen, "supervised mode: cannot read the kernel version");
		return -1;
	}
	uint32_t action = SECCOMP_RET_USER_NOTIF;
	if (syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) != 0) {
		snprintf(err, errlen,
			 "supervised mode needs seccomp user notification (SECCOMP_RET_USER_NOTIF, "
			 "Linux 5.0 with CONFIG_SECCOMP_FILTER): this kernel (%s) does not offer it: %s",
			 u.release, strerror(errno));
		return -1;
	}
	if (!at_least(f, 5, 14)) {
		snprintf(err, errlen,
			 "supervised mode needs Linux 5.14 or later (SECCOMP_IOCTL_NOTIF_ADDFD, 5.9, "
			 "and SECCOMP_ADDFD_FLAG_SEND, 5.14, place the program's sockets at fd >= %d); "
			 "this kernel is %s",
			 SL_SUP_FD_BASE, u.release);
		return -1;
	}
	f->wait_killable = at_least(f, 6, 0);
	f->sync_wakeup = at_least(f, 6, 6); /* confirmed on the listener later */
	int fd = (int)syscall(SYS_pidfd_open, (pid_t)syscall(SYS_gettid), PIDFD_THREAD);
	f->pidfd_thread = fd >= 0;
	if (fd >= 0)
		close(fd);
	return 0;
}

const char *sl_supervise_unavailable(char *buf, unsigned len)
{
	struct sl_sup_features f;
	return sl_sup_features_check(&f, buf, len) == 0 ? NULL : buf;
}

bool sl_sup_proc_text(pid_t pid, const char *name, char *buf, size_t cap)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	int fd = cap > 1 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, cap - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return true;
}
