/* SPDX-License-Identifier: MIT */
/*
 * loop.c - the notification loop.
 *
 * One thread waits in ppoll on the listener, a signalfd (SIGCHLD, and the
 * signals passed on to the program), and the duplicates of the sockets that
 * held calls wait on (a blocking receive waiting for data, a blocking send
 * waiting for buffer space). Its timeout is the nearest deadline of a held
 * call (a token bucket's slot), so a wait ends within the timer's precision
 * (the launcher sets a timer slack of 1 ns).
 *
 * A held call is one slot of s->calls. Nothing tells the supervisor that a
 * held call was abandoned (its thread killed, or, without WAIT_KILLABLE_RECV,
 * interrupted by a signal and restarted under a new id), so:
 *   - a new notification from a thread means its older held call is dead;
 *   - every SL_SUP_SWEEP_NS each held call is checked with NOTIF_ID_VALID;
 *   - an answer that fails with ENOENT ends the call.
 * A dead call gives back what it still holds of its grant.
 *
 * The loop ends when the listener reports POLLHUP (no task uses the filter
 * any more) and the program (the launcher's child) has been reaped.
 */
#include "internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int sl_sup_loop(struct sl_sup *s, pid_t child, const sigset_t *oldmask);

uint64_t sl_sup_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sl_sup_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sluice: warning: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

int sl_sup_answer(struct sl_sup *s, uint64_t id, int64_t val, int err)
{
	struct seccomp_notif_resp r = {.id = id, .val = err != 0 ? 0 : val, .error = -err};
	if (ioctl(s->listener, SECCOMP_IOCTL_NOTIF_SEND, &r) != 0)
		return -errno;
	return 0;
}

int sl_sup_continue(struct sl_sup *s, uint64_t id)
{
	struct seccomp_notif_resp r = {.id = id, .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
	if (ioctl(s->listener, SECCOMP_IOCTL_NOTIF_SEND, &r) != 0)
		return -errno;
	return 0;
}

bool sl_sup_valid(const struct sl_sup *s, uint64_t id)
{
	return ioctl(s->listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}

struct sl_sup_call *sl_sup_call_new(struct sl_sup *s, const struct seccomp_notif *req,
				    struct sl_sup_thread *th)
{
	struct sl_sup_call *c = NULL;
	for (unsigned i = 0; i < s->calls_hi; i++)
		if (!s->calls[i].used) {
			c = &s->calls[i];
			break;
		}
	if (c == NULL && s->calls_hi < SL_SUP_CALLS_MAX)
		c = &s->calls[s->calls_hi++];
	if (c == NULL) {
		if (!s->full_warned)
			sl_sup_warn("%d calls are held at once: further calls pass unthrottled "
				    "until some end",
				    SL_SUP_CALLS_MAX);
		s->full_warned = true;
		return NULL;
	}
	memset(c, 0, offsetof(struct sl_sup_call, riov));
	c->used = true;
	c->dup = -1;
	c->req = *req;
	c->th = th;
	c->start_ns = sl_sup_now_ns();
	c->due_ns = UINT64_MAX;
	c->backoff_ns = SL_DECIDE_BACKOFF_NS;
	th->refs++;
	s->n_calls++;
	return c;
}

void sl_sup_call_free(struct sl_sup *s, struct sl_sup_call *c)
{
	/* The call's end, counted as the preload counts it (engine/count.h). */
	sl_sup_stat_end(c->th->proc, c->rules | c->conns_rules, !c->refused, c->delayed_rules,
			c->waited_ns);
	if (c->granted)
		sl_sup_refund(s, c, UINT64_MAX);
	sl_sup_conns_drop(c);
	if (c->dup >= 0)
		close(c->dup);
	c->dup = -1;
	c->used = false;
	c->th->refs--;
	s->n_calls--;
	while (s->calls_hi > 0 && !s->calls[s->calls_hi - 1].used)
		s->calls_hi--;
}

bool sl_sup_step(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns)
{
	switch (c->kind) {
	case SL_SUP_CONNECT:
		return sl_sup_step_connect(s, c, now_ns);
	case SL_SUP_SEND:
		return sl_sup_step_send(s, c, now_ns);
	case SL_SUP_RECV:
		return sl_sup_step_recv(s, c, now_ns);
	case SL_SUP_ACCEPT:
		return sl_sup_step_accept(s, c, now_ns);
	default:
		return true;
	}
}

/* A new notification: dispatch it to its handler. */
static void on_notification(struct sl_sup *s)
{
	struct seccomp_notif req;
	memset(&req, 0, sizeof(req)); /* the kernel wants it zeroed */
	if (ioctl(s->listener, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0)
		return; /* ENOENT: the caller is already gone; EINTR */
	/* The same thread again: its older held call was abandoned. */
	for (unsigned i = 0; i < s->calls_hi; i++)
		if (s->calls[i].used && s->calls[i].req.pid == req.pid)
			sl_sup_call_free(s, &s->calls[i]);
	switch (req.data.nr) {
	case SYS_socket:
		sl_sup_on_socket(s, &req);
		break;
	case SYS_connect:
		sl_sup_on_connect(s, &req);
		break;
	case SYS_accept:
	case SYS_accept4:
		sl_sup_on_accept(s, &req);
		break;
	case SYS_write:
	case SYS_writev:
	case SYS_sendto:
	case SYS_sendmsg:
	case SYS_sendmmsg:
	case SYS_pwritev2:
		sl_sup_on_send(s, &req);
		break;
	case SYS_read:
	case SYS_readv:
	case SYS_recvfrom:
	case SYS_recvmsg:
	case SYS_recvmmsg:
	case SYS_preadv2:
		sl_sup_on_recv(s, &req);
		break;
	case SYS_sendfile:
	case SYS_splice:
		sl_sup_on_sendfile(s, &req);
		break;
	default:
		sl_sup_continue(s, req.id);
		break;
	}
}

/* Re-validate held calls; forget exited threads and processes. */
static void sweep(struct sl_sup *s)
{
	for (unsigned i = 0; i < s->calls_hi; i++)
		if (s->calls[i].used && !sl_sup_valid(s, s->calls[i].req.id))
			sl_sup_call_free(s, &s->calls[i]);
	sl_sup_conns_sweep(s);
	sl_sup_target_sweep(s);
}

static void on_signal(int sfd, pid_t child, int *child_status)
{
	struct signalfd_siginfo si;
	while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGHUP)
			kill(child, (int)si.ssi_signo); /* a program already reaped: ESRCH */
	}
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (pid == child)
			*child_status = status;
}

int sl_sup_loop(struct sl_sup *s, pid_t child, const sigset_t *oldmask)
{
	(void)oldmask;
	s->calls = calloc(SL_SUP_CALLS_MAX, sizeof(*s->calls));
	struct pollfd *pfd = calloc(SL_SUP_CALLS_MAX + 2, sizeof(*pfd));
	unsigned *pfd_call = calloc(SL_SUP_CALLS_MAX + 2, sizeof(*pfd_call));
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGCHLD);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGQUIT);
	int sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	if (s->calls == NULL || pfd == NULL || pfd_call == NULL || sfd < 0) {
		perror("sluice: --supervise");
		kill(child, SIGKILL);
		return -1;
	}
	int child_status = -1;
	bool hup = false;
	uint64_t next_sweep = sl_sup_now_ns() + SL_SUP_SWEEP_NS;

	while (!(hup && child_status != -1)) {
		uint64_t now = sl_sup_now_ns();
		uint64_t next = next_sweep;
		/* Calls whose deadline came. */
		for (unsigned i = 0; i < s->calls_hi; i++) {
			struct sl_sup_call *c = &s->calls[i];
			if (!c->used || c->due_ns > now)
				continue; /* an IO wait's due_ns is its timeout */
			c->wait = SL_SUP_WAIT_NONE;
			if (sl_sup_step(s, c, now))
				sl_sup_call_free(s, c);
			else
				now = sl_sup_now_ns();
		}
		unsigned n = 0;
		pfd[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
		pfd[n++] = (struct pollfd){.fd = hup ? -1 : s->listener, .events = POLLIN};
		for (unsigned i = 0; i < s->calls_hi; i++) {
			struct sl_sup_call *c = &s->calls[i];
			if (!c->used)
				continue;
			if (c->due_ns < next)
				next = c->due_ns;
			if (c->wait == SL_SUP_WAIT_IO) {
				pfd_call[n] = i;
				pfd[n++] = (struct pollfd){.fd = c->dup, .events = c->events};
			}
		}
		now = sl_sup_now_ns();
		uint64_t wait = next > now ? next - now : 0;
		struct timespec ts = {(time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull)};
		int r = ppoll(pfd, n, &ts, NULL);
		if (r < 0 && errno != EINTR) {
			perror("sluice: --supervise: ppoll");
			break;
		}
		if (r <= 0)
			goto timers;
		if (pfd[0].revents & POLLIN)
			on_signal(sfd, child, &child_status);
		if (pfd[1].revents & POLLIN)
			on_notification(s);
		else if (pfd[1].revents & (POLLHUP | POLLERR))
			hup = true;
		now = sl_sup_now_ns();
		for (unsigned k = 2; k < n; k++) {
			struct sl_sup_call *c = &s->calls[pfd_call[k]];
			if (pfd[k].revents == 0 || !c->used || c->wait != SL_SUP_WAIT_IO ||
			    c->dup != pfd[k].fd)
				continue;
			c->wait = SL_SUP_WAIT_NONE;
			if (sl_sup_step(s, c, now))
				sl_sup_call_free(s, c);
		}
	timers:
		now = sl_sup_now_ns();
		if (now >= next_sweep) {
			sweep(s);
			next_sweep = now + SL_SUP_SWEEP_NS;
			if (child_status == -1)
				on_signal(sfd, child, &child_status);
		}
	}
	/* Reap what is left (a subreaper inherits orphans). */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	for (unsigned i = 0; i < s->calls_hi; i++)
		if (s->calls[i].used)
			sl_sup_call_free(s, &s->calls[i]);
	sl_sup_target_free(s);
	free(s->calls);
	free(pfd);
	free(pfd_call);
	close(sfd);
	close(s->listener);
	return child_status;
}
