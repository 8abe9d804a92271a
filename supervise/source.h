/* SPDX-License-Identifier: MIT */
/*
 * source.h - sendfile and splice into a throttled socket, performed by the
 * supervisor as a send whose bytes come from a file or a pipe instead of
 * the program's memory: the source's side (source.c); io.c holds the call
 * (sl_sup_on_sendfile, declared here) and moves the bytes.
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_SOURCE_H
#define SLUICE_SUPERVISE_SOURCE_H

#include <stdint.h>
#include <sys/types.h>

#include <linux/seccomp.h>

struct sl_sup;
struct sl_sup_call;

/* A new sendfile or splice notification: held as a send from its source
 * when its output is a throttled socket and its source a file or a pipe;
 * held as a receive into a pipe when a throttled stream socket is
 * spliced into one; EINVAL when a throttled socket is on a side sluice
 * cannot move (a datagram socket spliced out, a socket's source that is
 * neither file nor pipe: programs fall back to read and write); else it
 * continues. */
void sl_sup_on_sendfile(struct sl_sup *s, const struct seccomp_notif *req);
/* Copy up to len bytes of the call's source, from where the call stands
 * (c->done), into buf without consuming them: the count, 0 at its end
 * (EOF, or a pipe with nothing in it now), -1 on error (errno). */
ssize_t sl_sup_src_peek(struct sl_sup_call *c, char *buf, uint64_t len);
/* n of the peeked bytes were sent: a pipe's leave it. */
void sl_sup_src_consume(struct sl_sup_call *c, uint64_t n);
/* A splice out of a socket: bytes the pipe takes now (0: full). */
uint64_t sl_sup_sink_room(const struct sl_sup_call *c);
/* Move up to n bytes from the socket into the pipe, without blocking: the
 * count, or -1 (errno; EAGAIN: no room after all). */
ssize_t sl_sup_sink_move(struct sl_sup_call *c, uint64_t n);
/* The call is answered: its offset (the program's variable or the file's
 * own) moves past what was sent, as the kernel's call would move it. */
void sl_sup_src_finish(struct sl_sup_call *c);

#endif /* SLUICE_SUPERVISE_SOURCE_H */
