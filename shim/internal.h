/* SPDX-License-Identifier: MIT */
/*
 * internal.h - the little that every file of the preloaded shim needs.
 *
 * Overview
 * --------
 * libsluice.so interposes the socket calls of an unmodified program. Each
 * module has its header next to its .c; a file includes the headers of what
 * it uses, and this one. What both modes decide is engine/'s (which rules
 * match, an address as rules see it with IPv4-mapped IPv6 as IPv4, piece
 * sizes, one rule's answer, counters: HACKING.md); the modules here, from
 * the bottom up:
 *
 *   real.c/h      the table of real libc functions (struct sl_real), and the
 *                 one list (SL_REAL_LIST) wrap_gen.h makes the wrappers of;
 *   log.c/h       sl_log: level test first, stack buffer, the real write;
 *                 SLUICE_LOG_FILE opened safely (common/privfile.c: no links,
 *                 owner checked, 0600); sandboxed.h: the seccomp flag;
 *   clock.c/h     CLOCK_MONOTONIC in ns (the TSC on a fitted line behind a
 *                 seqlock, seqlock.h), and the sleep hook;
 *   state.c/h     struct sl_state: the rules, the masks the hot path tests,
 *                 each rule's limiter and parameters;
 *   shm.c/h       shared=NAME limiters, opened through common/shm_shared.c
 *                 in the user's private directory of segments
 *                 (common/segment.c; the layout: common/shm_format.h);
 *   record.c/h    this process's status record: a segment from its first
 *                 need (exit.c: _exit, _Exit remove it), reclaimed if it died;
 *   vfork.c/h     vfork and clone: a child on our memory changes no table
 *                 (sl__vm_child());
 *   wrap_cred.c   setuid and friends: the status record is made first;
 *   dlopen.c      dlopen: one warning for a library loaded RTLD_DEEPBIND;
 *   wrap_raw.c/h  syscall()'s I/O numbers made through the wrappers;
 *   wake.c/h      the timerfd in every epoll set that wakes a thread that
 *                 waits while another thread's hold ends;
 *   stats.c/h     SLUICE_STATS, written at exit (common/stats_json.c);
 *   lease.c/h     redis=KEY rules: units leased from Redis (init, fork and
 *                 exit: lease_life.c, lease_state.h); lease_share.c/h
 *                 (on-error=local falls back to the process's recent share),
 *                 lease_pool.c/h (shared= with redis=: one bank per host);
 *                 redis.c/h (hiredis; fds kept from the program: ownfd.c/h),
 *                 redis_link.c/h (over redis_cluster.c, redis_sentinel.c);
 *   scope.c/h     the limiter of a rule for one call: per=thread slots, per=fd
 *                 rows, the per=peer table and its pins; credit.c/h: slices
 *                 of units a thread spends with no clock or atomic;
 *   fd.c/h        the fd byte the wrappers test, fd classification, and the
 *                 hooks run when an fd number stops meaning its socket;
 *                 conn.c/h: conns slots' records (connfam.c/h: those a fork
 *                 shares; sockalive.c/h: is a socket held); fdscan.c/h: the
 *                 scans at start and fork, the identity check;
 *   act.c/h       one call in progress (struct sl_call, call.h; the limiter
 *                 of each rule, rule_lim.h): acquire, sleep to absolute
 *                 deadlines (wait.c/h: timeouts, EINTR), refuse, refund;
 *   nb.c/h        non-blocking calls: a wait becomes EAGAIN or a partial
 *                 count, and the fd is held back until its tokens are there;
 *   fair.c/h      the turns of non-blocking fds waiting for one byte
 *                 limiter, reserved in the limiter in the order they wait;
 *   ready.c/h     when each held-back fd is ready again, deferred connects,
 *                 the timer that wakes event loops, and the "readiness
 *                 changed" hook that epoll.c registers;
 *   xfer.c/h      the transfer engine of both directions: pieces, the send
 *                 fast path, partial counts, the receive loop;
 *   connect.c/h   the rate and conns rules of connect;
 *   connwait.c/h  a non-blocking connect that waits for a conns slot
 *                 (cwrec.h: its record; cwlook.c: what calls see of it);
 *   accept.c/h    the rate and conns rules of accept;
 *   acchold.c/h   a per=peer accept that holds a connection until its slot
 *                 while the listener stays ready for other peers;
 *   breaker.c/h   circuit breakers on connect (SLUICE_BREAK): fail fast while
 *                 open, one probe, outcomes from connect and SO_ERROR; their
 *                 segment break-PID for `sluice stat` (layout shm_break.h);
 *   wrap_send.c   the exported send family (send ... sendfile64, sendmmsg);
 *   wrap_recv.c   the exported receive family (recv ... recvmmsg);
 *   wrap_sock.c   the exported connect, accept, socket, close, dup, fcntl,
 *                 fclose wrappers;
 *   wrap_sockopt.c getsockopt (SO_ERROR of a deferred connect);
 *   wrap_fd.c     the calls that hand out fds (open, pipe, eventfd, ...:
 *                 the number forgets its socket), and syscall() for the
 *                 numbers that change what an fd is;
 *   sandbox.c/h   prctl(PR_SET_SECCOMP) and seccomp(): once a filter is
 *                 installed, the shim makes no query system call;
 *   wrap_splice.c splice into or out of a socket, as a send or a receive;
 *   hup.c/h       RDHUP/HUP not reported where a read may be cut short;
 *   poll.c        poll, ppoll, select, pselect for held-back fds;
 *   epoll.c       epoll_create/ctl: registrations mirrored (epoll_tab.h),
 *                 held-back directions out of the kernel's interest set
 *                 until they are ready; epwait.c: epoll_wait and friends;
 *   exec.c        execve, execv, execvp, execvpe, posix_spawn(p): a warning
 *                 before running a program the shim cannot throttle;
 *   init.c        the constructor, the destructor and the fork handler.
 *
 * Thread-safety: every shim function may be called from any thread unless
 * its name ends in _unsync. No lock is ever held while sleeping. The locks:
 * the per=peer table's spinlock (scope.c, taken around fork with
 * pthread_atfork), a spinlock per fd for its epoll registrations (epoll.c),
 * and the lease thread's mutex (lease.c).
 *
 * Implementation notes
 * --------------------
 * Hot path: a wrapper first tests one byte of sl__fdbits[fd] (fd.h). For a
 * socket no rule can match, or an fd that is not a socket, the byte has the
 * "pass" bit of the call's kind set and the wrapper calls the real function
 * right away: one bounds check, one load, one branch.
 */
#ifndef SLUICE_SHIM_INTERNAL_H
#define SLUICE_SHIM_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include "policy.h"
#include "sluice_core.h"

#define SL_EXPORT __attribute__((visibility("default")))

/* Set while the shim works on behalf of a wrapper: a wrapped function called
 * from inside the shim (by a resolver, the logger or libc) passes straight
 * through. initial-exec: one %fs-relative load, no __tls_get_addr. Defined
 * in real.c. */
extern __thread int sl__busy __attribute__((tls_model("initial-exec")));

/* Call kinds: what the fd byte's pass bits are about. conns rules belong to
 * both CONNECT and ACCEPT. */
enum sl_kind_call {
	SL_K_CONNECT = 0,
	SL_K_ACCEPT = 1,
	SL_K_SEND = 2,
	SL_K_RECV = 3,
	SL_K_COUNT = 4,
};

/* a + b, or UINT64_MAX if that overflows (instants and waits in ns). */
static inline uint64_t sl__sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Zeroed private anonymous memory, reserved lazily (MAP_NORESERVE): the
 * per-fd tables, of which only the pages of fds in use become resident.
 * NULL on failure. */
static inline void *sl__map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

#endif /* SLUICE_SHIM_INTERNAL_H */
