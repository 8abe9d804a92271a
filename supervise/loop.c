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
#include "loop.h"
#include "calls.h"
#include "conns.h"
#include "filter.h"
#include "io.h"
#include "notif.h"
#include "sock.h"
#include "source.h"
#include "state.h"
#include "target.h"

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

/* Each trapped call's handler (filter.c's table says which). */
static void (*const handler[])(struct sl_sup *, const struct seccomp_notif *) = {
	[SL_SUP_ON_SEND] = sl_sup_on_send,         [SL_SUP_ON_RECV] = sl_sup_on_recv,
	[SL_SUP_ON_SENDFILE] = sl_sup_on_sendfile, [SL_SUP_ON_SOCKET] = sl_sup_on_socket,
	[SL_SUP_ON_ACCEPT] = sl_sup_on_accept,     [SL_SUP_ON_CONNECT] = sl_sup_on_connect,
	[SL_SUP_ON_DUP] = sl_sup_on_dup,
};

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
	const enum sl_sup_on on = sl_sup_on_of((long)req.data.nr);
	if (on == SL_SUP_ON_NONE)
		sl_sup_continue(s, req.id);
	else
		handler[on](s, &req);
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

void sl_sup_signals(sigset_t *set)
{
	sigfillset(set);
	/* Not catchable, or the launcher's own faults: left as they are. */
	const int keep[] = {SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS,
			    /* Job control: the launcher stops and continues with
			     * the program's process group, as a shell expects. */
			    SIGTSTP, SIGTTIN, SIGTTOU, SIGCONT};
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
		sigdelset(set, keep[i]);
}

/* Every signal but SIGCHLD (sl_sup_signals) is passed on to the program,
 * unless the kernel sent it (SI_KERNEL: a terminal's Ctrl-C, Ctrl-\, a
 * hangup, a window change), which it sent to the program's process group,
 * the program included: passed on it would arrive twice. SIGCHLD reaps. */
static void on_signal(int sfd, pid_t child, int *child_status)
{
	struct signalfd_siginfo si;
	while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		/* Not one the launcher raised itself (a SIGPIPE of its own
		 * write to a closed stderr). */
		if (si.ssi_signo != SIGCHLD && si.ssi_code != SI_KERNEL &&
		    si.ssi_pid != (uint32_t)getpid())
			kill(child, (int)si.ssi_signo); /* a program already reaped: ESRCH */
	}
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (pid == child)
			*child_status = status;
}

/* A call held while its socket is not ready (SL_SUP_WAIT_IO) would have
 * been interrupted natively by a signal its thread catches (alarm(1) over
 * an idle connection, a server's SIGTERM handler): with WAIT_KILLABLE_RECV
 * the kernel keeps such a signal until the answer, so its thread's pending
 * signals are looked at, 10 ms after the wait began, then twice as long
 * each time up to every 100 ms. */
#define SIG_GAP_MIN_NS 10000000ull
#define SIG_GAP_MAX_NS 100000000ull

static void signals(struct sl_sup *s, uint64_t now)
{
	if (!s->feat.wait_killable)
		return; /* without it the signal itself cancels the notification */
	for (unsigned i = 0; i < s->calls_hi; i++) {
		struct sl_sup_call *c = &s->calls[i];
		if (!c->used || c->wait != SL_SUP_WAIT_IO || c->sig_ns == 0 || c->sig_ns > now)
			continue;
		if (c->th->tid > 0 && sl_sup_signal_waiting(c->th->tid)) {
			if (sl_sup_interrupt(s, c))
				sl_sup_call_free(s, c);
			continue;
		}
		c->sig_gap_ns = c->sig_gap_ns * 2 < SIG_GAP_MAX_NS ? c->sig_gap_ns * 2
								   : SIG_GAP_MAX_NS;
		c->sig_ns = now + c->sig_gap_ns;
	}
}

int sl_sup_loop(struct sl_sup *s, pid_t child, const sigset_t *oldmask)
{
	(void)oldmask;
	s->calls = calloc(SL_SUP_CALLS_MAX, sizeof(*s->calls));
	struct pollfd *pfd = calloc(SL_SUP_CALLS_MAX + 2, sizeof(*pfd));
	unsigned *pfd_call = calloc(SL_SUP_CALLS_MAX + 2, sizeof(*pfd_call));
	sigset_t sigs;
	sl_sup_signals(&sigs);
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
			c->sig_ns = 0;
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
				pfd[n++] = (struct pollfd){.fd = c->wait_fd >= 0 ? c->wait_fd
										 : c->dup,
							   .events = c->events};
				if (c->sig_ns == 0) {
					c->sig_gap_ns = SIG_GAP_MIN_NS;
					c->sig_ns = now + c->sig_gap_ns;
				}
				if (c->sig_ns < next)
					next = c->sig_ns;
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
			    (c->wait_fd >= 0 ? c->wait_fd : c->dup) != pfd[k].fd)
				continue;
			c->wait = SL_SUP_WAIT_NONE;
			c->sig_ns = 0;
			if (sl_sup_step(s, c, now))
				sl_sup_call_free(s, c);
		}
	timers:
		now = sl_sup_now_ns();
		signals(s, now);
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
