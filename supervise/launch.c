/* SPDX-License-Identifier: MIT */
/*
 * launch.c - start the program under the filter and hand its listener to
 * the supervisor.
 *
 * The launcher forks. The child sets PR_SET_NO_NEW_PRIVS (what lets an
 * unprivileged process install a filter), starts a helper thread, and then
 * installs the filter from its main thread only (no TSYNC), so the helper
 * stays outside it: a filtered thread could not pass the listener on, its
 * own sendmsg would wait for a supervisor that does not have the listener
 * yet. The helper sends the listener fd to the parent over a socketpair
 * (SCM_RIGHTS) with one byte saying whether WAIT_KILLABLE_RECV was
 * accepted; the main thread closes its copy and execs the program, which
 * keeps the filter for good, as does everything it starts.
 *
 * The parent becomes a child subreaper (daemonised grandchildren stay its
 * descendants and are reaped by it, which the listener needs before it
 * reports POLLHUP) and runs the notification loop (loop.c) until the last
 * supervised process is gone. Every signal sent to the launcher is passed on
 * to the program (loop.c: sl_sup_signals), but for those the kernel sends to
 * the whole process group (a terminal's Ctrl-C), which reach the program
 * already, and job control, under which launcher and program stop together.
 */
#include "supervise.h"
#include "filter.h"
#include "kernel.h"
#include "loop.h"
#include "notif.h"
#include "shared.h"
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define FILTER_MAX 256

int sl_sup_loop(struct sl_sup *s, pid_t child, const sigset_t *oldmask);

struct helper_arg {
	int pipe_rd; /* the main thread writes the listener fd here */
	int sock;    /* to the parent */
};

/* The message that carries the listener: one byte (WAIT_KILLABLE_RECV
 * accepted) and one fd (SCM_RIGHTS). */
struct fd_msg {
	char byte;
	struct iovec iov;
	struct msghdr mh;
	union { /* last: struct cmsghdr ends in a flexible array */
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
};

static void fd_msg_init(struct fd_msg *m, char byte)
{
	memset(m, 0, sizeof(*m));
	m->byte = byte;
	m->iov = (struct iovec){&m->byte, 1};
	m->mh = (struct msghdr){.msg_iov = &m->iov,
				.msg_iovlen = 1,
				.msg_control = m->ctl.buf,
				.msg_controllen = sizeof(m->ctl.buf)};
}

/* The helper thread: outside the filter, it passes the listener on. */
static void *helper_main(void *v)
{
	struct helper_arg *a = v;
	int msg[2];
	ssize_t n;
	do
		n = read(a->pipe_rd, msg, sizeof(msg));
	while (n < 0 && errno == EINTR);
	if (n != sizeof(msg))
		return NULL;
	struct fd_msg m;
	fd_msg_init(&m, (char)msg[1]);
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m.mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &msg[0], sizeof(int));
	while (sendmsg(a->sock, &m.mh, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
	return NULL;
}

static void child_fail(const char *what)
{
	char buf[256];
	int n = snprintf(buf, sizeof(buf), "sluice: --supervise: %s: %s\n", what, strerror(errno));
	if (n > 0 && write(2, buf, (size_t)n) < 0)
		_exit(2);
	_exit(2);
}

/* The child: filter, hand-off, exec. Never returns. */
static void child_main(int sock, struct sock_fprog *prog, bool killable, char *const *argv,
		       const sigset_t *oldmask)
{
	int pfd[2];
	pthread_t helper;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		child_fail("prctl(PR_SET_NO_NEW_PRIVS)");
	if (pipe2(pfd, O_CLOEXEC) != 0)
		child_fail("pipe2");
	struct helper_arg a = {pfd[0], sock};
	if (pthread_create(&helper, NULL, helper_main, &a) != 0)
		child_fail("pthread_create");

	unsigned long flags = SECCOMP_FILTER_FLAG_NEW_LISTENER;
	int lfd = -1;
	if (killable)
		lfd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
				   flags | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, prog);
	if (lfd < 0) {
		killable = false;
		lfd = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, prog);
	}
	if (lfd < 0)
		child_fail("seccomp(SECCOMP_SET_MODE_FILTER)");
	int msg[2] = {lfd, killable ? 1 : 0};
	if (write(pfd[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
		child_fail("write");
	pthread_join(helper, NULL);
	close(lfd);
	close(sock);
	close(pfd[0]);
	close(pfd[1]);
	sigprocmask(SIG_SETMASK, oldmask, NULL);
	execvp(argv[0], argv);
	int e = errno;
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "sluice: %s: %s\n", argv[0], strerror(e));
	if (n > 0 && write(2, buf, (size_t)n) < 0)
		_exit(126);
	_exit(e == ENOENT ? 127 : 126);
}

/* Receive the listener from the child's helper; -1 if the child failed
 * before sending it. */
static int receive_listener(int sock, bool *killable)
{
	struct fd_msg m;
	fd_msg_init(&m, 0);
	ssize_t n;
	do
		n = recvmsg(sock, &m.mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	struct cmsghdr *cm = n == 1 ? CMSG_FIRSTHDR(&m.mh) : NULL;
	if (cm == NULL || cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int)))
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	*killable = m.byte == 1;
	return fd;
}

/* Policy rules supervised mode cannot honour yet: refused, never ignored. */
static int check_rules(const struct sl_policy *p)
{
	char text[SL_RULE_TEXT_MAX];
	for (uint32_t i = 0; i < p->n_rules; i++) {
		const struct sl_rule *r = &p->rules[i];
		const char *what = r->redis_key[0] != '\0' ? "redis="
				   : r->shared[0] != '\0' && r->op == SL_OP_CONNS
					   ? "conns with shared="
					   : NULL;
		if (what == NULL)
			continue;
		sl_rule_format(r, text, sizeof(text));
		fprintf(stderr,
			"sluice: --supervise: rule '%s': %s is not supported in supervised mode yet "
			"(it works with the preloaded library: --preload, for dynamically linked "
			"programs)\n",
			text, what);
		return -1;
	}
	return 0;
}

static int wait_status_exit(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status)) {
		int sig = WTERMSIG(status);
		/* Die the same way, as an exec'd launcher would have; a core
		 * dump is not ours to make. */
		if (sig != SIGKILL && sig != SIGSTOP) {
			struct rlimit core = {0, 0};
			setrlimit(RLIMIT_CORE, &core);
			signal(sig, SIG_DFL);
			sigset_t m;
			sigemptyset(&m);
			sigaddset(&m, sig);
			sigprocmask(SIG_UNBLOCK, &m, NULL);
			raise(sig);
		}
		return 128 + sig;
	}
	return 1;
}

int sl_supervise_run(char *const *argv, const struct sl_policy *p,
		     const struct sl_supervise_opts *o)
{
	char err[512];
	struct sl_sup *s = calloc(1, sizeof(*s));
	if (s == NULL) {
		perror("sluice: --supervise");
		return 2;
	}
	if (sl_sup_features_check(&s->feat, err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice: %s\n", err);
		return 2;
	}
	if (check_rules(p) != 0)
		return 2;
	s->policy = *p;
	s->verbose = o->verbose;
	sl_sup_traps_of(p, &s->traps);
	s->traps.stdio = o->trap_stdio && (s->traps.send || s->traps.recv);
	if (sl_sup_shared_open_all(s, sl_sup_now_ns(), err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice: %s\n", err);
		return 2;
	}

	struct sock_filter ins[FILTER_MAX];
	int n = sl_sup_filter_build(&s->traps, ins, FILTER_MAX);
	if (n < 0) {
		fputs("sluice: --supervise: the filter does not fit\n", stderr);
		return 2;
	}
	struct sock_fprog prog = {(unsigned short)n, ins};

	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
		perror("sluice: --supervise: prctl(PR_SET_CHILD_SUBREAPER)");
		return 2;
	}
	/* Wake-ups as exact as the kernel allows: deadlines are honoured to the
	 * microsecond, not the default 50 us of slack. */
	prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);

	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
		perror("sluice: --supervise: socketpair");
		return 2;
	}
	sigset_t block, oldmask;
	sl_sup_signals(&block); /* read from a signalfd, passed on (loop.c) */
	sigprocmask(SIG_BLOCK, &block, &oldmask);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		perror("sluice: --supervise: fork");
		return 2;
	}
	if (pid == 0) {
		close(sv[0]);
		child_main(sv[1], &prog, s->feat.wait_killable, argv, &oldmask);
	}
	close(sv[1]);
	/* Our own fds (one duplicate and one pidfd per held call and thread):
	 * the hard limit, raised after the fork so that the program keeps the
	 * soft limit it was given. */
	struct rlimit nofile;
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
		struct rlimit raised = {nofile.rlim_max, nofile.rlim_max};
		setrlimit(RLIMIT_NOFILE, &raised);
	}
	bool killable = false;
	s->listener = receive_listener(sv[0], &killable);
	close(sv[0]);
	if (s->listener < 0) {
		int status;
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
		return wait_status_exit(status);
	}
	s->feat.wait_killable = killable;
	uint64_t wake = SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP;
	s->feat.sync_wakeup = s->feat.sync_wakeup &&
			      ioctl(s->listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, wake) == 0;
	if (o->verbose)
		fprintf(stderr,
			"sluice: supervised mode (Linux %d.%d): sockets at fd >= %d; "
			"wait-killable %s, sync wake-up %s, thread pidfds %s\n",
			s->feat.major, s->feat.minor, SL_SUP_FD_BASE,
			s->feat.wait_killable ? "yes"
					      : "no (a blocking send is answered piece by piece)",
			s->feat.sync_wakeup ? "yes" : "no", s->feat.pidfd_thread ? "yes" : "no");
	int status = sl_sup_loop(s, pid, &oldmask);
	sl_sup_shared_close_all(s);
	free(s);
	return status < 0 ? 2 : wait_status_exit(status);
}
