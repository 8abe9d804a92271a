/* SPDX-License-Identifier: MIT */
/*
 * fd.h - what the shim knows about each file descriptor (fd.c).
 *
 * API: every function is thread-safe unless its name ends in _unsync (init
 * and the fork child). The inline tests below are the hot path of every
 * wrapper.
 */
#ifndef SLUICE_SHIM_FD_H
#define SLUICE_SHIM_FD_H

#include "addr.h"
#include "conn.h"
#include "internal.h"
#include "state.h"

/* close_range's flags (linux/close_range.h): UNSHARE and CLOEXEC. */
#define SL_CLOSE_RANGE_CLOEXEC (1u << 2)
#define SL_CLOSE_RANGE_FLAGS ((1u << 1) | SL_CLOSE_RANGE_CLOEXEC)

/* The fd byte. */
#define SL_FDB_PASS(k) (1u << (k)) /* classified: no rule of kind k can match */
#define SL_FDB_PASS_ALL 0x0fu
#define SL_FDB_READY 0x10u /* the fd's record is published */
#define SL_FDB_BUSY 0x20u  /* a thread is classifying it */
#define SL_FDB_CONN 0x40u  /* the fd refers to a connection record */
#define SL_FDB_KEEP 0x80u  /* reclassify, but keep the per-fd limiters (connect) */

#define SL_FDR_FAST(k) (1u << (k)) /* sl_fdrec.fast */
/* sl_fdrec.fast: match[k] is one rule of sl__st.credit_rules (a receive:
 * one counting bytes): it tries this thread's credit first (credit.h). */
#define SL_FDR_CREDIT(k) (1u << (4 + (k)))
/* The same for a per=fd or per=peer rule, whose credit must show the
 * record's ckey[k]: the wrappers' hot paths only if it does (sl__xfer_credit),
 * so that a thread serving many fds in turn does not try them. */
#define SL_FDR_KCREDIT(k) (1u << (8 + (k)))
#define SL_FDR_ANY_CREDIT(k) (SL_FDR_CREDIT(k) | SL_FDR_KCREDIT(k))
/* match[k] is two or more rules, all of sl__st.mcredit_rules (a receive's:
 * counting bytes): the call tries this thread's credit of each (two rules:
 * hot2_NAME, xfer_hot.h; else or a credit short: sl__mcredit_spend);
 * ckey[k] is the fd's key, which a
 * keyed rule's credit must show. */
#define SL_FDR_MCREDIT(k) (1u << (12 + (k)))
/* rec's credit key for a send (SL_K_SEND) or a receive (SL_K_RECV). */
#define SL_FDR_CKEY(rec, k) ((rec)->ckey[(k)-SL_K_SEND])

struct sl_fdrec {
	uint32_t cand[SL_K_COUNT];  /* rules whose family and type fit */
	uint32_t match[SL_K_COUNT]; /* cand narrowed by the address: peer for
	                               send/recv, local for accept */
	uint8_t family;             /* SL_FAM_* bit */
	uint8_t type;               /* SL_TYPE_* bit, 0 for other types */
	uint8_t stream;             /* SOCK_STREAM: byte transfers may be split */
	uint16_t fast;              /* SL_FDR_FAST(k): match[k] is not empty and all
	                               fast rules (state.h): the fast paths apply;
	                               and SL_FDR_CREDIT(k), SL_FDR_KCREDIT(k),
	                               SL_FDR_MCREDIT(k) */
	struct sl_addr peer;        /* family 0 if not connected */
	struct sl_addr local;
	_Atomic uint32_t conn; /* connection record index + 1, 0 = none */
	uint64_t dev, ino;     /* the socket's identity (fstat), checked by
	                              sl__fd_same before a rule acts on the fd */
	uint64_t ckey[2];      /* SL_FDR_CKEY: with SL_FDR_KCREDIT(k) or
	                     SL_FDR_MCREDIT(k) the key a keyed
	                     thread's credit of match[k] must show (credit.h:
	                     sl__fd_credit_key of the fd and socket), else 0 */
	/* conns:adaptive rules whose turns this accepted connection has
	 * (turn.c, sl__fd_set_turn), 0 for every other socket: its sends and
	 * receives then go through the general paths (no pass bit, no fast
	 * bit), and cand[] of both holds these rules, so that a call finds
	 * the record (sl__xfer_rec) though no send or recv rule matches. */
	uint32_t turn;
	uint32_t pad; /* 128 bytes: a record's address is a shift */
};
_Static_assert(sizeof(struct sl_fdrec) == 128, "fd.h: a record is 128 bytes (pad)");

/* The key of a keyed (per=fd, per=peer) rule's credit on fd, whose socket
 * has inode ino (credit.h): never 0. */
static inline uint64_t sl__fd_credit_key(int fd, uint64_t ino)
{
	return (uint64_t)1 << 63 | ino << 20 | ((uint64_t)fd & (SL_FD_LIMIT - 1));
}

extern _Atomic uint8_t sl__fdbits[SL_FD_LIMIT];
extern struct sl_fdrec *sl__fdrecs; /* [sl__fd_cap] */
/* 1 + the highest fd ever classified: bounds the scans of the table. */
extern _Atomic uint32_t sl__fd_busy_hi;

/* True if a call of kind k on fd passes straight through. The relaxed load
 * is enough for the pass bit: it carries no data; the slow path re-reads
 * with acquire. */
static inline bool sl__fd_pass(int fd, enum sl_kind_call k)
{
	return (unsigned)fd < SL_FD_LIMIT &&
	       (atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed) & SL_FDB_PASS(k));
}

/* True if anything at all is known of fd (close and fclose forget only
 * then). Relaxed: a hint; sl__fd_forget exchanges the byte. */
static inline bool sl__fd_known(int fd)
{
	return (unsigned)fd < SL_FD_LIMIT &&
	       atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed) != 0;
}

/* The part of sl__fd_rec past its inline test. */
const struct sl_fdrec *sl__fd_rec_miss(int fd);
/* fd + 1 while the calling thread classifies fd, else 0 (fdwait.c). */
extern __thread int sl__fd_classifying;
/* Waits until no other thread classifies fd (SL_FDB_BUSY in b, the bits as
 * loaded) and returns the fd's bits; errno kept. If the calling thread is
 * the classifier (a signal handler re-entered), returns b at once. */
uint8_t sl__fd_wait_classified(int fd, uint8_t b);
/* fd's published record, classifying it first if needed, or NULL if the
 * call should pass through (not a socket, no rules, fd too large). The
 * record is rewritten only when fd is reclassified (after a close, dup2
 * onto it or a connect on it), so a caller copies out what it uses before
 * anything that may race with that. A classified fd's record is one load and
 * a test away (acquire: READY means the record's fields are complete; it is
 * set for fds below sl__fd_cap only, after the state's init). */
static inline const struct sl_fdrec *sl__fd_rec(int fd)
{
	if ((unsigned)fd < SL_FD_LIMIT &&
	    (atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire) & SL_FDB_READY))
		return &sl__fdrecs[fd];
	return sl__fd_rec_miss(fd);
}
/* The same, copied into *out. */
bool sl__fd_get(int fd, struct sl_fdrec *out);

/* Forget what is known of fd: it was closed or replaced, or its number is
 * new. Runs the forget hooks, then releases the connection slots it held
 * when it was the last fd of the connection. */
void sl__fd_forget(int fd);
/* Modules that keep state per fd number (ready.c, epoll.c) register what
 * to do when a number is forgotten. Init only; registering twice is one. */
void sl__fd_on_forget_unsync(void (*hook)(int fd));
/* newfd (just forgotten) is a dup of oldfd: give it oldfd's classification
 * (no query: it is the same socket), classifying oldfd first if it is
 * unknown and queries are allowed. Its per-fd limiters start afresh, as for
 * any socket new to its number. The dups themselves: conn.h. */
void sl__fd_dup_class(int oldfd, int newfd);
/* fd is a new socket (socket, socketpair, accept): forget what the number
 * meant and classify it now, while the process may still ask the kernel
 * (sandbox.h); errno is preserved. */
void sl__fd_created(int fd);
/* fd was just handed out by a call that never makes a socket (open, pipe,
 * eventfd, memfd_create, ...): forget what the number meant and mark it as
 * not a socket, with no system call. errno is preserved. */
void sl__fd_opened(int fd);
/* close_range(first, last, flags) is about to run: forget the fds it will
 * close (none if it would fail with EINVAL or only sets close-on-exec). */
void sl__fd_forget_range(unsigned first, unsigned last, int flags);
/* Record that fd holds one slot of each limiter in lims (a new connection). */
void sl__fd_set_conn(int fd, struct sl_limiter *const *lims, unsigned n);
/* A connection whose slots are taken later (a deferred connect,
 * connwait.c): claim a record for the slots of lims (n <= SL_CONN_RULES),
 * with one reference and no fd yet: index + 1, or 0 if none is free. */
uint32_t sl__fd_conn_claim(int fd, struct sl_limiter *const *lims, unsigned n);
/* Make fd refer to record c, whose reference the caller hands over. */
void sl__fd_conn_attach(int fd, uint32_t c);
/* Rewrite fd's published record with r (a copy sl__fd_get made, changed):
 * only for an fd no other thread can have yet (turn.c: just accepted). */
void sl__fd_rewrite(int fd, const struct sl_fdrec *r);
/* Mark fd unknown but keep its connection (connect changed its peer). */
void sl__fd_invalidate(int fd);
/* Allocate (once) and clear the table. Init only. Returns 0 or -1. */
int sl__fdtab_init_unsync(void);
void sl__fdtab_reset_unsync(void);
/* Classify again the sockets that a connect left to be reclassified on
 * their next call (SL_FDB_KEEP): before fork (pthread_atfork prepare) and
 * before a seccomp filter (sandbox.c), so that a process that sandboxes
 * itself, or its child, knows them. A scan of the fd bytes; system calls
 * only for those sockets. */
void sl__fdtab_classify_pending(void); /* fdscan.c */
/* Before fork: the conns slots of every connection a child inherits that a
 * fork shares go to family entries (conn.h: sl__conn_share). fdscan.c. */
void sl__fdtab_share_conns(void);
/* The child after fork: clear the BUSY bits of threads that are gone. */
void sl__fdtab_after_fork_unsync(void);

/* Raise *hi to at least fd + 1: a table's bound on the fds it has seen,
 * for the scans that clear it (a re-init, the child after fork). Relaxed:
 * a bound only, ordered by what its caller does next. */
static inline void sl__fd_raise_hi(_Atomic uint32_t *hi, int fd)
{
	uint32_t h = atomic_load_explicit(hi, memory_order_relaxed);
	while (h < (uint32_t)fd + 1 &&
	       !atomic_compare_exchange_weak_explicit(hi, &h, (uint32_t)fd + 1,
						      memory_order_relaxed, memory_order_relaxed))
		;
}

/* The rules whose turns the connection of socket inode ino has, 0: none
 * (turn.c; a record classified again keeps them). */
uint32_t sl__turn_of(uint64_t ino);

#endif /* SLUICE_SHIM_FD_H */
