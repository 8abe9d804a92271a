/* SPDX-License-Identifier: MIT */
/*
 * wrap_sockopt.c - getsockopt, for the deferred connects of ready.c: SO_ERROR
 * of a non-blocking connect that waits for its rate slot is 0 (in
 * progress), then, if the real connect failed at once, that error (once);
 * every other call passes through.
 *
 * A file of its own, so that a unit test may define getsockopt itself.
 */
#include <string.h>

#include "anchors.h"
#include "breaker.h"
#include "ready.h"
#include "real.h"

/* Referenced by test_shim_poll so that this archive member is linked into it
 * even when a sanitizer runtime already defines getsockopt. */
const int sl__wrap_sockopt_anchor = 1;

SL_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	int e;
	if (level != SOL_SOCKET || name != SO_ERROR || val == NULL || len == NULL ||
	    *len < sizeof(int) || !sl__connect_soerror(fd, &e)) {
		int r = SL_REAL(getsockopt)(fd, level, name, val, len);
		if (r == 0 && sl__break_n != 0 && level == SOL_SOCKET && name == SO_ERROR &&
		    val != NULL && len != NULL && *len >= sizeof(int)) {
			memcpy(&e, val, sizeof(e));
			sl__break_soerror(fd, e); /* a breaker's pending connect */
		}
		return r;
	}
	memcpy(val, &e, sizeof(e));
	*len = sizeof(e);
	if (sl__break_n != 0)
		sl__break_soerror(fd, e);
	return 0;
}
