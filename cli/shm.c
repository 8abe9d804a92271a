/* SPDX-License-Identifier: MIT */
/*
 * shm.c - the launcher's side of the shim's segments (common/segment.h opens
 * them in the user's private directory; layout in common/shm_format.h):
 * find, check and map the status records of running processes and the
 * shared limiters, for `sluice stat`, `sluice set` and `sluice rm`.
 *
 * Nothing in a file is trusted: the directory must be the caller's with
 * mode 0700, the file the caller's with mode 0600, the size exact, the
 * magic and version ours, the limiters valid. A record whose process is
 * gone (kill(pid, 0) fails with ESRCH, or the pid now belongs to a process
 * that started at another time) is removed. The processes that use a shared
 * limiter are those whose /proc/PID/maps show its device and inode.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "internal.h"
#include "segment.h"

/* Start time (field 22 of /proc/PID/stat), 0 if unknown. */
static uint64_t start_ticks(int pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return sl_shm_start_ticks(buf);
}

static char why_buf[SL_ERR_MAX]; /* the launcher has one thread */

/* Why record r (mapped, `size` bytes) of `pid` is not usable, or NULL.
 * "gone" means the process no longer exists. */
static const char *record_check(const struct sl_shm_stat *r, size_t size, int pid)
{
	/* A file of ours named after a dead process goes, whatever it holds. */
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return "gone";
	if (size < sizeof(*r) || r->magic != SL_SHM_MAGIC_STAT)
		return "not a sluice status record (bad magic)";
	if (r->version != SL_SHM_VERSION)
		return "written by another version of sluice (format version differs)";
	if (r->n_rules > SL_MAX_RULES || r->size != sl_shm_stat_size(r->n_rules) ||
	    size != r->size || r->uid != geteuid())
		return "corrupt header";
	if (r->pid != (uint32_t)pid)
		return "gone"; /* a fork child that never got its own file */
	uint64_t t = start_ticks(pid);
	if (t != 0 && r->start_ticks != 0 && t != r->start_ticks)
		return "gone";
	char exe_path[64];
	struct stat exe;
	snprintf(exe_path, sizeof(exe_path), "/proc/%d/exe", pid);
	if (r->exe_ino != 0 && stat(exe_path, &exe) == 0 &&
	    ((uint64_t)exe.st_ino != r->exe_ino || (uint64_t)exe.st_dev != r->exe_dev))
		return "gone"; /* exec'd into another program since */
	for (uint32_t i = 0; i < r->n_rules; i++)
		if (memchr(sl_shm_stat_rule(r, i), 0, SL_RULE_TEXT_MAX) == NULL)
			return "corrupt rule text";
	return NULL;
}

struct sl_shm_stat *sl__cli_record_open(int pid, bool writable, int *fdp, const char **why)
{
	char name[32];
	struct sl_seg seg;
	snprintf(name, sizeof(name), SL_SHM_STAT_NAME, pid);
	unsigned flags = (writable ? SL_SEG_WRITE : 0) | (fdp != NULL ? SL_SEG_KEEPFD : 0);
	if (sl_seg_open(name, flags, 0, NULL, NULL, &seg, why_buf, sizeof(why_buf)) < 0) {
		*why = errno == ENOENT ? "gone" : why_buf;
		return NULL;
	}
	struct sl_shm_stat *r = seg.map;
	/* Acquire: pairs with the release fence after which the shim writes
	 * the magic (sl__shm_rec_fill_unsync). */
	atomic_thread_fence(memory_order_acquire);
	if ((*why = record_check(r, seg.size, pid)) != NULL) {
		sl_seg_close(&seg);
		if (strcmp(*why, "gone") == 0)
			sl_seg_unlink(name);
		return NULL;
	}
	if (fdp != NULL)
		*fdp = seg.fd;
	return r;
}

void sl__cli_record_close(struct sl_shm_stat *r)
{
	munmap(r, sl_shm_stat_size(r->n_rules));
}

struct pid_list {
	int *pids;
	int n, cap;
};

static int collect_pid(const char *name, void *arg)
{
	struct pid_list *l = arg;
	char *end;
	long pid = strtol(name + strlen(SL_SHM_STAT_PREFIX), &end, 10);
	if (*end != '\0' || pid <= 0 || pid > 0x7fffffff)
		return 0;
	if (l->n == l->cap) {
		int cap = l->cap ? l->cap * 2 : 64;
		int *p = realloc(l->pids, sizeof(int) * (size_t)cap);
		if (p == NULL)
			return 1;
		l->pids = p;
		l->cap = cap;
	}
	l->pids[l->n++] = (int)pid;
	return 0;
}

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

int sl__cli_record_pids(int **pids)
{
	struct pid_list l = {NULL, 0, 0};
	sl_seg_each(SL_SHM_STAT_PREFIX, collect_pid, &l);
	/* Ascending, so that output is stable. */
	if (l.n > 1)
		qsort(l.pids, (size_t)l.n, sizeof(int), cmp_int);
	*pids = l.pids;
	return l.n;
}

struct sl_shm_shared *sl__cli_shared_open(const char *name, bool writable, int *fdp,
					  const char **why)
{
	char seg_name[64];
	struct sl_seg seg;
	snprintf(seg_name, sizeof(seg_name), SL_SHM_SHARED_NAME, name);
	unsigned flags = (writable ? SL_SEG_WRITE : 0) | (fdp != NULL ? SL_SEG_KEEPFD : 0);
	if (sl_seg_open(seg_name, flags, sizeof(struct sl_shm_shared), NULL, NULL, &seg, why_buf,
			sizeof(why_buf)) < 0) {
		*why = errno == ENOENT ? strerror(ENOENT) : why_buf;
		return NULL;
	}
	struct sl_shm_shared *s = seg.map;
	if ((*why = sl_shm_check_shared(s, (unsigned)geteuid(), name, NULL)) != NULL) {
		sl_seg_close(&seg);
		return NULL;
	}
	if (fdp != NULL)
		*fdp = seg.fd;
	return s;
}

int sl__cli_shared_holders(const char *name, int **pids)
{
	char seg_name[64], path[SL_SEG_PATH_MAX];
	snprintf(seg_name, sizeof(seg_name), SL_SHM_SHARED_NAME, name);
	sl_seg_path(seg_name, path, sizeof(path));
	struct stat st;
	*pids = NULL;
	if (lstat(path, &st) != 0)
		return -1;
	struct pid_list l = {NULL, 0, 0};
	DIR *d = opendir("/proc");
	if (d == NULL)
		return 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		char *end, maps[300], line[1024];
		long pid = strtol(e->d_name, &end, 10);
		if (*end != '\0' || pid <= 0 || pid == getpid()) /* we map it too */
			continue;
		snprintf(maps, sizeof(maps), "/proc/%ld/maps", pid);
		FILE *f = fopen(maps, "re");
		if (f == NULL)
			continue;
		bool found = false;
		while (!found && fgets(line, sizeof(line), f) != NULL) {
			/* start-end perms offset major:minor inode path */
			unsigned maj, min;
			unsigned long long ino;
			if (sscanf(line, "%*s %*s %*s %x:%x %llu", &maj, &min, &ino) == 3 &&
			    ino == (unsigned long long)st.st_ino && makedev(maj, min) == st.st_dev)
				found = true;
		}
		fclose(f);
		if (found) {
			char num[32];
			snprintf(num, sizeof(num), "stat-%ld", pid);
			collect_pid(num, &l);
		}
	}
	closedir(d);
	if (l.n > 1)
		qsort(l.pids, (size_t)l.n, sizeof(int), cmp_int);
	*pids = l.pids;
	return l.n;
}

void sl__cli_old_note(void)
{
	char prefix[32];
	snprintf(prefix, sizeof(prefix), SL_SHM_OLD_PREFIX, (unsigned)geteuid());
	DIR *d = opendir(SL_SHM_DIR);
	int n = 0;
	if (d == NULL)
		return;
	for (struct dirent *e; (e = readdir(d)) != NULL;)
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	if (n > 0)
		fprintf(stderr,
			"sluice: info: %d file%s of an older sluice in " SL_SHM_DIR
			" %s ignored (segments now live in %s); remove them with rm " SL_SHM_DIR
			"/%s*\n",
			n, n == 1 ? "" : "s", n == 1 ? "is" : "are", sl_seg_dir(), prefix);
}

/* The rule that text (canonical "OP:SPEC") gives, or -1. */
int sl__cli_rule_of(const char *text, struct sl_rule *r)
{
	struct sl_policy p;
	char err[SL_ERR_MAX];
	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, "SLUICE_RULES", text, err, sizeof(err)) != 0 || p.n_rules != 1)
		return -1;
	*r = p.rules[0];
	return 0;
}

/* The canonical text of rule `text` with the limit of limiter params cur
 * (what `sluice set` changed), into out. */
void sl__cli_current_text(const char *text, const struct sl_params *cur, char *out, size_t len)
{
	struct sl_rule r;
	if (sl__cli_rule_of(text, &r) != 0) {
		snprintf(out, len, "%s", text);
		return;
	}
	r.amount = cur->amount;
	r.period_ns = cur->period_ns;
	r.burst = cur->burst;
	sl_rule_format(&r, out, len);
}
