/*
 * internal.h - what the files of the preloaded shim share.
 *
 * Overview
 * --------
 * libsluice.so interposes the socket calls of an unmodified program. The
 * files split by idea:
 *   real.c    the table of real libc functions (struct sl_real), resolved
 *             with dlsym(RTLD_NEXT) once, thread-safely, lazily if needed;
 *   log.c     sl_log: level test first, stack buffer, the real write;
 *   init.c    the constructor: reads SLUICE_* once, builds the limiters;
 *   fdtab.c   the fd classification table and connection records;
 *   match.c   matching a call to rules and finding the limiter of a scope
 *             (process, thread, fd, peer);
 *   act.c     the decision loop: acquire, sleep to absolute deadlines,
 *             refuse, refund, socket timeouts, EINTR;
 *   socket.c  connect, accept, close, dup, fcntl and friends;
 *   stdio.c   fclose: a socket closed through stdio is forgotten too;
 *   io.c      the send family, and the split-transfer engine of both sides;
 *   recv.c    the receive family's wrappers;
 *   stats.c   SLUICE_STATS, written at exit;
 *   shm.c     /dev/shm files: shared=NAME limiters, the live stats record;
 *   ready.c   non-blocking calls: when each throttled fd is ready again,
 *             deferred connects, the timer that wakes event loops;
 *   sockopt.c getsockopt(SO_ERROR) of a deferred connect;
 *   poll.c    poll, ppoll, select, pselect: throttled fds hidden, timeouts
 *             shortened to the next ready instant;
 *   epoll.c   epoll_*: registrations mirrored, throttled directions taken
 *             out of the kernel's interest set until they are ready;
 *   lease.c   redis=KEY rules: units leased from Redis (redis.c, the
 *             hiredis glue; redis_gcra.c, the server's script).
 *
 * Thread-safety: every function below may be called from any thread unless
 * its name ends in _unsync. No lock is ever held while sleeping; the only
 * lock (the peer table's spinlock) is made fork-safe with pthread_atfork.
 *
 * Implementation notes
 * --------------------
 * Hot path: a wrapper first tests one byte of sl__fdbits[fd]. For a socket
 * no rule can match, or an fd that is not a socket, the byte has the
 * "pass" bit of the call's kind set and the wrapper calls the real function
 * right away: one bounds check, one load, one branch.
 */
#ifndef SLUICE_SHIM_INTERNAL_H
#define SLUICE_SHIM_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "policy.h"
#include "shm_format.h"
#include "sluice_core.h"

#define SL_EXPORT __attribute__((visibility("default")))

/* ---- real.c ------------------------------------------------------------ */

/*
 * Every intercepted symbol: X(return type, name, parameter list). The list
 * only declares; real.c and the tests expand it.
 */
#define SL_REAL_LIST(X)                                                                        \
	X(int, connect, (int, const struct sockaddr *, socklen_t))                                \
	X(int, accept, (int, struct sockaddr *, socklen_t *))                                     \
	X(int, accept4, (int, struct sockaddr *, socklen_t *, int))                               \
	X(int, socket, (int, int, int))                                                           \
	X(int, socketpair, (int, int, int, int *))                                                \
	X(ssize_t, send, (int, const void *, size_t, int))                                        \
	X(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *, socklen_t))  \
	X(ssize_t, sendmsg, (int, const struct msghdr *, int))                                    \
	X(int, sendmmsg, (int, struct mmsghdr *, unsigned int, int))                              \
	X(ssize_t, write, (int, const void *, size_t))                                            \
	X(ssize_t, writev, (int, const struct iovec *, int))                                      \
	X(ssize_t, sendfile, (int, int, off_t *, size_t))                                         \
	X(ssize_t, sendfile64, (int, int, off_t *, size_t))                                       \
	X(ssize_t, recv, (int, void *, size_t, int))                                              \
	X(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *))          \
	X(ssize_t, recvmsg, (int, struct msghdr *, int))                                          \
	X(int, recvmmsg, (int, struct mmsghdr *, unsigned int, int, struct timespec *))           \
	X(ssize_t, read, (int, void *, size_t))                                                   \
	X(ssize_t, readv, (int, const struct iovec *, int))                                       \
	X(ssize_t, __read_chk, (int, void *, size_t, size_t))                                     \
	X(ssize_t, __recv_chk, (int, void *, size_t, size_t, int))                                \
	X(ssize_t, __recvfrom_chk,                                                                \
	  (int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *))                     \
	X(int, close, (int))                                                                      \
	X(int, close_range, (unsigned int, unsigned int, int))                                    \
	X(int, fclose, (FILE *))                                                                  \
	X(int, dup, (int))                                                                        \
	X(int, dup2, (int, int))                                                                  \
	X(int, dup3, (int, int, int))                                                             \
	X(int, fcntl, (int, int, ...))                                                            \
	X(int, fcntl64, (int, int, ...))                                                          \
	X(int, getsockopt, (int, int, int, void *, socklen_t *))                                  \
	X(int, poll, (struct pollfd *, nfds_t, int))                                              \
	X(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *))       \
	X(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *))                     \
	X(int, pselect,                                                                           \
	  (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *))         \
	X(int, epoll_create, (int))                                                               \
	X(int, epoll_create1, (int))                                                              \
	X(int, epoll_ctl, (int, int, int, struct epoll_event *))                                  \
	X(int, epoll_wait, (int, struct epoll_event *, int, int))                                 \
	X(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *))              \
	X(int, epoll_pwait2,                                                                      \
	  (int, struct epoll_event *, int, const struct timespec *, const sigset_t *))

enum sl_real_slot {
#define SL_REAL_ENUM(ret, name, args) SL_REAL_##name,
	SL_REAL_LIST(SL_REAL_ENUM)
#undef SL_REAL_ENUM
	SL_REAL_COUNT
};

/* One atomic pointer per symbol; NULL until resolved. Tests overwrite the
 * pointers with fakes (after sl_real_resolve_all, so nothing overwrites
 * them back). */
struct sl_real {
#define SL_REAL_FIELD(ret, name, args) ret(*_Atomic name) args;
	SL_REAL_LIST(SL_REAL_FIELD)
#undef SL_REAL_FIELD
};
extern struct sl_real sl__real;

/* Resolve every slot that is still empty (the constructor calls it). */
void sl_real_resolve_all(void);
/* Resolve one slot now and publish it; a symbol that does not exist gets a
 * stub that fails with ENOSYS (and logs once). */
void sl__real_resolve(enum sl_real_slot slot);

/* The real function `name`, resolving it on first use: one load and one
 * (predicted) branch. Acquire pairs with the release store in
 * sl__real_resolve, so whatever dlsym set up before publishing is seen. */
#define SL_REAL(name)                                                                          \
	__extension__({                                                                            \
		SL_REAL_TYPE(name) sl_fn_ = SL_REAL_LOAD(name);                                    \
		if (__builtin_expect(sl_fn_ == NULL, 0)) {                                             \
			sl__real_resolve(SL_REAL_##name);                                                  \
			sl_fn_ = SL_REAL_LOAD(name);                                                       \
		}                                                                                      \
		sl_fn_;                                                                                \
	})
/* The pointer type of slot `name`, and its current value (NULL if not yet
 * resolved). Wrappers whose fast path is a bare tail call use these and
 * leave resolution to their slow path. */
#define SL_REAL_TYPE(name) __typeof__(atomic_load_explicit(&sl__real.name, memory_order_relaxed))
#define SL_REAL_LOAD(name) atomic_load_explicit(&sl__real.name, memory_order_acquire)

/* ---- clock.c: the clock and sleep hooks ---------------------------------- */

/* CLOCK_MONOTONIC now, in ns (the TSC on a fitted line where it can be,
 * clock.c). Tests point it at a fake clock. */
extern uint64_t (*sl__clock_ns)(void);
/* Sleep until the absolute CLOCK_MONOTONIC instant deadline_ns: returns 0,
 * or EINTR if a signal handler ran. Tests point it at a fake. */
extern int (*sl__sleep_until)(uint64_t deadline_ns);
/* Use the TSC for sl__clock_ns if the CPU and the process allow it (the
 * constructor); make the line whole again in a fork child. */
void sl__clock_init(void);
void sl__clock_fork_child(void);

/* A line from TSC ticks to CLOCK_MONOTONIC ns: base_ns + (tsc - base_tsc) *
 * mult / 2^32 for tsc in [base_tsc, base_tsc + span). mult 0: not fitted. */
struct sl_clock_line {
	uint64_t base_tsc, base_ns, mult, span;
};
enum sl_fit { SL_FIT_OK, SL_FIT_WAIT, SL_FIT_OFF };
#define SL_FIT_FIRST_NS 10000000u   /* the first line's shortest stretch */
#define SL_FIT_SPAN_NS 100000000u   /* the longest a line is used */
#define SL_FIT_PPM 100u             /* a line off by more (plus the slack): */
#define SL_FIT_SLACK_NS 20000u      /* the TSC is not to be trusted */
#define SL_PAIR_MAX_TICKS 16384u    /* the widest sample kept (two TSC reads) */
/* The line's ns at tsc: false if tsc is outside its span. */
bool sl__clock_line_ns(const struct sl_clock_line *l, uint64_t tsc, uint64_t *ns);
/* Fit the next line through l's base and the sample (tsc, ns): SL_FIT_OK (l
 * is the new line; span 0 if the TSC went back and the base starts again),
 * SL_FIT_WAIT (too early for a first line, or a sample older than the
 * base), or SL_FIT_OFF (l is off by more than the tolerance, or the rate is
 * no TSC's). */
enum sl_fit sl__clock_line_fit(struct sl_clock_line *l, uint64_t tsc, uint64_t ns);

/* ---- log.c -------------------------------------------------------------- */

extern int sl__log_level; /* enum sl_log_level */
void sl__log_set_file(const char *path);
void sl__log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Tests the level before anything is formatted. */
#define sl_log(level, ...)                                                                     \
	do {                                                                                       \
		if ((int)(level) <= sl__log_level)                                                     \
			sl__log_write((level), __VA_ARGS__);                                               \
	} while (0)

/* Anchors that make a unit test link io.o and socket.o from the archive. */
extern const int sl__io_anchor, sl__recv_anchor, sl__socket_anchor, sl__poll_anchor,
	sl__epoll_anchor, sl__sockopt_anchor;

/* ---- re-entry guard ------------------------------------------------------ */

/* Set while the shim works on behalf of a wrapper: a wrapped function called
 * from inside the shim (by a resolver, the logger or libc) passes straight
 * through. initial-exec: one %fs-relative load, no __tls_get_addr. */
extern __thread int sl__busy __attribute__((tls_model("initial-exec")));

/* ---- state (init.c) ------------------------------------------------------- */

/* Call kinds: what the fast path tests. conns rules belong to both CONNECT
 * and ACCEPT. */
enum sl_kind_call {
	SL_K_CONNECT = 0,
	SL_K_ACCEPT = 1,
	SL_K_SEND = 2,
	SL_K_RECV = 3,
	SL_K_COUNT = 4,
};

/* Counters of one rule: struct sl_rstats, in shm_format.h. */

/* fds are tracked below sl__fd_cap (fdtab.c): the RLIMIT_NOFILE hard limit
 * at the first init, at least SL_FD_MIN and at most SL_FD_LIMIT; calls on
 * larger fds pass through. */
#define SL_FD_MIN 65536u
#define SL_FD_LIMIT (1u << 20)
extern uint32_t sl__fd_cap;
/* Set sl__fd_cap, once, before the first table is mapped (state init). */
void sl__fd_cap_init_unsync(void);
#define SL_THREAD_SLOTS 256  /* threads with per=thread limiters at once */
#define SL_PEER_SLOTS 1024   /* (rule, address) entries of per=peer limiters */
#define SL_CONN_RULES 8      /* conns rules one connection may hold a slot of */

struct sl_state {
	struct sl_policy policy;
	bool active;     /* rules apply to this process */
	bool ready;      /* sl__state_init has run */
	uint32_t kind_rules[SL_K_COUNT]; /* rules that may apply to each kind */
	uint32_t byte_rules;             /* rules counting bytes */
	uint32_t reject_rules;           /* action == reject */
	uint32_t conns_rules;            /* op == conns */
	uint32_t proc_rules;  /* per=process rules whose limiter is always
	                         rule_lim[i] (not redis=KEY: see lease.c) */
	uint32_t fast_rules;  /* proc_rules counting calls or bytes, not dry-run
	                         nor sliding windows:
	                         a transfer they all admit at once takes the
	                         fast path (sl__io_send) */
	uint32_t eagain_rules; /* delay rules with nonblock=eagain (set by
	                          sl__ready_init_unsync once its tables exist) */
	uint32_t n_fd_rules, n_thread_rules;
	uint64_t piece_min; /* smallest sl__piece_max of the byte rules at init:
	                       a transfer no larger is never split, unless
	                       `sluice set` lowered a burst since (then the fast
	                       path's police fails and the general path splits) */
	uint8_t scope_slot[SL_MAX_RULES]; /* index among rules of its scope */
	/* Each rule's per=process limiter (a tunable one in rec, or the
	 * shared one); the fallback of other scopes. */
	struct sl_limiter *rule_lim[SL_MAX_RULES];
	struct sl_limiter *fd_lims;     /* [sl__fd_cap][n_fd_rules], mmap'd */
	struct sl_limiter *thread_lims; /* [SL_THREAD_SLOTS][n_thread_rules] */
	struct sl_rstats *stats;        /* [SL_MAX_RULES], in rec */
	struct sl_shm_stat *rec;        /* the live stats record (shm.c) */
};
extern struct sl_state sl__st;

/* Build the state from a parsed policy (the constructor; tests call it
 * directly). Not thread-safe: call before any wrapper runs, or in tests
 * between cases. Returns 0, or -1 if memory could not be mapped. */
int sl__state_init_unsync(const struct sl_policy *p);
/* Reset the per-process counters (the child after fork). */
void sl__stats_reset(void);
/* Write SLUICE_STATS (the destructor; tests call it). */
void sl__stats_write(void);

/* ---- shm.c ---------------------------------------------------------------- */

/* Map this process's stats record (a /dev/shm file, else private memory);
 * fill its header and rule texts; mark it (in)active; the fork child's own
 * copy; remove the file at exit. */
int sl__shm_rec_open_unsync(bool file);
void sl__shm_rec_fill_unsync(const struct sl_policy *p, bool active);
void sl__shm_rec_set_active_unsync(bool active);
void sl__shm_rec_fork_child(void);
void sl__shm_rec_remove(void);
/* The shared limiter of rule i, opened or created; NULL with err set. */
struct sl_limiter *sl__shm_shared_open_unsync(unsigned i, const struct sl_rule *r,
					      uint64_t now_ns, char *err, size_t errlen);
void sl__shm_shared_close_all_unsync(void);
/* Shared conns limiters: count this process's slots; give back the slots of
 * dead processes (true if any). No-ops for other limiters. */
void sl__shm_hold(const struct sl_limiter *l, int64_t delta);
bool sl__shm_reclaim(struct sl_limiter *l);

/* ---- fdtab.c -------------------------------------------------------------- */

#define SL_FDB_PASS(k) (1u << (k)) /* classified: no rule of kind k can match */
#define SL_FDB_PASS_ALL 0x0fu
#define SL_FDB_READY 0x10u /* the fd's record is published */
#define SL_FDB_BUSY 0x20u  /* a thread is classifying it */
#define SL_FDB_CONN 0x40u  /* the record holds a connection */
#define SL_FDB_KEEP 0x80u  /* reclassify, but keep the per-fd limiters (connect) */

/* An address as rules see it. family: 0 unknown, 4, 6, or 1 (AF_UNIX). */
struct sl_addr {
	uint8_t family;
	uint8_t pad;
	uint16_t port; /* host order */
	uint8_t addr[16];
};

struct sl_fdrec {
	uint32_t cand[SL_K_COUNT];  /* rules whose family and type fit */
	uint32_t match[SL_K_COUNT]; /* cand narrowed by the address: peer for
	                               send/recv, local for accept */
	uint8_t family; /* SL_FAM_* bit */
	uint8_t type;   /* SL_TYPE_* bit, 0 for other types */
	uint8_t stream; /* SOCK_STREAM: byte transfers may be split */
	uint8_t pad;
	struct sl_addr peer;  /* family 0 if not connected */
	struct sl_addr local;
	_Atomic uint32_t conn; /* connection record index + 1, 0 = none */
};

extern _Atomic uint8_t sl__fdbits[SL_FD_LIMIT];

/* True if a call of kind k on fd passes straight through. The relaxed load
 * is enough for the pass bit: it carries no data; the slow path re-reads
 * with acquire. */
static inline bool sl__fd_pass(int fd, enum sl_kind_call k)
{
	return (unsigned)fd < SL_FD_LIMIT &&
	       (atomic_load_explicit(&sl__fdbits[fd], memory_order_relaxed) & SL_FDB_PASS(k));
}

/* Classify fd (if not yet) and copy its record into *out. Returns false if
 * the call should pass through (not a socket, no rules, fd too large). */
bool sl__fd_get(int fd, struct sl_fdrec *out);
/* The part of sl__fd_rec past its inline test (fdtab.c). */
const struct sl_fdrec *sl__fd_rec_miss(int fd);
extern struct sl_fdrec *sl__fdrecs; /* [sl__fd_cap] */
/* The same as sl__fd_get without the copy: fd's published record, or NULL.
 * The record is rewritten only when fd is reclassified (after a close, dup2
 * onto it or a connect on it), so a caller copies out what it uses before
 * anything that may race with that: the hot path's alternative to
 * sl__fd_get. A classified fd's record is one load and a test away
 * (acquire: READY means the record's fields are complete; it is set for
 * fds below sl__fd_cap only, after the state's init). */
static inline const struct sl_fdrec *sl__fd_rec(int fd)
{
	if ((unsigned)fd < SL_FD_LIMIT &&
	    (atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire) & SL_FDB_READY))
		return &sl__fdrecs[fd];
	return sl__fd_rec_miss(fd);
}
/* Forget what is known of fd: it was closed or replaced. Releases the
 * connection slot it held when it was the last fd of the connection. */
void sl__fd_forget(int fd);
/* newfd now refers to the same socket as oldfd (dup): share the connection. */
void sl__fd_dup(int oldfd, int newfd);
/* Record that fd holds one slot of each limiter in lims (a new connection). */
void sl__fd_set_conn(int fd, struct sl_limiter *const *lims, unsigned n);
/* Mark fd unknown but keep its connection (connect changed its peer). */
void sl__fd_invalidate(int fd);
/* Allocate (once) and clear the table. Init only. Returns 0 or -1. */
int sl__fdtab_init_unsync(void);
void sl__fdtab_reset_unsync(void);
/* The child after fork: clear the BUSY bits of threads that are gone. */
void sl__fdtab_after_fork_unsync(void);
/* Zeroed private anonymous memory, reserved lazily (MAP_NORESERVE). */
void *sl__map(size_t bytes);
/* Convert a sockaddr to an sl_addr; false if the family is not known. */
bool sl__addr_from(struct sl_addr *a, const struct sockaddr *sa, socklen_t len);

/* ---- match.c -------------------------------------------------------------- */

/* Rules in mask `cand` that match a socket of this family and type (SL_*
 * bits) talking to/listening on address a (NULL: unknown; rules with an
 * address filter do not match). */
uint32_t sl__match(uint32_t cand, unsigned family, unsigned type, const struct sl_addr *a);
/* Rules (any op) whose family and type filters fit. */
uint32_t sl__match_socket(unsigned family, unsigned type);
struct sl_call; /* act.c */
/* sl__limiter for the scopes other than process (and redis=KEY rules). */
struct sl_limiter *sl__limiter_scoped(struct sl_call *c, unsigned i);
/* The limiter of rule i for call c (its fd, its peer address). A per=peer
 * limiter stays the call's, and its entry pinned (never evicted), until
 * sl__call_end: the call may sleep on it, hold a grant on it, refund it. */
static inline struct sl_limiter *sl__limiter(struct sl_call *c, unsigned i)
{
	/* per=process, the default, is one test and one load away; a
	 * redis=KEY rule (per=process too) is not in proc_rules: lease.c
	 * says which limiter it uses now. */
	if ((sl__st.proc_rules >> i) & 1)
		return sl__st.rule_lim[i];
	return sl__limiter_scoped(c, i);
}
/* Unpin the peer table entries call c pinned (sl__call_end does). */
void sl__peer_unpin_call(struct sl_call *c);
/* If l is a per=peer limiter, pin its entry once more (the caller holds a
 * pin on it already) / drop one pin: a connection's conns slot (fdtab.c)
 * keeps its entry until the slot is given back. Others: nothing. */
void sl__peer_pin(struct sl_limiter *l);
void sl__peer_unpin(struct sl_limiter *l);
/* Units one piece of a split transfer may take under byte rule i. */
/* Rule i's amount, period and burst now: the rule's, or the ones `sluice
 * set` gave its limiter since (per=process and shared= rules; the limiters
 * of other scopes never change). */
struct sl_params sl__rule_now(unsigned i);
uint64_t sl__piece_max(unsigned i);
/* Limiter parameters of a rule; (re)initialise limiter l for rule i. */
void sl__rule_params(const struct sl_rule *r, struct sl_params *p);
void sl__limiter_reset(struct sl_limiter *l, unsigned i, uint64_t now_ns);
/* Fresh per-fd limiters for fd (a newly classified socket). */
void sl__scope_fd_reset(int fd);
/* Allocate (once) and clear the peer table and thread pool. Init only. */
int sl__scope_init_unsync(void);
void sl__scope_reset_unsync(void);
/* The child after fork: free the thread slots of threads that are gone. */
void sl__scope_after_fork_unsync(void);

/* ---- lease.c -------------------------------------------------------------- */

/* Set up the redis=KEY rules of p (after the limiters): empty banks, every
 * rule dormant, hiredis loaded if any. Init only. Returns 0 or -1. */
int sl__lease_init_unsync(const struct sl_policy *p);
/* Stop the lease thread and give up any host pool it renews: before the
 * shared segments are unmapped (re-init). */
void sl__lease_stop_unsync(void);
/* The limiter redis=KEY rule i uses now: its bank of leased units, or its
 * on-error fallback while Redis fails. */
struct sl_limiter *sl__lease_limiter(unsigned i);
/* Rule i's bank refused a call: ask for units now; returns when to retry. */
uint64_t sl__lease_retry_ns(unsigned i);

/* ---- act.c ---------------------------------------------------------------- */

#define SL_PIN_NONE UINT16_MAX /* sl_call.pin: the rule uses its process limiter */

/* What one call is being charged to. */
struct sl_grant {
	uint32_t rules;                         /* rules charged */
	struct sl_limiter *lim[SL_MAX_RULES];   /* their limiters */
	uint64_t at_ns[SL_MAX_RULES];           /* the instant of each one's slot
	                                           (its refund's now) */
	uint64_t n;                             /* units charged to each */
};

/* One call in progress. */
struct sl_call {
	int fd;
	enum sl_op op;           /* for errnos and messages */
	const struct sl_addr *peer; /* per=peer key, may be NULL */
	uint64_t start_ns;
	uint64_t timeout_ns;     /* absolute: SO_SNDTIMEO/SO_RCVTIMEO, UINT64_MAX: none */
	int timeout_opt;         /* SO_SNDTIMEO or SO_RCVTIMEO; 0: none applies */
	bool timeout_known;
	bool start_fresh;        /* start_ns not yet used by a decision */
	bool defer;              /* connect: its nb rules reserve but do not sleep:
	                            ready_ns says until when */
	bool nb_partial;         /* a send whose nb byte rules now send what they
	                            allow (after an SL_NB_PARTIAL) */
	uint32_t delayed_rules;  /* rules that made this call wait */
	uint32_t nb_rules;       /* rules whose wait becomes EAGAIN (ready.c) */
	uint32_t nb_maybe;       /* nb_rules if the fd is O_NONBLOCK, not read yet */
	uint32_t pinned;         /* per=peer rules whose limiter the call chose */
	uint64_t waited_ns;      /* time slept so far */
	uint64_t nb_want;        /* units the call still wants (sizes an nb wait) */
	uint64_t ready_ns;       /* nb/defer: the instant the call would have waited for */
	uint16_t pin[SL_MAX_RULES]; /* per rule in `pinned`: the peer table entry
	                               the call pins (match.c), or SL_PIN_NONE */
};

/* Start a call: reads the clock once into start_ns, and the call's first
 * decision (sl__admit or sl__available, even with no rules) is taken at that
 * instant without reading it again: call it right before that decision,
 * with nothing that blocks in between. Later decisions read the clock. */
void sl__call_begin(struct sl_call *c, int fd, enum sl_op op, const struct sl_addr *peer,
		    int timeout_opt);
/* The same with the clock read already (now), by a caller that has done
 * nothing that blocks since. */
void sl__call_begin_at(struct sl_call *c, int fd, enum sl_op op, const struct sl_addr *peer,
		       int timeout_opt, uint64_t now);
/*
 * Charge n units to every rule in `rules`, acting as each rule says:
 * delay sleeps to the slot's deadline, reject refuses at once, dry-run
 * never waits. On success returns 0 and fills *g (release what was not used
 * with sl__grant_refund). On refusal returns the errno to fail with (the
 * rule's, EAGAIN past the socket's timeout, EINTR if a signal arrived while
 * waiting) and nothing stays charged.
 */
int sl__admit(struct sl_call *c, uint32_t rules, uint64_t n, struct sl_grant *g);
/* Give back `unused` units of each limiter of g, as of its slot's instant
 * (a fixed window gives back only units of the window they were taken in). */
void sl__grant_refund(const struct sl_call *c, const struct sl_grant *g, uint64_t unused);
/* Units the rules in `rules` admit right now (the smallest). Waits until it
 * is at least 1 if `wait` (then returns 0 with *err set on refusal). */
uint64_t sl__available(struct sl_call *c, uint32_t rules, bool wait, int *err);
/* Charge n units after the fact (a receive): taken as debt, never refused
 * (sl_limiter_charge). */
void sl__charge(struct sl_call *c, uint32_t rules, uint64_t n);
/* Count n bytes against the stats of rules. */
void sl__stats_bytes(uint32_t rules, uint64_t n);
/* Finish the call's stats: one call seen by each rule in `rules`, admitted
 * if ok, and the call's delay for the rules that made it wait. */
void sl__call_end(struct sl_call *c, uint32_t rules, bool ok);
/* sl__call_end and sl__stats_bytes(rules, bytes) in one pass. */
void sl__call_end_bytes(struct sl_call *c, uint32_t rules, bool ok, uint64_t bytes);
/* The stats of a call of `rules` that waited for none of them: one call
 * seen by each, admitted if ok, `bytes` moved. Relaxed: statistics, read
 * by `sluice stat` and at exit; nothing is published through them. */
static inline void sl__stats_end(uint32_t rules, bool ok, uint64_t bytes)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		struct sl_rstats *s = &sl__st.stats[__builtin_ctz(rest)];
		atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
		if (ok)
			atomic_fetch_add_explicit(&s->admitted, 1, memory_order_relaxed);
		if (bytes != 0)
			atomic_fetch_add_explicit(&s->bytes, bytes, memory_order_relaxed);
	}
}

/* ---- io.c ------------------------------------------------------------------ */

enum sl_io_how {
	SL_IO_SEND, SL_IO_SENDTO, SL_IO_SENDMSG, SL_IO_WRITE, SL_IO_WRITEV, SL_IO_SENDFILE,
	SL_IO_SENDFILE64, SL_IO_RECV, SL_IO_RECVFROM, SL_IO_RECVMSG, SL_IO_READ, SL_IO_READV,
	SL_IO_READ_CHK, SL_IO_RECV_CHK, SL_IO_RECVFROM_CHK,
};

/* One call, described for the split loops. */
struct sl_io {
	enum sl_io_how how;
	int fd;
	int flags;
	char *buf;                 /* send: really const */
	size_t total;              /* bytes asked for */
	size_t buflen;             /* the _chk variants' object size */
	struct sockaddr *addr;     /* sendto: destination; recvfrom: source */
	socklen_t addrlen;
	socklen_t *addrlenp;
	struct msghdr *msg;        /* sendmsg/recvmsg; send: really const */
	const struct iovec *iov;   /* writev/readv */
	int iovcnt;
	int in_fd;                 /* sendfile */
	off_t *offset;
};

/* The send and receive sides of the io wrappers, past their pass test. */
ssize_t sl__io_send(struct sl_io *io);
ssize_t sl__io_recv(struct sl_io *io);
/* End a transfer: stats, errno, the return value (done > 0 wins over an
 * error; otherwise err, from the shim, or e, from the kernel, is errno). */
ssize_t sl__io_end(struct sl_call *c, uint32_t rules, size_t done, ssize_t r, int err, int e);
/* Rules of `rules` with action reject. */
uint32_t sl__rejecting(uint32_t rules);
size_t sl__iov_total(const struct iovec *iov, size_t cnt);
/* True if p can never be a valid user pointer (below the lowest mappable
 * address, 64 KiB by default: NULL, small integers). The vector wrappers
 * read the caller's iovec/msghdr to size the call; with such a pointer they
 * let the real call fail with EFAULT instead of faulting in the shim. */
static inline bool sl__bad_ptr(const void *p)
{
	return (uintptr_t)p < 65536u;
}
/* The same for a msghdr and its iovec array. */
static inline bool sl__bad_msg(const struct msghdr *m)
{
	return sl__bad_ptr(m) || (m->msg_iovlen != 0 && sl__bad_ptr(m->msg_iov));
}

/* ---- stdio.c ----------------------------------------------------------------- */

extern const int sl__stdio_anchor;

/* ---- ready.c: non-blocking calls ------------------------------------------ */

/* Directions an fd can be throttled in: IN (recv, accept), OUT (send,
 * connect). */
enum sl_dir { SL_DIR_IN = 0, SL_DIR_OUT = 1 };

/* poll/epoll bits a throttled direction hides (the values are the same for
 * poll and epoll on Linux); SL_HIDE_ALL: the fd is hidden whole (a deferred
 * connect: the socket is not connecting yet). */
#define SL_HIDE_IN (POLLIN | POLLPRI | POLLRDNORM | POLLRDBAND | POLLRDHUP)
#define SL_HIDE_OUT (POLLOUT | POLLWRNORM | POLLWRBAND)
#define SL_HIDE_ALL 0xffffffffu

/* Map (once) and clear the tables; called by sl__state_init_unsync. Not
 * thread-safe. Returns 0 or -1. */
int sl__ready_init_unsync(void);
/* True once the policy has a delay rule with nonblock=eagain: only then do
 * the wait wrappers do anything but call libc. Relaxed load. */
bool sl__ready_on(void);
/*
 * Of `rules`, those whose waits become EAGAIN for call c (c->nb_rules):
 * delay rules with nonblock=eagain, if flags has MSG_DONTWAIT or the fd is
 * O_NONBLOCK. The fd's flags (a fcntl) are read only when a wait is due
 * (sl__call_nb), as the socket's timeout is: a call admitted at once never
 * asks. Call after sl__call_begin.
 */
static inline void sl__nb_begin(struct sl_call *c, int flags, uint32_t rules)
{
	uint32_t m = rules & sl__st.eagain_rules;
	if (flags & MSG_DONTWAIT)
		c->nb_rules = m;
	else
		c->nb_maybe = m;
}
/* The part of sl__call_nb that reads the fd's O_NONBLOCK. */
void sl__nb_read(struct sl_call *c);
/* c->nb_rules, the fd's flags read first if they are not yet. */
static inline uint32_t sl__call_nb(struct sl_call *c)
{
	if (c->nb_maybe != 0)
		sl__nb_read(c);
	return c->nb_rules;
}
/* True if rule i's waits become EAGAIN for c (the fd's flags read only if
 * i may be such a rule). */
static inline bool sl__nb_has(struct sl_call *c, unsigned i)
{
	return (((c->nb_rules | c->nb_maybe) >> i) & 1) && ((sl__call_nb(c) >> i) & 1);
}
/* sl__admit's answer when an nb byte rule refuses a send's piece (unless
 * c->nb_partial): nothing is noted, and the caller sends what the rules
 * allow now instead, as it does for reject rules. */
#define SL_NB_PARTIAL (-1)
/* Units rule i must have before a call that waits for it goes on:
 * min(what the call still wants (c->nb_want, if set), half the rule's
 * piece, quantum_ns of the rate), at least 1; 1 for conns and message
 * rules. An nb call (ready.c) uses SL_NB_QUANTUM_NS, a blocking wait
 * SL_WAIT_QUANTUM_NS: waking for every unit, a receive under a delay rule
 * moved a few bytes per call at full CPU. */
uint64_t sl__need(const struct sl_call *c, unsigned i, uint64_t quantum_ns);
#define SL_NB_QUANTUM_NS 100000000u
#define SL_WAIT_QUANTUM_NS 2000000u
/* An nb rule refuses call c: note until when (now + wait_ns), count a delay.
 * Returns EAGAIN. */
int sl__nb_refuse(struct sl_call *c, unsigned i, uint64_t now, uint64_t wait_ns);
/* The part of sl__nb_end for a call that was refused or cut. */
void sl__nb_end_slow(struct sl_call *c, enum sl_dir dir, bool cut);
/* At the end of an nb call that still wants `left` units: if it was refused
 * for tokens, or `cut` (it moved less than asked) and the tokens for its
 * next call are missing, the fd is throttled in dir until they are there. */
static inline void sl__nb_end(struct sl_call *c, enum sl_dir dir, bool cut, uint64_t left)
{
	if (c->ready_ns != 0 || cut) {
		c->nb_want = left;
		sl__nb_end_slow(c, dir, cut);
	}
}
/* poll bits of fd hidden at now (0, SL_HIDE_* or SL_HIDE_ALL); *until gets
 * the earliest instant that changes (left alone if nothing is hidden). */
uint32_t sl__ready_hidden(int fd, uint64_t now, uint64_t *until);
/* Do what is due at now (re-arm epoll registrations, start deferred
 * connects) and return the next instant something is due (UINT64_MAX:
 * nothing). One relaxed load when nothing is due. */
uint64_t sl__ready_tick(uint64_t now);
/* fd is new or closed: forget its throttle, deferred connect, epoll slots. */
void sl__ready_forget(int fd);
/* Make the timer run sl__ready_tick for fd at `at` (epoll.c calls it when it
 * hides bits of a registration). */
void sl__ready_arm(int fd, uint64_t at);
/* A non-blocking connect whose rate slot starts at c->ready_ns: remember it,
 * hold the socket back, and connect for real when the slot comes. Returns
 * true if deferred (the caller returns EINPROGRESS). */
bool sl__connect_defer(struct sl_call *c, const struct sockaddr *sa, socklen_t len);
/* connect() on an fd whose connect is deferred: EALREADY until its slot,
 * then the real connect's answer. Returns false if fd has none. */
bool sl__connect_again(int fd, const struct sockaddr *sa, socklen_t len, int *ret);
/* SO_ERROR of fd if it has a deferred connect (sockopt.c): returns 1 with
 * *err (0: in progress, or the real connect's error, once), else 0. */
int sl__connect_soerror(int fd, int *err);

/* ---- epoll.c ----------------------------------------------------------------- */

/* Bring the kernel registrations of fd in line with what is hidden now. */
void sl__ep_sync(int fd);
/* True if fd has registrations this shim mirrors. Relaxed load. */
bool sl__ep_has(int fd);
void sl__ep_forget(int fd);
int sl__ep_init_unsync(bool on);

#endif /* SLUICE_SHIM_INTERNAL_H */
