/* SPDX-License-Identifier: MIT */
/*
 * hup.c - end-of-stream events of sockets whose reads a byte rule may cut:
 * see hup.h.
 */
#include "hup.h"
#include "clock.h"
#include "fd.h"
#include "ready.h"
#include "state.h"

bool sl__hup_cuts(int fd)
{
	if (sl__fd_pass(fd, SL_K_RECV) || sl__st.byte_rules == 0)
		return false;
	const struct sl_fdrec *rec = sl__fd_rec(fd);
	return rec != NULL && rec->stream && (rec->match[SL_K_RECV] & sl__st.byte_rules) != 0;
}

bool sl__hup_held(int fd, uint32_t rev, uint32_t asked)
{
	if ((rev & POLLHUP) == 0 || (rev & POLLIN) != 0 || (asked & POLLIN) == 0)
		return false;
	uint64_t until = UINT64_MAX;
	return (sl__ready_hidden(fd, sl__clock_ns(), &until) & POLLIN) != 0 && sl__hup_cuts(fd);
}
