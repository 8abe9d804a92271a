/* SPDX-License-Identifier: MIT */
/*
 * wrap_splice.c - the exported splice, the zero-copy path between a socket
 * and a pipe (haproxy's splice-auto, nginx-less proxies).
 *
 * One end of a splice is always a pipe. A splice out of a socket that a
 * receive rule matches is a receive of up to n bytes on it (sl__recv: cut
 * to what the byte rules allow now, charged after); a splice into a socket
 * that a send rule matches is a send (sl__send: pieces, waits). Any other
 * splice (file to pipe, pipe to pipe, unmatched sockets) passes through.
 * SPLICE_F_NONBLOCK counts as MSG_DONTWAIT for the shim (the call must not
 * sleep); the flags go to the kernel unchanged.
 *
 * tee and vmsplice move data between pipes and memory only, never through
 * a socket: they are not interposed.
 */
#include <fcntl.h>

#include "fd.h"
#include "real.h"
#include "xfer.h"
#include "xfer_recv.h"

SL_EXPORT ssize_t splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t n,
			 unsigned int flags)
{
	const struct sl_fdrec *rec;
	struct sl_splice sp = {.in = in,
			       .out = out,
			       .off_in = off_in,
			       .off_out = off_out,
			       .flags = flags};
	struct sl_io io = {.fd = in,
			   .total = n,
			   .splice = &sp,
			   .flags = flags & SPLICE_F_NONBLOCK ? MSG_DONTWAIT : 0};
	if (sl__busy || (sl__fd_pass(in, SL_K_RECV) && sl__fd_pass(out, SL_K_SEND)))
		return SL_REAL(splice)(in, off_in, out, off_out, n, flags);
	if (!sl__fd_pass(in, SL_K_RECV) && (rec = sl__fd_rec(in)) != NULL &&
	    rec->match[SL_K_RECV] != 0) {
		io.how = SL_IO_SPLICE_IN;
		return sl__recv(&io);
	}
	if (!sl__fd_pass(out, SL_K_SEND) && sl__fd_rec(out) != NULL) {
		io.how = SL_IO_SPLICE_OUT;
		io.fd = out;
		return sl__send(&io);
	}
	return SL_REAL(splice)(in, off_in, out, off_out, n, flags);
}
