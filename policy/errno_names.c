/* SPDX-License-Identifier: MIT */
/*
 * errno_names.c - names for the errno option (errno NAME).
 *
 * Only errors that a socket call can itself return are listed, so that a
 * refusal looks like something the program already knows how to handle.
 * The list is one X-macro so that names and values cannot drift apart; the
 * values come from <errno.h> (read as data, never assigned). Where two names
 * share a value (EWOULDBLOCK is EAGAIN on Linux) the first one listed is the
 * name printed back.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"

#define SL__ERRNO_LIST(X)                                                                          \
	X(EAGAIN)                                                                                  \
	X(EWOULDBLOCK)                                                                             \
	X(ECONNREFUSED)                                                                            \
	X(ECONNABORTED)                                                                            \
	X(ECONNRESET)                                                                              \
	X(ETIMEDOUT)                                                                               \
	X(EACCES)                                                                                  \
	X(EPERM)                                                                                   \
	X(EADDRINUSE)                                                                              \
	X(EADDRNOTAVAIL)                                                                           \
	X(EAFNOSUPPORT)                                                                            \
	X(EALREADY)                                                                                \
	X(EHOSTDOWN)                                                                               \
	X(EHOSTUNREACH)                                                                            \
	X(EINPROGRESS)                                                                             \
	X(EINTR)                                                                                   \
	X(EIO)                                                                                     \
	X(EMFILE)                                                                                  \
	X(EMSGSIZE)                                                                                \
	X(ENETDOWN)                                                                                \
	X(ENETRESET)                                                                               \
	X(ENETUNREACH)                                                                             \
	X(ENFILE)                                                                                  \
	X(ENOBUFS)                                                                                 \
	X(ENOMEM)                                                                                  \
	X(ENOTCONN)                                                                                \
	X(EPIPE)                                                                                   \
	X(EPROTO)

#define SL__ERRNO_NAME(e) #e,
#define SL__ERRNO_VALUE(e) e,

const char *const sl__errno_names[] = {SL__ERRNO_LIST(SL__ERRNO_NAME)};
static const int errno_values[] = {SL__ERRNO_LIST(SL__ERRNO_VALUE)};
const size_t sl__errno_count = sizeof errno_values / sizeof errno_values[0];

/* The value of the errno called name[0, len), or 0 if it is not listed. */
int sl_errno_from_name(const char *name, size_t len)
{
	int i = sl__lookup(sl__errno_names, sl__errno_count, name, len);
	return i < 0 ? 0 : errno_values[i];
}

/* The name of errno value err, or NULL if it is not listed. */
const char *sl_errno_name(int err)
{
	for (size_t i = 0; i < sl__errno_count; i++)
		if (errno_values[i] == err)
			return sl__errno_names[i];
	return NULL;
}

/*
 * The errno a refusal of r uses when the intercepted call is `call`: the
 * rule's errno option if given, else the operation's default (connect
 * ECONNREFUSED, accept ECONNABORTED, send and recv EAGAIN; conns refuses
 * a connect with ECONNREFUSED and an accept with ECONNABORTED).
 */
int sl_rule_errno(const struct sl_rule *r, enum sl_op call)
{
	if (r->err != 0)
		return r->err;
	switch ((enum sl_op)r->op) {
	case SL_OP_CONNECT:
		return ECONNREFUSED;
	case SL_OP_ACCEPT:
		return ECONNABORTED;
	case SL_OP_SEND:
	case SL_OP_RECV:
		return EAGAIN;
	case SL_OP_CONNS:
	case SL_OP_COUNT:
		break;
	}
	return call == SL_OP_ACCEPT ? ECONNABORTED : ECONNREFUSED;
}
