/* SPDX-License-Identifier: MIT */
/*
 * segment.h - sluice's shared memory files ("segments"), one private
 * directory per user, opened and created by name. Used by the preloaded
 * library (shim/shm.c: shared limiters, status records) and by the launcher
 * (cli/shm.c: `sluice stat`, `set`, `rm`); the layouts are in shm_format.h.
 *
 * Overview
 * --------
 * Every segment of a user lives in one directory that only this user can
 * enter:
 *
 *   root                        /run/sluice
 *   $XDG_RUNTIME_DIR set, a directory of the user with mode 0700
 *                               $XDG_RUNTIME_DIR/sluice
 *   else /run/user/UID, if it is such a directory
 *                               /run/user/UID/sluice
 *   else                        /dev/shm/sluice-UID
 *
 * (UID is the effective uid.) The directory is created with mode 0700, and
 * on every open it is opened without following a link and checked: a
 * directory, owned by the user, no access for group or others. A segment
 * in it is opened with O_NOFOLLOW and checked the same way (a regular file,
 * owned by the user, mode 0600; shm_format.h, sl_shm_check_file). A new
 * segment is built whole under a random temporary name (".tmp-" and 16 hex
 * digits from getrandom) and then linked (never replacing: of several
 * creators exactly one wins) or renamed (replacing: status records) into
 * place, so that its name only ever shows a complete file.
 *
 * Names: "shared-NAME" (a shared limiter), "stat-PID" (a status record).
 *
 * API
 * ---
 * sl_seg_setup_unsync chooses the directory (reads XDG_RUNTIME_DIR, lstat()s
 * the candidates) and remembers it; not thread-safe, call it at start. The
 * other functions are thread-safe, keep no fd open unless asked, preserve
 * nothing of errno but set it as documented, and never allocate.
 *
 * Implementation notes
 * --------------------
 * The functions use raw syscalls for close and getdents64: inside the shim
 * close() is interposed, and readdir() would allocate.
 */
#ifndef SLUICE_SEGMENT_H
#define SLUICE_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_SEG_WRITE 1u            /* map read-write (else read-only) */
#define SL_SEG_CREATE 2u           /* missing: build it with init, link it into place */
#define SL_SEG_REPLACE 4u          /* build a fresh one with init, renamed over any old one */
#define SL_SEG_KEEPFD 8u           /* leave the fd open in seg->fd (for flock) */
#define SL_SEG_MAX_SIZE (1u << 20) /* larger files are never mapped */
#define SL_SEG_PATH_MAX 320

struct sl_seg {
	void *map;    /* MAP_SHARED mapping of the whole file */
	size_t size;  /* its size */
	int fd;       /* with SL_SEG_KEEPFD, else -1 */
	uint64_t dev; /* st_dev and st_ino: who maps it (/proc/PID/maps) */
	uint64_t ino;
};

/* Builds a new segment's content in map (size bytes, zeroed). 0 or -1. */
typedef int (*sl_seg_init_fn)(void *map, size_t size, void *arg);

/* Choose the directory for this process (see above) and remember it. */
void sl_seg_setup_unsync(void);

/* Use `dir` instead (an absolute path shorter than SL_SEG_PATH_MAX - 80):
 * for tests, and for a caller that owns a directory of its own. It is
 * created and checked like the default one. */
void sl_seg_use_dir_unsync(const char *dir);

/* The directory's path (after sl_seg_setup_unsync, which it calls if
 * needed: single-threaded callers only then). */
const char *sl_seg_dir(void);

/*
 * Open the directory, creating it (mode 0700) if `create`, and check it.
 * Returns an O_DIRECTORY fd, or -1 with errno (ENOENT: absent) and a
 * one-line reason naming the path and the remedy in err.
 */
int sl_seg_dir_open(bool create, char *err, size_t errlen);

/*
 * Open, check and map segment `name` of `size` bytes (0: the file's size,
 * at most SL_SEG_MAX_SIZE; the caller checks it). With SL_SEG_CREATE a
 * missing segment is built by init and linked into place (if another
 * process links its own first, that one is opened); with SL_SEG_REPLACE a
 * new one is built and renamed over any old one. Returns 0 (opened), 1
 * (created by this call), or -1 with errno (ENOENT: no such segment) and a
 * reason naming the path in err.
 */
int sl_seg_open(const char *name, unsigned flags, size_t size, sl_seg_init_fn init, void *arg,
		struct sl_seg *seg, char *err, size_t errlen);

/* Unmap seg (and close its fd, if kept). */
void sl_seg_close(struct sl_seg *seg);

/* Remove segment `name`. 0, or -1 with errno. */
int sl_seg_unlink(const char *name);

/* The path of segment `name` into out (for messages). */
void sl_seg_path(const char *name, char *out, size_t cap);

/*
 * Call fn(name, arg) for every entry of the directory whose name starts
 * with prefix, until fn returns non-zero. Returns the number of entries
 * seen, or -1 if the directory cannot be opened (errno).
 */
int sl_seg_each(const char *prefix, int (*fn)(const char *name, void *arg), void *arg);

/*
 * True at most once every `interval_s` seconds per user (a stamp file in
 * the directory, ".reclaim", whose mtime is the last time): whether to scan
 * for dead processes' records now. False if the directory does not exist.
 */
bool sl_seg_reclaim_due(unsigned interval_s);

/* Remove temporary files (".tmp-*") older than age_s seconds: left by a
 * process killed while it built a segment. */
void sl_seg_sweep_tmp(unsigned age_s);

#endif /* SLUICE_SEGMENT_H */
