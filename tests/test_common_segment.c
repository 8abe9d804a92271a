/* SPDX-License-Identifier: MIT */
/*
 * test_common_segment.c - common/segment.c, the private directory of a user's
 * segments: created 0700, checked on every open (a link, another mode and
 * another owner are refused with the path and the remedy); segments built
 * whole under random names and linked (never replacing) or renamed
 * (replacing) into place, checked on open (link, mode, owner, size); the
 * reclaim stamp at most once per interval.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_assert.h"

#include "../common/segment.h"

static char base[64], dir[128];
static int n_inits;

static int fill(void *map, size_t size, void *arg)
{
	n_inits++;
	memset(map, *(const char *)arg, size);
	return 0;
}

static int fail_init(void *map, size_t size, void *arg)
{
	(void)map;
	(void)size;
	(void)arg;
	n_inits++;
	return -1;
}

static int count(const char *name, void *arg)
{
	(void)name;
	(*(int *)arg)++;
	return 0;
}

static int tmp_left(void)
{
	int n = 0;
	sl_seg_each(".tmp-", count, &n);
	return n;
}

static int setup(void **state)
{
	(void)state;
	snprintf(base, sizeof(base), "/tmp/sl-seg-test.XXXXXX");
	if (mkdtemp(base) == NULL)
		return -1;
	snprintf(dir, sizeof(dir), "%s/sluice", base);
	sl_seg_use_dir_unsync(dir);
	n_inits = 0;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	return system(cmd) == 0 ? 0 : -1;
}

/* Created on demand: the directory 0700, the file 0600 with init's bytes;
 * a second open finds it (no init); no temporary file stays. */
static void test_create_then_open(void **state)
{
	(void)state;
	struct sl_seg s;
	char err[512], a = 'a', b = 'b';
	umask(0);
	assert_dec_equal(sl_seg_open("shared-x", SL_SEG_WRITE | SL_SEG_CREATE, 4096, fill, &a, &s,
				     err, sizeof(err)),
			 1);
	umask(022);
	assert_dec_equal(((char *)s.map)[4095], 'a');
	sl_seg_close(&s);
	struct stat st;
	assert_dec_equal(lstat(dir, &st), 0);
	assert_dec_equal(st.st_mode & 07777, 0700);
	char path[SL_SEG_PATH_MAX];
	sl_seg_path("shared-x", path, sizeof(path));
	assert_dec_equal(lstat(path, &st), 0);
	assert_dec_equal(st.st_mode & 07777, 0600);
	assert_dec_equal(sl_seg_open("shared-x", SL_SEG_CREATE, 4096, fill, &b, &s, err,
				     sizeof(err)),
			 0);
	assert_dec_equal(((char *)s.map)[0], 'a');
	assert_dec_equal(n_inits, 1);
	sl_seg_close(&s);
	assert_dec_equal(tmp_left(), 0);
	/* Replace: a fresh one under the same name. */
	assert_dec_equal(sl_seg_open("shared-x", SL_SEG_REPLACE, 4096, fill, &b, &s, err,
				     sizeof(err)),
			 1);
	assert_dec_equal(((char *)s.map)[0], 'b');
	sl_seg_close(&s);
	assert_dec_equal(tmp_left(), 0);
	/* Without CREATE a missing one is ENOENT, naming the path. */
	assert_dec_equal(sl_seg_open("shared-y", 0, 4096, NULL, NULL, &s, err, sizeof(err)), -1);
	assert_dec_equal(errno, ENOENT);
	assert_non_null(strstr(err, "/sluice/shared-y: No such file or directory"));
	/* A failing init leaves nothing behind. */
	assert_dec_equal(sl_seg_open("shared-z", SL_SEG_CREATE, 4096, fail_init, NULL, &s, err,
				     sizeof(err)),
			 -1);
	assert_dec_equal(tmp_left(), 0);
	assert_dec_equal(access(path, F_OK), 0);
	int n = 0;
	assert_dec_equal(sl_seg_each("shared-", count, &n), 1);
	assert_dec_equal(sl_seg_unlink("shared-x"), 0);
	assert_dec_equal(sl_seg_each("shared-", count, &n), 0);
}

/* The directory: a link, a wider mode, another owner are refused. */
static void test_dir_refusals(void **state)
{
	(void)state;
	struct sl_seg s;
	char err[512], a = 'a';
	assert_dec_equal(symlink(base, dir), 0);
	assert_dec_equal(sl_seg_open("shared-x", SL_SEG_CREATE, 64, fill, &a, &s, err, sizeof(err)),
			 -1);
	assert_non_null(strstr(err, "is a symbolic link, not a directory of yours: remove it"));
	assert_dec_equal(unlink(dir), 0);
	assert_dec_equal(mkdir(dir, 0755), 0);
	assert_dec_equal(chmod(dir, 0755), 0);
	assert_dec_equal(sl_seg_open("shared-x", SL_SEG_CREATE, 64, fill, &a, &s, err, sizeof(err)),
			 -1);
	assert_dec_equal(errno, EACCES);
	assert_non_null(strstr(err, "has mode 0755: other users can reach it; it must be 0700"));
	if (geteuid() == 0) {
		assert_dec_equal(chmod(dir, 0700), 0);
		assert_dec_equal(chown(dir, 65534, 65534), 0);
		assert_dec_equal(sl_seg_open("shared-x", SL_SEG_CREATE, 64, fill, &a, &s, err,
					     sizeof(err)),
				 -1);
		assert_non_null(strstr(err,
				       "belongs to user 65534, not to you (user 0): another user "
				       "created it"));
	}
	assert_dec_equal(n_inits, 0);
}

/* A segment: a link, a wider mode, another size, another owner. */
static void test_file_refusals(void **state)
{
	(void)state;
	struct sl_seg s;
	char err[512], path[SL_SEG_PATH_MAX], a = 'a';
	assert_dec_equal(sl_seg_open("shared-x", SL_SEG_CREATE, 64, fill, &a, &s, err, sizeof(err)),
			 1);
	sl_seg_close(&s);
	sl_seg_path("shared-x", path, sizeof(path));
	assert_dec_equal(sl_seg_open("shared-x", 0, 128, NULL, NULL, &s, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "shared-x: truncated (smaller than the format's size)"));
	assert_dec_equal(chmod(path, 0644), 0);
	assert_dec_equal(sl_seg_open("shared-x", 0, 64, NULL, NULL, &s, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "readable or writable by other users (mode must be 0600)"));
	assert_dec_equal(chmod(path, 0600), 0);
	if (geteuid() == 0) {
		assert_dec_equal(chown(path, 65534, 65534), 0);
		assert_dec_equal(sl_seg_open("shared-x", 0, 64, NULL, NULL, &s, err, sizeof(err)),
				 -1);
		assert_non_null(strstr(err, "shared-x: owned by another user"));
		assert_dec_equal(chown(path, 0, 0), 0);
	}
	char link[SL_SEG_PATH_MAX];
	sl_seg_path("shared-l", link, sizeof(link));
	assert_dec_equal(symlink(path, link), 0);
	assert_dec_equal(sl_seg_open("shared-l", SL_SEG_CREATE, 64, fill, &a, &s, err, sizeof(err)),
			 -1);
	assert_non_null(strstr(err, "shared-l: is a symbolic link"));
	/* Size 0: whatever size the file has. */
	assert_dec_equal(sl_seg_open("shared-x", 0, 0, NULL, NULL, &s, err, sizeof(err)), 0);
	assert_dec_equal(s.size, 64);
	sl_seg_close(&s);
}

/* The reclaim stamp: due once, then not within the interval; due again
 * once its time is older than the interval. */
static void test_reclaim_stamp(void **state)
{
	(void)state;
	assert_false(sl_seg_reclaim_due(3600)); /* no directory yet */
	char err[256];
	int dfd = sl_seg_dir_open(true, err, sizeof(err));
	assert_true(dfd >= 0);
	close(dfd);
	assert_true(sl_seg_reclaim_due(3600));
	assert_false(sl_seg_reclaim_due(3600));
	char stamp[SL_SEG_PATH_MAX];
	sl_seg_path(".reclaim", stamp, sizeof(stamp));
	struct timespec old[2] = {{1000, 0}, {1000, 0}};
	assert_dec_equal(utimensat(AT_FDCWD, stamp, old, 0), 0);
	assert_true(sl_seg_reclaim_due(3600));
	assert_false(sl_seg_reclaim_due(3600));
}

/* The default choice: root's is /run/sluice whatever XDG_RUNTIME_DIR says;
 * another user's a private XDG_RUNTIME_DIR, never a world-writable one. */
static void test_default_dir(void **state)
{
	(void)state;
	if (geteuid() == 0) {
		setenv("XDG_RUNTIME_DIR", base, 1);
		sl_seg_setup_unsync();
		assert_string_equal(sl_seg_dir(), "/run/sluice");
	} else {
		char want[128];
		assert_dec_equal(chmod(base, 0700), 0);
		setenv("XDG_RUNTIME_DIR", base, 1);
		sl_seg_setup_unsync();
		snprintf(want, sizeof(want), "%s/sluice", base);
		assert_string_equal(sl_seg_dir(), want);
		setenv("XDG_RUNTIME_DIR", "/tmp", 1);
		sl_seg_setup_unsync();
		assert_null(strstr(sl_seg_dir(), "/tmp"));
	}
	unsetenv("XDG_RUNTIME_DIR");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_create_then_open, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reclaim_stamp, setup, teardown),
		cmocka_unit_test_setup_teardown(test_default_dir, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
