/*
 * shm_shared.h - opening and creating a shared=NAME limiter file
 * (/dev/shm/sluice-UID-shared-NAME, layout in shm_format.h), shared by the
 * preloaded library (shim/shm.c) and the supervisor (supervise/shared.c), so
 * that preloaded and supervised processes naming NAME draw from one limiter.
 *
 * A segment is built whole under a temporary name and published with
 * link(2), so no process ever maps a half-written one; an existing segment
 * is checked (owner, mode, size, magic, version, header, limiter, and the
 * canonical rule text it was created for) before use. The caller passes its
 * close(2): the shim's real one, never its own interposed close.
 */
#ifndef SLUICE_SHM_SHARED_H
#define SLUICE_SHM_SHARED_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shm_format.h"

/* Build a complete segment for rule r (canonical text `text`) under a
 * temporary name and link it as `path`. Returns 0 (linked), 1 (someone
 * else's is there), -1 (error, errno set). */
static inline int sl_shm_shared_create(const char *path, const struct sl_rule *r, const char *text,
				       uint64_t now_ns, int (*close_fn)(int))
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
	if (s != NULL && sl_tunable_init(&s->lim, &p, now_ns) == SL_OK) {
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
	int e = errno;
	if (s != NULL)
		munmap(s, sizeof(*s));
	close_fn(fd);
	unlink(tmp);
	errno = e;
	return rc;
}

/* Open and check an existing segment. NULL with the reason in why. */
static inline struct sl_shm_shared *sl_shm_shared_map(const char *path, const char *name,
						      const char *text, const char **why,
						      int (*close_fn)(int))
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
	close_fn(fd);
	if (s != NULL && (*why = sl_shm_check_shared(s, (unsigned)getuid(), name, text)) != NULL) {
		munmap(s, sizeof(*s));
		s = NULL;
	}
	return s;
}

/* The segment of rule r (shared=NAME) at path, created if it does not exist;
 * NULL with the reason in why. */
static inline struct sl_shm_shared *sl_shm_shared_open(const char *path, const struct sl_rule *r,
						       const char *text, uint64_t now_ns,
						       const char **why, int (*close_fn)(int))
{
	struct sl_shm_shared *s = NULL;
	*why = NULL;
	for (int attempt = 0; attempt < 3 && s == NULL; attempt++) {
		s = sl_shm_shared_map(path, r->shared, text, why, close_fn);
		if (s != NULL || strcmp(*why, strerror(ENOENT)) != 0)
			break;
		if (sl_shm_shared_create(path, r, text, now_ns, close_fn) < 0) {
			*why = strerror(errno);
			break;
		}
	}
	return s;
}

#endif /* SLUICE_SHM_SHARED_H */
