/* SPDX-License-Identifier: MIT */
/*
 * target.c - the supervised threads and processes, and access to their fds
 * and memory.
 *
 * A notification names a thread id, which the kernel may give to another
 * thread once this one has exited. The safe orders (supervised-mode study):
 *   - fds: through a pidfd of the thread (PIDFD_THREAD, Linux 6.9), which
 *     names one task for good: pidfd_getfd on it can never reach another
 *     process. Thread pidfds are cached per tid; a cached one whose thread
 *     has exited polls readable, and the tid is looked up afresh. Without
 *     PIDFD_THREAD the tid is mapped to its process through
 *     /proc/TID/status for every call and the process pidfd is used.
 *   - memory: process_vm_readv/writev take a tid, so a copy is trusted only
 *     after NOTIF_ID_VALID says the call (and so its thread) still waits:
 *     readv, ID_VALID, act; ID_VALID before writev.
 * Both need ptrace-attach permission on the target. A target that made
 * itself non-dumpable, or a Yama ptrace_scope of 2 or 3, refuses it: the
 * process is then marked unreachable, a warning says once what passes
 * unthrottled, and its calls continue untouched.
 *
 * Threads and processes live in two chained hash tables; the sweep frees
 * the entries of exited ones that no held call points to.
 */
#include "target.h"
#include "admit.h"
#include "conns.h"
#include "kernel.h"
#include "notif.h"
#include "stat.h"
#include "state.h"
#include "turn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define HASH_CAP 4096

static size_t hash_pid(pid_t p)
{
	return ((uint32_t)p * 2654435761u) % HASH_CAP;
}

static bool pidfd_exited(int pidfd)
{
	struct pollfd p = {.fd = pidfd, .events = POLLIN};
	return pidfd >= 0 && poll(&p, 1, 0) > 0;
}

/* The thread group of tid from /proc/TID/status, or -1. */
static pid_t tgid_of(pid_t tid)
{
	char buf[1024];
	const char *t = sl_sup_proc_text(tid, "status", buf, sizeof(buf)) ? strstr(buf, "\nTgid:")
									  : NULL;
	return t != NULL ? (pid_t)strtol(t + 6, NULL, 10) : -1;
}

static void proc_free(const struct sl_sup *s, struct sl_sup_proc *p)
{
	sl_sup_stat_close(s, p);
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->fddir >= 0)
		close(p->fddir);
	sl_sup_proc_free_rows(p);
	free(p->fdcls);
	free(p);
}

/* SLUICE_ONLY / SLUICE_SKIP, judged as the shim does: the executable's file
 * name or argv[0]'s, read from /proc when the process is first seen (an
 * exec later keeps the decision). */
static bool selected(const struct sl_policy *pol, pid_t tgid)
{
	if (pol->only[0] == '\0' && pol->skip[0] == '\0')
		return true;
	char path[64], exe[4096], argv0[4096];
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)tgid);
	ssize_t n = readlink(path, exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)tgid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, argv0, sizeof(argv0) - 1) : -1;
	if (fd >= 0)
		close(fd);
	argv0[n > 0 ? n : 0] = '\0';
	const char *b1 = strrchr(exe, '/'), *b2 = strrchr(argv0, '/');
	return sl_policy_selects(pol, b1 != NULL ? b1 + 1 : exe, b2 != NULL ? b2 + 1 : argv0);
}

struct sl_sup_proc *sl_sup_proc_find(struct sl_sup *s, pid_t tgid)
{
	if (s->procs == NULL)
		return NULL;
	for (struct sl_sup_proc *p = s->procs[hash_pid(tgid)]; p != NULL; p = p->next)
		if (p->tgid == tgid && !pidfd_exited(p->pidfd))
			return p;
	return NULL;
}

static struct sl_sup_proc *proc_of(struct sl_sup *s, pid_t tgid)
{
	if (s->procs == NULL) {
		if ((s->procs = calloc(HASH_CAP, sizeof(*s->procs))) == NULL)
			return NULL;
		s->procs_cap = HASH_CAP; /* what the loops over every process go through */
	}
	size_t h = hash_pid(tgid);
	for (struct sl_sup_proc *p = s->procs[h]; p != NULL; p = p->next)
		if (p->tgid == tgid && !pidfd_exited(p->pidfd))
			return p;
	struct sl_sup_proc *p = calloc(1, sizeof(*p));
	if (p == NULL)
		return NULL;
	p->tgid = tgid;
	p->pidfd = (int)syscall(SYS_pidfd_open, tgid, 0);
	if (p->pidfd < 0) {
		free(p);
		return NULL;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)tgid);
	p->fddir = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)tgid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, p->comm, sizeof(p->comm) - 1);
		p->comm[n > 0 ? n - (p->comm[n - 1] == '\n') : 0] = '\0';
		close(fd);
	}
	p->next_fd = -1; /* sl_sup_place starts at the top */
	p->pass = !selected(&s->policy, tgid);
	sl_sup_stat_open(s, p, sl_sup_now_ns());
	p->next = s->procs[h];
	s->procs[h] = p;
	s->n_procs++;
	return p;
}

static void thread_free(struct sl_sup_thread *t)
{
	if (t->pidfd >= 0)
		close(t->pidfd);
	if (t->fddir >= 0)
		close(t->fddir);
	t->proc->refs--;
	free(t->lims);
	free(t);
}

struct sl_sup_thread *sl_sup_thread_of(struct sl_sup *s, pid_t tid)
{
	if (s->threads == NULL) {
		if ((s->threads = calloc(HASH_CAP, sizeof(*s->threads))) == NULL)
			return NULL;
		s->threads_cap = HASH_CAP;
	}
	size_t h = hash_pid(tid);
	for (struct sl_sup_thread **pp = &s->threads[h]; *pp != NULL; pp = &(*pp)->next) {
		struct sl_sup_thread *t = *pp;
		if (t->tid != tid)
			continue;
		/* A cached thread pidfd: valid while its thread lives. Without
		 * one, the tid's process is looked up again. */
		if (t->pidfd >= 0 && !pidfd_exited(t->pidfd))
			return t;
		if (t->pidfd < 0 && tgid_of(tid) == t->proc->tgid && !pidfd_exited(t->proc->pidfd))
			return t;
		if (t->refs == 0) {
			*pp = t->next;
			thread_free(t);
			s->n_threads--;
		} else {
			t->tid = -1; /* held calls still point here; the sweep frees it */
		}
		break;
	}
	pid_t tgid = tgid_of(tid);
	if (tgid <= 0)
		return NULL;
	struct sl_sup_proc *p = proc_of(s, tgid);
	if (p == NULL)
		return NULL;
	struct sl_sup_thread *t = calloc(1, sizeof(*t));
	if (t == NULL)
		return NULL;
	t->tid = tid;
	t->fddir = -1;
	t->pidfd = s->feat.pidfd_thread ? (int)syscall(SYS_pidfd_open, tid, PIDFD_THREAD) : -1;
	t->proc = p;
	p->refs++;
	t->next = s->threads[h];
	s->threads[h] = t;
	s->n_threads++;
	return t;
}

struct sl_sup_thread *sl_sup_thread_peek(struct sl_sup *s, pid_t tid)
{
	if (s->threads == NULL)
		return NULL;
	for (struct sl_sup_thread *t = s->threads[hash_pid(tid)]; t != NULL; t = t->next)
		if (t->tid == tid)
			return t;
	return NULL;
}

int sl_sup_thread_fddir(struct sl_sup_thread *t)
{
	if (t->fddir < 0 && t->tid > 0) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/task/%d/fd", (int)t->proc->tgid,
			 (int)t->tid);
		t->fddir = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	}
	return t->fddir;
}

struct sl_sup_fdclass *sl_sup_fdclass_of(struct sl_sup_proc *p, int fd, bool make)
{
	if (fd < 0)
		return NULL;
	if ((size_t)fd >= p->n_fdcls) {
		if (!make || fd >= (1 << 20))
			return NULL;
		size_t n = (size_t)fd + 64;
		struct sl_sup_fdclass *v = realloc(p->fdcls, n * sizeof(*v));
		if (v == NULL)
			return NULL;
		memset(v + p->n_fdcls, 0, (n - p->n_fdcls) * sizeof(*v));
		p->fdcls = v;
		p->n_fdcls = n;
	}
	return &p->fdcls[fd];
}

/* Forget the exited threads and processes no call refers to, or, with
 * all, every one. */
static void forget(struct sl_sup *s, bool all)
{
	if (s->threads != NULL)
		for (size_t h = 0; h < HASH_CAP; h++)
			for (struct sl_sup_thread **pp = &s->threads[h]; *pp != NULL;) {
				struct sl_sup_thread *t = *pp;
				bool gone = all || (t->refs == 0 &&
						    (t->tid < 0 ||
						     pidfd_exited(t->pidfd >= 0 ? t->pidfd
										: t->proc->pidfd)));
				if (gone) {
					*pp = t->next;
					thread_free(t);
					s->n_threads--;
				} else {
					pp = &t->next;
				}
			}
	if (s->procs != NULL)
		for (size_t h = 0; h < HASH_CAP; h++)
			for (struct sl_sup_proc **pp = &s->procs[h]; *pp != NULL;) {
				struct sl_sup_proc *p = *pp;
				if (all || (p->refs == 0 && pidfd_exited(p->pidfd))) {
					*pp = p->next;
					proc_free(s, p);
					s->n_procs--;
				} else {
					pp = &p->next;
				}
			}
}

void sl_sup_target_sweep(struct sl_sup *s)
{
	forget(s, false);
}

int sl_sup_getfd(struct sl_sup *s, struct sl_sup_thread *t, int fd)
{
	(void)s;
	int pidfd = t->pidfd >= 0 ? t->pidfd : t->proc->pidfd;
	int r = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
	if (r >= 0)
		return r;
	int e = errno;
	if (e == EPERM)
		sl_sup_unreachable(t->proc, "pidfd_getfd", e);
	return -e;
}

void sl_sup_unreachable(struct sl_sup_proc *p, const char *what, int err)
{
	if (p->unreachable)
		return;
	p->unreachable = p->pass = true;
	sl_sup_warn("process %d (%s) cannot be throttled: %s: %s (it made itself non-dumpable, "
		    "or Yama's ptrace_scope forbids it): its connects, accepts, sends and receives "
		    "run unthrottled",
		    (int)p->tgid, p->comm, what, strerror(err));
}

ssize_t sl_sup_mem_readv(pid_t tid, const struct iovec *remote, int n, void *buf, size_t len)
{
	struct iovec local = {buf, len};
	ssize_t r = (ssize_t)syscall(SYS_process_vm_readv, tid, &local, 1UL, remote,
				     (unsigned long)n, 0UL);
	return r < 0 ? -errno : r;
}

ssize_t sl_sup_mem_writev(pid_t tid, const struct iovec *remote, int n, const void *buf, size_t len)
{
	struct iovec local = {(void *)buf, len};
	ssize_t r = (ssize_t)syscall(SYS_process_vm_writev, tid, &local, 1UL, remote,
				     (unsigned long)n, 0UL);
	return r < 0 ? -errno : r;
}

ssize_t sl_sup_mem_read(pid_t tid, uint64_t addr, void *buf, size_t len)
{
	struct iovec remote = {(void *)(uintptr_t)addr, len};
	return sl_sup_mem_readv(tid, &remote, 1, buf, len);
}

ssize_t sl_sup_mem_write(pid_t tid, uint64_t addr, const void *buf, size_t len)
{
	struct iovec remote = {(void *)(uintptr_t)addr, len};
	return sl_sup_mem_writev(tid, &remote, 1, buf, len);
}

void sl_sup_target_free(struct sl_sup *s)
{
	sl_sup_conns_free();
	sl_sup_turn_free(s);
	forget(s, true);
	free(s->threads);
	free(s->procs);
	free(s->peers);
	s->threads = NULL;
	s->procs = NULL;
	s->peers = NULL;
}

/* The hexadecimal mask after `key` in a /proc status text, 0 if absent. */
static uint64_t status_mask(const char *text, const char *key)
{
	const char *l = strstr(text, key);
	return l != NULL ? strtoull(l + strlen(key), NULL, 16) : 0;
}

bool sl_sup_signal_waiting(pid_t tid)
{
	char buf[2048];
	if (!sl_sup_proc_text(tid, "status", buf, sizeof(buf)))
		return false;
	uint64_t pending = status_mask(buf, "\nSigPnd:") | status_mask(buf, "\nShdPnd:");
	return (pending & status_mask(buf, "\nSigCgt:") & ~status_mask(buf, "\nSigBlk:")) != 0;
}
