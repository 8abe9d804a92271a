/*
 * shm.c - sluice's files in /dev/shm (layout in shm_format.h): the shared
 * limiters of shared=NAME rules, and this process's stats record.
 *
 * Shared limiters. The first process to use NAME builds the whole file under
 * a private temporary name and link()s it into place: the final name only
 * ever shows a complete file, and of several processes starting at the same
 * moment exactly one link succeeds; the others remove their copy and open
 * the winner's. Opening checks the owner, the mode (0600), the size, the
 * magic, the version, the header and the limiter (sl_tunable_validate), and
 * that the file was created by the same rule text; anything else is a
 * configuration error that names the file and the reason, never a crash.
 * Forked children keep the mapping; exec'd programs open the file again.
 *
 * Shared conns limiters also count, per process (by pid), the slots each
 * holds. When a shared conns limiter refuses, the processes of the table that
 * no longer exist (kill(pid, 0) fails with ESRCH) get their slots given
 * back: a holder killed with SIGKILL leaks nothing for longer than the next
 * refusal. Trade-offs: a process killed between taking a slot and counting
 * it (a few instructions) leaks that slot; a dead holder whose pid was
 * reused by a live process is not reclaimed until that process exits; a
 * process beyond the table's SL_SHM_HOLDERS entries is not tracked.
 *
 * Stats record. Every process with rules maps /dev/shm/sluice-UID-stat-PID:
 * its rule texts, counters and per=process limiters, so that `sluice stat`
 * reads them and `sluice set` retunes them in place. A fork child gets a
 * copy of its parent's record under its own pid; exit removes the file (a
 * process killed leaves it for `sluice stat` to remove). Without /dev/shm
 * the record is private memory and everything else works.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "real.h"
#include "shm.h"
#include "state.h"

static struct sl_shm_shared *sl_shared[SL_MAX_RULES]; /* by rule index */
static bool sl_rec_is_file;       /* the record is a file (else private) */
static _Atomic int sl_holders_full_logged;

/* ---- stats record -------------------------------------------------------- */

/* Field 22 of /proc/self/stat, the start time in clock ticks; 0 if unknown. */
static uint64_t sl_start_ticks(void)
{
	char buf[1024];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = SL_REAL(read)(fd, buf, sizeof(buf) - 1);
	SL_REAL(close)(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	return sl_shm_start_ticks(buf);
}

static void sl_rec_path(char *out, size_t cap, int pid)
{
	snprintf(out, cap, SL_SHM_STAT_FMT, (unsigned)getuid(), pid);
}

/* Create this pid's record file, fresh (a file left by the image before an
 * exec, or by a dead process whose pid we got, is replaced). Returns the
 * fd or -1. */
static int sl_rec_create(void)
{
	char path[128];
	sl_rec_path(path, sizeof(path), (int)getpid());
	unlink(path);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, sizeof(struct sl_shm_stat)) != 0) {
		SL_REAL(close)(fd);
		unlink(path);
		return -1;
	}
	return fd;
}

/* Map the record: a fresh file if `file` (the process has rules), else or
 * if that fails private memory. */
int sl__shm_rec_open_unsync(bool file)
{
	if (sl__st.rec != NULL) {
		if (sl_rec_is_file && file) {
			/* Re-init in the same process (tests): keep the file. */
			memset(sl__st.rec, 0, sizeof(*sl__st.rec));
			return 0;
		}
		sl__shm_rec_remove();
		munmap(sl__st.rec, sizeof(*sl__st.rec));
		sl__st.rec = NULL;
	}
	int fd = file ? sl_rec_create() : -1;
	if (fd >= 0) {
		void *m = mmap(NULL, sizeof(struct sl_shm_stat), PROT_READ | PROT_WRITE, MAP_SHARED,
			       fd, 0);
		SL_REAL(close)(fd);
		if (m != MAP_FAILED) {
			sl__st.rec = m;
			sl_rec_is_file = true;
			return 0;
		}
	}
	sl_rec_is_file = false;
	sl__st.rec = sl__map(sizeof(struct sl_shm_stat));
	return sl__st.rec != NULL ? 0 : -1;
}

/* Fill the record's header and rule texts (the limiters are initialised by
 * the caller), then publish it with the magic. */
void sl__shm_rec_fill_unsync(const struct sl_policy *p, bool active)
{
	struct sl_shm_stat *r = sl__st.rec;
	r->version = SL_SHM_VERSION;
	r->size = sizeof(*r);
	r->pid = (uint32_t)getpid();
	r->uid = (uint32_t)getuid();
	r->start_ticks = sl_start_ticks();
	r->n_rules = p->n_rules;
	r->active = active;
	snprintf(r->program, sizeof(r->program), "%s", program_invocation_short_name);
	for (uint32_t i = 0; i < p->n_rules && i < SL_MAX_RULES; i++)
		sl_rule_format(&p->rules[i], r->rules[i], sizeof(r->rules[i]));
	/* Release: a reader that sees the magic sees the fields above (readers
	 * in other processes use an acquire fence after reading it). */
	atomic_thread_fence(memory_order_release);
	r->magic = SL_SHM_MAGIC_STAT;
}

/* Mark the record active or not (SLUICE_ONLY/SKIP decided after init). */
void sl__shm_rec_set_active_unsync(bool active)
{
	if (sl__st.rec != NULL)
		sl__st.rec->active = active;
}

/* The fork child: its own file, a copy of the parent's record (its own
 * buckets, as before fork), mapped at the same address so that every
 * pointer into it stays valid. Counters are reset by the caller. */
void sl__shm_rec_fork_child(void)
{
	if (sl__st.rec == NULL || !sl_rec_is_file)
		return;
	struct sl_shm_stat *old = sl__st.rec;
	int fd = sl_rec_create();
	if (fd >= 0) {
		ssize_t w = pwrite(fd, old, sizeof(*old), 0);
		void *m = w == (ssize_t)sizeof(*old)
				  ? mmap(old, sizeof(*old), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
					 fd, 0)
				  : MAP_FAILED;
		SL_REAL(close)(fd);
		if (m == old) {
			old->pid = (uint32_t)getpid();
			old->start_ticks = sl_start_ticks();
			return;
		}
	}
	/* No file: a private copy at the same address, and no record. */
	struct sl_shm_stat copy;
	memcpy(&copy, old, sizeof(copy));
	void *m = mmap(old, sizeof(*old), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (m == old)
		memcpy(old, &copy, sizeof(copy));
	sl_rec_is_file = false;
}

/* Remove this process's record file (exit). */
void sl__shm_rec_remove(void)
{
	/* pid 0: the record of a failed init, never filled in. */
	if (sl__st.rec == NULL || !sl_rec_is_file ||
	    (sl__st.rec->pid != 0 && sl__st.rec->pid != (uint32_t)getpid()))
		return;
	char path[128];
	sl_rec_path(path, sizeof(path), (int)getpid());
	unlink(path);
}

/* ---- shared limiters ------------------------------------------------------ */

static void sl_shared_path(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, SL_SHM_SHARED_FMT, (unsigned)getuid(), name);
}

/* Build a complete segment for rule r under a temporary name and link it
 * as `path`. Returns 0 (linked), 1 (someone else's is there), -1 (error). */
static int sl_shared_create(const char *path, const struct sl_rule *r, const char *text,
			    uint64_t now_ns)
{
	char tmp[192];
	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
	unlink(tmp);
	int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	int rc = -1;
	struct sl_shm_shared *s = NULL;
	if (ftruncate(fd, sizeof(*s)) == 0) {
		void *m = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		s = m == MAP_FAILED ? NULL : m;
	}
	struct sl_params p;
	sl_shm_rule_params(r, &p);
	/* A host pool (redis=) starts with an empty bank of max(lease, burst)
	 * slots, as a process's own bank does (lease.c). */
	struct sl_params bank = {.kind = SL_KIND_CONC, .amount = r->lease > r->burst ? r->lease
										    : r->burst};
	if (s != NULL && sl_tunable_init(&s->lim, &p, now_ns) == SL_OK &&
	    (r->redis_key[0] == '\0' ||
	     (sl_limiter_init(&s->bank, &bank, 0) == SL_OK &&
	      sl_limiter_acquire(&s->bank, bank.amount, 0, 0).verdict == SL_ADMIT))) {
		s->magic = SL_SHM_MAGIC_SHARED;
		s->version = SL_SHM_VERSION;
		s->size = sizeof(*s);
		s->uid = (uint32_t)getuid();
		snprintf(s->name, sizeof(s->name), "%s", r->shared);
		snprintf(s->rule, sizeof(s->rule), "%s", text);
		/* link() publishes the file whole: no process can open it
		 * before this point. */
		rc = link(tmp, path) == 0 ? 0 : errno == EEXIST ? 1 : -1;
	}
	if (s != NULL)
		munmap(s, sizeof(*s));
	SL_REAL(close)(fd);
	unlink(tmp);
	return rc;
}

/* Open and check an existing segment. NULL with the reason in why. */
static struct sl_shm_shared *sl_shared_map(const char *path, const char *name, const char *text,
					   const char **why)
{
	int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		*why = errno == ELOOP ? "is a symbolic link" : strerror(errno);
		return NULL;
	}
	struct stat st;
	struct sl_shm_shared *s = NULL;
	if (fstat(fd, &st) != 0)
		*why = strerror(errno);
	else
		*why = sl_shm_check_file(&st, (unsigned)getuid(), sizeof(*s));
	if (*why == NULL) {
		void *m = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED)
			*why = strerror(errno);
		else
			s = m;
	}
	SL_REAL(close)(fd);
	if (s != NULL && (*why = sl_shm_check_shared(s, (unsigned)getuid(), name, text)) != NULL) {
		munmap(s, sizeof(*s));
		s = NULL;
	}
	return s;
}

/*
 * The shared limiter of rule i (shared=NAME), created if it does not exist.
 * Returns its head, or NULL with a one-line error in err.
 */
struct sl_limiter *sl__shm_shared_open_unsync(unsigned i, const struct sl_rule *r,
					      uint64_t now_ns, char *err, size_t errlen)
{
	char path[160], text[SL_RULE_TEXT_MAX];
	sl_shared_path(path, sizeof(path), r->shared);
	sl_rule_format(r, text, sizeof(text));
	const char *why = NULL;
	struct sl_shm_shared *s = NULL;
	for (int attempt = 0; attempt < 3 && s == NULL; attempt++) {
		s = sl_shared_map(path, r->shared, text, &why);
		if (s != NULL || strcmp(why, strerror(ENOENT)) != 0)
			break;
		int c = sl_shared_create(path, r, text, now_ns);
		if (c < 0) {
			why = strerror(errno);
			break;
		}
	}
	if (s == NULL) {
		if (why != NULL && strcmp(why, "created with different parameters") == 0) {
			struct sl_shm_shared *other = NULL;
			int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			if (fd >= 0) {
				void *m = mmap(NULL, sizeof(*other), PROT_READ, MAP_SHARED, fd, 0);
				other = m == MAP_FAILED ? NULL : m;
				SL_REAL(close)(fd);
			}
			snprintf(err, errlen, "shared limiter '%s' (%s) was created by rule '%.200s', "
				 "not '%s'", r->shared, path, other != NULL ? other->rule : "?", text);
			if (other != NULL)
				munmap(other, sizeof(*other));
		} else {
			snprintf(err, errlen, "shared limiter '%s' (%s): %s; remove the file to start "
				 "afresh", r->shared, path, why != NULL ? why : "cannot be created");
		}
		return NULL;
	}
	if (sl_shared[i] != NULL)
		munmap(sl_shared[i], sizeof(*sl_shared[i]));
	sl_shared[i] = s;
	return &s->lim.head;
}

struct sl_shm_shared *sl__shm_shared_seg(unsigned i)
{
	return i < SL_MAX_RULES ? sl_shared[i] : NULL;
}

/* Unmap every shared limiter (before a re-init). */
void sl__shm_shared_close_all_unsync(void)
{
	for (unsigned i = 0; i < SL_MAX_RULES; i++) {
		if (sl_shared[i] != NULL)
			munmap(sl_shared[i], sizeof(*sl_shared[i]));
		sl_shared[i] = NULL;
	}
}

/* The shared segment whose conns limiter is l, or NULL. */
static struct sl_shm_shared *sl_shared_conc(const struct sl_limiter *l)
{
	if (l->kind != SL_KIND_TUNABLE || l->params.kind != SL_KIND_CONC)
		return NULL;
	for (unsigned i = 0; i < sl__st.policy.n_rules; i++)
		if (sl_shared[i] != NULL && &sl_shared[i]->lim.head == l)
			return sl_shared[i];
	return NULL;
}

/* This process's holder entry in s, claimed if needed; NULL if full. */
static struct sl_shm_holder *sl_holder(struct sl_shm_shared *s, bool claim)
{
	const uint32_t me = (uint32_t)getpid();
	struct sl_shm_holder *free_h = NULL;
	for (unsigned k = 0; k < SL_SHM_HOLDERS; k++) {
		/* Relaxed: the pid is an owner tag; the counts carry no data. */
		uint32_t pid = atomic_load_explicit(&s->holders[k].pid, memory_order_relaxed);
		if (pid == me)
			return &s->holders[k];
		if (pid == 0 && free_h == NULL)
			free_h = &s->holders[k];
	}
	for (unsigned k = 0; claim && k < SL_SHM_HOLDERS; k++) {
		uint32_t expect = 0;
		/* Relaxed: as above; the CAS alone decides the owner. */
		if (atomic_compare_exchange_strong_explicit(&s->holders[k].pid, &expect, me,
							    memory_order_relaxed, memory_order_relaxed))
			return &s->holders[k];
	}
	(void)free_h;
	if (claim && !atomic_exchange_explicit(&sl_holders_full_logged, 1, memory_order_relaxed))
		sl_log(SL_LOG_WARN, "shared conns limiter '%s': more than %u processes hold slots; "
				    "the rest are not tracked for dead-holder recovery", s->name,
		       SL_SHM_HOLDERS);
	return NULL;
}

/* Count n slots taken (delta > 0) or given back (delta < 0) by this process
 * in l, if l is a shared conns limiter. */
void sl__shm_hold(const struct sl_limiter *l, int64_t delta)
{
	struct sl_shm_shared *s = sl_shared_conc(l);
	if (s == NULL || delta == 0)
		return;
	struct sl_shm_holder *h = sl_holder(s, delta > 0);
	if (h == NULL)
		return;
	/* Relaxed: a count; the limiter's own word orders the slots. */
	if (delta > 0) {
		atomic_fetch_add_explicit(&h->held, (uint32_t)delta, memory_order_relaxed);
		return;
	}
	uint32_t cur = atomic_load_explicit(&h->held, memory_order_relaxed);
	uint32_t sub = (uint32_t)-delta;
	while (!atomic_compare_exchange_weak_explicit(&h->held, &cur, cur > sub ? cur - sub : 0,
						      memory_order_relaxed, memory_order_relaxed))
		;
}

/*
 * Give back the slots of l (a shared conns limiter) held by processes that
 * no longer exist. Returns true if any were given back. Thread- and
 * process-safe: the CAS to SL_SHM_RECLAIMING lets one reclaimer take each.
 */
bool sl__shm_reclaim(struct sl_limiter *l)
{
	struct sl_shm_shared *s = sl_shared_conc(l);
	if (s == NULL)
		return false;
	bool any = false;
	int saved = errno;
	for (unsigned k = 0; k < SL_SHM_HOLDERS; k++) {
		struct sl_shm_holder *h = &s->holders[k];
		/* Relaxed: see sl_holder. */
		uint32_t pid = atomic_load_explicit(&h->pid, memory_order_relaxed);
		if (pid == 0 || pid == SL_SHM_RECLAIMING || pid == (uint32_t)getpid() ||
		    kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		if (!atomic_compare_exchange_strong_explicit(&h->pid, &pid, SL_SHM_RECLAIMING,
							     memory_order_relaxed, memory_order_relaxed))
			continue;
		uint32_t held = atomic_exchange_explicit(&h->held, 0, memory_order_relaxed);
		/* One at a time: never more than the limiter holds. */
		for (uint32_t j = 0; j < held && sl_limiter_release(&s->lim.head, 1) == SL_OK; j++)
			;
		atomic_store_explicit(&h->pid, 0, memory_order_relaxed);
		sl_log(SL_LOG_INFO, "shared conns limiter '%s': gave back %u slots of dead process %u",
		       s->name, held, pid);
		any = any || held > 0;
	}
	errno = saved;
	return any;
}
