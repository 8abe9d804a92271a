/* SPDX-License-Identifier: MIT */
/*
 * fd.c - what the shim knows about each file descriptor.
 *
 * sl__fdbits[fd] is one byte per fd, tested by every wrapper: bit k set means
 * "classified, and no rule of call kind k can match this fd", so the call
 * goes straight to libc. 0 means unknown: the next wrapper that sees it
 * classifies the fd once (getsockopt SO_TYPE and SO_DOMAIN, getsockname,
 * getpeername; getsockopt through the table of real functions, the others
 * by their libc names, which test_shim_bigfd.c defines), stores the details
 * in sl__fdrecs[fd] and publishes the bits with a release. Files, pipes and
 * ttys end up with every pass bit set.
 *
 * The classification is forgotten on close, close_range, dup2/dup3 onto the
 * fd and fcntl(F_DUPFD) (the new fd), and by every call that hands out an
 * fd number (wrap_fd.c: open, pipe, eventfd, ... mark theirs "not a socket"
 * at once), also when made through syscall(); it is refreshed after connect
 * (the peer changed). Modules with per-fd state of their own (ready.c,
 * epoll.c) register a forget hook, run by sl__fd_forget: closing an fd is
 * this one call.
 *
 * Sockets are classified where they are made (socket, socketpair, accept:
 * sl__fd_created), a dup shares its original's classification, and the fds
 * a process inherits through exec are classified by the constructor
 * (sl__fd_scan_unsync, fdscan.c): so a process that later installs a seccomp filter
 * (sandbox.h), and the children it forks, already know their sockets, and
 * nothing asks the kernel once the filter is there. A socket that still
 * needs classifying then passes through, counted as unclassified.
 *
 * An fd may still change behind our back (fclose() and glibc's own opens
 * work inside libc, where no wrapper sees them; a raw system call
 * instruction). Each record keeps its socket's inode (st_dev, st_ino), and
 * sl__fd_same (fdscan.c) compares it with an fstat of the fd, only when a rule is
 * about to make a call wait or refuse it (act.c): a stale record may charge
 * a call, never hold it back, and the unmatched path pays nothing.
 *
 * Connection records count the slots of conns rules: a connect or accept
 * takes one slot of each matching conns limiter and stores them in a record
 * that every fd of the connection (dup) refers to; the last close gives the
 * slots back. Records live in a flat array as large as the fd table (a live
 * record is referenced by at least one fd, so it cannot run out), found by
 * probing from the fd's own index.
 *
 * fds at or above sl__fd_cap are not tracked: their calls pass through,
 * with one warning. The cap is the RLIMIT_NOFILE hard limit when the tables
 * are first mapped (so a process that may open a million fds tracks them
 * all), at least SL_FD_MIN, at most SL_FD_LIMIT; the tables are mapped
 * MAP_NORESERVE, so only the pages of fds in use are ever resident. When
 * the address space for the cap cannot be reserved (a low RLIMIT_AS), the
 * cap is SL_FD_MIN, or if that fails too the soft RLIMIT_NOFILE (at least
 * 1024): fds above it pass through, with the warning below.
 *
 * Thread-safety: all functions are thread-safe. Two threads classifying the
 * same fd agree through the BUSY bit; the loser waits for the winner.
 */
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <string.h>
#include <dirent.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "conn.h"
#include "fd.h"
#include "record.h"
#include "log.h"
#include "real.h"
#include "match.h"
#include "sandboxed.h"
#include "scope.h"
#include "shm.h"
#include "state.h"

_Atomic uint8_t sl__fdbits[SL_FD_LIMIT];

struct sl_fdrec *sl__fdrecs; /* [sl__fd_cap], mmap'd by sl__fdtab_init_unsync */
static _Atomic int big_fd_logged;
_Atomic uint32_t sl__fd_busy_hi; /* 1 + the highest fd ever classified */
/* What other modules do when an fd number is forgotten (init only). */
static void (*forget_hooks[8])(int fd);
static unsigned n_forget_hooks;

/* Allocate the records (once; later calls just clear them). Not
 * thread-safe: init only. Returns 0 or -1. */
int sl__fdtab_init_unsync(void)
{
	if (sl__fdrecs == NULL || !sl__conn_mapped()) {
		if (sl__fdrecs == NULL)
			sl__fdrecs = sl__map(sizeof(struct sl_fdrec) * sl__fd_cap);
		/* Fresh mappings are zero, and so is sl__fdbits until the first
		 * init (no wrapper sets a bit before it): clearing them would
		 * only make 10 MB resident in every process. */
		return sl__fdrecs == NULL || sl__conn_init_unsync(false) != 0 ? -1 : 0;
	}
	sl__fdtab_reset_unsync();
	return 0;
}

void sl__fdtab_reset_unsync(void)
{
	for (size_t i = 0; i < sl__fd_cap; i++)
		atomic_store_explicit(&sl__fdbits[i], 0, memory_order_relaxed);
	if (sl__fdrecs != NULL) {
		memset(sl__fdrecs, 0, sizeof(struct sl_fdrec) * sl__fd_cap);
		sl__conn_init_unsync(true);
	}
}

/* Fill *r from the kernel's view of socket fd. Returns 1 for a socket, 0 for
 * something else (pass through for good), -1 if fd is not open. */
static int fd_classify(int fd, struct sl_fdrec *r)
{
	int type = 0, domain = 0;
	socklen_t l = sizeof(type);
	memset(r, 0, sizeof(*r));
	if (SL_REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &l) < 0)
		return errno == EBADF ? -1 : 0;
	l = sizeof(domain);
	if (SL_REAL(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l) < 0)
		return 0;
	r->family = (uint8_t)sl_addr_fam_bit(domain);
	r->type = (uint8_t)sl_addr_type_bit(type);
	r->stream = type == SOCK_STREAM;
	if (r->family == 0)
		return 0;
	struct stat st;
	if (fstat(fd, &st) == 0) {
		r->dev = (uint64_t)st.st_dev;
		r->ino = (uint64_t)st.st_ino;
	}
	struct sockaddr_storage ss;
	l = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &l) == 0)
		sl_addr_from(&r->local, (struct sockaddr *)&ss, l);
	l = sizeof(ss);
	if (getpeername(fd, (struct sockaddr *)&ss, &l) == 0)
		sl_addr_from(&r->peer, (struct sockaddr *)&ss, l);
	uint32_t fits = sl_match_socket(&sl__st.policy, r->family, r->type);
	for (int k = 0; k < SL_K_COUNT; k++)
		r->cand[k] = sl__st.kind_rules[k] & fits;
	r->match[SL_K_CONNECT] = r->cand[SL_K_CONNECT];
	r->match[SL_K_ACCEPT] = sl_match(&sl__st.policy, r->cand[SL_K_ACCEPT], r->family, r->type,
					 &r->local);
	const struct sl_addr *peer = r->peer.family != 0 ? &r->peer : NULL;
	r->match[SL_K_SEND] = sl_match(&sl__st.policy, r->cand[SL_K_SEND], r->family, r->type,
				       peer);
	r->match[SL_K_RECV] = sl_match(&sl__st.policy, r->cand[SL_K_RECV], r->family, r->type,
				       peer);
	r->turn = sl__turn_of(r->ino); /* classified again, it keeps its turns */
	r->cand[SL_K_SEND] |= r->turn;
	r->cand[SL_K_RECV] |= r->turn;
	return 1;
}

/* Fresh per-fd limiters for fd (a newly classified socket). */
static void fd_limiters_reset(int fd)
{
	if ((unsigned)fd < sl__fd_cap && sl__st.fd_lims != NULL)
		sl__rules_reset_row(&sl__st.fd_lims[(size_t)fd * sl__st.n_fd_rules], SL_SCOPE_FD);
}

/* Every field of r but the live conn field into out (fd's record: through
 * rec_rewrite), the credit keys for fd. */
static void rec_fill(struct sl_fdrec *out, const struct sl_fdrec *r, int fd)
{
	memcpy(out->cand, r->cand, sizeof(out->cand));
	memcpy(out->match, r->match, sizeof(out->match));
	out->family = r->family;
	out->type = r->type;
	out->stream = r->stream;
	out->fast = 0;
	out->ckey[0] = out->ckey[1] = 0;
	for (int k = 0; k < SL_K_COUNT; k++) {
		const uint32_t m = r->match[k];
		if (m != 0 && (m & ~sl__st.fast_rules) == 0)
			out->fast |= (uint16_t)SL_FDR_FAST(k);
		const uint32_t credit = k == SL_K_RECV ? sl__st.credit_in_rules
						       : sl__st.credit_rules;
		/* Credit pays sends and receives only. */
		if ((k != SL_K_SEND && k != SL_K_RECV) || m == 0 || (m & credit) == 0)
			continue;
		if ((m & (m - 1)) != 0) {
			/* Two rules or more: each its own credit, if all are
			 * buckets (no window: fast_take_multi's order). */
			if ((m & ~(sl__st.mcredit_rules & credit)) == 0) {
				out->fast |= (uint16_t)SL_FDR_MCREDIT(k);
				SL_FDR_CKEY(out, k) = sl__fd_credit_key(fd, r->ino);
			}
			continue;
		}
		if (sl__fast_keyed(&sl__st.fast[__builtin_ctz(m)])) {
			out->fast |= (uint16_t)SL_FDR_KCREDIT(k);
			SL_FDR_CKEY(out, k) = sl__fd_credit_key(fd, r->ino);
		} else {
			out->fast |= (uint16_t)SL_FDR_CREDIT(k);
		}
	}
	out->peer = r->peer;
	out->local = r->local;
	out->dev = r->dev;
	out->ino = r->ino;
	out->turn = r->turn;
	if (r->turn != 0) /* every send and receive to the general paths */
		out->fast &= (uint16_t)(SL_FDR_FAST(SL_K_CONNECT) | SL_FDR_FAST(SL_K_ACCEPT));
}

/* Rewrite fd's record with r. The per=peer entries the fd pinned go before
 * (its peer may be another now) and again after: a fast call that read the
 * old peer and pinned its entry in between is undone by the second drop,
 * or sees the new peer itself (sl__peer_fd_lim). */
static void rec_rewrite(int fd, const struct sl_fdrec *r)
{
	sl__peer_fd_drop(fd);
	rec_fill(&sl__fdrecs[fd], r, fd);
	sl__peer_fd_drop(fd);
}

/* Copy a published record, keeping the live conn field out of the copy's
 * business (callers never read it from a copy). */
static void fd_copy(int fd, const struct sl_fdrec *r, struct sl_fdrec *out)
{
	rec_fill(out, r, fd);
	atomic_store_explicit(&out->conn, 0, memory_order_relaxed);
}

/* The fd byte's pass bits for a record: kind k passes if no rule of it is a
 * candidate or, for a connected stream socket's sends and receives, if none
 * matches: its peer is its only one (a connect reclassifies it); a datagram
 * socket's sendto may name another. */
static uint8_t rec_pass(const struct sl_fdrec *r)
{
	const bool fixed = r->stream && r->peer.family != 0;
	uint8_t pass = 0;
	for (int k = 0; k < SL_K_COUNT; k++)
		if (r->cand[k] == 0 || (fixed && (k == SL_K_SEND || k == SL_K_RECV) &&
					r->match[k] == 0 && r->turn == 0))
			pass |= (uint8_t)SL_FDB_PASS(k);
	return pass;
}

static const struct sl_fdrec *fd_classify_owned(int fd, uint8_t b);

/* The part of sl__fd_rec_miss for an fd whose record is not published: wait for
 * the thread classifying it, or classify it. b is the fd's bits as loaded.
 * Returns the record, or NULL if the call should pass through. */
static __attribute__((noinline)) const struct sl_fdrec *fd_rec_slow(int fd, uint8_t b)
{
	/* Relaxed: only bounds the scan after fork (one thread then). */
	sl__fd_raise_hi(&sl__fd_busy_hi, fd);
	for (;;) {
		if (b & SL_FDB_READY)
			return &sl__fdrecs[fd];
		if (b & SL_FDB_BUSY) {
			b = sl__fd_wait_classified(fd, b);
			if (b & SL_FDB_BUSY)
				return NULL; /* our own classification, re-entered */
			continue;
		}
		/* Acquire on success: we own the record until we publish it. */
		if (atomic_compare_exchange_weak_explicit(&sl__fdbits[fd], &b, b | SL_FDB_BUSY,
							  memory_order_acquire,
							  memory_order_acquire))
			break;
	}
	const int outer = sl__fd_classifying;
	sl__fd_classifying = fd + 1;
	const struct sl_fdrec *rec = fd_classify_owned(fd, b);
	sl__fd_classifying = outer;
	return rec;
}

/* fd_rec_slow's classification of fd, BUSY set by this thread (b: the bits
 * before). Clears BUSY on every path. */
static const struct sl_fdrec *fd_classify_owned(int fd, uint8_t b)
{
	struct sl_fdrec r;
	if (sl__sandboxed() && sl__st.active) {
		/* No query may be made any more (sandbox.h): the fd passes
		 * through for good, counted once. Relaxed, as for big fds. */
		atomic_fetch_or_explicit(&sl__fdbits[fd], (uint8_t)SL_FDB_PASS_ALL,
					 memory_order_relaxed);
		atomic_fetch_and_explicit(&sl__fdbits[fd], (uint8_t)~SL_FDB_BUSY,
					  memory_order_release);
		if ((b & SL_FDB_PASS_ALL) != SL_FDB_PASS_ALL)
			sl__rec_unclassified();
		return NULL;
	}
	int saved = errno;
	int kind = sl__st.active ? fd_classify(fd, &r) : 0;
	errno = saved;
	if (kind < 0) {
		atomic_fetch_and_explicit(&sl__fdbits[fd], (uint8_t)~SL_FDB_BUSY,
					  memory_order_release);
		return NULL;
	}
	if (kind == 0)
		memset(&r, 0, sizeof(r));
	else if (!(b & SL_FDB_KEEP)) /* a new socket, not a reconnected one */
		fd_limiters_reset(fd);
	uint32_t any = 0;
	for (int k = 0; k < SL_K_COUNT; k++)
		any |= kind > 0 ? r.cand[k] : 0;
	if (any != 0)
		sl__rec_publish(); /* a rule may apply: sluice stat shows us */
	struct sl_fdrec *dst = &sl__fdrecs[fd];
	rec_rewrite(fd, &r);
	uint8_t pass = rec_pass(&r);
	/* Release: publishes the fields written above (pairs with the acquire
	 * loads in sl__fd_rec and above); then drop BUSY. */
	atomic_fetch_or_explicit(&sl__fdbits[fd], (uint8_t)(SL_FDB_READY | pass),
				 memory_order_release);
	atomic_fetch_and_explicit(&sl__fdbits[fd], (uint8_t) ~(SL_FDB_BUSY | SL_FDB_KEEP),
				  memory_order_release);
	return dst;
}

const struct sl_fdrec *sl__fd_rec_miss(int fd)
{
	if (!sl__st.ready)
		return NULL;
	if ((unsigned)fd >= sl__fd_cap) {
		if (fd >= 0 && sl__st.active && !sl__sandboxed() &&
		    !atomic_exchange_explicit(&big_fd_logged, 1, memory_order_relaxed))
			sl_log(SL_LOG_WARN,
			       "fd %d is beyond the table (%u fds: the RLIMIT_NOFILE hard limit "
			       "at start, at most %u): such fds pass through",
			       fd, sl__fd_cap, SL_FD_LIMIT);
		/* Relaxed: the bits carry nothing else. Every later call on
		 * this number passes at once; no record is ever READY here. */
		if ((unsigned)fd < SL_FD_LIMIT)
			atomic_fetch_or_explicit(&sl__fdbits[fd], (uint8_t)SL_FDB_PASS_ALL,
						 memory_order_relaxed);
		return NULL;
	}
	/* Acquire, as in sl__fd_rec: fd_rec_slow returns at once if the
	 * record was published meanwhile. */
	return fd_rec_slow(fd, atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire));
}

bool sl__fd_get(int fd, struct sl_fdrec *out)
{
	const struct sl_fdrec *r = sl__fd_rec(fd);
	if (r == NULL)
		return false;
	fd_copy(fd, r, out);
	return true;
}

/* Mark fd unknown but keep its connection (its peer changed), and its
 * per-fd limiters if it was classified (it is the same socket: SL_FDB_KEEP
 * tells the reclassification not to reset them). */
void sl__fd_invalidate(int fd)
{
	/* In a sandbox the fd could not be classified again: it keeps what
	 * is known (its rules, its old addresses). */
	if ((unsigned)fd >= sl__fd_cap || sl__sandboxed())
		return;
	/* Relaxed: the next reader reclassifies and publishes with release. */
	uint8_t b = atomic_fetch_and_explicit(&sl__fdbits[fd], (uint8_t)(SL_FDB_CONN | SL_FDB_KEEP),
					      memory_order_relaxed);
	if ((b & SL_FDB_READY) && (b & SL_FDB_PASS_ALL) != SL_FDB_PASS_ALL)
		atomic_fetch_or_explicit(&sl__fdbits[fd], (uint8_t)SL_FDB_KEEP,
					 memory_order_relaxed);
}

void sl__fd_on_forget_unsync(void (*hook)(int fd))
{
	for (unsigned i = 0; i < n_forget_hooks; i++)
		if (forget_hooks[i] == hook)
			return;
	if (n_forget_hooks < sizeof(forget_hooks) / sizeof(forget_hooks[0]))
		forget_hooks[n_forget_hooks++] = hook;
}

void sl__fd_forget(int fd)
{
	for (unsigned i = 0; i < n_forget_hooks; i++)
		forget_hooks[i](fd);
	if ((unsigned)fd >= sl__fd_cap || sl__fdrecs == NULL)
		return;
	sl__peer_fd_drop(fd);
	/* Relaxed: nothing is published by clearing. */
	uint8_t b = atomic_exchange_explicit(&sl__fdbits[fd], 0, memory_order_relaxed);
	if (!(b & SL_FDB_CONN))
		return;
	/* seq_cst: a deferred connect being started on fd checks that fd still
	 * refers to its record after it marked it started; this closer looks
	 * at that mark after the exchange (conn_hooks->closing). */
	uint32_t c = atomic_exchange(&sl__fdrecs[fd].conn, 0);
	if (c != 0)
		sl__conn_closing(fd, c);
}

/* Make fd refer to connection record c (index + 1), already referenced. */
static void fd_attach(int fd, uint32_t c)
{
	/* Release: publishes the record's contents to the fd's closer. */
	uint32_t old = atomic_exchange_explicit(&sl__fdrecs[fd].conn, c, memory_order_acq_rel);
	atomic_fetch_or_explicit(&sl__fdbits[fd], (uint8_t)SL_FDB_CONN, memory_order_relaxed);
	if (old != 0)
		sl__conn_put(old);
}

void sl__fd_dup_class(int oldfd, int newfd)
{
	uint8_t ob = atomic_load_explicit(&sl__fdbits[oldfd], memory_order_acquire);
	if (!(ob & SL_FDB_READY) && !sl__sandboxed() && sl__st.active) {
		int saved = errno;
		(void)sl__fd_rec(oldfd);
		errno = saved;
		ob = atomic_load_explicit(&sl__fdbits[oldfd], memory_order_acquire);
	}
	if (!(ob & SL_FDB_READY))
		return;
	/* oldfd's record is published (acquire above) and rewritten only if
	 * oldfd is reclassified: a program racing that with its own dup gets
	 * one of the two, as it would with the kernel. */
	struct sl_fdrec r;
	fd_copy(oldfd, &sl__fdrecs[oldfd], &r);
	uint8_t pass = rec_pass(&r);
	rec_rewrite(newfd, &r);
	if (pass != SL_FDB_PASS_ALL)
		fd_limiters_reset(newfd);
	/* Release: publishes the record just written (as in fd_rec_slow). */
	atomic_fetch_or_explicit(&sl__fdbits[newfd], (uint8_t)(SL_FDB_READY | pass),
				 memory_order_release);
}

void sl__fd_rewrite(int fd, const struct sl_fdrec *r)
{
	rec_rewrite(fd, r);
}

void sl__fd_set_conn(int fd, struct sl_limiter *const *lims, unsigned n)
{
	if (n == 0)
		return;
	/* Each slot keeps its per=peer entry (given back by conn_release). */
	for (unsigned i = 0; i < n; i++)
		sl__peer_pin(lims[i]);
	uint32_t c = 0;
	if ((unsigned)fd < sl__fd_cap && sl__fdrecs != NULL)
		c = sl__conn_claim(fd, lims, n);
	for (unsigned j = c != 0 ? SL_CONN_RULES : 0; j < n; j++)
		sl__conn_release(lims[j]);
	if (c != 0)
		fd_attach(fd, c);
}

uint32_t sl__fd_conn_claim(int fd, struct sl_limiter *const *lims, unsigned n)
{
	if (n == 0 || n > SL_CONN_RULES || (unsigned)fd >= sl__fd_cap || sl__fdrecs == NULL)
		return 0;
	return sl__conn_claim(fd, lims, n);
}

void sl__fd_conn_attach(int fd, uint32_t c)
{
	fd_attach(fd, c);
}

void sl__fdtab_after_fork_unsync(void)
{
	/* Only the forking thread lives on in the child: a BUSY bit another
	 * thread held while classifying would stay set for good. */
	const uint32_t hi = atomic_load_explicit(&sl__fd_busy_hi, memory_order_relaxed);
	for (uint32_t fd = 0; fd < hi; fd++)
		if (atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed) & SL_FDB_BUSY)
			atomic_fetch_and_explicit(&sl__fdbits[fd], (uint8_t)~SL_FDB_BUSY,
						  memory_order_relaxed);
}

void sl__fd_created(int fd)
{
	int saved = errno;
	sl__fd_forget(fd);
	/* Classified now, while the kernel may still be asked (sandbox.h). */
	if (sl__st.active && !sl__sandboxed())
		(void)sl__fd_rec(fd);
	errno = saved;
}

void sl__fd_opened(int fd)
{
	int saved = errno;
	sl__fd_forget(fd);
	if ((unsigned)fd < sl__fd_cap && sl__fdrecs != NULL && sl__st.ready) {
		static const struct sl_fdrec none;
		rec_rewrite(fd, &none);
		/* Release: publishes the cleared record (as in fd_rec_slow). */
		atomic_fetch_or_explicit(&sl__fdbits[fd], (uint8_t)(SL_FDB_READY | SL_FDB_PASS_ALL),
					 memory_order_release);
	}
	errno = saved;
}
