/*
 * stdio.c - fclose, so that a socket closed through stdio is forgotten.
 *
 * A program may fdopen() a socket and fclose() it: glibc closes the fd with
 * its internal close, which no preload sees, and the fd number's next owner
 * (a file, a pipe) would inherit the socket's classification and rules. So
 * fclose forgets the stream's fd first, as close does (before the real call:
 * after it, another thread may already have the number again).
 */
#include <stdio.h>

#include "internal.h"

/* Referenced by the unit tests so that this archive member is linked into
 * them even when a sanitizer runtime already defines the libc names. */
const int sl__stdio_anchor = 1;

SL_EXPORT int fclose(FILE *fp)
{
	int fd = fp != NULL ? fileno(fp) : -1;
	/* Relaxed: only a hint; sl__fd_forget exchanges the byte. */
	if ((unsigned)fd < SL_FD_LIMIT && atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed))
		sl__fd_forget(fd);
	return SL_REAL(fclose)(fp);
}
