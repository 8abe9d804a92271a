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
 * fd and fcntl(F_DUPFD) (the new fd), and refreshed after connect (the peer
 * changed). Modules with per-fd state of their own (ready.c, epoll.c)
 * register a forget hook, run by sl__fd_forget: closing an fd is this one
 * call. An fd closed behind our back (fclose() closes inside libc,
 * where no wrapper sees it) and reused may keep a stale class; socket(),
 * socketpair() and accept() forget their new fds for that reason.
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
 * MAP_NORESERVE, so only the pages of fds in use are ever resident.
 *
 * Thread-safety: all functions are thread-safe. Two threads classifying the
 * same fd agree through the BUSY bit; the loser waits for the winner.
 */
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/un.h>

#include "fd.h"
#include "log.h"
#include "real.h"
#include "match.h"
#include "scope.h"
#include "shm.h"
#include "state.h"

_Atomic uint8_t sl__fdbits[SL_FD_LIMIT];

struct conn {
	_Atomic uint32_t refs; /* fds referring to the connection; 0 = free */
	uint32_t n;
	struct sl_limiter *lims[SL_CONN_RULES];
};

struct sl_fdrec *sl__fdrecs;  /* [sl__fd_cap], mmap'd by sl__fdtab_init_unsync */
static struct conn *conn_table;    /* [sl__fd_cap] */
static _Atomic int big_fd_logged;
static _Atomic uint32_t busy_hi; /* 1 + the highest fd ever classified */
/* What other modules do when an fd number is forgotten (init only). */
static void (*forget_hooks[4])(int fd);
static unsigned n_forget_hooks;

/* Allocate the records (once; later calls just clear them). Not
 * thread-safe: init only. Returns 0 or -1. */
int sl__fdtab_init_unsync(void)
{
	if (sl__fdrecs == NULL || conn_table == NULL) {
		if (sl__fdrecs == NULL)
			sl__fdrecs = sl__map(sizeof(struct sl_fdrec) * sl__fd_cap);
		if (conn_table == NULL)
			conn_table = sl__map(sizeof(struct conn) * sl__fd_cap);
		/* Fresh mappings are zero, and so is sl__fdbits until the first
		 * init (no wrapper sets a bit before it): clearing them would
		 * only make 10 MB resident in every process. */
		return sl__fdrecs == NULL || conn_table == NULL ? -1 : 0;
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
		memset(conn_table, 0, sizeof(struct conn) * sl__fd_cap);
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
	r->family = domain == AF_INET ? SL_FAM_INET : domain == AF_INET6 ? SL_FAM_INET6
			  : domain == AF_UNIX ? SL_FAM_UNIX : 0;
	r->type = type == SOCK_STREAM ? SL_TYPE_STREAM : type == SOCK_DGRAM ? SL_TYPE_DGRAM : 0;
	r->stream = type == SOCK_STREAM;
	if (r->family == 0)
		return 0;
	struct sockaddr_storage ss;
	l = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &l) == 0)
		sl__addr_from(&r->local, (struct sockaddr *)&ss, l);
	l = sizeof(ss);
	if (getpeername(fd, (struct sockaddr *)&ss, &l) == 0)
		sl__addr_from(&r->peer, (struct sockaddr *)&ss, l);
	uint32_t fits = sl__match_socket(r->family, r->type);
	for (int k = 0; k < SL_K_COUNT; k++)
		r->cand[k] = sl__st.kind_rules[k] & fits;
	r->match[SL_K_CONNECT] = r->cand[SL_K_CONNECT];
	r->match[SL_K_ACCEPT] = sl__match(r->cand[SL_K_ACCEPT], r->family, r->type, &r->local);
	const struct sl_addr *peer = r->peer.family != 0 ? &r->peer : NULL;
	r->match[SL_K_SEND] = sl__match(r->cand[SL_K_SEND], r->family, r->type, peer);
	r->match[SL_K_RECV] = sl__match(r->cand[SL_K_RECV], r->family, r->type, peer);
	return 1;
}

/* Fresh per-fd limiters for fd (a newly classified socket). */
static void fd_limiters_reset(int fd)
{
	if ((unsigned)fd < sl__fd_cap && sl__st.fd_lims != NULL)
		sl__rules_reset_row(&sl__st.fd_lims[(size_t)fd * sl__st.n_fd_rules], SL_SCOPE_FD);
}

/* Copy a published record, keeping the live conn field out of the copy's
 * business (callers never read it from a copy). */
static void fd_copy(const struct sl_fdrec *r, struct sl_fdrec *out)
{
	memcpy(out->cand, r->cand, sizeof(out->cand));
	memcpy(out->match, r->match, sizeof(out->match));
	out->family = r->family;
	out->type = r->type;
	out->stream = r->stream;
	out->peer = r->peer;
	out->local = r->local;
	atomic_store_explicit(&out->conn, 0, memory_order_relaxed);
}

/* The part of sl__fd_rec_miss for an fd whose record is not published: wait for
 * the thread classifying it, or classify it. b is the fd's bits as loaded.
 * Returns the record, or NULL if the call should pass through. */
static __attribute__((noinline)) const struct sl_fdrec *fd_rec_slow(int fd, uint8_t b)
{
	/* Relaxed: only bounds the scan after fork (one thread then). */
	uint32_t hi = atomic_load_explicit(&busy_hi, memory_order_relaxed);
	while (hi <= (uint32_t)fd &&
	       !atomic_compare_exchange_weak_explicit(&busy_hi, &hi, (uint32_t)fd + 1,
						      memory_order_relaxed, memory_order_relaxed))
		;
	for (int spins = 0;; spins++) {
		if (b & SL_FDB_READY)
			return &sl__fdrecs[fd];
		if (b & SL_FDB_BUSY) {
			if (spins > 1000)
				return NULL;
			sched_yield();
			b = atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire);
			continue;
		}
		/* Acquire on success: we own the record until we publish it. */
		if (atomic_compare_exchange_weak_explicit(&sl__fdbits[fd], &b, b | SL_FDB_BUSY,
							  memory_order_acquire,
							  memory_order_acquire))
			break;
	}
	struct sl_fdrec r;
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
	struct sl_fdrec *dst = &sl__fdrecs[fd];
	memcpy(dst->cand, r.cand, sizeof(r.cand));
	memcpy(dst->match, r.match, sizeof(r.match));
	dst->family = r.family;
	dst->type = r.type;
	dst->stream = r.stream;
	dst->peer = r.peer;
	dst->local = r.local;
	uint8_t pass = 0;
	for (int k = 0; k < SL_K_COUNT; k++)
		if (r.cand[k] == 0)
			pass |= (uint8_t)SL_FDB_PASS(k);
	/* Release: publishes the fields written above (pairs with the acquire
	 * loads in sl__fd_rec and above); then drop BUSY. */
	atomic_fetch_or_explicit(&sl__fdbits[fd], (uint8_t)(SL_FDB_READY | pass),
				 memory_order_release);
	atomic_fetch_and_explicit(&sl__fdbits[fd], (uint8_t)~(SL_FDB_BUSY | SL_FDB_KEEP),
				  memory_order_release);
	return dst;
}

const struct sl_fdrec *sl__fd_rec_miss(int fd)
{
	if (!sl__st.ready)
		return NULL;
	if ((unsigned)fd >= sl__fd_cap) {
		if (fd >= 0 && sl__st.active &&
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
	fd_copy(r, out);
	return true;
}

/* Give back one slot of conns limiter l (and uncount it if l is shared). */
static void conn_release(struct sl_limiter *l)
{
	sl_limiter_release(l, 1);
	sl__shm_hold(l, -1);
	sl__peer_unpin(l); /* last: l may be re-used once unpinned */
}

/* Drop one reference to connection record c (index + 1); the last one
 * gives back every slot it holds. */
static void conn_put(uint32_t c)
{
	struct conn *cn = &conn_table[c - 1];
	/* Copied before the reference is dropped: once refs is 0 another
	 * thread's sl__fd_set_conn may claim and rewrite the record. The
	 * creator wrote them before publishing c (release in fd_attach),
	 * and we hold a reference, so they are stable until the fetch_sub. */
	struct sl_limiter *lims[SL_CONN_RULES];
	uint32_t n = cn->n;
	memcpy(lims, cn->lims, sizeof(lims));
	/* acq_rel: release, so that this dropper's reads of the record happen
	 * before a later claimer rewrites it (the acquire CAS of refs in
	 * sl__fd_set_conn); acquire, so that the last dropper's releases come
	 * after every other dropper's reads. */
	if (atomic_fetch_sub_explicit(&cn->refs, 1, memory_order_acq_rel) != 1)
		return;
	for (uint32_t i = 0; i < n; i++)
		conn_release(lims[i]);
}

/* Mark fd unknown but keep its connection (its peer changed), and its
 * per-fd limiters if it was classified (it is the same socket: SL_FDB_KEEP
 * tells the reclassification not to reset them). */
void sl__fd_invalidate(int fd)
{
	if ((unsigned)fd >= sl__fd_cap)
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
	/* Relaxed: nothing is published by clearing. */
	uint8_t b = atomic_exchange_explicit(&sl__fdbits[fd], 0, memory_order_relaxed);
	if (!(b & SL_FDB_CONN))
		return;
	uint32_t c = atomic_exchange_explicit(&sl__fdrecs[fd].conn, 0, memory_order_acquire);
	if (c != 0)
		conn_put(c);
}

/* Make fd refer to connection record c (index + 1), already referenced. */
static void fd_attach(int fd, uint32_t c)
{
	/* Release: publishes the record's contents to the fd's closer. */
	uint32_t old = atomic_exchange_explicit(&sl__fdrecs[fd].conn, c, memory_order_acq_rel);
	atomic_fetch_or_explicit(&sl__fdbits[fd], (uint8_t)SL_FDB_CONN, memory_order_relaxed);
	if (old != 0)
		conn_put(old);
}

void sl__fd_dup(int oldfd, int newfd)
{
	sl__fd_forget(newfd);
	if ((unsigned)oldfd >= sl__fd_cap || (unsigned)newfd >= sl__fd_cap || sl__fdrecs == NULL)
		return;
	uint32_t c = atomic_load_explicit(&sl__fdrecs[oldfd].conn, memory_order_acquire);
	if (c == 0)
		return;
	/* Relaxed: the reference is taken while oldfd holds one, so the record
	 * cannot be freed under us (unless the program races close and dup). */
	atomic_fetch_add_explicit(&conn_table[c - 1].refs, 1, memory_order_relaxed);
	fd_attach(newfd, c);
}

void sl__fd_set_conn(int fd, struct sl_limiter *const *lims, unsigned n)
{
	if (n == 0)
		return;
	/* Each slot keeps its per=peer entry (given back by conn_release). */
	for (unsigned i = 0; i < n; i++)
		sl__peer_pin(lims[i]);
	if ((unsigned)fd >= sl__fd_cap || sl__fdrecs == NULL) {
		for (unsigned i = 0; i < n; i++)
			conn_release(lims[i]);
		return;
	}
	for (uint32_t probe = 0; probe < sl__fd_cap; probe++) {
		uint32_t i = ((uint32_t)fd + probe) % sl__fd_cap;
		uint32_t expect = 0;
		/* Acquire: the previous owner's last writes are done. */
		if (!atomic_compare_exchange_strong_explicit(&conn_table[i].refs, &expect, 1,
							     memory_order_acquire,
							     memory_order_relaxed))
			continue;
		struct conn *cn = &conn_table[i];
		cn->n = n > SL_CONN_RULES ? SL_CONN_RULES : n;
		for (unsigned j = 0; j < cn->n; j++)
			cn->lims[j] = lims[j];
		for (unsigned j = cn->n; j < n; j++)
			conn_release(lims[j]);
		fd_attach(fd, i + 1);
		return;
	}
	for (unsigned i = 0; i < n; i++)
		conn_release(lims[i]);
}

void sl__fdtab_after_fork_unsync(void)
{
	/* Only the forking thread lives on in the child: a BUSY bit another
	 * thread held while classifying would stay set for good. */
	const uint32_t hi = atomic_load_explicit(&busy_hi, memory_order_relaxed);
	for (uint32_t fd = 0; fd < hi; fd++)
		if (atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed) & SL_FDB_BUSY)
			atomic_fetch_and_explicit(&sl__fdbits[fd], (uint8_t)~SL_FDB_BUSY,
						  memory_order_relaxed);
}
