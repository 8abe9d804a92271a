/* SPDX-License-Identifier: MIT */
/*
 * io.c - the send and receive families of supervised programs, performed by
 * the supervisor on its own duplicate of the socket.
 *
 * Send (write, writev, send, sendto, sendmsg, the first message of
 * sendmmsg, pwritev2 at offset -1): the call is held until the rules admit
 * a piece (at most the smallest burst of its byte rules, at most
 * SL_SUP_PIECE_MAX); then the piece is read from the program's memory, the
 * call is checked to be still waiting (NOTIF_ID_VALID), and the piece is
 * sent with MSG_DONTWAIT | MSG_NOSIGNAL. What it did not move is refunded.
 * A blocking socket's call goes on piece by piece until all is sent when
 * the filter has WAIT_KILLABLE_RECV (the program's signals then wait for
 * the answer, so none can cancel the call between a piece and its answer);
 * without it the call is answered with the count of its first piece, a
 * short count as the kernel may give. A non-blocking socket's call (with
 * it) goes on while each piece went whole and the rules have the next
 * one's units now, up to NB_MORE_MAX (nb_more), as a native call moves what
 * the buffer takes.
 * A full socket buffer: a blocking call waits for POLLOUT on the duplicate
 * (SO_SNDTIMEO honoured), a non-blocking one gets the kernel's EAGAIN. EPIPE
 * raises SIGPIPE in the calling thread unless the call said MSG_NOSIGNAL.
 *
 * Receive (read, readv, recv, recvfrom, recvmsg, the first message of
 * recvmmsg, preadv2 at offset -1): the call waits for data first (a
 * non-blocking socket without data gets the kernel's EAGAIN, so Go's
 * edge-triggered poller still sees the next edge), then asks the rules for
 * at most what is queued (FIONREAD), then peeks that much, copies it into
 * the program's buffers (after NOTIF_ID_VALID), answers, and only then
 * consumes what was delivered: a call cancelled before its answer loses no
 * data. MSG_WAITALL on a blocking stream socket is completed piece by piece
 * under WAIT_KILLABLE_RECV. Calls with MSG_PEEK, MSG_OOB, MSG_ERRQUEUE or
 * MSG_TRUNC continue in the kernel uncharged. A receive on a connection
 * with turns (conns:adaptive, system protection) takes its turn step first
 * (turn.c), and so does a send that may start a client's turn (client.c).
 *
 * A throttled call is always held, never answered with a made-up EAGAIN:
 * data that is already queued produces no new edge for an edge-triggered
 * epoll, and Go would wait for it for ever. Each held call keeps one of the
 * program's threads in the system call: Go starts another thread for its
 * other goroutines, so the cost is one OS thread per held call (bounded by
 * SL_SUP_CALLS_MAX, and by Go's own limit of 10,000 threads).
 *
 * sendmsg/recvmsg with control messages take their units and then continue
 * in the kernel (the count is the requested one). sendfile and splice into
 * a throttled socket are sends whose pieces come from the file or the pipe
 * (source.c); a splice out of one into a pipe is a receive whose pieces go
 * into the pipe (source.c, hold_sink; into_pipe here).
 */
#include "io.h"
#include "describe.h"
#include "filter.h"
#include "admit.h"
#include "calls.h"
#include "client.h"
#include "notif.h"
#include "sock.h"
#include "source.h"
#include "stat.h"
#include "state.h"
#include "target.h"
#include "turn.h"

#include "iov.h"
#include "match.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#define MMSG_LEN_OFF 56 /* struct mmsghdr.msg_len */
#define MSG_NAMELEN_OFF offsetof(struct msghdr, msg_namelen)
#define MSG_CONTROLLEN_OFF offsetof(struct msghdr, msg_controllen)
#define MSG_FLAGS_OFF offsetof(struct msghdr, msg_flags)

static char piece_buf[SL_SUP_PIECE_MAX];

static ssize_t read_piece(struct sl_sup_call *c, uint64_t len)
{
	if (c->src_fd >= 0) /* sendfile, splice (source.c) */
		return sl_sup_src_peek(c, piece_buf, len);
	static struct iovec sl[SL_SUP_IOV_MAX];
	int k = sl__iov_slice(c->riov, c->niov, (size_t)c->done, (size_t)len, sl, SL_SUP_IOV_MAX);
	return sl_sup_mem_readv((pid_t)c->req.pid, sl, k, piece_buf, len);
}

static ssize_t write_piece(struct sl_sup_call *c, uint64_t len)
{
	static struct iovec sl[SL_SUP_IOV_MAX];
	int k = sl__iov_slice(c->riov, c->niov, (size_t)c->done, (size_t)len, sl, SL_SUP_IOV_MAX);
	return sl_sup_mem_writev((pid_t)c->req.pid, sl, k, piece_buf, len);
}

/* Read the program's iovec array. */
void sl_sup_on_send(struct sl_sup *s, const struct seccomp_notif *req)
{
	bool answered = false;
	struct sl_sup_call *c = sl_sup_describe_fast(s, req, &answered);
	if (c == NULL && !answered)
		c = sl_sup_describe(s, req, SL_SUP_SEND);
	if (c != NULL && sl_sup_step_send(s, c, sl_sup_now_ns()))
		sl_sup_call_free(s, c);
}

void sl_sup_on_recv(struct sl_sup *s, const struct seccomp_notif *req)
{
	struct sl_sup_call *c = sl_sup_describe(s, req, SL_SUP_RECV);
	if (c != NULL && sl_sup_step_recv(s, c, sl_sup_now_ns()))
		sl_sup_call_free(s, c);
}

/* Answer a transfer with its count (or -err when nothing moved): sendmmsg
 * and recvmmsg report one message, its length in msg_len. */
static bool finish(struct sl_sup *s, struct sl_sup_call *c, int err)
{
	int64_t v = (int64_t)c->done;
	if (c->done > 0 || err == 0) {
		err = 0;
		long nr = c->req.data.nr;
		if (nr == SYS_sendmmsg || nr == SYS_recvmmsg) {
			uint32_t len = (uint32_t)c->done;
			if (sl_sup_mem_write((pid_t)c->req.pid, c->msg_ptr + MMSG_LEN_OFF, &len,
					     sizeof(len)) < 0)
				err = EFAULT;
			v = 1;
		}
	}
	if (c->src_fd >= 0)
		sl_sup_src_finish(c);
	sl_sup_answer(s, c->req.id, v, err);
	return true;
}

/* Wait for tokens for the next piece: true when they are there (or the call
 * was refused and answered: *done set). */
static bool take_piece(struct sl_sup *s, struct sl_sup_call *c, uint64_t bytes, uint64_t now_ns,
		       bool *answered)
{
	*answered = false;
	if (c->granted)
		return sl_sup_call_wait(c, SL_SUP_GO, now_ns,
					c->go_ns > now_ns ? c->go_ns - now_ns : 0);
	uint64_t wait = 0;
	int err = 0;
	enum sl_sup_verdict v = sl_sup_admit(s, c, bytes, c->done == 0 ? 1 : 0, now_ns, &wait,
					     &err);
	if (v == SL_SUP_REFUSE) {
		*answered = finish(s, c, err);
		return false;
	}
	c->granted = v == SL_SUP_GO;
	return sl_sup_call_wait(c, v, now_ns, wait);
}

/* Wait for the socket (a blocking call), until SO_*TIMEO if set. */
static bool wait_io(struct sl_sup_call *c, short events, uint64_t now_ns)
{
	if (c->timeout_ns != 0 && now_ns >= c->start_ns + c->timeout_ns)
		return false; /* timed out */
	c->wait = SL_SUP_WAIT_IO;
	c->wait_fd = -1;
	c->events = events;
	c->due_ns = c->timeout_ns != 0 ? c->start_ns + c->timeout_ns : UINT64_MAX;
	return true;
}

/* After the turn step of call c (turn.c, client.c): 0 held, 1 done
 * (answered, or let continue when no rule of the call's own applies), -1
 * go on with its rules. */
static int after_turn(struct sl_sup *s, struct sl_sup_call *c, enum sl_sup_turn_step step)
{
	if (step != SL_SUP_TURN_GO)
		return step == SL_SUP_TURN_DONE;
	if (c->rules != 0)
		return -1;
	sl_sup_continue(s, c->req.id); /* the kernel's */
	return 1;
}

/* A non-blocking send goes on after a piece only with this many bytes moved
 * at most (the kernel takes at most a socket buffer's room, a few MiB, in
 * one call; the supervisor serves other calls meanwhile). */
#define NB_MORE_MAX (16ull * SL_SUP_PIECE_MAX)

/* A non-blocking send moved a piece whole and has more to move: go on
 * (true) only if every rule of the call has the next piece's units now,
 * as the preload's call moves what the rules admit and the kernel takes,
 * not one bounce buffer's worth (a send of 16 MiB under a rule that never
 * limits moved 256 KiB per call, so CPython's test_socket
 * testWriteNonBlocking never filled the buffer in 11 calls); else the call
 * is answered with its count, nothing taken (a short count, as the kernel
 * gives when the buffer fills). Only where the program's signals wait for
 * the answer (WAIT_KILLABLE_RECV): none can cancel the call between two
 * pieces. */
static bool nb_more(struct sl_sup *s, struct sl_sup_call *c, uint64_t piece, uint64_t now_ns)
{
	if (!c->nonblock || !c->stream || c->cont || c->src_fd >= 0 || !s->feat.wait_killable ||
	    c->done >= NB_MORE_MAX)
		return false;
	for (uint32_t rest = c->rules; rest != 0; rest &= rest - 1) {
		const unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_rule *r = &s->policy.rules[i];
		/* A message rule counted the call's one message; a dry run
		 * never holds a call back (its admit notes what it would). */
		if (r->unit != SL_UNIT_BYTES || r->action == SL_ACTION_DRYRUN)
			continue;
		const struct sl_limiter *l = sl_sup_lim_of(s, c, i, now_ns);
		if (l == NULL || sl_limiter_available(l, now_ns) < piece)
			return false;
	}
	return true;
}

bool sl_sup_step_send(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns)
{
	int turn; /* a client's request: its turn first */
	if (c->turn_ino != 0 &&
	    (turn = after_turn(s, c, sl_sup_client_step_send(s, c, now_ns))) >= 0)
		return turn;
	for (;;) {
		uint64_t left = c->total - c->done;
		uint64_t piece = c->cont || !c->stream ? left : sl_sup_piece_cap(s, c, now_ns);
		if (piece > left)
			piece = left;
		if (!c->granted && !c->cont && piece > SL_SUP_PIECE_MAX)
			return finish(s, c, EMSGSIZE); /* a datagram bigger than we move */
		bool answered;
		if (!take_piece(s, c, piece, now_ns, &answered))
			return answered;
		piece = c->grant_bytes;
		if (c->cont) { /* control messages, a fast send: the kernel sends */
			/* Charged as sent: the kernel moves at most this much. A
			 * call that is gone by now gets its units back (the
			 * call's release refunds a grant still held). */
			if (sl_sup_continue(s, c->req.id) == 0) {
				c->granted = false;
				sl_sup_stat_bytes(c->th->proc, c->rules, piece);
			}
			return true;
		}
		ssize_t k = read_piece(c, piece);
		if (!sl_sup_valid(s, c->req.id))
			return true; /* cancelled: the grant goes back */
		if (k > 0 && (uint64_t)k < piece && c->src_fd < 0)
			k = -1; /* a hole in the program's buffer: EFAULT, as the
				 * kernel fails a copy it cannot make whole, nothing
				 * of this piece sent (the count if earlier ones went) */
		if (k <= 0) {
			int e = k < 0 && c->src_fd >= 0 ? errno : EFAULT;
			sl_sup_refund(s, c, UINT64_MAX);
			if (k == 0 && c->src_fd >= 0 && c->src_pipe && c->done == 0) {
				sl_sup_continue(s, c->req.id); /* an empty pipe: the kernel waits */
				return true;
			}
			return finish(s, c, k == 0 && c->src_fd >= 0 ? 0 : e); /* EOF: the count */
		}
		struct iovec iov = {piece_buf, (size_t)k};
		struct msghdr mh = {.msg_name = c->destlen ? &c->dest : NULL,
				    .msg_namelen = c->destlen,
				    .msg_iov = &iov,
				    .msg_iovlen = 1};
		int fl = MSG_DONTWAIT | MSG_NOSIGNAL |
			 (c->flags & (MSG_MORE | MSG_EOR | MSG_OOB | MSG_CONFIRM | MSG_DONTROUTE));
		ssize_t r = sendmsg(c->dup, &mh, fl);
		if (r < 0) {
			int e = errno;
			if (e == EINTR)
				continue;
			if ((e == EAGAIN || e == EWOULDBLOCK) && !c->nonblock &&
			    wait_io(c, POLLOUT, sl_sup_now_ns()))
				return false; /* the grant is kept for the retry */
			sl_sup_refund(s, c, UINT64_MAX);
			if (e == EPIPE && !(c->flags & MSG_NOSIGNAL) && c->done == 0 &&
			    c->th->tid > 0)
				syscall(SYS_tgkill, c->th->proc->tgid, c->th->tid, SIGPIPE);
			return finish(s, c, e);
		}
		sl_sup_refund(s, c, piece - (uint64_t)r);
		if (c->src_fd >= 0)
			sl_sup_src_consume(c, (uint64_t)r);
		c->granted = false;
		c->done += (uint64_t)r;
		sl_sup_stat_bytes(c->th->proc, c->rules, (uint64_t)r);
		if (c->done >= c->total || !c->stream || !s->feat.wait_killable)
			return finish(s, c, 0);
		now_ns = sl_sup_now_ns();
		if (c->nonblock) {
			const uint64_t rest = c->total - c->done;
			const uint64_t cap = sl_sup_piece_cap(s, c, now_ns);
			if ((uint64_t)r < (uint64_t)k ||
			    !nb_more(s, c, rest < cap ? rest : cap, now_ns))
				return finish(s, c, 0);
		}
	}
}

/* A splice out of the socket finds its pipe full: EAGAIN (or the count so
 * far) if it may not block, else it waits for room. */
static bool pipe_full(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns)
{
	if (c->nonblock || !wait_io(c, POLLOUT, now_ns))
		return finish(s, c, c->done > 0 ? 0 : EAGAIN);
	c->wait_fd = c->dst_pipe;
	return false;
}

/* Move the granted piece from the socket into the pipe (source.c). */
static bool into_pipe(struct sl_sup *s, struct sl_sup_call *c, uint64_t piece, uint64_t now_ns)
{
	if (!sl_sup_valid(s, c->req.id))
		return true;
	ssize_t k = sl_sup_sink_move(c, piece);
	int e = errno;
	sl_sup_refund(s, c, k < 0 ? UINT64_MAX : piece - (uint64_t)k);
	c->granted = false;
	if (k < 0)
		return e == EAGAIN ? pipe_full(s, c, now_ns) : finish(s, c, e);
	c->done += (uint64_t)k;
	sl_sup_stat_bytes(c->th->proc, c->rules, (uint64_t)k);
	return finish(s, c, 0);
}

/* Consume the k bytes of a stream the call delivered: MSG_TRUNC discards
 * them in the kernel on TCP; a unix stream refuses that (EFAULT, nothing
 * consumed: the same bytes were delivered again and again), so they are
 * read into piece_buf, whose copy was delivered already. */
static void consume(struct sl_sup_call *c, uint64_t k)
{
	if (recv(c->dup, NULL, k, MSG_TRUNC | MSG_DONTWAIT) < 0 && errno == EFAULT)
		recv(c->dup, piece_buf, k, MSG_DONTWAIT);
}

bool sl_sup_step_recv(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns)
{
	int turn; /* turns: the request's turn first, or a client's answer */
	if (c->turn_ino != 0 && (turn = after_turn(s, c, sl_sup_turn_step_recv(s, c, now_ns))) >= 0)
		return turn;
	bool waitall = (c->flags & MSG_WAITALL) && c->stream && !c->nonblock &&
		       s->feat.wait_killable;
	for (;;) {
		uint64_t left = c->total - c->done;
		if (!c->granted) {
			int q = 0;
			if (ioctl(c->dup, FIONREAD, &q) != 0)
				q = 0;
			if (q == 0) {
				/* Nothing queued: end of stream, an error, an
				 * empty datagram, or not yet. */
				ssize_t r = recv(c->dup, piece_buf, 1, MSG_PEEK | MSG_DONTWAIT);
				if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
					if (c->done > 0)
						return finish(s, c, 0);
					if (!c->nonblock && wait_io(c, POLLIN, now_ns))
						return false;
					return finish(s, c, EAGAIN);
				}
				if (r < 0)
					return finish(s, c, errno);
				if (r == 0 && c->stream)
					return finish(s, c, 0);
			}
			uint64_t piece = (uint64_t)q < left ? (uint64_t)q : left;
			if (piece > SL_SUP_PIECE_MAX)
				piece = SL_SUP_PIECE_MAX;
			if (c->stream) {
				uint64_t cap = sl_sup_piece_cap(s, c, now_ns);
				piece = piece < cap ? piece : cap;
				if (piece == 0)
					piece = 1; /* queued between FIONREAD and the peek */
			}
			if (c->dst_pipe >= 0) {
				uint64_t room = sl_sup_sink_room(c);
				if (room == 0)
					return pipe_full(s, c, now_ns);
				piece = piece < room ? piece : room;
			}
			bool answered;
			if (!take_piece(s, c, piece, now_ns, &answered))
				return answered;
		} else if (now_ns < c->go_ns) {
			c->due_ns = c->go_ns;
			c->wait = SL_SUP_WAIT_TIME;
			return false;
		}
		uint64_t piece = c->grant_bytes;
		if (c->cont) {
			c->granted = false;
			sl_sup_continue(s, c->req.id);
			return true;
		}
		if (c->dst_pipe >= 0)
			return into_pipe(s, c, piece, now_ns);
		struct sockaddr_storage from;
		socklen_t fromlen = sizeof(from);
		memset(&from, 0, sizeof(from));
		/* MSG_TRUNC tells a datagram's full length; on a stream socket
		 * it would skip the copy. */
		ssize_t full = recvfrom(c->dup, piece_buf, piece,
					MSG_PEEK | MSG_DONTWAIT | (c->stream ? 0 : MSG_TRUNC),
					(struct sockaddr *)&from, &fromlen);
		if (full < 0) {
			int e = errno;
			sl_sup_refund(s, c, UINT64_MAX);
			if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR)
				continue; /* someone else read it: wait again */
			return finish(s, c, e);
		}
		uint64_t k = (uint64_t)full < piece ? (uint64_t)full : piece;
		bool truncated = !c->stream && (uint64_t)full > left;
		if (!sl_sup_valid(s, c->req.id))
			return true;
		if (k > 0 && write_piece(c, k) != (ssize_t)k) {
			sl_sup_refund(s, c, UINT64_MAX);
			return finish(s, c, EFAULT);
		}
		sl_sup_refund(s, c, piece - k);
		c->granted = false;
		sl_sup_stat_bytes(c->th->proc, c->rules, k);
		if (waitall && c->done + k < c->total && k > 0) {
			/* Completed inside one call: only death can end it
			 * before the answer, and then the data has no reader. */
			consume(c, k);
			c->done += k;
			now_ns = sl_sup_now_ns();
			continue;
		}
		c->done += k;
		/* Where the source address and flags go. */
		long nr = c->req.data.nr;
		pid_t tid = (pid_t)c->req.pid;
		int fault = 0;
		if (nr == SYS_recvfrom && c->name_ptr != 0) {
			/* The kernel's move_addr_to_user: the data is consumed
			 * whatever happens, and a length or address it cannot
			 * read or write makes the call fail (EFAULT, EINVAL). */
			socklen_t room = 0;
			if (sl_sup_mem_read(tid, c->namelen_ptr, &room, sizeof(room)) !=
			    sizeof(room))
				fault = EFAULT;
			else if ((int)room < 0)
				fault = EINVAL;
			else {
				socklen_t len = room < fromlen ? room : fromlen;
				if ((len > 0 && sl_sup_mem_write(tid, c->name_ptr, &from, len) !=
							(ssize_t)len) ||
				    sl_sup_mem_write(tid, c->namelen_ptr, &fromlen,
						     sizeof(fromlen)) != sizeof(fromlen))
					fault = EFAULT;
			}
		} else if (nr == SYS_recvmsg || nr == SYS_recvmmsg) {
			socklen_t room = c->destlen;
			int mflags = truncated ? MSG_TRUNC : 0;
			size_t zero = 0;
			if (c->name_ptr != 0) {
				sl_sup_mem_write(tid, c->name_ptr, &from,
						 room < fromlen ? room : fromlen);
				sl_sup_mem_write(tid, c->msg_ptr + MSG_NAMELEN_OFF, &fromlen,
						 sizeof(fromlen));
			}
			sl_sup_mem_write(tid, c->msg_ptr + MSG_CONTROLLEN_OFF, &zero, sizeof(zero));
			sl_sup_mem_write(tid, c->msg_ptr + MSG_FLAGS_OFF, &mflags, sizeof(mflags));
		}
		if (fault != 0)
			sl_sup_answer(s, c->req.id, 0, fault);
		else
			finish(s, c, 0);
		/* Consumed only now: an answer that did not arrive (the call was
		 * cancelled) leaves the data for the retry. */
		if (c->stream)
			consume(c, k);
		else
			recv(c->dup, piece_buf, 1, MSG_DONTWAIT);
		return true;
	}
}

bool sl_sup_interrupt(struct sl_sup *s, struct sl_sup_call *c)
{
	if ((c->kind == SL_SUP_SEND || c->kind == SL_SUP_RECV) && c->done > 0)
		return finish(s, c, 0); /* a partial count, as the kernel's */
	if (c->granted)
		sl_sup_refund(s, c, UINT64_MAX);
	c->granted = false;
	sl_sup_continue(s, c->req.id);
	return true;
}
