/* SPDX-License-Identifier: MIT */
/*
 * bench_core.c - cost of one acquire on the lock-free GCRA token bucket,
 * next to a plain token bucket doing the same integer math under a
 * pthread mutex.
 *
 * Prints, for police (max_wait 0) and reserve (max_wait UINT64_MAX):
 *   - ns per operation with 1 thread and with 2 threads contending on one
 *     limiter (throughput: wall time / total operations, best of 5 runs,
 *     lock-free and mutex runs alternating), side by side, and their ratio;
 *   - instructions per operation, measured by re-executing this binary under
 *     `valgrind --tool=callgrind` in a mode that runs N operations of one kind:
 *     inside sl_gcra_acquire (--toggle-collect), and for the whole loop by the
 *     difference of two runs with different N (so setup cost cancels out).
 * The limiter's clock is a synthetic counter (now += 50 ns per operation):
 * no clock read is measured. Targets: uncontended police/reserve under 40
 * instructions; contended, at least 1.5x the mutex bucket's throughput.
 *
 *   bench_core                      the full report
 *   bench_core --ops MODE N         run N ops of MODE and exit (see run_mode)
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../core/internal.h"
#include "sluice_core.h"

#define STEP_NS 50        /* synthetic clock step per operation */
#define OPS_TIMED 4000000 /* operations per timed run (per thread) */
#define RUNS 5            /* timed runs; the best is reported */

/* The same bucket as struct sl_gcra, but a plain tat under a mutex. */
struct mutex_bucket {
	pthread_mutex_t lock;
	struct sl_gcra p; /* parameters only; p.tat is unused */
	uint64_t tat;
};

/* sl_gcra_acquire's math with the CAS loop replaced by a critical section. */
static struct sl_decision mutex_acquire(struct mutex_bucket *b, uint64_t n, uint64_t now_ns,
					uint64_t max_wait_ns)
{
	const struct sl_gcra *g = &b->p;
	const uint32_t ts = g->tick_shift;
	const uint64_t now = sl__ns_to_ticks(sl__elapsed(now_ns, g->epoch_ns), ts);
	const uint64_t cost = sl__cost(n, g->mult, g->shift);
	const uint64_t tol = g->leaky ? cost : g->tau_ticks;
	const uint64_t max_wait = sl__ns_to_ticks(max_wait_ns, ts);
	if (cost > g->limit_ticks || (cost > tol && cost - tol > max_wait))
		return sl__never();
	struct sl_decision d;
	pthread_mutex_lock(&b->lock);
	const uint64_t end = sl__sat_add(sl__max(b->tat, now), cost);
	const uint64_t ahead = end - now;
	const uint64_t wait = ahead > tol ? ahead - tol : 0;
	if (end == UINT64_MAX) {
		d = sl__never();
	} else if (ahead > g->limit_ticks || wait > max_wait) {
		d = sl__decide(SL_REFUSE, sl__ticks_to_ns(wait - sl__min(wait, max_wait), ts));
	} else {
		b->tat = end;
		d = sl__decide(SL_ADMIT, sl__ticks_to_ns(wait, ts));
	}
	pthread_mutex_unlock(&b->lock);
	return d;
}

/* One token bucket of each flavour: n_unit units per 100 ns, burst 16 of
 * them, so that every operation takes n_unit units. */
static struct sl_limiter lf;
static struct mutex_bucket mb = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void buckets_init(uint64_t n_unit)
{
	const struct sl_params p = {.kind = SL_KIND_TOKEN,
				    .amount = n_unit,
				    .period_ns = 100,
				    .burst = 16 * n_unit};
	if (sl_limiter_init(&lf, &p, 0) != SL_OK ||
	    sl_token_init(&mb.p, n_unit, 100, 16 * n_unit, 0) != SL_OK) {
		fprintf(stderr, "bench_core: init failed\n");
		exit(1);
	}
	mb.tat = 0;
}

struct job {
	bool mutex;
	uint64_t max_wait;
	uint64_t step_ns; /* synthetic clock step per operation */
	uint64_t n;       /* units per operation */
	uint64_t ops;
	uint64_t admitted;
	pthread_barrier_t *start;
	double t0, t1; /* when this thread started and finished its loop */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The measured loop: n units at a synthetic time step_ns apart. */
static void *job_run(void *arg)
{
	struct job *j = arg;
	uint64_t admitted = 0, now = 0;
	if (j->start)
		pthread_barrier_wait(j->start);
	j->t0 = now_s();
	for (uint64_t i = 0; i < j->ops; i++) {
		now += j->step_ns;
		struct sl_decision d = j->mutex ? mutex_acquire(&mb, j->n, now, j->max_wait)
						: sl_limiter_acquire(&lf, j->n, now, j->max_wait);
		admitted += d.verdict == SL_ADMIT;
	}
	j->t1 = now_s();
	j->admitted = admitted;
	return NULL;
}

/* ns per operation of one timed run over `threads` threads; *overlap is
 * the fraction of the run during which all threads were running. */
static double time_run(bool mutex, uint64_t max_wait, int threads, double *overlap)
{
	buckets_init(1);
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, (unsigned)threads);
	pthread_t t[2];
	struct job j[2];
	for (int i = 0; i < threads; i++) {
		j[i] = (struct job){.mutex = mutex,
				    .max_wait = max_wait,
				    .step_ns = STEP_NS,
				    .n = 1,
				    .ops = OPS_TIMED,
				    .start = &start};
		pthread_create(&t[i], NULL, job_run, &j[i]);
	}
	/* Wall time from the first thread's start to the last one's end,
	 * measured by the workers (the main thread may not even run). */
	double first = 1e30, last_start = 0, first_end = 1e30, last = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		first = j[i].t0 < first ? j[i].t0 : first;
		last_start = j[i].t0 > last_start ? j[i].t0 : last_start;
		first_end = j[i].t1 < first_end ? j[i].t1 : first_end;
		last = j[i].t1 > last ? j[i].t1 : last;
	}
	pthread_barrier_destroy(&start);
	*overlap = first_end > last_start ? (first_end - last_start) / (last - first) : 0;
	return (last - first) * 1e9 / (double)(OPS_TIMED * (uint64_t)threads);
}

/* Best of RUNS runs for both buckets, alternating so that a change in the
 * machine's load hits both alike. With 2 threads only runs where both ran
 * together for at least 80% of the time count (on a busy machine one
 * thread may otherwise run alone, which is not contention); up to 8 * RUNS
 * tries. Returns false if too few runs qualified. */
static bool time_both(uint64_t max_wait, int threads, double *lfree, double *mtx)
{
	int got_a = 0, got_b = 0;
	*lfree = *mtx = 1e30;
	for (int r = 0; r < 8 * RUNS && (got_a < RUNS || got_b < RUNS); r++) {
		double ov;
		const double a = time_run(false, max_wait, threads, &ov);
		if (threads == 1 || ov >= 0.8) {
			got_a++;
			*lfree = a < *lfree ? a : *lfree;
		}
		const double b = time_run(true, max_wait, threads, &ov);
		if (threads == 1 || ov >= 0.8) {
			got_b++;
			*mtx = b < *mtx ? b : *mtx;
		}
	}
	return got_a > 0 && got_b > 0;
}

/* Run `self --ops mode n` under callgrind; return the "Collected" count, or
 * -1 if valgrind is missing or failed. toggle: function to count, or NULL. */
static long long callgrind_ir(const char *mode, uint64_t n, const char *toggle)
{
	char self[4096], nbuf[32], tbuf[256];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0)
		return -1;
	self[len] = '\0';
	snprintf(nbuf, sizeof(nbuf), "%llu", (unsigned long long)n);
	snprintf(tbuf, sizeof(tbuf), "--toggle-collect=%s", toggle ? toggle : "main");
	int fd[2];
	if (pipe(fd) != 0)
		return -1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		if (devnull >= 0)
			dup2(devnull, 1);
		dup2(fd[1], 2);
		close(fd[0]);
		close(fd[1]);
		execlp("valgrind", "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
		       tbuf, self, "--ops", mode, nbuf, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	char buf[65536];
	size_t used = 0;
	ssize_t got;
	while ((got = read(fd[0], buf + used, sizeof(buf) - 1 - used)) > 0)
		used += (size_t)got;
	close(fd[0]);
	buf[used] = '\0';
	int status = 0;
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -1;
	const char *c = strstr(buf, "Collected :");
	return c ? strtoll(c + strlen("Collected :"), NULL, 10) : -1;
}

/* Modes: police (half refused), police-admit (all admitted), reserve, each
 * optionally with -mutex and/or -1500 (1500 units per operation). */
static int run_mode(const char *mode, const char *count)
{
	struct job j = {.ops = strtoull(count, NULL, 10), .step_ns = STEP_NS, .n = 1};
	if (strncmp(mode, "police-admit", 12) == 0)
		j.step_ns = 4 * STEP_NS;
	else if (strncmp(mode, "reserve", 7) == 0)
		j.max_wait = UINT64_MAX;
	else if (strncmp(mode, "police", 6) != 0)
		return 2;
	j.mutex = strstr(mode, "-mutex") != NULL;
	if (strstr(mode, "-1500"))
		j.n = 1500;
	buckets_init(j.n);
	job_run(&j);
	/* Print the admitted count so the loop cannot be optimised away. */
	printf("%s %llu ops, %llu admitted\n", mode, (unsigned long long)j.ops,
	       (unsigned long long)j.admitted);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--ops") == 0)
		return run_mode(argv[2], argv[3]);

	printf("bench_core: token bucket 1 unit/100 ns, burst 16, n = 1, synthetic clock +%d ns/op\n",
	       STEP_NS);
	printf("%-8s %7s %16s %12s %16s\n", "op", "threads", "lock-free ns/op", "mutex ns/op",
	       "mutex/lock-free");
	const char *names[2] = {"police", "reserve"};
	const uint64_t waits[2] = {0, UINT64_MAX};
	for (int m = 0; m < 2; m++)
		for (int threads = 1; threads <= 2; threads++) {
			double lfree, mtx;
			if (!time_both(waits[m], threads, &lfree, &mtx)) {
				printf("%-8s %7d   (the threads never ran together: skipped)\n",
				       names[m], threads);
				continue;
			}
			printf("%-8s %7d %16.1f %12.1f %15.2fx\n", names[m], threads, lfree, mtx,
			       mtx / lfree);
		}

	printf("instructions per op (callgrind, uncontended, no clock read):\n");
	printf("%-20s %20s %24s\n", "op", "in sl_gcra_acquire", "whole loop (difference)");
	static const char *const modes[] = {
		"police-admit",      "police",        "reserve",
		"police-admit-1500", "reserve-1500",  "police-admit-mutex",
		"police-mutex",      "reserve-mutex",
	};
	const uint64_t n1 = 100000, n2 = 200000;
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		const bool mutex = strstr(modes[m], "-mutex") != NULL;
		long long inside = mutex ? 0 : callgrind_ir(modes[m], n2, "sl_gcra_acquire");
		long long a = callgrind_ir(modes[m], n1, NULL);
		long long b = callgrind_ir(modes[m], n2, NULL);
		if (inside < 0 || a < 0 || b < 0) {
			printf("valgrind (callgrind) is missing or failed: instruction counts skipped\n");
			break;
		}
		char in_s[32] = "-";
		if (!mutex)
			snprintf(in_s, sizeof(in_s), "%.1f", (double)inside / (double)n2);
		printf("%-20s %20s %24.1f\n", modes[m], in_s, (double)(b - a) / (double)(n2 - n1));
	}
	printf("police: half the operations are refused; police-admit: all admitted;\n"
	       "-1500: 1500 units per operation (bytes), cost by 128-bit multiply.\n");
	return 0;
}
