/* SPDX-License-Identifier: MIT */
/*
 * segment.c - the private directory of a user's segments and the one way
 * to open or create a segment in it (see segment.h). Linked into both the
 * library and the launcher.
 */
#include "segment.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "shm_format.h"

static char seg_dir_path[SL_SEG_PATH_MAX];

/* glibc's own close, past the preload's close() and syscall() wrappers:
 * the floor calls nothing of a front end (in the preload, close() and
 * syscall() are its wrappers). __close is in glibc's public ABI
 * (GLIBC_2.2.5); the fd is never a socket, and close is not restarted. */
extern int __close(int fd);

static void seg_closefd(int fd)
{
	__close(fd);
}

/* Whether path is a directory (not a link) of uid with mode 0700 or less. */
static bool seg_private_dir(const char *path, unsigned uid)
{
	struct stat st;
	return path[0] == '/' && lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == uid &&
	       (st.st_mode & 077) == 0;
}

void sl_seg_setup_unsync(void)
{
	unsigned uid = (unsigned)geteuid();
	char run_user[64];
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	snprintf(run_user, sizeof(run_user), "/run/user/%u", uid);
	struct stat st;
	if (uid == 0 && lstat("/run", &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
	    (st.st_mode & 022) == 0)
		snprintf(seg_dir_path, sizeof(seg_dir_path), "/run/sluice");
	else if (uid != 0 && xdg != NULL && strlen(xdg) < SL_SEG_PATH_MAX - 80 &&
		 seg_private_dir(xdg, uid))
		snprintf(seg_dir_path, sizeof(seg_dir_path), "%s/sluice", xdg);
	else if (uid != 0 && seg_private_dir(run_user, uid))
		snprintf(seg_dir_path, sizeof(seg_dir_path), "%s/sluice", run_user);
	else
		snprintf(seg_dir_path, sizeof(seg_dir_path), SL_SHM_DIR "/sluice-%u", uid);
}

void sl_seg_use_dir_unsync(const char *dir)
{
	snprintf(seg_dir_path, sizeof(seg_dir_path), "%s", dir);
}

const char *sl_seg_dir(void)
{
	if (seg_dir_path[0] == '\0')
		sl_seg_setup_unsync();
	return seg_dir_path;
}

void sl_seg_path(const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s", sl_seg_dir(), name);
}

int sl_seg_dir_open(bool create, char *err, size_t errlen)
{
	const char *dir = sl_seg_dir();
	unsigned uid = (unsigned)geteuid();
	if (create && mkdir(dir, 0700) != 0 && errno != EEXIST) {
		int e = errno;
		snprintf(err, errlen, "cannot create the directory %s: %s", dir, strerror(e));
		errno = e;
		return -1;
	}
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		struct stat st;
		if ((e == ELOOP || e == ENOTDIR) && lstat(dir, &st) == 0)
			snprintf(err, errlen,
				 "%s is %s, not a directory of yours: remove it "
				 "(it may have been planted by user %u)",
				 dir, S_ISLNK(st.st_mode) ? "a symbolic link" : "not a directory",
				 (unsigned)st.st_uid);
		else
			snprintf(err, errlen, "cannot open the directory %s: %s", dir, strerror(e));
		errno = e;
		return -1;
	}
	struct stat st;
	const char *why = NULL;
	if (fstat(fd, &st) != 0)
		why = strerror(errno);
	else if (st.st_uid != uid)
		snprintf(err, errlen,
			 "the directory %s belongs to user %u, not to you (user %u): "
			 "another user created it; have it removed (as root: rm -r %s), or set "
			 "XDG_RUNTIME_DIR to a directory of yours with mode 0700",
			 dir, (unsigned)st.st_uid, uid, dir);
	else if ((st.st_mode & 077) != 0)
		snprintf(err, errlen,
			 "the directory %s has mode %04o: other users can reach it; "
			 "it must be 0700 (chmod 700 %s)",
			 dir, (unsigned)(st.st_mode & 07777), dir);
	if (why != NULL)
		snprintf(err, errlen, "cannot check the directory %s: %s", dir, why);
	if (why != NULL || st.st_uid != uid || (st.st_mode & 077) != 0) {
		seg_closefd(fd);
		errno = EACCES;
		return -1;
	}
	return fd;
}

/* A random temporary name ".tmp-" and 16 hex digits. */
static void seg_tmpname(char *out, size_t cap)
{
	uint64_t r = 0;
	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		r ^= (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec << 32 ^
		     (uint64_t)getpid() ^ (uint64_t)(uintptr_t)out;
	}
	snprintf(out, cap, ".tmp-%016llx", (unsigned long long)r);
}

/* Build a segment under a temporary name and publish it as name: linkat
 * (fails with EEXIST if it exists) or renameat (replace). 0 or -1 (errno). */
static int seg_build(int dfd, const char *name, bool replace, size_t size, sl_seg_init_fn init,
		     void *arg)
{
	char tmp[40];
	int fd = -1;
	for (int attempt = 0; attempt < 4 && fd < 0; attempt++) {
		seg_tmpname(tmp, sizeof(tmp));
		fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			return -1;
	}
	if (fd < 0)
		return -1;
	int rc = -1, e = EIO;
	void *m = MAP_FAILED;
	if (ftruncate(fd, (off_t)size) != 0)
		e = errno;
	else if ((m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
		e = errno;
	else if (init(m, size, arg) != 0)
		e = EINVAL;
	else if ((replace ? renameat(dfd, tmp, dfd, name) : linkat(dfd, tmp, dfd, name, 0)) != 0)
		e = errno;
	else
		rc = 0;
	if (m != MAP_FAILED)
		munmap(m, size);
	seg_closefd(fd);
	if (rc != 0 || !replace)
		unlinkat(dfd, tmp, 0);
	errno = e;
	return rc;
}

/* Open and check an existing segment. 0, or -1 with errno and err. */
static int seg_map(int dfd, const char *name, unsigned flags, size_t size, struct sl_seg *seg,
		   char *err, size_t errlen)
{
	bool w = (flags & SL_SEG_WRITE) != 0;
	int fd = openat(dfd, name,
			(w ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "%s/%s: %s", sl_seg_dir(), name,
			 e == ELOOP ? "is a symbolic link" : strerror(e));
		errno = e;
		return -1;
	}
	struct stat st;
	const char *why;
	if (fstat(fd, &st) != 0)
		why = strerror(errno);
	else if (size == 0 && (st.st_size <= 0 || st.st_size > SL_SEG_MAX_SIZE))
		why = S_ISREG(st.st_mode) ? "has an impossible size" : "not a regular file";
	else
		why = sl_shm_check_file(&st, (unsigned)geteuid(), size ? size : (size_t)st.st_size);
	void *m = MAP_FAILED;
	if (why == NULL) {
		size = (size_t)st.st_size;
		m = mmap(NULL, size, w ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED)
			why = strerror(errno);
	}
	if (why != NULL) {
		snprintf(err, errlen, "%s/%s: %s", sl_seg_dir(), name, why);
		seg_closefd(fd);
		errno = EACCES;
		return -1;
	}
	seg->map = m;
	seg->size = size;
	seg->dev = (uint64_t)st.st_dev;
	seg->ino = (uint64_t)st.st_ino;
	seg->fd = -1;
	if (flags & SL_SEG_KEEPFD)
		seg->fd = fd;
	else
		seg_closefd(fd);
	return 0;
}

int sl_seg_open(const char *name, unsigned flags, size_t size, sl_seg_init_fn init, void *arg,
		struct sl_seg *seg, char *err, size_t errlen)
{
	bool make = (flags & (SL_SEG_CREATE | SL_SEG_REPLACE)) != 0 && init != NULL && size > 0;
	int dfd = sl_seg_dir_open(make, err, errlen);
	if (dfd < 0)
		return -1;
	int rc = -1, e = 0;
	bool created = false;
	for (int attempt = 0; attempt < 3 && rc != 0; attempt++) {
		if (make && ((flags & SL_SEG_REPLACE) || attempt > 0)) {
			if (seg_build(dfd, name, (flags & SL_SEG_REPLACE) != 0, size, init, arg) ==
			    0)
				created = true;
			else if (errno != EEXIST) {
				e = errno;
				snprintf(err, errlen, "cannot create %s/%s: %s", sl_seg_dir(), name,
					 strerror(e));
				break;
			}
		}
		rc = seg_map(dfd, name, flags, size, seg, err, errlen);
		e = errno;
		if (rc != 0 && (e != ENOENT || !make))
			break;
	}
	seg_closefd(dfd);
	errno = e;
	return rc != 0 ? -1 : created ? 1 : 0;
}

void sl_seg_close(struct sl_seg *seg)
{
	if (seg->map != NULL)
		munmap(seg->map, seg->size);
	if (seg->fd >= 0)
		seg_closefd(seg->fd);
	seg->map = NULL;
	seg->fd = -1;
}

int sl_seg_unlink(const char *name)
{
	char err[8];
	int dfd = sl_seg_dir_open(false, err, sizeof(err));
	if (dfd < 0)
		return -1;
	int rc = unlinkat(dfd, name, 0), e = errno;
	seg_closefd(dfd);
	errno = e;
	return rc;
}

/* One entry of the getdents64 buffer. */
struct linux_dirent64 {
	uint64_t ino;
	int64_t off;
	unsigned short reclen;
	unsigned char type;
	char name[];
};

int sl_seg_each(const char *prefix, int (*fn)(const char *name, void *arg), void *arg)
{
	char err[8];
	int dfd = sl_seg_dir_open(false, err, sizeof(err));
	if (dfd < 0)
		return -1;
	size_t plen = strlen(prefix);
	int seen = 0;
	bool stop = false;
	_Alignas(8) char buf[4096];
	for (long n; !stop && (n = (long)getdents64(dfd, buf, sizeof(buf))) > 0;) {
		for (long off = 0; off < n && !stop;) {
			const struct linux_dirent64 *d = (const struct linux_dirent64 *)(buf + off);
			off += d->reclen;
			if (strncmp(d->name, prefix, plen) != 0)
				continue;
			seen++;
			stop = fn(d->name, arg) != 0;
		}
	}
	seg_closefd(dfd);
	return seen;
}

bool sl_seg_reclaim_due(unsigned interval_s)
{
	char err[8];
	int dfd = sl_seg_dir_open(false, err, sizeof(err));
	if (dfd < 0)
		return false;
	int fd = openat(dfd, ".reclaim", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
			0600);
	seg_closefd(dfd);
	if (fd < 0)
		return false;
	struct stat st;
	struct timespec now;
	bool due = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
		   clock_gettime(CLOCK_REALTIME, &now) == 0 &&
		   (st.st_size == 0 || now.tv_sec - st.st_mtim.tv_sec >= (time_t)interval_s ||
		    now.tv_sec < st.st_mtim.tv_sec);
	/* The first byte marks a stamp that has been used once. */
	if (due && (st.st_size != 0 || pwrite(fd, "1", 1, 0) == 1))
		due = futimens(fd, NULL) == 0;
	seg_closefd(fd);
	return due;
}

void sl_seg_sweep_tmp(unsigned age_s)
{
	char err[8];
	int dfd = sl_seg_dir_open(false, err, sizeof(err));
	if (dfd < 0)
		return;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	_Alignas(8) char buf[4096];
	for (long n; (n = (long)getdents64(dfd, buf, sizeof(buf))) > 0;) {
		for (long off = 0; off < n;) {
			const struct linux_dirent64 *d = (const struct linux_dirent64 *)(buf + off);
			struct stat st;
			off += d->reclen;
			if (strncmp(d->name, ".tmp-", 5) == 0 &&
			    fstatat(dfd, d->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    now.tv_sec - st.st_mtim.tv_sec > (time_t)age_s)
				unlinkat(dfd, d->name, 0);
		}
	}
	seg_closefd(dfd);
}
