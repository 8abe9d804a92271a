/* SPDX-License-Identifier: MIT */
/*
 * fdscan.c - the fd table (fd.c) asked from outside a call: every fd open at
 * start is classified (inherited sockets, before the program can install a
 * seccomp filter), and before a rule acts on an fd its identity is checked
 * (one fstat: the program may have replaced the socket behind the
 * wrappers' back, through a call sluice does not see). And before fork
 * (the prepare handler): sockets a connect left for later are classified,
 * so that a child that sandboxes itself knows them, and the conns slots of
 * connections the child inherits move where both see them (connfam.c).
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "conn.h"
#include "fd.h"
#include "fdscan.h"
#include "log.h"
#include "sandboxed.h"
#include "state.h"

bool sl__fd_same(int fd)
{
	if (sl__sandboxed() || (unsigned)fd >= sl__fd_cap || sl__fdrecs == NULL ||
	    !(atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire) & SL_FDB_READY))
		return true;
	uint64_t dev = sl__fdrecs[fd].dev, ino = sl__fdrecs[fd].ino;
	if (ino == 0) /* fstat failed when it was classified: nothing to compare */
		return true;
	int saved = errno;
	struct stat st;
	bool same = fstat(fd, &st) == 0 && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino;
	if (!same) {
		sl_log(SL_LOG_DEBUG,
		       "fd %d is no longer the socket it was classified as: "
		       "classified again",
		       fd);
		sl__fd_forget(fd);
	}
	errno = saved;
	return same;
}

void sl__fd_scan_unsync(void)
{
	if (!sl__st.active || sl__fdrecs == NULL)
		return;
	int saved = errno;
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL) {
		/* No /proc: the low fds, where inherited sockets usually are
		 * (a closed one fails its classification and stays unknown). */
		for (int fd = 0; fd < 256 && (unsigned)fd < sl__fd_cap; fd++)
			(void)sl__fd_rec(fd);
		errno = saved;
		return;
	}
	const int own = dirfd(d);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);
		if (end != e->d_name && *end == '\0' && fd >= 0 && fd != own &&
		    (unsigned long)fd < sl__fd_cap)
			(void)sl__fd_rec((int)fd);
	}
	closedir(d);
	errno = saved;
}

void sl__fdtab_share_conns(void)
{
	if (sl__fdrecs == NULL || sl__sandboxed())
		return;
	/* Relaxed: as below; a connection another thread accepts meanwhile
	 * is the parent's alone, as it would be after the fork. */
	const uint32_t hi = atomic_load_explicit(&sl__fd_busy_hi, memory_order_relaxed);
	for (uint32_t fd = 0; fd < hi && fd < sl__fd_cap; fd++) {
		uint32_t c = atomic_load_explicit(&sl__fdrecs[fd].conn, memory_order_acquire);
		if (c != 0)
			sl__conn_share((int)fd, c);
	}
}

void sl__fdtab_classify_pending(void)
{
	if (!sl__st.active || sl__sandboxed() || sl__fdrecs == NULL)
		return;
	int saved = errno;
	/* Relaxed: the forking thread's own view is enough; an fd another
	 * thread classifies meanwhile is classified either way. */
	const uint32_t hi = atomic_load_explicit(&sl__fd_busy_hi, memory_order_relaxed);
	for (uint32_t fd = 0; fd < hi && fd < sl__fd_cap; fd++) {
		uint8_t b = atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed);
		if ((b & SL_FDB_KEEP) && !(b & (SL_FDB_READY | SL_FDB_BUSY)))
			(void)sl__fd_rec((int)fd);
	}
	errno = saved;
}

void sl__fd_forget_range(unsigned first, unsigned last, int flags)
{
	/* Only when the call cannot fail with EINVAL (a failed call must keep
	 * what it did not close), and not for CLOSE_RANGE_CLOEXEC, which
	 * closes nothing now. */
	if (first > last || ((unsigned)flags & ~SL_CLOSE_RANGE_FLAGS) != 0 ||
	    ((unsigned)flags & SL_CLOSE_RANGE_CLOEXEC))
		return;
	for (unsigned fd = first; fd <= last && fd < sl__fd_cap; fd++)
		if (atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed))
			sl__fd_forget((int)fd);
}
