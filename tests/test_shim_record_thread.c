/* SPDX-License-Identifier: MIT */
/*
 * test_shim_record_thread.c - the status record's lifetime (shim/record.c):
 * private at init, published as the segment stat-PID at the first socket a
 * rule may apply to (once, however many threads race to it, and without
 * losing their counts), a private copy in a fork child until the child's
 * own first need, removed by _exit and by sl__shm_rec_remove. The segment
 * directory is a temporary one (sl_seg_use_dir_unsync). Built under
 * ThreadSanitizer too (make sanitize: *_thread tests).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_shim.h"
#include "../shim/record.h"
#include "../common/segment.h"
#include "../shim/shm.h"

#define MS 1000000ull
#define THREADS 8

static struct sl_real saved;
static char base[64], dir[128];

static void rec_path(int pid, char *out, size_t cap)
{
	snprintf(out, cap, "%s/stat-%d", dir, pid);
}

static int setup(void **state)
{
	(void)state;
	snprintf(base, sizeof(base), "/tmp/sl-rec-test.XXXXXX");
	if (mkdtemp(base) == NULL)
		return -1;
	snprintf(dir, sizeof(dir), "%s/sluice", base);
	sl_seg_use_dir_unsync(dir);
	uint64_t (*clock_fn)(void) = sl__clock_ns;
	int (*sleep_fn)(uint64_t) = sl__sleep_until;
	shim_setup(&saved, 1000 * MS);
	/* The real clock: the fake one's counters are not for threads. */
	sl__clock_ns = clock_fn;
	sl__sleep_until = sleep_fn;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	shim_teardown(&saved);
	char cmd[200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	return system(cmd) == 0 ? 0 : -1;
}

/* The file's counters of rule 0 (a separate read-only mapping). */
static uint64_t file_calls(int pid)
{
	char path[256];
	rec_path(pid, path, sizeof(path));
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return UINT64_MAX;
	size_t size = sl_shm_stat_size(1);
	struct sl_shm_stat *r = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (r == MAP_FAILED)
		return UINT64_MAX;
	uint64_t n = r->magic == SL_SHM_MAGIC_STAT && r->n_rules == 1
			     ? atomic_load(&sl_shm_stat_stats(r)[0].calls) +
				       sl_shm_stat_tsum(r, 0).calls
			     : UINT64_MAX - 1;
	munmap(r, size);
	return n;
}

/* No file until a matching socket; then one, 0600, sized by the rules,
 * counting; removed with the record. */
static void test_record_lazy(void **state)
{
	(void)state;
	char path[256], buf[16] = "x";
	struct stat st;
	rec_path(getpid(), path, sizeof(path));
	use_policy("SLUICE_SEND", "1GiB/s");
	assert_dec_equal(atomic_load(&sl__rec_state), SL_REC_PRIVATE);
	assert_dec_equal(stat(path, &st), -1);
	int lst, cli, srv;
	struct sockaddr_in a;
	loopback_pair(&lst, &cli, &srv, &a);
	assert_dec_equal(send(cli, buf, 1, 0), 1);
	assert_dec_equal(atomic_load(&sl__rec_state), SL_REC_FILE);
	assert_dec_equal(stat(path, &st), 0);
	assert_dec_equal(st.st_mode & 07777, 0600);
	assert_dec_equal(st.st_size, sl_shm_stat_size(1));
	assert_dec_equal(send(cli, buf, 1, 0), 1);
	assert_dec_equal(file_calls(getpid()), 2);
	sl__shm_rec_remove();
	assert_dec_equal(stat(path, &st), -1);
	assert_dec_equal(atomic_load(&sl__rec_state), SL_REC_OFF);
	/* Removed means removed: a new socket does not bring it back. */
	assert_dec_equal(send(srv, buf, 1, 0), 1);
	assert_dec_equal(stat(path, &st), -1);
	close(cli);
	close(srv);
	close(lst);
}

static pthread_barrier_t barrier;
static struct sockaddr_in race_addr;

static void *racer(void *arg)
{
	(void)arg;
	int s = socket(AF_INET, SOCK_STREAM, 0);
	char b = 'r';
	pthread_barrier_wait(&barrier);
	/* The connect classifies the socket: the first need of every thread. */
	if (connect(s, (struct sockaddr *)&race_addr, sizeof(race_addr)) != 0 ||
	    send(s, &b, 1, 0) != 1)
		abort();
	close(s);
	return NULL;
}

/* THREADS threads reach their first matching socket at once: one file,
 * and every one of their calls counted in it. */
static void test_record_race(void **state)
{
	(void)state;
	use_policy("SLUICE_SEND", "1GiB/s");
	int lst = socket(AF_INET, SOCK_STREAM, 0);
	race_addr = (struct sockaddr_in){.sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t l = sizeof(race_addr);
	assert_dec_equal(bind(lst, (struct sockaddr *)&race_addr, sizeof(race_addr)), 0);
	assert_dec_equal(listen(lst, THREADS * 2), 0);
	assert_dec_equal(getsockname(lst, (struct sockaddr *)&race_addr, &l), 0);
	pthread_t t[THREADS];
	pthread_barrier_init(&barrier, NULL, THREADS);
	for (int i = 0; i < THREADS; i++)
		assert_dec_equal(pthread_create(&t[i], NULL, racer, NULL), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&barrier);
	assert_dec_equal(atomic_load(&sl__rec_state), SL_REC_FILE);
	assert_dec_equal(file_calls(getpid()), THREADS);
	int n = 0;
	char path[256];
	rec_path(getpid(), path, sizeof(path));
	for (int i = 0; i < 3; i++)
		n += access(path, F_OK) == 0;
	assert_dec_equal(n, 3);
	sl__shm_rec_remove();
	close(lst);
}

/* A fork child keeps a private copy (no file of its own) until its own
 * first matching socket; its _exit removes the file it made. */
static void test_record_fork_exit(void **state)
{
	(void)state;
	char buf[1] = "f";
	use_policy("SLUICE_SEND", "1GiB/s");
	int lst, cli, srv;
	struct sockaddr_in a;
	loopback_pair(&lst, &cli, &srv, &a);
	assert_dec_equal(send(cli, buf, 1, 0), 1);
	int pipefd[2];
	assert_dec_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	if (pid == 0) {
		char path[256], report[3];
		rec_path(getpid(), path, sizeof(path));
		report[0] = access(path, F_OK) == 0 ? 'y' : 'n'; /* before: no file */
		int s = socket(AF_INET, SOCK_STREAM, 0);
		connect(s, (struct sockaddr *)&a, sizeof(a));
		send(s, buf, 1, 0);
		report[1] = access(path, F_OK) == 0 ? 'y' : 'n'; /* after: its own */
		report[2] = sl__st.rec->pid == (uint32_t)getpid() ? 'y' : 'n';
		if (write(pipefd[1], report, 3) != 3)
			_exit(3);
		_exit(0);
	}
	char got[4] = "";
	assert_dec_equal(read(pipefd[0], got, 3), 3);
	int status;
	assert_dec_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_string_equal(got, "nyy");
	char path[256];
	rec_path(pid, path, sizeof(path));
	assert_dec_equal(access(path, F_OK), -1); /* _exit removed it */
	rec_path(getpid(), path, sizeof(path));
	assert_dec_equal(access(path, F_OK), 0); /* the parent's stays */
	sl__shm_rec_remove();
	close(pipefd[0]);
	close(pipefd[1]);
	close(cli);
	close(srv);
	close(lst);
}

int main(void)
{
	/* Link the wrappers even when a sanitizer's interceptors define the names. */
	assert_dec_equal(sl__wrap_send_anchor + sl__wrap_sock_anchor + sl__exit_anchor, 3);
	/* The constructor ran without rules, so it registered no fork
	 * handler: this one does the record's part of init.c's. */
	pthread_atfork(NULL, NULL, sl__shm_rec_fork_child);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_record_lazy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_record_race, setup, teardown),
		cmocka_unit_test_setup_teardown(test_record_fork_exit, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
