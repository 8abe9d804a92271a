/* SPDX-License-Identifier: MIT */
/*
 * iov.h - the part of a program's iovec array a piece of a transfer covers,
 * for the library's split transfers (xfer.c) and the supervisor's pieces
 * (supervise/io.c). Pure; any thread.
 */
#ifndef SLUICE_SHIM_IOV_H
#define SLUICE_SHIM_IOV_H

#include <stddef.h>
#include <sys/uio.h>

/* The iovecs covering bytes [off, off + len) of iov[0..cnt) into out (room
 * for max). Returns how many. */
static inline int sl__iov_slice(const struct iovec *iov, int cnt, size_t off, size_t len,
				struct iovec *out, int max)
{
	int n = 0;
	for (int i = 0; i < cnt && len > 0 && n < max; i++) {
		size_t l = iov[i].iov_len;
		if (off >= l) {
			off -= l;
			continue;
		}
		size_t take = l - off < len ? l - off : len;
		out[n].iov_base = (char *)iov[i].iov_base + off;
		out[n].iov_len = take;
		n++;
		len -= take;
		off = 0;
	}
	return n;
}

#endif /* SLUICE_SHIM_IOV_H */
