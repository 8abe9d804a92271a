/* SPDX-License-Identifier: MIT */
/*
 * epoll_tab.h - the epoll wrappers' mirror of the kernel's registrations,
 * shared by epoll.c (which keeps it) and epwait.c (which reads it to put
 * the program's data back into events): each fd's SL_EP_SLOTS slots, one
 * per epoll set it is in, and their lock.
 *
 * API: any thread; a slot is changed only under its fd's lock.
 */
#ifndef SLUICE_SHIM_EPOLL_TAB_H
#define SLUICE_SHIM_EPOLL_TAB_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "internal.h"
#include "state.h"

#define SL_EP_SLOTS 4
#define SL_EP_MAGIC 0x51ceull
#define SL_EP_TOKEN(fd, s) ((SL_EP_MAGIC << 48) | ((uint64_t)(s) << 32) | (uint32_t)(fd))
/* Bits that say what to wait for (the rest are flags, or always reported). */
#define SL_EP_EVBITS                                                                               \
	(EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM | EPOLLWRBAND |   \
	 EPOLLRDHUP | EPOLLMSG)

/* What the kernel holds for a registration. */
enum ep_ks {
	SL_KS_MASK = 0,   /* kevents */
	SL_KS_PARKED = 1, /* EPOLLONESHOT, no events: its events are dropped */
	SL_KS_ABSENT = 2, /* deleted (EPOLLEXCLUSIVE, everything hidden) */
};

struct ep_reg {
	_Atomic int32_t epfd1;   /* epoll fd + 1; 0: free slot */
	_Atomic uint32_t events; /* the program's events */
	_Atomic uint64_t data;   /* the program's epoll_data */
	uint32_t kevents;        /* (lock) events last given to the kernel */
	_Atomic uint8_t ks;      /* enum ep_ks; written under the lock */
	_Atomic uint8_t armed;   /* 0 once a oneshot event was delivered, until MOD */
};

struct ep_fd {
	atomic_flag lock;
	_Atomic uint8_t n; /* slots in use */
	struct ep_reg r[SL_EP_SLOTS];
	/* 128 bytes: epoll_wait finds an event's slot with a shift, not a
	 * multiply (the table is mapped; only the pages of fds in epoll sets
	 * are ever touched). */
	uint8_t pad[128 - 8 - SL_EP_SLOTS * sizeof(struct ep_reg)];
};
_Static_assert(sizeof(struct ep_fd) == 128, "an fd's slots fill 128 bytes");

extern struct ep_fd *sl__ep_table; /* [sl__fd_cap], mmap'd */
extern _Atomic uint32_t sl__ep_hi; /* 1 + the highest fd epoll_ctl was given */

static inline void sl__ep_lock(struct ep_fd *e)
{
	/* Acquire pairs with the release in ep_unlock: the slots as the
	 * last holder left them. */
	for (int spins = 0; atomic_flag_test_and_set_explicit(&e->lock, memory_order_acquire);
	     spins++)
		if (spins > 64)
			sched_yield();
}

static inline void sl__ep_unlock(struct ep_fd *e)
{
	atomic_flag_clear_explicit(&e->lock, memory_order_release);
}

static inline bool sl__ep_has(int fd)
{
	/* Relaxed: a hint; the slots are read under the lock. */
	return sl__ep_table != NULL && (unsigned)fd < sl__fd_cap &&
	       atomic_load_explicit(&sl__ep_table[fd].n, memory_order_relaxed) != 0;
}

/* Give the kernel what slot s of fd should hold now (its events without
 * the bits `hidden`). Lock held. Returns 0, or -1 with errno if the kernel
 * refused (the registration is gone). */
int sl__ep_apply(int fd, int s, uint32_t hidden);

#endif /* SLUICE_SHIM_EPOLL_TAB_H */
