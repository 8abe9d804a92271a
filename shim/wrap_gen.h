/* SPDX-License-Identifier: MIT */
/*
 * wrap_gen.h - expands SL_REAL_LIST (real.h) into the exported wrappers of
 * the shapes the including file defines (WRAP_SEND, WRAP_SEND_TFO,
 * WRAP_RECV, WRAP_NEWFD, WRAP_NEWFD_MODE, WRAP_NEWFD_PAIR), each other
 * shape's entries into nothing (WRAP_OWN: wrappers written by hand).
 *
 * Included at the point of expansion, once, by each of wrap_send.c,
 * wrap_recv.c and wrap_fd.c: no include guard, on purpose.
 */
#include "real.h"

#ifndef WRAP_SEND
#define WRAP_SEND(ret, name, params, args, fd)
#endif
#ifndef WRAP_SEND_TFO
#define WRAP_SEND_TFO(ret, name, params, args, fd)
#endif
#ifndef WRAP_RECV
#define WRAP_RECV(ret, name, params, args, fd)
#endif
#ifndef WRAP_NEWFD
#define WRAP_NEWFD(ret, name, params, args, fd)
#endif
#ifndef WRAP_NEWFD_MODE
#define WRAP_NEWFD_MODE(ret, name, params, args, fd)
#endif
#ifndef WRAP_NEWFD_PAIR
#define WRAP_NEWFD_PAIR(ret, name, params, args, fd)
#endif
#define WRAP_OWN(ret, name, params, args, fd)
#define WRAP(ret, name, params, args, shape, fd) WRAP_##shape(ret, name, params, args, fd)
SL_REAL_LIST(WRAP)
