/* SPDX-License-Identifier: MIT */
/*
 * cwlook.c - what the program sees of a connect that waits for a conns slot
 * (connwait.c): poll and epoll do not report its fd (ready.c asks
 * sl__cw_hidden), connect() answers EALREADY, getsockopt(SO_ERROR) reads 0,
 * then the error it failed with, once. Each look starts the connect first
 * if it is due.
 */
#include <errno.h>

#include "clock.h"
#include "connwait.h"
#include "cwrec.h"
#include "ready.h"

uint32_t sl__cw_hidden(int fd, uint64_t now, uint64_t *until)
{
	if (!sl__cw_any())
		return 0;
	uint32_t k = sl__cw_fd_conn(fd);
	if (k == 0)
		return 0;
	struct cw *w = &sl__cw_tab[k - 1];
	uint32_t st = atomic_load_explicit(&w->state, memory_order_acquire);
	if (st == CW_PENDING)
		st = sl__cw_kick(k, fd, now, false);
	if (st != CW_PENDING && st != CW_STARTING)
		return 0;
	uint64_t u = st == CW_STARTING ? now + CW_STARTING_NS : sl__cw_next_look(w, now);
	if (u < *until)
		*until = u;
	return SL_HIDE_ALL;
}

/* The state of fd's record after starting it if due, or CW_HELD if fd's
 * connect does not wait here. *k gets the record. */
static uint32_t look(int fd, uint32_t *k)
{
	if (!sl__cw_any() || (*k = sl__cw_fd_conn(fd)) == 0)
		return CW_HELD;
	uint32_t st = atomic_load_explicit(&sl__cw_tab[*k - 1].state, memory_order_acquire);
	if (st == CW_PENDING)
		st = sl__cw_kick(*k, fd, sl__clock_ns(), false);
	return st;
}

/* A FAILED record's error, once (then SPENT); 0 if another thread took it. */
static int take_err(uint32_t k)
{
	uint32_t st = CW_FAILED;
	if (!atomic_compare_exchange_strong(&sl__cw_tab[k - 1].state, &st, CW_SPENT))
		return 0;
	return sl__cw_tab[k - 1].err;
}

bool sl__cw_again(int fd, int *ret)
{
	uint32_t k = 0, st = look(fd, &k);
	/* Started or never waited here: the kernel answers; failed and
	 * reported: a new connect, charged anew. */
	if (k == 0 || st == CW_HELD || st == CW_SPENT)
		return false;
	*ret = -1;
	if (st == CW_FAILED) {
		int e = take_err(k);
		errno = e != 0 ? e : EALREADY;
	} else {
		errno = EALREADY;
	}
	return true;
}

int sl__cw_soerror(int fd, int *err)
{
	uint32_t k = 0, st = look(fd, &k);
	if (k == 0 || st == CW_HELD || st == CW_SPENT)
		return 0;
	*err = st == CW_FAILED ? take_err(k) : 0;
	return 1;
}
