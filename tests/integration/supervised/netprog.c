/* SPDX-License-Identifier: MIT */
/*
 * netprog.c - a small network client for the supervised-mode tests, built
 * with `gcc -static` by tests/integration/test_supervise_static.py (no
 * libc socket call of it can be interposed: only the supervisor sees them).
 *
 *   netprog connect PORT N          N connects (and closes) to 127.0.0.1:PORT
 *   netprog upload PORT SIZE        connect, write() SIZE pattern bytes, close
 *   netprog download PORT FILE      connect, read() to EOF into FILE
 *   netprog recvmsg PORT FILE       the same with recvmsg()
 *   netprog recv PORT FILE          the same with recv()
 * PORT may be a unix stream socket's path (it starts with '/');
 * NETPROG_MAX_BYTES stops the three downloads past that many bytes.
 *   netprog writev PORT SIZE        upload with writev() of 3 pieces per call
 *   netprog filewrite FILE N        N 1-byte write()s to FILE (cost bench)
 *   netprog syscalls - -            io_uring_setup and an i386 getpid
 *                                   (int $0x80): prints their results,
 *                                   a line each
 *   netprog nodump PORT SIZE        PR_SET_DUMPABLE 0, then upload
 *   netprog small PORT N            connect, N 1-byte write()s (bench)
 *   netprog write8k PORT N          connect, N 8 KiB write()s, a short one
 *                                   finished by more calls (bench)
 *   netprog idle PORT -             connect, one read() of a connection
 *                                   that sends nothing (a signal ends it)
 * Prints one JSON line: {"start": CLOCK_MONOTONIC seconds at the start,
 * "elapsed": seconds, "bytes": n, "calls": n,
 * "short": n, "fd": first socket fd, "eintr": n, "usr1": n, "usr2": n}.
 * SIGALRM fires every 20 ms (SA_RESTART off) while it runs, so held calls
 * meet signals; SIGUSR1 and SIGUSR2 are counted (SA_RESTART).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t alarms, usr1, usr2;

static void on_usr(int sig)
{
	if (sig == SIGUSR1)
		usr1++;
	else
		usr2++;
}

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The peer: a unix stream socket's path when PORT starts with '/' (main). */
static const char *peer_path;

static int dial(int port)
{
	int fd;
	/* A signal that comes before the supervisor has picked the call up
	 * interrupts even socket() (documented in the README). */
	while ((fd = socket(peer_path != NULL ? AF_UNIX : AF_INET, SOCK_STREAM, 0)) < 0 &&
	       errno == EINTR)
		;
	if (fd < 0) {
		perror("socket");
		exit(1);
	}
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((unsigned short)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_un u = {.sun_family = AF_UNIX};
	if (peer_path != NULL)
		snprintf(u.sun_path, sizeof(u.sun_path), "%s", peer_path);
	const struct sockaddr *to = peer_path != NULL ? (const struct sockaddr *)&u
						      : (const struct sockaddr *)&a;
	const socklen_t tolen = peer_path != NULL ? sizeof(u) : sizeof(a);
	while (connect(fd, to, tolen) != 0) {
		if (errno == EINTR)
			continue; /* a restarted connect may say EALREADY/EISCONN */
		if (errno == EISCONN)
			break;
		perror("connect");
		exit(1);
	}
	return fd;
}

static unsigned char pattern(unsigned long i)
{
	return (unsigned char)((i * 2654435761u) >> 13);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: netprog MODE PORT|FILE ARG\n");
		return 2;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	sa.sa_handler = on_usr;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);
	sa.sa_flags = 0;
	struct itimerval it = {{0, 20000}, {0, 20000}};
	const char *mode = argv[1];
	long calls = 0, shorts = 0, eintr = 0, firstfd = -1;
	unsigned long bytes = 0;
	static unsigned char buf[1 << 20];
	if (strcmp(mode, "filewrite") == 0) {
		int fd = open(argv[2], O_WRONLY);
		long n = atol(argv[3]);
		double t0 = now();
		for (long i = 0; i < n; i++)
			if (write(fd, "x", 1) == 1)
				bytes++;
		printf("{\"start\": %.6f, \"elapsed\": %.6f, \"bytes\": %lu, \"calls\": %ld, \"fd\": %d}\n",
		       t0, now() - t0, bytes, n, fd);
		return 0;
	}
	if (strcmp(mode, "syscalls") == 0) {
		unsigned char params[120] = {0}; /* struct io_uring_params */
		long r = syscall(SYS_io_uring_setup, 4, params);
		int e = r < 0 ? errno : 0;
		/* Out before the i386 call: a kernel without IA32 emulation
		 * kills the program with SIGSEGV there. */
		printf("{\"io_uring_setup\": %ld, \"io_uring_errno\": %d, \"pid\": %d}\n", r, e,
		       (int)getpid());
		fflush(stdout);
		long r32 = 20; /* i386 getpid */
		__asm__ volatile("int $0x80" : "+a"(r32) : : "memory");
		printf("{\"i386_getpid\": %ld}\n", r32);
		return 0;
	}
	if (strcmp(mode, "nodump") == 0) {
		prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
		mode = "upload";
	}
	if (argv[2][0] == '/')
		peer_path = argv[2];
	int port = atoi(argv[2]);
	if (getenv("NETPROG_NOALARM") == NULL)
		setitimer(ITIMER_REAL, &it, NULL);
	double t0 = now();
	if (strcmp(mode, "connect") == 0) {
		long n = atol(argv[3]);
		for (long i = 0; i < n; i++) {
			int fd = dial(port);
			if (firstfd < 0)
				firstfd = fd;
			close(fd);
			calls++;
		}
	} else if (strcmp(mode, "small") == 0) {
		long n = atol(argv[3]);
		int fd = dial(port);
		firstfd = fd;
		t0 = now();
		for (long i = 0; i < n; i++)
			if (write(fd, "x", 1) == 1)
				bytes++;
		calls = n;
		close(fd);
	} else if (strcmp(mode, "write8k") == 0) {
		long n = atol(argv[3]);
		int fd = dial(port);
		firstfd = fd;
		memset(buf, 'x', 8192);
		t0 = now();
		for (long i = 0; i < n; i++) {
			size_t off = 0;
			while (off < 8192) {
				ssize_t k = write(fd, buf + off, 8192 - off);
				if (k < 0 && errno == EINTR) {
					eintr++;
					continue;
				}
				if (k < 0) {
					perror("write");
					return 1;
				}
				calls++;
				shorts += off + (size_t)k < 8192;
				off += (size_t)k;
				bytes += (unsigned long)k;
			}
		}
		close(fd);
	} else if (strcmp(mode, "upload") == 0 || strcmp(mode, "writev") == 0) {
		unsigned long size = strtoul(argv[3], NULL, 10);
		int fd = dial(port);
		firstfd = fd;
		while (bytes < size) {
			size_t want = size - bytes < 100000 ? size - bytes : 100000;
			for (size_t i = 0; i < want; i++)
				buf[i] = pattern(bytes + i);
			ssize_t n;
			if (mode[0] == 'w') {
				size_t a = want / 3, b = want / 3;
				struct iovec iov[3] = {{buf, a},
						       {buf + a, b},
						       {buf + a + b, want - a - b}};
				n = writev(fd, iov, 3);
			} else {
				n = write(fd, buf, want);
			}
			if (n < 0 && errno == EINTR) {
				eintr++;
				continue;
			}
			if (n < 0) {
				perror("write");
				return 1;
			}
			calls++;
			shorts += (size_t)n < want;
			bytes += (unsigned long)n;
		}
		close(fd);
	} else if (strcmp(mode, "download") == 0 || strcmp(mode, "recvmsg") == 0 ||
		   strcmp(mode, "recv") == 0) {
		/* NETPROG_MAX_BYTES: stop past it (a peer's data read again and
		 * again ends there, not at the test's timeout). */
		const char *cap = getenv("NETPROG_MAX_BYTES");
		const unsigned long most = cap != NULL ? strtoul(cap, NULL, 10) : ~0ul;
		int out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int fd = dial(port);
		firstfd = fd;
		while (bytes <= most) {
			ssize_t n;
			if (strcmp(mode, "recvmsg") == 0) {
				struct iovec iov = {buf, sizeof(buf)};
				struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
				n = recvmsg(fd, &mh, 0);
			} else if (strcmp(mode, "recv") == 0) {
				n = recv(fd, buf, sizeof(buf), 0);
			} else {
				n = read(fd, buf, sizeof(buf));
			}
			if (n < 0 && errno == EINTR) {
				eintr++;
				continue;
			}
			if (n < 0) {
				perror("read");
				return 1;
			}
			if (n == 0)
				break;
			calls++;
			bytes += (unsigned long)n;
			if (write(out, buf, (size_t)n) != n) {
				perror("write file");
				return 1;
			}
		}
		close(out);
		close(fd);
	} else if (strcmp(mode, "idle") == 0) {
		/* One read of a connection that sends nothing: natively the
		 * 20 ms timer's SIGALRM (no SA_RESTART) ends it with EINTR. */
		int fd = dial(port);
		firstfd = fd;
		ssize_t n = read(fd, buf, 1);
		if (n < 0 && errno == EINTR)
			eintr++;
		else if (n > 0)
			bytes += (unsigned long)n;
		calls++;
		close(fd);
	} else {
		fprintf(stderr, "netprog: unknown mode %s\n", mode);
		return 2;
	}
	double el = now() - t0;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
		     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	printf("{\"start\": %.6f, \"elapsed\": %.6f, \"bytes\": %lu, \"calls\": %ld, \"short\": %ld, \"fd\": %ld, "
	       "\"eintr\": %ld, \"alarms\": %d, \"usr1\": %d, \"usr2\": %d, \"cpu\": %.6f}\n",
	       t0, el, bytes, calls, shorts, firstfd, eintr, (int)alarms, (int)usr1, (int)usr2,
	       cpu);
	return 0;
}
