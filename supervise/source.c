/* SPDX-License-Identifier: MIT */
/*
 * source.c - sendfile(sock, in, off, n) and splice(in, off, sock, NULL, n)
 * of a throttled socket, done by the supervisor (source.h).
 *
 * The call is held as a send (io.c): each piece is admitted by the rules,
 * copied from the source into the piece buffer without consuming it, sent
 * with MSG_DONTWAIT on our duplicate of the socket, and only what the
 * socket took is consumed, so nothing is lost or sent twice:
 *   a file   pread at the call's offset (the program's off_t/loff_t, or the
 *            file's own position, which our duplicate shares) plus what was
 *            sent; the offset is moved once, at the answer;
 *   a pipe   tee() into a private pipe, read from there, and the bytes the
 *            socket took are then read off the program's pipe.
 * The answer is the count sent, as the kernel's. A pipe with nothing in it
 * when the call starts lets the call continue in the kernel, which waits
 * for the writer (those bytes pass uncharged); sockets and other sources
 * keep the old answer, EINVAL, on which programs fall back to read and
 * write.
 *
 * splice(sock, NULL, pipe, NULL, n) of a throttled stream socket is held as
 * a receive (io.c) whose pieces go into the pipe (our duplicate of it):
 * each is at most the room the pipe has, admitted, then moved by our own
 * splice, so what leaves the socket is exactly what the pipe got; the
 * answer is the count. Blocking as the kernel's call would (a socket or
 * pipe without O_NONBLOCK, no SPLICE_F_NONBLOCK): the call waits for data,
 * then for room. Were the program's thread to give up the call after our
 * splice moved a piece (a signal at that instant), the bytes are in its
 * pipe with no count returned.
 */
#include "source.h"
#include "calls.h"
#include "filter.h"
#include "io.h"
#include "match.h"
#include "notif.h"
#include "sock.h"
#include "state.h"
#include "target.h"
#include "turn.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int tee_pipe[2] = {-1, -1}; /* private: where a pipe's bytes are peeked */

ssize_t sl_sup_src_peek(struct sl_sup_call *c, char *buf, uint64_t len)
{
	if (!c->src_pipe)
		return pread(c->src_fd, buf, (size_t)len, (off_t)(c->src_pos + (int64_t)c->done));
	if (tee_pipe[0] < 0 && pipe2(tee_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return -1;
	ssize_t n = tee(c->src_fd, tee_pipe[1], (size_t)len, SPLICE_F_NONBLOCK);
	if (n < 0)
		return errno == EAGAIN ? 0 : -1;
	ssize_t got = 0;
	while (got < n) { /* all of it: the private pipe is emptied every time */
		ssize_t k = read(tee_pipe[0], buf + got, (size_t)(n - got));
		if (k <= 0)
			return -1;
		got += k;
	}
	return got;
}

void sl_sup_src_consume(struct sl_sup_call *c, uint64_t n)
{
	static char sink[4096];
	while (c->src_pipe && n > 0) {
		ssize_t k = read(c->src_fd, sink, n < sizeof(sink) ? (size_t)n : sizeof(sink));
		if (k <= 0)
			return;
		n -= (uint64_t)k;
	}
}

void sl_sup_src_finish(struct sl_sup_call *c)
{
	if (c->src_pipe || c->done == 0)
		return;
	int64_t end = c->src_pos + (int64_t)c->done;
	if (c->src_off_ptr != 0)
		sl_sup_mem_write((pid_t)c->req.pid, c->src_off_ptr, &end, sizeof(end));
	else
		lseek(c->src_fd, (off_t)end, SEEK_SET);
}

uint64_t sl_sup_sink_room(const struct sl_sup_call *c)
{
	int cap = fcntl(c->dst_pipe, F_GETPIPE_SZ), q = 0;
	if (cap <= 0 || ioctl(c->dst_pipe, FIONREAD, &q) != 0)
		return 1; /* unknown: try a byte; the move says if it fits */
	return cap > q ? (uint64_t)(cap - q) : 0;
}

ssize_t sl_sup_sink_move(struct sl_sup_call *c, uint64_t n)
{
	return splice(c->dup, NULL, c->dst_pipe, NULL, (size_t)n, SPLICE_F_NONBLOCK);
}

enum hold { HELD, REFUSE, PASS };

/* splice(sock, off_in, pipe, off_out, n, flags) out of throttled stream
 * socket `sock` (our duplicate): held as a receive into the pipe. */
static enum hold hold_sink(struct sl_sup *s, const struct seccomp_notif *req,
			   struct sl_sup_thread *th, int sock, uint32_t rules)
{
	const __u64 *a = req->data.args;
	struct stat st;
	if (a[1] != 0 || a[3] != 0 || a[4] == 0)
		return PASS; /* an offset: the kernel's ESPIPE; nothing to move */
	int out = sl_sup_getfd(s, th, (int)a[2]);
	if (out < 0 || fstat(out, &st) != 0 || !S_ISFIFO(st.st_mode)) {
		if (out >= 0)
			close(out);
		return PASS; /* not a pipe: the kernel's answer */
	}
	struct sl_sup_call *c = sl_sup_call_new(s, req, th);
	if (c == NULL) {
		close(out);
		return PASS;
	}
	c->kind = SL_SUP_RECV;
	c->dup = sock;
	c->dst_pipe = out;
	c->total = a[4];
	c->rules = rules;
	c->stream = true;
	c->nonblock = (a[5] & SPLICE_F_NONBLOCK) ||
		      ((fcntl(sock, F_GETFL) | fcntl(out, F_GETFL)) & O_NONBLOCK);
	if (sl_sup_step_recv(s, c, sl_sup_now_ns()))
		sl_sup_call_free(s, c);
	return HELD;
}

/* Hold the call as a send from source fd `in` (offset at target address
 * offp, 0: the file's own) into throttled socket `sock` (our duplicates,
 * the call's from then on), under rules: HELD (held or answered); REFUSE,
 * a source sluice does not move (EINVAL); PASS, the kernel answers it
 * (a bad offset, nothing to move, no free call slot). */
static enum hold hold(struct sl_sup *s, const struct seccomp_notif *req, struct sl_sup_thread *th,
		      int sock, int in, uint64_t offp, uint64_t n, uint32_t rules)
{
	struct stat st;
	if (fstat(in, &st) != 0 ||
	    !(S_ISREG(st.st_mode) || (S_ISFIFO(st.st_mode) && req->data.nr == SYS_splice)))
		return REFUSE; /* sendfile from a pipe: the kernel's EINVAL too */
	int64_t pos = 0;
	if (S_ISREG(st.st_mode)) {
		if (offp != 0 ? sl_sup_mem_read((pid_t)req->pid, offp, &pos, sizeof(pos)) !=
					(ssize_t)sizeof(pos)
			      : (pos = (int64_t)lseek(in, 0, SEEK_CUR)) < 0)
			return PASS; /* the kernel's EFAULT */
	} else if (offp != 0) {
		return PASS; /* an offset on a pipe: the kernel's ESPIPE */
	}
	struct sl_sup_call *c = n != 0 ? sl_sup_call_new(s, req, th) : NULL;
	if (c == NULL)
		return PASS;
	c->kind = SL_SUP_SEND;
	c->dup = sock;
	c->src_fd = in;
	c->src_pipe = S_ISFIFO(st.st_mode);
	c->src_pos = pos;
	c->src_off_ptr = offp;
	c->total = n;
	c->rules = rules;
	c->stream = true;
	c->nonblock = (fcntl(sock, F_GETFL) & O_NONBLOCK) != 0;
	if (sl_sup_step_send(s, c, sl_sup_now_ns()))
		sl_sup_call_free(s, c);
	return HELD;
}

void sl_sup_on_sendfile(struct sl_sup *s, const struct seccomp_notif *req)
{
	struct sl_sup_thread *th = sl_sup_thread_of(s, (pid_t)req->pid);
	const bool splice = req->data.nr == SYS_splice;
	const __u64 *a = req->data.args;
	/* sendfile(out, in, off, n); splice(in, off_in, out, off_out, n, flags) */
	int fds[2] = {(int)a[0], splice ? (int)a[2] : -1};
	enum sl_op ops[2] = {splice ? SL_OP_RECV : SL_OP_SEND, SL_OP_SEND};
	for (int i = 0; i < 2 && th != NULL && !th->proc->pass; i++) {
		if (!sl_sup_traps_fd(&s->traps, fds[i]))
			continue;
		int dup = sl_sup_getfd(s, th, fds[i]);
		if (dup < 0)
			continue;
		struct stat st; /* turns (turn.c): a send ends the connection's turn */
		if (sl_sup_traps_turns(&s->traps) && (splice ? i == 1 : i == 0) &&
		    fstat(dup, &st) == 0)
			sl_sup_turn_send(s, st.st_ino, sl_sup_now_ns());
		unsigned fam, type;
		struct sl_addr peer;
		sl_sup_classify(dup, &fam, &type, &peer);
		uint32_t rules = fam != 0 ? sl_sup_match(s, ops[i], fam, type, &peer) : 0;
		if (rules == 0) {
			close(dup);
			continue;
		}
		/* The socket is the output: a send from the source. */
		bool out = splice ? i == 1 : i == 0;
		int in = out && type == SL_TYPE_STREAM && (!splice || a[3] == 0)
				 ? sl_sup_getfd(s, th, splice ? fds[0] : (int)a[1])
				 : -1;
		enum hold h = in >= 0 ? hold(s, req, th, dup, in, splice ? a[1] : a[2],
					     splice ? a[4] : a[3], rules)
			      : !out && type == SL_TYPE_STREAM ? hold_sink(s, req, th, dup, rules)
							       : REFUSE;
		if (h == HELD)
			return;
		if (in >= 0)
			close(in);
		close(dup);
		if (h == PASS || (out && splice && a[3] != 0)) /* off_out on a socket: ESPIPE */
			sl_sup_continue(s, req->id);
		else
			sl_sup_answer(s, req->id, 0,
				      EINVAL); /* programs fall back to read, write */
		return;
	}
	sl_sup_continue(s, req->id);
}
