/* SPDX-License-Identifier: MIT */
/*
 * describe.c - a trapped send or receive described for the engine: the
 * program's buffers (its iovecs, read from its memory), the flags, the
 * destination of a sendto/sendmsg, where a receive's source address goes,
 * the socket's family, type and peer, and the rules that match it
 * (engine/match.h). Calls that are not the supervisor's to throttle (not a
 * socket, MSG_PEEK and friends, control messages' continuation, no rule)
 * continue in the kernel from here. Under conns:adaptive rules or system
 * protection a send on a server's connection with turns ends its running
 * turn here, and a receive that may start one is held for its turn step
 * (turn.c) even when no rule matches; so are a send that may start a
 * client's turn (client.c) and a receive that may end it (turn.c).
 */
#include "describe.h"
#include "calls.h"
#include "admit.h"
#include "notif.h"
#include "sock.h"
#include "state.h"
#include "target.h"
#include "turn.h"

#include "iov.h"
#include "match.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

enum parse { PARSE_OK, PARSE_CONTINUE };

static enum parse read_iov(struct sl_sup_call *c, uint64_t ptr, uint64_t n)
{
	if (n == 0 || n > SL_SUP_IOV_MAX)
		return PARSE_CONTINUE; /* nothing to move, or the kernel's EINVAL */
	size_t len = (size_t)n * sizeof(struct iovec);
	if (sl_sup_mem_read((pid_t)c->req.pid, ptr, c->riov, len) != (ssize_t)len)
		return PARSE_CONTINUE; /* the kernel's EFAULT */
	c->niov = (int)n;
	return PARSE_OK;
}

static enum parse read_msghdr(struct sl_sup_call *c, uint64_t ptr, struct msghdr *mh)
{
	if (sl_sup_mem_read((pid_t)c->req.pid, ptr, mh, sizeof(*mh)) != (ssize_t)sizeof(*mh))
		return PARSE_CONTINUE;
	c->msg_ptr = ptr;
	c->cont = mh->msg_controllen > 0;
	return read_iov(c, (uint64_t)(uintptr_t)mh->msg_iov, mh->msg_iovlen);
}

static uint64_t iov_total(const struct sl_sup_call *c)
{
	uint64_t t = 0;
	for (int i = 0; i < c->niov; i++) {
		if (c->riov[i].iov_len > (uint64_t)SSIZE_MAX - t)
			return UINT64_MAX; /* the kernel's EINVAL */
		t += c->riov[i].iov_len;
	}
	return t;
}

static uint64_t sock_timeout(int fd, int opt)
{
	struct timeval tv;
	socklen_t l = sizeof(tv);
	if (getsockopt(fd, SOL_SOCKET, opt, &tv, &l) != 0)
		return 0;
	return (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000u;
}

/* The address a send names (sendto's, sendmsg's msg_name), into c->dest. */
static enum parse read_dest(struct sl_sup_call *c, uint64_t ptr, size_t len)
{
	if (ptr == 0 || len == 0)
		return PARSE_OK;
	c->destlen = len < sizeof(c->dest) ? (socklen_t)len : sizeof(c->dest);
	return sl_sup_mem_read((pid_t)c->req.pid, ptr, &c->dest, c->destlen) == (ssize_t)c->destlen
		       ? PARSE_OK
		       : PARSE_CONTINUE;
}

/* The buffers, flags and address of a send (out) or a receive call. */
static enum parse parse_call(struct sl_sup_call *c, bool out)
{
	const __u64 *a = c->req.data.args;
	const long nr = (long)c->req.data.nr;
	struct msghdr mh;
	c->niov = 1;
	switch (nr) {
	case SYS_write:
	case SYS_read:
		c->riov[0] = (struct iovec){(void *)(uintptr_t)a[1], (size_t)a[2]};
		return PARSE_OK;
	case SYS_sendto:
	case SYS_recvfrom:
		c->riov[0] = (struct iovec){(void *)(uintptr_t)a[1], (size_t)a[2]};
		c->flags = (int)a[3];
		if (out)
			return read_dest(c, a[4], (uint32_t)a[5]);
		c->name_ptr = a[4] != 0 && a[5] != 0 ? a[4] : 0;
		c->namelen_ptr = c->name_ptr != 0 ? a[5] : 0;
		break;
	case SYS_pwritev2:
	case SYS_preadv2:
		if (a[3] != UINT64_MAX || a[5] != 0)
			return PARSE_CONTINUE; /* an offset on a socket: ESPIPE */
		return read_iov(c, a[1], a[2]);
	case SYS_writev:
	case SYS_readv:
		return read_iov(c, a[1], a[2]);
	case SYS_sendmsg:
	case SYS_sendmmsg:
	case SYS_recvmsg:
	case SYS_recvmmsg: {
		const bool mm = nr == SYS_sendmmsg || nr == SYS_recvmmsg;
		if (mm && (uint32_t)a[2] == 0)
			return PARSE_CONTINUE;
		c->flags = (int)(mm ? a[3] : a[2]);
		if (read_msghdr(c, a[1], &mh) != PARSE_OK)
			return PARSE_CONTINUE;
		if (out)
			return read_dest(c, (uint64_t)(uintptr_t)mh.msg_name, mh.msg_namelen);
		c->name_ptr = (uint64_t)(uintptr_t)mh.msg_name;
		c->destlen = mh.msg_name != NULL ? mh.msg_namelen : 0; /* its room */
		break;
	}
	default:
		return PARSE_CONTINUE;
	}
	if (c->flags & (MSG_PEEK | MSG_OOB | MSG_ERRQUEUE | MSG_TRUNC))
		return PARSE_CONTINUE; /* nothing consumed, or not the data stream */
	return PARSE_OK;
}

/* Whether parse_call read the program's memory for this call: write,
 * read, recvfrom and a sendto without an address take everything from the
 * registers. */
static bool reads_memory(const struct seccomp_notif *req)
{
	const long nr = (long)req->data.nr;
	return !(
		nr == SYS_write || nr == SYS_read || nr == SYS_recvfrom ||
		(nr == SYS_sendto && (req->data.args[4] == 0 || (uint32_t)req->data.args[5] == 0)));
}

/* The common start of both families: the call's socket, its rules. Returns
 * the held call, or NULL when the call was let through. */
struct sl_sup_call *sl_sup_describe(struct sl_sup *s, const struct seccomp_notif *req,
				    enum sl_sup_kind kind)
{
	struct sl_sup_thread *th = sl_sup_thread_of(s, (pid_t)req->pid);
	if (th == NULL || th->proc->pass)
		goto pass;
	const int fd = (int)(uint32_t)req->data.args[0];
	int dup = sl_sup_getfd(s, th, fd);
	if (dup < 0)
		goto pass;
	struct stat st;
	struct sl_sup_fdclass *e = sl_sup_fdclass_of(th->proc, fd, true);
	if (fstat(dup, &st) != 0 || !S_ISSOCK(st.st_mode)) {
		if (e != NULL)
			e->valid = false;
		close(dup); /* a file or pipe the program moved up here itself */
		goto pass;
	}
	/* The same socket as last time: its family and type are known. */
	const bool known = e != NULL && e->valid && e->ino == st.st_ino && e->dev == st.st_dev;
	struct sl_sup_call *c = sl_sup_call_new(s, req, th);
	if (c == NULL) {
		close(dup);
		goto pass;
	}
	c->kind = (uint8_t)kind;
	c->dup = dup;
	enum parse p = parse_call(c, kind == SL_SUP_SEND);
	/* The memory read above is the calling thread's only if its call is
	 * still waiting (its tid cannot have been reused then); nothing read,
	 * nothing to check (the fd came through the thread's pidfd). */
	if (p != PARSE_OK || (reads_memory(req) && !sl_sup_valid(s, req->id)))
		goto pass_call;
	c->total = iov_total(c);
	if (c->total == 0 || c->total == UINT64_MAX)
		goto pass_call;
	unsigned fam, type;
	/* The peer is looked up only when a rule of the operation filters on
	 * an address or keeps a limiter per peer: one system call less on
	 * every other transfer. */
	enum sl_op op = kind == SL_SUP_SEND ? SL_OP_SEND : SL_OP_RECV;
	const bool needs_addr = sl_match_needs_addr(&s->policy, op);
	if (known) {
		fam = e->fam;
		type = e->type;
		if (needs_addr) {
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			memset(&c->peer, 0, sizeof(c->peer));
			if (getpeername(dup, (struct sockaddr *)&ss, &sl) == 0)
				sl_addr_from(&c->peer, (struct sockaddr *)&ss, sl);
		}
	} else {
		sl_sup_classify(dup, &fam, &type, needs_addr ? &c->peer : NULL);
	}
	if (c->destlen > 0 && kind == SL_SUP_SEND)
		sl_addr_from(&c->peer, (struct sockaddr *)&c->dest, c->destlen);
	c->rules = sl_sup_match(s, op, fam, type, &c->peer);
	if (e != NULL && !known) {
		memset(e, 0, sizeof(*e));
		e->fam = fam;
		e->type = type;
		e->dev = st.st_dev;
		e->ino = st.st_ino;
		e->valid = true;
	}
	/* conns:adaptive, system protection: a send ends a server
	 * connection's turn, or may start a client's (client.c); a receive
	 * may start a server's turn or end a client's (turn.c), matched by
	 * rules or not. */
	if (sl_sup_traps_turns(&s->traps) && type == SL_TYPE_STREAM) {
		if (kind == SL_SUP_SEND ? sl_sup_turn_send(s, st.st_ino, c->start_ns)
					: sl_sup_turn_wants(s, st.st_ino))
			c->turn_ino = st.st_ino;
	}
	if (c->rules == 0 && c->turn_ino == 0)
		goto pass_call;
	const bool file_nonblock = (fcntl(dup, F_GETFL) & O_NONBLOCK) != 0;
	if (e != NULL) {
		e->nonblock = file_nonblock;
		e->uses = 0;
		if (file_nonblock)
			e->sndtimeo_ok = false;
		/* For the fast send (below): the thread's fd directory, opened
		 * now that the thread is known to live. */
		if (kind == SL_SUP_SEND)
			sl_sup_thread_fddir(th);
	}
	c->stream = type == SL_TYPE_STREAM;
	c->nonblock = file_nonblock || (c->flags & MSG_DONTWAIT);
	if (!c->nonblock)
		c->timeout_ns = sock_timeout(dup, kind == SL_SUP_SEND ? SO_SNDTIMEO : SO_RCVTIMEO);
	if (e != NULL && kind == SL_SUP_SEND && !file_nonblock && !(c->flags & MSG_DONTWAIT)) {
		e->sndtimeo_ns = c->timeout_ns;
		e->sndtimeo_ok = true;
	}
	return c;
pass_call:
	sl_sup_call_free(s, c);
pass:
	sl_sup_continue(s, req->id);
	return NULL;
}

/*
 * The fast send: a write, or a send/sendto without an address, of at most
 * one piece, on a blocking stream socket the supervisor has already looked
 * at (its class entry, filled by sl_sup_describe), when no send rule needs the
 * peer. It takes the call's whole length from the rules (waiting for it if
 * it must) and lets the call continue in the kernel: no duplicate of the
 * socket, no copy. The length comes from the registers, so the kernel
 * moves at most what was charged. One lookup in the thread's fd directory
 * checks both that the fd still names the socket of the entry (the same
 * inode) and that the thread is the one the entry was made for (the
 * directory of an exited thread finds nothing, whoever has its tid now).
 * Returns the call, held, for sl_sup_step_send; NULL with *answered when
 * it continued (no rule matches), NULL alone when the full path must
 * describe it.
 */
struct sl_sup_call *sl_sup_describe_fast(struct sl_sup *s, const struct seccomp_notif *req,
					 bool *answered)
{
	const __u64 *a = req->data.args;
	const long nr = (long)req->data.nr;
	int flags = 0;
	if (nr == SYS_sendto) {
		if (a[4] != 0 && (uint32_t)a[5] != 0)
			return NULL;
		flags = (int)a[3];
	} else if (nr != SYS_write) {
		return NULL;
	}
	if (flags & ~(MSG_NOSIGNAL | MSG_MORE | MSG_EOR))
		return NULL; /* MSG_DONTWAIT, MSG_OOB...: the full path */
	const uint64_t len = a[2];
	if (len == 0 || len > SL_SUP_PIECE_MAX)
		return NULL;
	if (s->send_needs_addr == 0)
		s->send_needs_addr = sl_match_needs_addr(&s->policy, SL_OP_SEND) ? 2 : 1;
	if (s->send_needs_addr != 1)
		return NULL;
	struct sl_sup_thread *th = sl_sup_thread_peek(s, (pid_t)req->pid);
	if (th == NULL || th->fddir < 0 || th->proc->pass)
		return NULL;
	const int fd = (int)(uint32_t)a[0];
	struct sl_sup_fdclass *e = sl_sup_fdclass_of(th->proc, fd, false);
	if (e == NULL || !e->valid || e->nonblock || !e->sndtimeo_ok || e->type != SL_TYPE_STREAM ||
	    ++e->uses >= SL_SUP_FDCLASS_REFRESH)
		return NULL;
	char name[12], *q = name + sizeof(name);
	*--q = '\0';
	for (unsigned v = (unsigned)fd;; v /= 10) {
		*--q = (char)('0' + v % 10);
		if (v < 10)
			break;
	}
	struct stat st;
	if (fstatat(th->fddir, q, &st, 0) != 0 || !S_ISSOCK(st.st_mode) || st.st_ino != e->ino ||
	    st.st_dev != e->dev) {
		e->valid = false;
		return NULL;
	}
	/* A server's answer: the connection's turn ends. A client's request:
	 * the full path, which may hold it for its turn's slots. */
	if (sl_sup_traps_turns(&s->traps) && sl_sup_turn_send(s, st.st_ino, sl_sup_now_ns()))
		return NULL;
	const struct sl_addr none = {0};
	const uint32_t rules = sl_sup_match(s, SL_OP_SEND, e->fam, e->type, &none);
	if (rules == 0) {
		sl_sup_continue(s, req->id); /* no rule: the kernel's */
		*answered = true;
		return NULL;
	}
	struct sl_sup_call *c = sl_sup_call_new(s, req, th);
	if (c == NULL)
		return NULL;
	c->kind = SL_SUP_SEND;
	c->rules = rules;
	c->flags = flags;
	c->stream = true;
	c->niov = 1;
	c->riov[0] = (struct iovec){(void *)(uintptr_t)a[1], (size_t)len};
	c->total = len;
	c->timeout_ns = e->sndtimeo_ns;
	if (len > sl_sup_piece_cap(s, c, c->start_ns)) {
		c->rules = 0; /* nothing counted: the full path takes it */
		sl_sup_call_free(s, c);
		return NULL;
	}
	c->cont = true;
	return c;
}
