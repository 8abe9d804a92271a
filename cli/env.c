/* SPDX-License-Identifier: MIT */
/*
 * env.c - where libsluice.so lives and how it gets into LD_PRELOAD.
 *
 * The launcher finds the library relative to its own executable, read from
 * /proc/self/exe (already free of symbolic links), so a build tree
 * (build/sluice beside build/libsluice.so) and an installed tree
 * (PREFIX/bin/sluice and PREFIX/lib/sluice/libsluice.so) both work without
 * configuration, and the current directory is never searched: running
 * sluice from a directory holding someone else's libsluice.so must not load
 * it. SLUICE_LIBRARY overrides the search. The result is always canonical and
 * absolute, because the loader resolves a relative LD_PRELOAD entry against
 * whatever directory the program happens to run in.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIB_NAME "libsluice.so"

/* Canonicalise candidate into out if it names a regular file. */
static bool try_library(const char *candidate, char *out, size_t outlen)
{
	char real[PATH_MAX];
	struct stat st;
	if (realpath(candidate, real) == NULL || stat(real, &st) != 0 || !S_ISREG(st.st_mode))
		return false;
	return (size_t)snprintf(out, outlen, "%s", real) < outlen;
}

int sl__cli_find_library(const char *override, char *out, size_t outlen, char *err, size_t errlen)
{
	char exe[PATH_MAX];
	char candidate[PATH_MAX + sizeof("/../lib/sluice/" LIB_NAME)];

	if (override != NULL && override[0] != '\0') {
		errno = 0;
		if (!try_library(override, out, outlen)) {
			snprintf(err, errlen, "SLUICE_LIBRARY=\"%s\": not a readable file: %s",
				 override, strerror(errno != 0 ? errno : EINVAL));
			return -1;
		}
		goto check;
	}

	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0 || exe[0] != '/') {
		snprintf(err, errlen, "cannot read /proc/self/exe (%s); set SLUICE_LIBRARY",
			 strerror(errno));
		return -1;
	}
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0'; /* the directory; "" for the root */

	snprintf(candidate, sizeof(candidate), "%s/" LIB_NAME, exe);
	if (try_library(candidate, out, outlen))
		goto check;
	snprintf(candidate, sizeof(candidate), "%s/../lib/sluice/" LIB_NAME, exe);
	if (try_library(candidate, out, outlen))
		goto check;
	snprintf(err, errlen,
		 "cannot find " LIB_NAME " in %s/ or %s/../lib/sluice/; build it (make) or set "
		 "SLUICE_LIBRARY",
		 exe, exe);
	return -1;

check:
	/* ld.so splits LD_PRELOAD at spaces and colons, with no quoting. */
	if (strpbrk(out, " :") != NULL) {
		snprintf(err, errlen, "%s: LD_PRELOAD cannot hold a path with a space or colon",
			 out);
		return -1;
	}
	return 0;
}

/* True if the LD_PRELOAD entry e (length len) names the file lib. */
static bool same_file(const char *e, size_t len, const char *lib, const struct stat *lib_st)
{
	char path[PATH_MAX];
	struct stat st;
	if (strlen(lib) == len && memcmp(e, lib, len) == 0)
		return true;
	if (len >= sizeof(path))
		return false;
	memcpy(path, e, len);
	path[len] = '\0';
	return lib_st != NULL && stat(path, &st) == 0 && st.st_dev == lib_st->st_dev &&
	       st.st_ino == lib_st->st_ino;
}

int sl__cli_preload_join(const char *old, const char *lib, char *out, size_t outlen)
{
	struct stat lib_st;
	const struct stat *lst = stat(lib, &lib_st) == 0 ? &lib_st : NULL;
	const char *sep = " :";

	if (old == NULL)
		old = "";
	for (const char *p = old + strspn(old, sep); *p != '\0'; p += strspn(p, sep)) {
		size_t len = strcspn(p, sep);
		if (same_file(p, len, lib, lst))
			return (size_t)snprintf(out, outlen, "%s", old) < outlen ? 0 : -1;
		p += len;
	}
	/* Keep the separator style the user already chose. */
	const char *join = strchr(old, ':') != NULL && strchr(old, ' ') == NULL ? ":" : " ";
	int n = old[strspn(old, sep)] == '\0' ? snprintf(out, outlen, "%s", lib)
					      : snprintf(out, outlen, "%s%s%s", lib, join, old);
	return n >= 0 && (size_t)n < outlen ? 0 : -1;
}
