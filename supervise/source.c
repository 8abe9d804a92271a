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
 */
#include "source.h"
#include "state.h"
#include "target.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
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
