/* SPDX-License-Identifier: MIT */
/*
 * sock.c - socket, connect and accept of supervised programs.
 *
 * socket() and accept()/accept4() are performed by the supervisor whenever a
 * send or receive rule could apply to the new socket: it creates (accepts)
 * the socket itself and installs it in the program with
 * SECCOMP_IOCTL_NOTIF_ADDFD at a free fd >= SL_SUP_FD_BASE (place.c). The
 * filter traps fd-based I/O only for those numbers, so a program's file
 * and pipe I/O never leaves the kernel. When no number is free below the
 * program's RLIMIT_NOFILE, the socket takes the lowest free fd and its
 * transfers pass unthrottled (warned once per process).
 *
 * connect() is held until the rule's slot comes and then continues in the
 * kernel (SECCOMP_USER_NOTIF_FLAG_CONTINUE), for blocking and non-blocking
 * sockets alike: Go's connect is never answered with a fabricated EAGAIN or
 * EINPROGRESS. A conns:adaptive rule takes no slot there: the connection
 * it matches has client turns (client.c), registered once the connect goes
 * on; so a stream socket such a rule may match is placed high when it is
 * made, whatever the other rules. accept() waits for a pending connection
 * first (a non-blocking listener with none gets the kernel's EAGAIN), then
 * for the rule's slot, then accepts. A connection a conns:adaptive rule accepts is
 * placed high whatever the other rules (its turns are its sends and
 * receives, turn.c), and one it refuses is reset. So is one that system
 * protection (load1=, cpu=, rt=) follows: once the rules' own decisions
 * admitted it, after the real accept, each rule's gate takes a slot
 * (gate.c) or refuses it, never waiting; refused, it is reset and every
 * slot and unit the accept took is given back.
 */
#include "sock.h"
#include "gate.h"
#include "stat.h"
#include "place.h"
#include "kernel.h"
#include "filter.h"
#include "admit.h"
#include "calls.h"
#include "client.h"
#include "conns.h"
#include "notif.h"
#include "state.h"
#include "target.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

void sl_sup_classify(int fd, unsigned *fam, unsigned *type, struct sl_addr *peer)
{
	int v = 0;
	socklen_t len = sizeof(v);
	*fam = getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) == 0 ? sl_addr_fam_bit(v) : 0;
	len = sizeof(v);
	*type = getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) == 0 ? sl_addr_type_bit(v) : 0;
	if (peer != NULL) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		memset(peer, 0, sizeof(*peer));
		if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
			sl_addr_from(peer, (struct sockaddr *)&ss, sl);
	}
}

/* Whether a new socket of this kind must be placed high. */
static bool wants_place(const struct sl_sup *s, unsigned fam, unsigned type)
{
	return s->traps.place && fam != 0 && type != 0 &&
	       (sl_sup_may_match(s, SL_OP_SEND, fam, type) ||
		sl_sup_may_match(s, SL_OP_RECV, fam, type));
}

/* Whether process p is in another network namespace than the supervisor
 * (it called unshare(CLONE_NEWNET) or setns): a socket made here would be
 * in ours, and reach what the program's namespace does not. An unprivileged
 * supervisor cannot enter the program's (setns needs CAP_SYS_ADMIN in its
 * own user namespace), so such sockets are the kernel's, unthrottled,
 * with one warning. Not known (/proc/PID/ns unreadable): the same. */
static bool other_netns(struct sl_sup_proc *p)
{
	static struct stat own;
	struct stat st;
	if (own.st_ino == 0 && stat("/proc/self/ns/net", &own) != 0)
		return false;
	if (p->fddir < 0 || fstatat(p->fddir, "../ns/net", &st, 0) != 0)
		return false;
	if (st.st_ino == own.st_ino && st.st_dev == own.st_dev)
		return false;
	if (!p->netns_warned)
		sl_sup_warn("process %d (%s) is in another network namespace: its new sockets are "
			    "made there by the kernel and pass unthrottled",
			    (int)p->tgid, p->comm);
	p->netns_warned = true;
	return true;
}

void sl_sup_on_socket(struct sl_sup *s, const struct seccomp_notif *req)
{
	int domain = (int)req->data.args[0], type = (int)req->data.args[1];
	int proto = (int)req->data.args[2];
	const unsigned fam = sl_addr_fam_bit(domain), kind = sl_addr_type_bit(type);
	if (!wants_place(s, fam, kind) && sl_sup_client_rules(s, fam, kind) == 0) {
		sl_sup_continue(s, req->id);
		return;
	}
	struct sl_sup_thread *th = sl_sup_thread_of(s, (pid_t)req->pid);
	if (th == NULL || th->proc->pass || other_netns(th->proc)) {
		sl_sup_continue(s, req->id);
		return;
	}
	int fd = socket(domain, type | SOCK_CLOEXEC, proto);
	if (fd < 0) {
		sl_sup_answer(s, req->id, 0, errno);
		return;
	}
	int r = sl_sup_place(s, th, req->id, fd, (type & SOCK_CLOEXEC) != 0);
	close(fd);
	if (r < 0 && r != -ENOENT) /* never left unanswered: the thread would hang */
		sl_sup_answer(s, req->id, 0, -r);
}

/* The socket a connect or an accept names (args[0]): the calling thread,
 * our duplicate of the fd, its family and type bits. */
struct target {
	struct sl_sup_thread *th;
	int dup;
	unsigned fam, type;
};

/* Fill *t for notification req; false after letting the call continue
 * when the thread passes (gone, SLUICE_ONLY/SKIP) or the fd is not there
 * (the kernel gives the caller EBADF). */
static bool target_of(struct sl_sup *s, const struct seccomp_notif *req, struct target *t)
{
	t->th = sl_sup_thread_of(s, (pid_t)req->pid);
	t->dup = t->th == NULL || t->th->proc->pass
			 ? -1
			 : sl_sup_getfd(s, t->th, (int)req->data.args[0]);
	if (t->dup < 0)
		sl_sup_continue(s, req->id);
	else
		sl_sup_classify(t->dup, &t->fam, &t->type, NULL);
	return t->dup >= 0;
}

void sl_sup_on_connect(struct sl_sup *s, const struct seccomp_notif *req)
{
	struct target t;
	if (!target_of(s, req, &t))
		return;
	/* A TCP socket already connecting or connected (a connect interrupted
	 * by a signal and called again, a polling connect): the kernel answers
	 * it (EALREADY, EISCONN) uncharged, as the shim does. */
	struct tcp_info ti;
	socklen_t til = sizeof(ti);
	bool busy = t.type == SL_TYPE_STREAM && (t.fam & (SL_FAM_INET | SL_FAM_INET6)) &&
		    getsockopt(t.dup, IPPROTO_TCP, TCP_INFO, &ti, &til) == 0 &&
		    ti.tcpi_state != TCP_CLOSE;
	struct stat st; /* for client turns: the program may close it once it goes on */
	const ino_t ino = fstat(t.dup, &st) == 0 ? st.st_ino : 0;
	close(t.dup);
	if (busy) {
		sl_sup_continue(s, req->id);
		return;
	}
	struct sockaddr_storage ss;
	size_t len = (size_t)(uint32_t)req->data.args[2];
	if (len > sizeof(ss))
		len = sizeof(ss);
	memset(&ss, 0, sizeof(ss));
	ssize_t got = len >= sizeof(sa_family_t)
			      ? sl_sup_mem_read((pid_t)req->pid, req->data.args[1], &ss, len)
			      : -EINVAL;
	if (got != (ssize_t)len || !sl_sup_valid(s, req->id) || ss.ss_family == AF_UNSPEC) {
		sl_sup_continue(s, req->id); /* EFAULT, EINVAL, a dissolve: the kernel's */
		return;
	}
	struct sl_addr a;
	sl_addr_from(&a, (struct sockaddr *)&ss, (socklen_t)len);
	uint32_t rules = sl_sup_match(s, SL_OP_CONNECT, t.fam, t.type, &a);
	/* conns:adaptive rules take no slot at connect: the connection has
	 * client turns (client.c), each request taking one. */
	uint32_t conns = sl_sup_match(s, SL_OP_CONNS, t.fam, t.type, &a);
	const uint32_t client = conns & sl_sup_client_rules(s, t.fam, t.type);
	conns &= ~s->traps.turns;
	struct sl_sup_call *c = rules | conns ? sl_sup_call_new(s, req, t.th) : NULL;
	if (c == NULL) {
		const int fd = (int)(uint32_t)req->data.args[0];
		if (sl_sup_continue(s, req->id) == 0 && client != 0)
			sl_sup_client_connected(s, t.th->proc, fd, ino, client, sl_sup_now_ns());
		return;
	}
	c->kind = SL_SUP_CONNECT;
	c->rules = rules;
	c->conns_rules = conns;
	c->client_rules = client;
	c->turn_ino = ino;
	c->peer = a;
	if (sl_sup_step_connect(s, c, sl_sup_now_ns()))
		sl_sup_call_free(s, c);
}

/* Take one unit for a connect or an accept: false while it must wait (the
 * call's deadline is set), true when it may go on or was refused (*err). */
static bool take_one(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns, int *err)
{
	*err = 0;
	if (c->granted)
		return sl_sup_call_wait(c, SL_SUP_GO, now_ns,
					c->go_ns > now_ns ? c->go_ns - now_ns : 0);
	uint64_t wait = 0;
	enum sl_sup_verdict v = sl_sup_admit(s, c, 0, 1, now_ns, &wait, err);
	if (v == SL_SUP_GO)
		c->granted = true; /* even for dry-run rules: the wait is over */
	return v == SL_SUP_REFUSE || sl_sup_call_wait(c, v, now_ns, wait);
}

/* A slot of the call's conns rules: false while it must wait (deadline
 * set), true to go on (or refused: *err). */
static bool take_slot(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns, int *err)
{
	uint64_t wait = 0;
	switch (sl_sup_conns_take(s, c, now_ns, &wait, err)) {
	case SL_SUP_RETRY:
		c->due_ns = now_ns + wait;
		c->wait = SL_SUP_WAIT_TIME;
		return false;
	default:
		return true;
	}
}

bool sl_sup_step_connect(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns)
{
	int err;
	if (!take_one(s, c, now_ns, &err))
		return false;
	if (err == 0 && !take_slot(s, c, now_ns, &err))
		return false; /* the rate's unit stays taken while the slot is awaited */
	c->granted = false;   /* the unit is used, whatever the kernel says */
	if (err != 0) {
		sl_sup_answer(s, c->req.id, 0, err);
		return true;
	}
	/* The socket's inode first: once the call goes on, the program may
	 * fork and close its copy before we look. */
	const int fd = (int)(uint32_t)c->req.data.args[0];
	const ino_t ino = c->conns_held != 0 ? sl_sup_fd_ino(c->th->proc, fd) : 0;
	if (sl_sup_continue(s, c->req.id) != 0)
		return true;
	sl_sup_conns_hold(s, c, fd, ino, sl_sup_now_ns());
	if (c->client_rules != 0) /* the socket the connect named when it came */
		sl_sup_client_connected(s, c->th->proc, fd, c->turn_ino, c->client_rules,
					sl_sup_now_ns());
	return true;
}

void sl_sup_on_accept(struct sl_sup *s, const struct seccomp_notif *req)
{
	struct target t;
	if (!target_of(s, req, &t))
		return;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct sl_addr local = {0};
	if (getsockname(t.dup, (struct sockaddr *)&ss, &sl) == 0)
		sl_addr_from(&local, (struct sockaddr *)&ss, sl);
	uint32_t rules = sl_sup_match(s, SL_OP_ACCEPT, t.fam, t.type, &local);
	uint32_t conns = sl_sup_match(s, SL_OP_CONNS, t.fam, t.type, &local);
	int flags = req->data.nr == SYS_accept4 ? (int)req->data.args[3] : 0;
	int accmode = 0;
	socklen_t il = sizeof(accmode);
	bool listening = getsockopt(t.dup, SOL_SOCKET, SO_ACCEPTCONN, &accmode, &il) == 0 &&
			 accmode;
	struct sl_sup_call *c = NULL;
	if (listening && (rules != 0 || conns != 0 || wants_place(s, t.fam, t.type)) &&
	    (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) == 0)
		c = sl_sup_call_new(s, req, t.th);
	if (c == NULL) {
		close(t.dup);
		sl_sup_continue(s, req->id);
		return;
	}
	c->kind = SL_SUP_ACCEPT;
	c->rules = rules;
	c->conns_rules = conns;
	c->dup = t.dup;
	c->flags = flags;
	c->nonblock = (fcntl(t.dup, F_GETFL) & O_NONBLOCK) != 0;
	c->name_ptr = req->data.args[1];
	c->namelen_ptr = req->data.args[2];
	if (sl_sup_step_accept(s, c, sl_sup_now_ns()))
		sl_sup_call_free(s, c);
}

/* accept4 on our duplicate of a listener without blocking the supervisor
 * for long: it runs only after poll said a connection is pending, and a
 * blocking listener's SO_RCVTIMEO (which bounds accept) is set to 1 us (one
 * jiffy, the kernel rounds up) around the call, in case another, unsupervised
 * process took the connection first. Supervised accepts on the listener are
 * all held by this thread meanwhile, so none of them sees the change. */
static int accept_now(int dup, bool nonblock, struct sockaddr_storage *ss, socklen_t *sl, int flags)
{
	struct timeval old, tiny = {0, 1};
	socklen_t ol = sizeof(old);
	bool swap = !nonblock && getsockopt(dup, SOL_SOCKET, SO_RCVTIMEO, &old, &ol) == 0 &&
		    setsockopt(dup, SOL_SOCKET, SO_RCVTIMEO, &tiny, sizeof(tiny)) == 0;
	int fd = accept4(dup, (struct sockaddr *)ss, sl, flags | SOCK_CLOEXEC);
	int e = errno;
	if (swap)
		setsockopt(dup, SOL_SOCKET, SO_RCVTIMEO, &old, sizeof(old));
	errno = e;
	return fd;
}

/* System protection of the connection an accept just made, its rules'
 * decisions taken: a slot of the gate of each of its accept rules and of
 * the conns rules whose slot it holds (c->gates_held). 0, or the errno of
 * the rule whose gate refuses it (what the accept took is then given
 * back, the call counted refused). */
static int take_gates(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns)
{
	const uint32_t sys = (c->rules | c->conns_held) & s->traps.gates;
	if (sys == 0)
		return 0;
	int who;
	c->gates_held = sl_sup_gates_take(s, c->th->proc, sys, now_ns, sl_sup_conns_sweep, &who);
	if (who < 0)
		return 0;
	c->granted = true; /* the rate rules' units (take_one) */
	sl_sup_refund(s, c, UINT64_MAX);
	sl_sup_conns_drop(s, c);
	c->refused = true;
	sl_sup_stat_refused(c->th->proc, (unsigned)who);
	return sl_rule_errno(&s->policy.rules[who], SL_OP_ACCEPT);
}

bool sl_sup_step_accept(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns)
{
	/* First a pending connection. */
	if (!c->granted) {
		struct pollfd p = {.fd = c->dup, .events = POLLIN};
		if (poll(&p, 1, 0) <= 0) {
			if (c->nonblock) {
				sl_sup_answer(s, c->req.id, 0,
					      EAGAIN); /* the kernel's own answer */
				return true;
			}
			c->wait = SL_SUP_WAIT_IO;
			c->events = POLLIN;
			c->due_ns = UINT64_MAX;
			return false;
		}
	}
	int err;
	if (!take_one(s, c, now_ns, &err))
		return false;
	if (err == 0 && !take_slot(s, c, now_ns, &err))
		return false;
	c->granted = false;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = accept_now(c->dup, c->nonblock, &ss, &sl, c->flags & SOCK_NONBLOCK);
	if (fd < 0) {
		if ((errno == EAGAIN || errno == EWOULDBLOCK) && !c->nonblock) {
			c->wait = SL_SUP_WAIT_IO; /* another process took it: wait again */
			c->events = POLLIN;
			c->due_ns = UINT64_MAX;
			return false;
		}
		sl_sup_answer(s, c->req.id, 0, errno);
		return true;
	}
	/* Reset when refused by an adaptive limit or a gate: the client does
	 * not wait. */
	bool reset = (c->conns_rules & s->traps.turns) != 0;
	if (err == 0 && (err = take_gates(s, c, now_ns)) != 0)
		reset = true;
	if (err != 0) { /* refused: the connection is closed, like policing */
		if (reset) {
			struct linger lg = {.l_onoff = 1, .l_linger = 0};
			setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		}
		close(fd);
		sl_sup_answer(s, c->req.id, 0, err);
		return true;
	}
	/* The peer's address goes into the caller's buffer before the fd is
	 * installed, which answers the call. */
	if (c->name_ptr != 0 && c->namelen_ptr != 0) {
		socklen_t want = 0;
		if (sl_sup_mem_read((pid_t)c->req.pid, c->namelen_ptr, &want, sizeof(want)) !=
			    (ssize_t)sizeof(want) ||
		    !sl_sup_valid(s, c->req.id) ||
		    sl_sup_mem_write((pid_t)c->req.pid, c->name_ptr, &ss, want < sl ? want : sl) <
			    0 ||
		    sl_sup_mem_write((pid_t)c->req.pid, c->namelen_ptr, &sl, sizeof(sl)) < 0) {
			close(fd);
			sl_sup_answer(s, c->req.id, 0, EFAULT);
			return true;
		}
	}
	unsigned fam, type;
	sl_sup_classify(fd, &fam, &type, NULL);
	int placed;
	/* High too under conns:adaptive or system protection: its sends and
	 * receives are its turns. */
	if (wants_place(s, fam, type) || (c->conns_rules & s->traps.turns) ||
	    ((c->rules | c->conns_rules) & s->traps.gates)) {
		placed = sl_sup_place(s, c->th, c->req.id, fd, (c->flags & SOCK_CLOEXEC) != 0);
	} else {
		struct seccomp_notif_addfd add = {.id = c->req.id,
						  .flags = SECCOMP_ADDFD_FLAG_SEND,
						  .srcfd = (uint32_t)fd,
						  .newfd_flags = (c->flags & SOCK_CLOEXEC)
									 ? O_CLOEXEC
									 : 0};
		placed = ioctl(s->listener, SECCOMP_IOCTL_NOTIF_ADDFD, &add);
	}
	struct stat st; /* before the answer: the program may fork and close it */
	const ino_t ino = fstat(fd, &st) == 0 ? st.st_ino : 0;
	close(fd);
	if (placed < 0 && placed != -ENOENT) /* never left unanswered */
		sl_sup_answer(s, c->req.id, 0, -placed);
	sl_sup_conns_hold(s, c, placed, ino, now_ns); /* fd < 0: its slot goes back */
	return true;
}

/* The fd a dup or an F_DUPFD from `min` would take in p: the lowest free
 * one (-1 if it cannot be told). */
static int lowest_free(const struct sl_sup_proc *p, int min)
{
	for (int n = min; p->fddir >= 0 && n < SL_SUP_FD_BASE; n++) {
		char name[16];
		struct stat st;
		snprintf(name, sizeof(name), "%d", n);
		if (fstatat(p->fddir, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			return errno == ENOENT ? n : -1;
	}
	return -1;
}

void sl_sup_on_dup(struct sl_sup *s, const struct seccomp_notif *req)
{
	struct target t;
	if (!target_of(s, req, &t))
		return;
	close(t.dup);
	const long nr = (long)req->data.nr;
	struct sl_sup_proc *p = t.th->proc;
	const char *how = nr == SYS_dup     ? "dup"
			  : nr == SYS_fcntl ? "fcntl(F_DUPFD)"
			  : nr == SYS_dup2  ? "dup2"
					    : "dup3";
	int to = nr == SYS_dup2 || nr == SYS_dup3 ? (int)req->data.args[1]
		 : nr == SYS_fcntl                ? lowest_free(p, (int)req->data.args[2])
						  : lowest_free(p, 0);
	/* Where the socket lands is trapped (high, or fds 0-2 under
	 * --trap-stdio), or no send or receive rule can match it. */
	bool throttled = wants_place(s, t.fam, t.type);
	bool trapped = (to >= 0 && sl_sup_traps_fd(&s->traps, to)) ||
		       (nr == SYS_fcntl && req->data.args[2] >= SL_SUP_FD_BASE);
	if (throttled && !trapped && !s->moved_warned) {
		char where[32];
		if (to >= 0)
			snprintf(where, sizeof(where), "fd %d", to);
		else
			snprintf(where, sizeof(where), "a lower fd");
		sl_sup_warn(
			"process %d (%s): %s moves socket %d to %s, where its sends and receives "
			"pass unthrottled: supervised mode traps them on fds %d and up%s",
			(int)p->tgid, p->comm, how, (int)(uint32_t)req->data.args[0], where,
			SL_SUP_FD_BASE,
			s->traps.stdio
				? " and 0-2"
				: " (--trap-stdio adds fds 0-2, where inetd-style servers move theirs)");
		s->moved_warned = true; /* once: a forking server moves one in each child */
	}
	sl_sup_continue(s, req->id);
}
