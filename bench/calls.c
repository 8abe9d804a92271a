/* SPDX-License-Identifier: MIT */
/*
 * calls.c - one process making ITERS 1-byte calls of one kind, for the
 * instruction counts of bench/compare/instructions.py (callgrind counts
 * the instructions of a run of 2,000 and of 22,000 calls and subtracts).
 *
 * usage: calls KIND ITERS
 *   devnull  write() of 1 byte to /dev/null (a call no rule matches)
 *   send write writev sendmsg
 *            1 byte on a connected TCP socket (Nagle on, the default
 *            socket); writev and sendmsg with one 1-byte iovec
 *   send4    send on 4 such sockets in turn (a thread serving several
 *            connections)
 *   recv read
 *            1 byte from a connected TCP socket: before every 64th call
 *            the other end writes 64 bytes (one raw write, as the send
 *            kinds drain their peer every 64 calls), so every call returns
 *            1 and a call's time is about its own: a thread-local credit's
 *            renewals, which come with time (credit.h), are counted per
 *            call as for a send, not doubled by a peer write per call
 *   epoll poll
 *            epoll_wait / poll (timeout 0) on that socket after the other
 *            end wrote 1 byte: each call reports it readable; the byte is
 *            read back with a raw system call, which no library sees
 *   epollpipe
 *            the same epoll_wait on a pipe (an fd no rule matches)
 *
 * Both ends of the TCP loopback pair (127.0.0.1, port chosen by the kernel)
 * are in this process, so a run needs no peer and no scheduler round trip.
 * The other end works only through raw system calls (flow_raw below): a
 * preloaded library (sluice, trickle) sees none of them, so what it adds
 * to a run is what it adds to the measured calls. The send kinds empty the
 * receive queue with one non-blocking raw read every 64 calls, the same
 * count of instructions in every run, so the sender never blocks.
 *
 * Ends itself after 120 s (alarm). Prints "calls KIND ITERS" on success;
 * exit status 1 on a system error (message on stderr), 2 on bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define CALLS_TIME_LIMIT_S 120
#define CALLS_DRAIN_EVERY 64
#define CALLS_DRAIN_BUF 65536
#define CALLS_PAIRS 4 /* send4 */

static void calls_die(const char *what)
{
	fprintf(stderr, "calls: %s: %s\n", what, strerror(errno));
	exit(1);
}

/*
 * A system call that no preloaded library can see: libc's syscall() is
 * itself interposed by sluice (shim/wrap_fd.c), so x86-64 issues the
 * instruction here. Returns the kernel's result (-errno on failure).
 * Elsewhere it falls back to syscall(), whose wrapper cost then counts.
 */
static long calls_raw3(long nr, long a, long b, long c)
{
#if defined(__x86_64__)
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c)
			 : "rcx", "r11", "memory");
	return ret;
#else
	long r = syscall(nr, a, b, c);
	return r < 0 ? -errno : r;
#endif
}

static long calls_raw_recv(int fd, void *buf, size_t n)
{
#if defined(__x86_64__)
	long ret;
	register long r10 __asm__("r10") = MSG_DONTWAIT;
	register long r8 __asm__("r8") = 0;
	register long r9 __asm__("r9") = 0;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"((long)SYS_recvfrom), "D"((long)fd), "S"((long)buf), "d"((long)n),
			   "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
#else
	long r = syscall(SYS_recvfrom, fd, buf, n, MSG_DONTWAIT, 0, 0);
	return r < 0 ? -errno : r;
#endif
}

/* A connected TCP loopback pair: *mine is the measured end. */
static void calls_pair(int *mine, int *other)
{
	struct sockaddr_in a;
	socklen_t len = sizeof a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &len) < 0)
		calls_die("listen on 127.0.0.1");
	*mine = socket(AF_INET, SOCK_STREAM, 0);
	if (*mine < 0 || connect(*mine, (struct sockaddr *)&a, sizeof a) < 0)
		calls_die("connect");
	*other = accept(lfd, NULL, NULL);
	if (*other < 0)
		calls_die("accept");
	close(lfd);
}

enum calls_kind {
	K_DEVNULL,
	K_SEND,
	K_WRITE,
	K_WRITEV,
	K_SENDMSG,
	K_RECV,
	K_READ,
	K_EPOLL,
	K_POLL,
	K_EPOLLPIPE,
	K_SEND4
};
static const char *const calls_names[] = {"devnull", "send",      "write", "writev",
					  "sendmsg", "recv",      "read",  "epoll",
					  "poll",    "epollpipe", "send4"};
static int calls_ep = -1; /* the epoll set of the epoll kinds */

static ssize_t calls_one(enum calls_kind k, int fd, char *byte)
{
	struct iovec iov = {byte, 1};
	struct msghdr mh;
	switch (k) {
	case K_DEVNULL:
	case K_WRITE:
		return write(fd, byte, 1);
	case K_SEND:
	case K_SEND4:
		return send(fd, byte, 1, 0);
	case K_WRITEV:
		return writev(fd, &iov, 1);
	case K_SENDMSG:
		memset(&mh, 0, sizeof mh);
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		return sendmsg(fd, &mh, 0);
	case K_RECV:
		return recv(fd, byte, 1, 0);
	case K_READ:
		return read(fd, byte, 1);
	case K_EPOLL:
	case K_EPOLLPIPE: {
		struct epoll_event ev;
		int n = epoll_wait(calls_ep, &ev, 1, 0);
		if (n == 1 && calls_raw3(SYS_read, fd, (long)byte, 1) != 1)
			return -1;
		return n;
	}
	case K_POLL: {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int n = poll(&p, 1, 0);
		if (n == 1 && calls_raw3(SYS_read, fd, (long)byte, 1) != 1)
			return -1;
		return n;
	}
	}
	return -1;
}

int main(int argc, char **argv)
{
	alarm(CALLS_TIME_LIMIT_S);
	if (argc != 3)
		goto usage;
	size_t k = 0;
	while (k < sizeof calls_names / sizeof calls_names[0] && strcmp(argv[1], calls_names[k]))
		k++;
	char *end;
	errno = 0;
	unsigned long long iters = strtoull(argv[2], &end, 10);
	if (k == sizeof calls_names / sizeof calls_names[0] || errno || end == argv[2] || *end ||
	    argv[2][0] == '-')
		goto usage;
	enum calls_kind kind = (enum calls_kind)k;
	int fd, other = -1;
	if (kind == K_DEVNULL) {
		fd = open("/dev/null", O_WRONLY);
		if (fd < 0)
			calls_die("/dev/null");
	} else if (kind == K_EPOLLPIPE) {
		int p[2];
		if (pipe(p) < 0)
			calls_die("pipe");
		fd = p[0];
		other = p[1];
	} else {
		calls_pair(&fd, &other);
	}
	/* send4: the pairs taken in turn (pair 0 is fd, other). */
	int fds[CALLS_PAIRS] = {fd}, others[CALLS_PAIRS] = {other};
	const int pairs = kind == K_SEND4 ? CALLS_PAIRS : 1;
	for (int p = 1; p < pairs; p++)
		calls_pair(&fds[p], &others[p]);
	if (kind == K_EPOLL || kind == K_EPOLLPIPE) {
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
		calls_ep = epoll_create1(0);
		if (calls_ep < 0 || epoll_ctl(calls_ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			calls_die("epoll");
	}
	int receiving = kind == K_RECV || kind == K_READ || kind == K_EPOLL || kind == K_POLL ||
			kind == K_EPOLLPIPE;
	if (receiving) {
		/* Each 1-byte write leaves at once, so the byte is queued at fd
		 * before the measured call (no Nagle wait for an ACK). */
		int one = 1;
		if (kind != K_EPOLLPIPE &&
		    setsockopt(other, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
			calls_die("TCP_NODELAY");
	}
	static char drain[CALLS_DRAIN_BUF];
	char byte = 'x';
	/* recv and read: the peer writes CALLS_DRAIN_EVERY bytes at once. */
	const int batched = kind == K_RECV || kind == K_READ;
	for (unsigned long long i = 0; i < iters; i++) {
		if (receiving && (!batched || i % CALLS_DRAIN_EVERY == 0)) {
			const long want = batched ? CALLS_DRAIN_EVERY : 1;
			long w = calls_raw3(SYS_write, other, (long)drain, want);
			if (w != want) {
				errno = w < 0 ? (int)-w : EIO;
				calls_die("peer write");
			}
		}
		const int p = (int)(i % (unsigned)pairs);
		ssize_t r = calls_one(kind, fds[p], &byte);
		if (r != 1) {
			if (r >= 0)
				errno = EIO;
			calls_die(calls_names[kind]);
		}
		if (!receiving && others[p] >= 0 &&
		    (i / (unsigned)pairs) % CALLS_DRAIN_EVERY == CALLS_DRAIN_EVERY - 1) {
			long d = calls_raw_recv(others[p], drain, sizeof drain);
			if (d < 0 && d != -EAGAIN) {
				errno = (int)-d;
				calls_die("drain");
			}
		}
	}
	for (int p = 0; p < pairs; p++) {
		close(fds[p]);
		if (others[p] >= 0)
			close(others[p]);
	}
	printf("calls %s %llu\n", calls_names[kind], iters);
	return 0;
usage:
	fprintf(stderr, "usage: calls devnull|send|write|writev|sendmsg|recv|read|epoll|poll|"
			"epollpipe|send4 ITERS\n");
	return 2;
}
