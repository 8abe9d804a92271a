/* SPDX-License-Identifier: MIT */
/*
 * bare_filter.c - run a program under a seccomp filter that does nothing of
 * supervised mode's work: the floor every supervised program pays, against
 * which bench/bench_supervise.sh measures supervised mode's own cost.
 *
 *   build/bench/bare_filter [--fd-check | --continue] PROGRAM [ARG]...
 *
 * The filter checks the architecture and the x32 bit like supervised mode's
 * (supervise/filter.c) and allows everything else. The kernel caches such a
 * filter's verdict per system call (it depends on no argument), so the
 * program never runs for write(2). --fd-check adds a test of write's fd
 * that allows either way, as supervised mode's fd >= 512 test does when it
 * lets a file write through: the verdict then depends on an argument and
 * the program runs for every write.
 *
 * --continue traps every write(2) to an fd >= 3 (anything but stdio; the
 * benchmark's socket) as a user notification, which a thread of this
 * process answers with SECCOMP_USER_NOTIF_FLAG_CONTINUE: the kernel then
 * performs the call itself. That is a bare notification round trip (the
 * program stopped, the supervisor woken, its answer, the program woken),
 * with the listener set up as supervised mode sets up its own
 * (supervise/launch.c: a forked child installs the filter and hands the
 * listener over a socketpair; SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP where the
 * kernel has it, 6.6), so that supervised mode's trapped call can be
 * compared with the least any supervisor could do for it.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The constants Debian 12's headers lack, as the supervisor has them. */
#include "../supervise/internal.h"

/*
 * Answers every notification on the listener (arg: its fd, cast) with
 * CONTINUE until the listener fails. A call whose program is gone by the
 * answer (ENOENT) is skipped. The thread ends with the process: main exits
 * when the program does.
 */
static void *bare_filter_answer(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	for (;;) {
		struct seccomp_notif req;
		struct seccomp_notif_resp resp;
		memset(&req, 0, sizeof(req));
		if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
			if (errno == EINTR || errno == ENOENT)
				continue;
			perror("bare_filter: SECCOMP_IOCTL_NOTIF_RECV");
			return NULL;
		}
		memset(&resp, 0, sizeof(resp));
		resp.id = req.id;
		resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
		if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_SEND, &resp) != 0 && errno != ENOENT) {
			perror("bare_filter: SECCOMP_IOCTL_NOTIF_SEND");
			return NULL;
		}
	}
}

/* Sends fd over the socket sock (SCM_RIGHTS); 0, or -1 with errno. */
static int bare_filter_send_fd(int sock, int fd)
{
	char byte = 0;
	struct iovec iov = {&byte, 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} c;
	memset(&c, 0, sizeof(c));
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = c.buf,
			    .msg_controllen = sizeof(c.buf)};
	struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(h), &fd, sizeof(int));
	return sendmsg(sock, &mh, 0) == 1 ? 0 : -1;
}

/* The fd sent over sock, or -1 (the sender failed or sent none). */
static int bare_filter_recv_fd(int sock)
{
	char byte;
	struct iovec iov = {&byte, 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} c;
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = c.buf,
			    .msg_controllen = sizeof(c.buf)};
	ssize_t n;
	while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	struct cmsghdr *h = n == 1 ? CMSG_FIRSTHDR(&mh) : NULL;
	if (h == NULL || h->cmsg_type != SCM_RIGHTS || h->cmsg_len != CMSG_LEN(sizeof(int)))
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(h), sizeof(int));
	return fd;
}

/*
 * --continue: fork the program under a filter with a listener, answer its
 * trapped writes from a thread, and exit as the program exits (its status,
 * or 128 + the signal that ended it).
 */
static int bare_filter_run_continue(struct sock_fprog *prog, char **argv)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
		perror("bare_filter: socketpair");
		return 2;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("bare_filter: fork");
		return 2;
	}
	if (pid == 0) {
		close(sv[0]);
		int lfd = -1;
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0)
			lfd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
					   SECCOMP_FILTER_FLAG_NEW_LISTENER, prog);
		if (lfd < 0 || bare_filter_send_fd(sv[1], lfd) != 0) {
			fprintf(stderr, "bare_filter: %s\n", strerror(errno));
			_exit(2);
		}
		close(lfd);
		close(sv[1]);
		execvp(argv[0], argv);
		fprintf(stderr, "bare_filter: %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(sv[1]);
	int lfd = bare_filter_recv_fd(sv[0]);
	close(sv[0]);
	if (lfd >= 0) {
		/* Best effort, as supervised mode: older kernels wake the
		 * program on any CPU. */
		uint64_t wake = SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP;
		(void)ioctl(lfd, SECCOMP_IOCTL_NOTIF_SET_FLAGS, wake);
		pthread_t t;
		if (pthread_create(&t, NULL, bare_filter_answer, (void *)(intptr_t)lfd) != 0) {
			fputs("bare_filter: pthread_create failed\n", stderr);
			kill(pid, SIGKILL);
		}
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			perror("bare_filter: waitpid");
			return 2;
		}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv)
{
	int first = 1;
	bool fd_check = argc > 1 && strcmp(argv[1], "--fd-check") == 0;
	bool cont = argc > 1 && strcmp(argv[1], "--continue") == 0;
	first += fd_check || cont;
	if (argc <= first) {
		fputs("usage: bare_filter [--fd-check | --continue] PROGRAM [ARG]...\n", stderr);
		return 2;
	}
	struct sock_filter ins[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		/* --fd-check: if (nr == write) { load fd; allow either way }
		 * --continue: if (nr == write && fd >= 3) trap */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_write, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args)),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 512, 0, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof(ins) / sizeof(ins[0]), ins};
	if (cont) { /* fd >= 3 falls through to the trap, a lower one skips to the allow */
		ins[8] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 3, 0, 1);
		ins[9] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF);
		return bare_filter_run_continue(&prog, argv + first);
	}
	if (!fd_check) { /* skip the fd test: the last instruction alone */
		ins[6] = ins[10];
		prog.len = 7;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
		fprintf(stderr, "bare_filter: %s\n", strerror(errno));
		return 2;
	}
	execvp(argv[first], argv + first);
	fprintf(stderr, "bare_filter: %s: %s\n", argv[first], strerror(errno));
	return 127;
}
