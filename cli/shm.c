/*
 * shm.c - the launcher's side of /dev/shm (layout in shim/shm_format.h):
 * find, check and map the stats records of running processes and the
 * shared limiters, for `sluice stat` and `sluice set`.
 *
 * Nothing in a file is trusted: the owner must be the caller, the mode 0600,
 * the size exact, the magic and version ours, the limiters valid. A record
 * whose process is gone (kill(pid, 0) fails with ESRCH, or the pid now
 * belongs to a process that started at another time) is removed.
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
#include <unistd.h>

#include "internal.h"

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

/* Map `path` (one of the layouts, `size` bytes) after checking the file.
 * Returns the mapping, or NULL with a reason in why (and the fd kept open
 * in *fdp when fdp is not NULL, for flock). */
void *sl__cli_shm_map(const char *path, size_t size, bool writable, int *fdp, const char **why)
{
	int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		*why = errno == ELOOP ? "is a symbolic link" : strerror(errno);
		return NULL;
	}
	struct stat st;
	void *m = NULL;
	*why = fstat(fd, &st) != 0 ? strerror(errno) : sl_shm_check_file(&st, (unsigned)getuid(), size);
	if (*why == NULL) {
		m = mmap(NULL, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED) {
			*why = strerror(errno);
			m = NULL;
		}
	}
	if (fdp != NULL && m != NULL)
		*fdp = fd;
	else
		close(fd);
	return m;
}

/* Why record r (mapped) of `pid` is not usable, or NULL. "gone" means the
 * process no longer exists. */
static const char *record_check(const struct sl_shm_stat *r, int pid)
{
	/* A file of ours named after a dead process goes, whatever it holds. */
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return "gone";
	if (r->magic != SL_SHM_MAGIC_STAT)
		return "not a sluice stats record (bad magic)";
	if (r->version != SL_SHM_VERSION)
		return "written by another version of sluice (format version differs)";
	if (r->size != sizeof(*r) || r->uid != getuid() || r->n_rules > SL_MAX_RULES)
		return "corrupt header";
	if (r->pid != (uint32_t)pid)
		return "gone"; /* a fork child that never got its own file */
	uint64_t t = start_ticks(pid);
	if (t != 0 && r->start_ticks != 0 && t != r->start_ticks)
		return "gone";
	for (uint32_t i = 0; i < r->n_rules; i++)
		if (memchr(r->rules[i], 0, sizeof(r->rules[i])) == NULL)
			return "corrupt rule text";
	return NULL;
}

struct sl_shm_stat *sl__cli_record_open(int pid, bool writable, int *fdp, const char **why)
{
	char path[128];
	snprintf(path, sizeof(path), SL_SHM_STAT_FMT, (unsigned)getuid(), pid);
	struct sl_shm_stat *r = sl__cli_shm_map(path, sizeof(*r), writable, fdp, why);
	if (r == NULL)
		return NULL;
	/* Acquire: pairs with the release fence after which the shim writes
	 * the magic (sl__shm_rec_fill_unsync). */
	atomic_thread_fence(memory_order_acquire);
	if ((*why = record_check(r, pid)) != NULL) {
		munmap(r, sizeof(*r));
		if (fdp != NULL)
			close(*fdp);
		if (strcmp(*why, "gone") == 0)
			unlink(path);
		return NULL;
	}
	return r;
}

void sl__cli_record_close(struct sl_shm_stat *r)
{
	munmap(r, sizeof(*r));
}

int sl__cli_record_pids(int *pids, int max)
{
	char prefix[64];
	snprintf(prefix, sizeof(prefix), SL_SHM_STAT_PREFIX, (unsigned)getuid());
	size_t plen = strlen(prefix);
	DIR *d = opendir(SL_SHM_DIR);
	int n = 0;
	if (d == NULL)
		return 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		if (strncmp(e->d_name, prefix, plen) != 0)
			continue;
		char *end;
		long pid = strtol(e->d_name + plen, &end, 10);
		if (*end != '\0' || pid <= 0 || pid > 0x7fffffff)
			continue;
		if (n < max)
			pids[n++] = (int)pid;
	}
	closedir(d);
	/* Ascending, so that output is stable. */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && pids[j - 1] > pids[j]; j--) {
			int t = pids[j];
			pids[j] = pids[j - 1];
			pids[j - 1] = t;
		}
	return n;
}

struct sl_shm_shared *sl__cli_shared_open(const char *name, bool writable, int *fdp,
					  const char **why)
{
	char path[160];
	snprintf(path, sizeof(path), SL_SHM_SHARED_FMT, (unsigned)getuid(), name);
	struct sl_shm_shared *s = sl__cli_shm_map(path, sizeof(*s), writable, fdp, why);
	if (s != NULL && (*why = sl_shm_check_shared(s, (unsigned)getuid(), name, NULL)) != NULL) {
		munmap(s, sizeof(*s));
		if (fdp != NULL)
			close(*fdp);
		s = NULL;
	}
	return s;
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
