/* SPDX-License-Identifier: MIT */
/*
 * place.c - a supervised program's sockets, made by the supervisor (sock.c),
 * are installed with SECCOMP_IOCTL_NOTIF_ADDFD at a free fd >=
 * SL_SUP_FD_BASE, where the filter traps their transfers: found downward
 * from a per-process cursor below SL_SUP_FD_TOP (SETFD, checked free in
 * /proc/TGID/fd first; the SEND flag answers the call with the number in
 * the same step; sl_sup_place says why downward). When no number is free
 * below the program's RLIMIT_NOFILE, the socket takes the lowest free fd
 * and its transfers pass unthrottled (warned once per process).
 */
#include "place.h"
#include "admit.h"
#include "kernel.h"
#include "notif.h"
#include "state.h"
#include "target.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define SL_SUP_PLACE_TOP_EVERY 32

/* The soft RLIMIT_NOFILE of process tgid (at most 2^20), 0 if unknown:
 * from /proc/TGID/limits, which any process may read (prlimit() on a
 * process that dropped to another user needs CAP_SYS_RESOURCE), else
 * prlimit(). */
static unsigned long nofile_of(pid_t tgid)
{
	char buf[4096];
	unsigned long soft = 0;
	const char *l = sl_sup_proc_text(tgid, "limits", buf, sizeof(buf))
				? strstr(buf, "\nMax open files")
				: NULL;
	struct rlimit rl;
	if (l == NULL || sscanf(l + 15, " %lu", &soft) != 1) /* after "\nMax open files" */
		soft = prlimit(tgid, RLIMIT_NOFILE, NULL, &rl) == 0 ? (unsigned long)rl.rlim_cur
								    : 0;
	return soft > (1ul << 20) ? (1ul << 20) : soft;
}

/* The n-th number (from 0) sl_sup_place tries for process p whose limit is
 * hi: first every number of [SL_SUP_FD_BASE, top) downward from p's cursor,
 * wrapping (top: hi, but at most SL_SUP_FD_TOP, so select() takes the
 * socket), then [top, hi) upward. The kernel gives the program's own
 * open() the lowest free number, so sockets placed from the top down meet
 * the program's files only when every number between them is taken: a
 * program with 600 low fds opening files while another thread makes
 * sockets gets 600, 601, ... and its sockets 1023, 1022, ... (placed
 * upward from 512, a socket's number was often the one the program's next
 * open() was about to take, and the install replaced that file). The
 * cursor saves a look at every number the program's sockets hold at the
 * top, but it would sweep down into the program's own files as sockets
 * come and go (the same race again, 3 of 8 runs of fdrace): every
 * SL_SUP_PLACE_TOP_EVERY placements the search starts at the top again, so
 * the cursor stays within about that many numbers of the sockets alive. */
static unsigned long place_nth(const struct sl_sup_proc *p, unsigned long hi, unsigned long n)
{
	const unsigned long top = hi < SL_SUP_FD_TOP ? hi : SL_SUP_FD_TOP;
	const unsigned long span = top > SL_SUP_FD_BASE ? top - SL_SUP_FD_BASE : 0;
	if (n >= span)
		return top + (n - span);
	unsigned long start = p->next_fd >= SL_SUP_FD_BASE && (unsigned long)p->next_fd < top
				      ? (unsigned long)p->next_fd
				      : top - 1;
	return SL_SUP_FD_BASE + (start - SL_SUP_FD_BASE + span - n) % span;
}

int sl_sup_place(struct sl_sup *s, struct sl_sup_thread *th, uint64_t id, int srcfd, bool cloexec)
{
	struct sl_sup_proc *p = th->proc;
	struct seccomp_notif_addfd add = {.id = id,
					  .srcfd = (uint32_t)srcfd,
					  .newfd_flags = cloexec ? O_CLOEXEC : 0};
	unsigned long hi = p->fddir >= 0 ? nofile_of(p->tgid) : 0;
	if (p->placed++ % SL_SUP_PLACE_TOP_EVERY == 0)
		p->next_fd = -1; /* the top */
	for (unsigned long tries = 0; hi > SL_SUP_FD_BASE && tries < hi - SL_SUP_FD_BASE; tries++) {
		int n = (int)place_nth(p, hi, tries);
		char name[16];
		struct stat st;
		snprintf(name, sizeof(name), "%d", n);
		if (fstatat(p->fddir, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			continue; /* in use */
		if (errno == EACCES || errno == EPERM)
			sl_sup_unreachable(p, "/proc/PID/fd", errno);
		if (errno != ENOENT)
			break;
		add.flags = SECCOMP_ADDFD_FLAG_SETFD | SECCOMP_ADDFD_FLAG_SEND;
		add.newfd = (uint32_t)n;
		int r = ioctl(s->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
		if (r >= 0) {
			p->next_fd = n - 1; /* below SL_SUP_FD_BASE: the top next time */
			sl_sup_fd_reset(p, r);
			return r;
		}
		if (errno == EBUSY)
			continue; /* another thread's open is installing n: the next one */
		if (errno != EBADF && errno != EMFILE)
			return -errno; /* ENOENT: the call is gone */
		break;
	}
	if (p->fddir < 0)
		sl_sup_unreachable(p, "/proc/PID/fd", EACCES);
	if (!p->low_fd_warned && !p->unreachable)
		sl_sup_warn("process %d (%s): no free fd between %d and its RLIMIT_NOFILE (%lu): "
			    "its sockets take low fds and their sends and receives pass unthrottled",
			    (int)p->tgid, p->comm, SL_SUP_FD_BASE, hi);
	p->low_fd_warned = true;
	add.flags = SECCOMP_ADDFD_FLAG_SEND;
	add.newfd = 0;
	int r = ioctl(s->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
	return r >= 0 ? r : -errno;
}
