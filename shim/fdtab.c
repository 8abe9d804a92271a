/*
 * fdtab.c - what the shim knows about each file descriptor.
 *
 * sl__fdbits[fd] is one byte per fd, tested by every wrapper: bit k set means
 * "classified, and no rule of call kind k can match this fd", so the call
 * goes straight to libc. 0 means unknown: the next wrapper that sees it
 * classifies the fd once (getsockopt SO_TYPE and SO_DOMAIN, getsockname,
 * getpeername), stores the details in sl__fdrecs[fd] and publishes the bits
 * with a release. Files, pipes and ttys end up with every pass bit set.
 *
 * The classification is forgotten on close, close_range, dup2/dup3 onto the
 * fd and fcntl(F_DUPFD) (the new fd), and refreshed after connect (the peer
 * changed). An fd closed behind our back (fclose() closes inside libc,
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
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/un.h>

#include "internal.h"
#include "record.h"

_Atomic uint8_t sl__fdbits[SL_FD_LIMIT];
uint32_t sl__fd_cap;

struct sl_conn {
	_Atomic uint32_t refs; /* fds referring to the connection; 0 = free */
	uint32_t n;
	struct sl_limiter *lims[SL_CONN_RULES];
};

struct sl_fdrec *sl__fdrecs;  /* [sl__fd_cap], mmap'd by sl__fdtab_init */
static struct sl_conn *sl_conns;    /* [sl__fd_cap] */
static _Atomic int sl_fd_big_logged;
static _Atomic uint32_t sl_fd_busy_hi; /* 1 + the highest fd ever classified */

/* Map `bytes` of zeroed private memory, reserved lazily. NULL on failure. */
void *sl__map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

#define SL_FD_PROBE_BYTES 512u

void sl__fd_cap_init_unsync(void)
{
	if (sl__fd_cap != 0)
		return; /* the tables are sized by it: it never changes */
	struct rlimit rl;
	uint64_t cap = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_max : 0;
	cap = cap < SL_FD_MIN ? SL_FD_MIN : cap > SL_FD_LIMIT ? SL_FD_LIMIT : cap;
	cap = (cap + 63) / 64 * 64; /* whole words of ready.c's bitmap */
	/* The tables sized by the cap take about SL_FD_PROBE_BYTES per fd of
	 * address space (reserved, not resident; 324 at this writing): under
	 * a low RLIMIT_AS (ulimit -v) fall back to SL_FD_MIN entries, then to
	 * the soft RLIMIT_NOFILE (at least 1024), rather than fail. */
	uint64_t soft = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (uint64_t)rl.rlim_cur : 0;
	soft = soft < 1024 ? 1024 : soft > SL_FD_MIN ? SL_FD_MIN : (soft + 63) / 64 * 64;
	const uint64_t tries[3] = { cap, SL_FD_MIN, soft };
	for (int t = 0; t < 3; t++) {
		if (tries[t] > cap)
			continue;
		cap = tries[t];
		void *probe = mmap(NULL, cap * SL_FD_PROBE_BYTES, PROT_NONE,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (probe != MAP_FAILED) {
			munmap(probe, cap * SL_FD_PROBE_BYTES);
			break;
		}
	}
	sl__fd_cap = (uint32_t)cap;
}

/* Allocate the records (once; later calls just clear them). Not
 * thread-safe: init only. Returns 0 or -1. */
int sl__fdtab_init_unsync(void)
{
	if (sl__fdrecs == NULL || sl_conns == NULL) {
		if (sl__fdrecs == NULL)
			sl__fdrecs = sl__map(sizeof(struct sl_fdrec) * sl__fd_cap);
		if (sl_conns == NULL)
			sl_conns = sl__map(sizeof(struct sl_conn) * sl__fd_cap);
		/* Fresh mappings are zero, and so is sl__fdbits until the first
		 * init (no wrapper sets a bit before it): clearing them would
		 * only make 10 MB resident in every process. */
		return sl__fdrecs == NULL || sl_conns == NULL ? -1 : 0;
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
		memset(sl_conns, 0, sizeof(struct sl_conn) * sl__fd_cap);
	}
}

/* An sl_addr from a sockaddr: IPv4-mapped IPv6 addresses count as IPv4,
 * AF_UNIX as family 1 with no address. False for other families. */
bool sl__addr_from(struct sl_addr *a, const struct sockaddr *sa, socklen_t len)
{
	memset(a, 0, sizeof(*a));
	if (sa == NULL || len < (socklen_t)sizeof(sa_family_t))
		return false;
	if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		a->family = 4;
		a->port = ntohs(in->sin_port);
		memcpy(a->addr, &in->sin_addr, 4);
		return true;
	}
	if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		a->port = ntohs(in6->sin6_port);
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			a->family = 4;
			memcpy(a->addr, &in6->sin6_addr.s6_addr[12], 4);
		} else {
			a->family = 6;
			memcpy(a->addr, &in6->sin6_addr, 16);
		}
		return true;
	}
	if (sa->sa_family == AF_UNIX) {
		a->family = 1;
		return true;
	}
	return false;
}

/* Fill *r from the kernel's view of socket fd. Returns 1 for a socket, 0 for
 * something else (pass through for good), -1 if fd is not open. */
static int sl_fd_classify(int fd, struct sl_fdrec *r)
{
	int type = 0, domain = 0;
	socklen_t l = sizeof(type);
	memset(r, 0, sizeof(*r));
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) < 0)
		return errno == EBADF ? -1 : 0;
	l = sizeof(domain);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &l) < 0)
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

/* Copy a published record, keeping the live conn field out of the copy's
 * business (callers never read it from a copy). */
static void sl_fd_copy(const struct sl_fdrec *r, struct sl_fdrec *out)
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
static __attribute__((noinline)) const struct sl_fdrec *sl_fd_rec_slow(int fd, uint8_t b)
{
	/* Relaxed: only bounds the scan after fork (one thread then). */
	uint32_t hi = atomic_load_explicit(&sl_fd_busy_hi, memory_order_relaxed);
	while (hi <= (uint32_t)fd &&
	       !atomic_compare_exchange_weak_explicit(&sl_fd_busy_hi, &hi, (uint32_t)fd + 1,
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
	int kind = sl__st.active ? sl_fd_classify(fd, &r) : 0;
	errno = saved;
	if (kind < 0) {
		atomic_fetch_and_explicit(&sl__fdbits[fd], (uint8_t)~SL_FDB_BUSY,
					  memory_order_release);
		return NULL;
	}
	if (kind == 0)
		memset(&r, 0, sizeof(r));
	else if (!(b & SL_FDB_KEEP)) /* a new socket, not a reconnected one */
		sl__scope_fd_reset(fd);
	uint32_t any = 0;
	for (int k = 0; k < SL_K_COUNT; k++)
		any |= kind > 0 ? r.cand[k] : 0;
	if (any != 0)
		sl__rec_publish(); /* a rule may apply: sluice stat shows us */
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
		    !atomic_exchange_explicit(&sl_fd_big_logged, 1, memory_order_relaxed))
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
	/* Acquire, as in sl__fd_rec: sl_fd_rec_slow returns at once if the
	 * record was published meanwhile. */
	return sl_fd_rec_slow(fd, atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire));
}

bool sl__fd_get(int fd, struct sl_fdrec *out)
{
	const struct sl_fdrec *r = sl__fd_rec(fd);
	if (r == NULL)
		return false;
	sl_fd_copy(r, out);
	return true;
}

/* Give back one slot of conns limiter l (and uncount it if l is shared). */
static void sl_conn_release(struct sl_limiter *l)
{
	sl_limiter_release(l, 1);
	sl__shm_hold(l, -1);
	sl__peer_unpin(l); /* last: l may be re-used once unpinned */
}

/* Drop one reference to connection record c (index + 1); the last one
 * gives back every slot it holds. */
static void sl_conn_put(uint32_t c)
{
	struct sl_conn *cn = &sl_conns[c - 1];
	/* Copied before the reference is dropped: once refs is 0 another
	 * thread's sl__fd_set_conn may claim and rewrite the record. The
	 * creator wrote them before publishing c (release in sl_fd_attach),
	 * and we hold a reference, so they are stable until the fetch_sub. */
	struct sl_limiter *lims[SL_CONN_RULES];
	uint32_t n = cn->n;
	memcpy(lims, cn->lims, sizeof(lims));
	/* acq_rel: the last dropper must see the lims written by the creator
	 * (release in sl__fd_set_conn) before releasing them. */
	if (atomic_fetch_sub_explicit(&cn->refs, 1, memory_order_acq_rel) != 1)
		return;
	for (uint32_t i = 0; i < n; i++)
		sl_conn_release(lims[i]);
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

void sl__fd_forget(int fd)
{
	sl__ready_forget(fd);
	if ((unsigned)fd >= sl__fd_cap || sl__fdrecs == NULL)
		return;
	/* Relaxed: nothing is published by clearing. */
	uint8_t b = atomic_exchange_explicit(&sl__fdbits[fd], 0, memory_order_relaxed);
	if (!(b & SL_FDB_CONN))
		return;
	uint32_t c = atomic_exchange_explicit(&sl__fdrecs[fd].conn, 0, memory_order_acquire);
	if (c != 0)
		sl_conn_put(c);
}

/* Make fd refer to connection record c (index + 1), already referenced. */
static void sl_fd_attach(int fd, uint32_t c)
{
	/* Release: publishes the record's contents to the fd's closer. */
	uint32_t old = atomic_exchange_explicit(&sl__fdrecs[fd].conn, c, memory_order_acq_rel);
	atomic_fetch_or_explicit(&sl__fdbits[fd], (uint8_t)SL_FDB_CONN, memory_order_relaxed);
	if (old != 0)
		sl_conn_put(old);
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
	atomic_fetch_add_explicit(&sl_conns[c - 1].refs, 1, memory_order_relaxed);
	sl_fd_attach(newfd, c);
}

void sl__fd_set_conn(int fd, struct sl_limiter *const *lims, unsigned n)
{
	if (n == 0)
		return;
	/* Each slot keeps its per=peer entry (given back by sl_conn_release). */
	for (unsigned i = 0; i < n; i++)
		sl__peer_pin(lims[i]);
	if ((unsigned)fd >= sl__fd_cap || sl__fdrecs == NULL) {
		for (unsigned i = 0; i < n; i++)
			sl_conn_release(lims[i]);
		return;
	}
	for (uint32_t probe = 0; probe < sl__fd_cap; probe++) {
		uint32_t i = ((uint32_t)fd + probe) % sl__fd_cap;
		uint32_t expect = 0;
		/* Acquire: the previous owner's last writes are done. */
		if (!atomic_compare_exchange_strong_explicit(&sl_conns[i].refs, &expect, 1,
							     memory_order_acquire,
							     memory_order_relaxed))
			continue;
		struct sl_conn *cn = &sl_conns[i];
		cn->n = n > SL_CONN_RULES ? SL_CONN_RULES : n;
		for (unsigned j = 0; j < cn->n; j++)
			cn->lims[j] = lims[j];
		for (unsigned j = cn->n; j < n; j++)
			sl_conn_release(lims[j]);
		sl_fd_attach(fd, i + 1);
		return;
	}
	for (unsigned i = 0; i < n; i++)
		sl_conn_release(lims[i]);
}

void sl__fdtab_after_fork_unsync(void)
{
	/* Only the forking thread lives on in the child: a BUSY bit another
	 * thread held while classifying would stay set for good. */
	const uint32_t hi = atomic_load_explicit(&sl_fd_busy_hi, memory_order_relaxed);
	for (uint32_t fd = 0; fd < hi; fd++)
		if (atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed) & SL_FDB_BUSY)
			atomic_fetch_and_explicit(&sl__fdbits[fd], (uint8_t)~SL_FDB_BUSY,
						  memory_order_relaxed);
}
