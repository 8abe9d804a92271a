/* SPDX-License-Identifier: MIT */
/*
 * internal.h - what the files of the supervisor share.
 *
 * Overview
 * --------
 * Supervised mode throttles programs that LD_PRELOAD cannot reach (static
 * binaries, Go programs) with seccomp user notification: a filter installed
 * in the program before exec, inherited by every descendant, hands chosen
 * system calls to the `sluice` process, which decides with the same core/
 * limiters and policy/ rules as the shim, holds the calling thread while it
 * waits, and then lets the call continue or performs it on the program's
 * behalf. The files split by idea:
 *   features.c  the kernel's seccomp and pidfd features, checked at start;
 *   filter.c    the classic BPF program: which calls are trapped;
 *   launch.c    fork, filter, listener handoff over SCM_RIGHTS, exec, reap;
 *   loop.c      the notification loop: held calls, their deadlines and fds;
 *   target.c    the supervised threads and processes: pidfds, their fds
 *               (pidfd_getfd), their memory (process_vm_readv/writev);
 *   limits.c    rule matching and limiter scopes over core/ and policy/;
 *   sock.c      socket, accept, connect: sockets placed at fd >= 512;
 *   io.c        the send and receive families, performed by the supervisor.
 *
 * Design: the program's sockets are created by the supervisor (socket and
 * accept emulated, the fd installed with SECCOMP_IOCTL_NOTIF_ADDFD at a free
 * number >= SL_SUP_FD_BASE), so the filter traps fd-based I/O only for fds
 * >= SL_SUP_FD_BASE and file I/O runs at the speed of a bare filter.
 *
 * Threading: the supervisor is one thread; nothing here is thread-safe.
 */
#ifndef SLUICE_SUPERVISE_INTERNAL_H
#define SLUICE_SUPERVISE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/seccomp.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "addr.h"
#include "decide.h"
#include "policy.h"
#include "sluice_core.h"
#include "supervise.h"

#define SL_SUP_FD_BASE 512            /* sockets are placed at this fd or above */
#define SL_SUP_CALLS_MAX 16384        /* calls held at once (one thread each) */
#define SL_SUP_IOV_MAX 1024           /* UIO_MAXIOV */
#define SL_SUP_PIECE_MAX (256u << 10) /* most bytes moved by one piece */
#define SL_SUP_SWEEP_NS 100000000ull  /* held calls re-validated this often */

/* Not in Debian 12's headers. */
#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif
#ifndef PIDFD_THREAD
#define PIDFD_THREAD 0x80 /* O_EXCL */
#endif

struct sl_sup; /* the supervisor, below */

/* ---- features.c ---------------------------------------------------------- */

struct sl_sup_features {
	int major, minor;   /* uname release */
	bool wait_killable; /* SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (6.0) */
	bool sync_wakeup;   /* SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (6.6) */
	bool pidfd_thread;  /* pidfd_open(tid, PIDFD_THREAD) (6.9) */
};

/* Fill *f; 0, or -1 with a one-line reason in err (a kernel older than
 * 5.14, or user notification not available). */
int sl_sup_features_check(struct sl_sup_features *f, char *err, size_t errlen);

/* ---- filter.c ------------------------------------------------------------ */

/* Which groups of calls the filter hands to the supervisor. */
struct sl_sup_traps {
	bool place;   /* socket, accept, accept4 (fd placement) */
	bool connect; /* connect */
	bool accept;  /* accept, accept4 (rate or conns) */
	bool send;    /* write, writev, send*, pwritev2, sendfile, splice: fd >= base */
	bool recv;    /* read, readv, recv*, preadv2, splice: fd >= base */
};

/* The traps a policy needs. */
void sl_sup_traps_of(const struct sl_policy *p, struct sl_sup_traps *t);

/* Build the filter into prog (at most `max` instructions); returns the
 * number of instructions, or -1 if it does not fit. */
struct sock_filter;
int sl_sup_filter_build(const struct sl_sup_traps *t, struct sock_filter *prog, int max);

/* ---- target.c ------------------------------------------------------------ */

struct sl_sup_fdrow; /* limits.c: the per=fd limiters of one fd */

/* A supervised process (thread group). */
struct sl_sup_proc {
	pid_t tgid;
	int pidfd;        /* process pidfd: readable once it has exited */
	int fddir;        /* /proc/TGID/fd, to find free fd numbers */
	int next_fd;      /* where the search for a free high fd starts */
	bool unreachable; /* pidfd_getfd refused (EPERM): passes unthrottled */
	bool pass;        /* unreachable, or left out by SLUICE_ONLY/SKIP */
	bool low_fd_warned;
	uint32_t lims_init; /* per=process limiters initialised, by rule */
	struct sl_limiter lims[SL_MAX_RULES];
	struct sl_sup_fdrow **fdrows; /* per=fd limiters, indexed by fd */
	size_t n_fdrows;
	char comm[20];
	struct sl_shm_stat *rec;  /* the live record (stat.c), or NULL */
	size_t rec_size;          /* its mapping's size */
	unsigned refs;            /* threads pointing here */
	struct sl_sup_proc *next; /* hash chain */
};

/* A supervised thread: the pid field of a notification. */
struct sl_sup_thread {
	pid_t tid;
	int pidfd; /* thread pidfd (PIDFD_THREAD), or -1 */
	struct sl_sup_proc *proc;
	uint32_t lims_init;         /* per=thread limiters initialised, by rule */
	struct sl_limiter *lims;    /* [SL_MAX_RULES], allocated on first use */
	unsigned refs;              /* held calls pointing here */
	struct sl_sup_thread *next; /* hash chain */
};

/* The thread that made a notification, and its process; NULL if it is
 * gone (the notification is then dead too). */
struct sl_sup_thread *sl_sup_thread_of(struct sl_sup *s, pid_t tid);
/* Forget threads and processes that have exited (the sweep calls it). */
void sl_sup_target_sweep(struct sl_sup *s);
/* Free every thread, process and peer entry (at the end). */
void sl_sup_target_free(struct sl_sup *s);
/* A duplicate of the target's fd (close it after the answer), or -errno.
 * EPERM marks the process unreachable and warns once. */
int sl_sup_getfd(struct sl_sup *s, struct sl_sup_thread *t, int fd);
/* Mark a process the supervisor has no ptrace access to; warn once. */
void sl_sup_unreachable(struct sl_sup_proc *p, const char *what, int err);
/* Copy from / to the target's memory: bytes copied, or -errno. */
ssize_t sl_sup_mem_read(pid_t tid, uint64_t addr, void *buf, size_t len);
ssize_t sl_sup_mem_readv(pid_t tid, const struct iovec *remote, int n, void *buf, size_t len);
ssize_t sl_sup_mem_writev(pid_t tid, const struct iovec *remote, int n, const void *buf,
			  size_t len);
ssize_t sl_sup_mem_write(pid_t tid, uint64_t addr, const void *buf, size_t len);

/* ---- limits.c ------------------------------------------------------------ */

struct sl_sup_call;

/* Rules of operation op (and of conns when `conns`) fitting the socket and
 * address. */
uint32_t sl_sup_match(const struct sl_sup *s, enum sl_op op, unsigned fam, unsigned type,
		      const struct sl_addr *a);
/* Whether any rule of op could apply to a socket of this family and type. */
bool sl_sup_may_match(const struct sl_sup *s, enum sl_op op, unsigned fam, unsigned type);

enum sl_sup_verdict {
	SL_SUP_GO = 0,    /* taken: act after *wait_ns */
	SL_SUP_RETRY = 1, /* nothing taken: ask again after *wait_ns */
	SL_SUP_REFUSE = 2 /* refused: *err is the errno */
};
/* Take `bytes` from the byte rules and `msgs` from the other rules of the
 * call's rules (c->rules) at now_ns, recording the grant in the call. */
enum sl_sup_verdict sl_sup_admit(struct sl_sup *s, struct sl_sup_call *c, uint64_t bytes,
				 uint64_t msgs, uint64_t now_ns, uint64_t *wait_ns, int *err);
/* The instant past which rule i may not make call c wait (max-delay from the
 * call's start, or the socket's timeout). */
uint64_t sl_sup_limit(const struct sl_sup *s, const struct sl_sup_call *c, unsigned i);
/* Act on rule i's answer a (engine/decide.h) that is not a grant: a dry-run
 * is noted and GO (go on); a retry within limit is RETRY with *wait_ns; else
 * REFUSE with *err. The call's end counts them (engine/count.h). */
enum sl_sup_verdict sl_sup_settle(struct sl_sup *s, struct sl_sup_call *c, unsigned i,
				  struct sl_answer a, uint64_t now_ns, uint64_t limit,
				  uint64_t *wait_ns, int *err);
/* Give back `bytes` of the call's grant (what the piece did not move), or the
 * whole grant (bytes = UINT64_MAX). */
void sl_sup_refund(struct sl_sup *s, struct sl_sup_call *c, uint64_t bytes);
/* Bytes a piece of call c may take at most under its rules (engine/params.h:
 * sl_piece_max), and never more than SL_SUP_PIECE_MAX. */
uint64_t sl_sup_piece_cap(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);
/* The limiter of rule i for call c (its scope), initialised on first use;
 * NULL without memory. */
struct sl_limiter *sl_sup_lim_of(struct sl_sup *s, struct sl_sup_call *c, unsigned i,
				 uint64_t now_ns);

/* ---- conns.c ------------------------------------------------------------- */

/* Take a slot of each of the call's conns rules: GO, RETRY (ask again after
 * *wait_ns) or REFUSE (*err). */
enum sl_sup_verdict sl_sup_conns_take(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns,
				      uint64_t *wait_ns, int *err);
/* The connection is open at fd of the call's process: its slots stay taken
 * until that fd no longer names the socket. */
void sl_sup_conns_hold(struct sl_sup_call *c, int fd);
/* The call ends without a connection: give its slots back. */
void sl_sup_conns_drop(struct sl_sup_call *c);
/* Give back the slots of connections that were closed. */
void sl_sup_conns_sweep(struct sl_sup *s);
/* Forget every connection (at the end). */
void sl_sup_conns_free(void);

/* Forget the per=fd limiters of fd in proc (a new socket took the number). */
void sl_sup_fd_reset(struct sl_sup_proc *p, int fd);
void sl_sup_proc_free_rows(struct sl_sup_proc *p);

/* ---- stat.c: the status record (segment stat-TGID) of each supervised process */

struct sl_shm_stat;
/* Create and publish p's record, its per=process limiters initialised at
 * now_ns; p->rec stays NULL if that fails. */
void sl_sup_stat_open(const struct sl_sup *s, struct sl_sup_proc *p, uint64_t now_ns);
/* Remove p's record. */
void sl_sup_stat_close(struct sl_sup_proc *p);
/* The record's limiter of rule i (retuned by `sluice set`), or NULL. */
struct sl_limiter *sl_sup_stat_lim(struct sl_sup_proc *p, unsigned i);
/* The counters (engine/count.h, as the preload counts): rule i refused a
 * call; bytes moved under rules; a call of rules ended, admitted if ok,
 * having waited waited_ns for the rules in `delayed`. */
void sl_sup_stat_refused(struct sl_sup_proc *p, unsigned i);
void sl_sup_stat_bytes(struct sl_sup_proc *p, uint32_t rules, uint64_t n);
void sl_sup_stat_end(struct sl_sup_proc *p, uint32_t rules, bool ok, uint32_t delayed,
		     uint64_t waited_ns);

/* ---- shared.c: shared=NAME rules --------------------------------------- */

struct sl_shm_shared;
/* Map (create) the segment of every shared= rule; 0, or -1 with a reason. */
int sl_sup_shared_open_all(struct sl_sup *s, uint64_t now_ns, char *err, size_t errlen);
/* The shared limiter of rule i, or NULL if the rule is not shared=. */
struct sl_limiter *sl_sup_shared_lim(const struct sl_sup *s, unsigned i);
void sl_sup_shared_close_all(struct sl_sup *s);

/* ---- loop.c -------------------------------------------------------------- */

enum sl_sup_kind {
	SL_SUP_CONNECT = 0,
	SL_SUP_SEND = 1,
	SL_SUP_RECV = 2,
	SL_SUP_ACCEPT = 3,
};

enum sl_sup_wait {
	SL_SUP_WAIT_NONE = 0, /* step at once */
	SL_SUP_WAIT_TIME = 1, /* step at due_ns */
	SL_SUP_WAIT_IO = 2,   /* step when dup polls `events` (or at due_ns) */
};

/* One held call. */
struct sl_sup_call {
	bool used;
	uint8_t kind;  /* enum sl_sup_kind */
	uint8_t wait;  /* enum sl_sup_wait */
	bool nonblock; /* O_NONBLOCK on the file or MSG_DONTWAIT */
	bool granted;  /* a grant is held (grant_* below) */
	bool stream;
	short events; /* SL_SUP_WAIT_IO: POLLIN or POLLOUT */
	int dup;      /* our duplicate of the target's fd */
	int flags;    /* the call's MSG_* flags */
	struct seccomp_notif req;
	struct sl_sup_thread *th;
	uint32_t rules;
	uint64_t start_ns, due_ns; /* due_ns: when the loop steps the call next */
	uint64_t go_ns;            /* when the grant's wait is over */
	/* Transfer state. */
	bool cont; /* control messages: take the units, then continue */
	int niov;
	uint64_t total, done;
	uint64_t grant_bytes, grant_msgs, grant_at_ns;
	uint64_t grant_n[SL_MAX_RULES]; /* units taken from each rule */
	/* What the call's end counts (engine/count.h). */
	bool refused;           /* a rule refused it */
	uint32_t delayed_rules; /* rules that made it wait (dry-run: would have) */
	uint64_t waited_ns;     /* the waits its rules asked for, in all */
	uint64_t backoff_ns;    /* the next retry of a limiter without a hint */
	struct sl_addr peer;
	struct sockaddr_storage dest; /* sendto/sendmsg destination */
	socklen_t destlen;
	uint64_t name_ptr, namelen_ptr; /* where a receive's source goes */
	uint64_t msg_ptr;               /* recvmsg/recvmmsg: the header */
	uint64_t timeout_ns;            /* SO_SNDTIMEO/SO_RCVTIMEO, 0: none */
	/* conns rules of a connect or accept (conns.c). */
	uint32_t conns_rules; /* matched */
	uint32_t conns_held;  /* slots taken, not yet handed to a connection */
	bool conns_taken;
	struct sl_limiter *conns_lim[SL_MAX_RULES];
	/* Last, so that a new call clears only what comes before. */
	struct iovec riov[SL_SUP_IOV_MAX]; /* the target's buffers */
};

/* The supervisor. */
struct sl_sup {
	struct sl_policy policy;
	struct sl_sup_features feat;
	struct sl_sup_traps traps;
	bool verbose;
	int listener;
	struct sl_sup_call *calls; /* [SL_SUP_CALLS_MAX] */
	unsigned n_calls;          /* used slots */
	unsigned calls_hi;         /* slots below this may be used */
	bool full_warned;
	/* target.c */
	struct sl_sup_thread **threads; /* open hash on tid */
	size_t threads_cap, n_threads;
	struct sl_sup_proc **procs; /* open hash on tgid */
	size_t procs_cap, n_procs;
	/* limits.c: per=peer limiters */
	struct sl_sup_peer *peers;
	uint64_t peer_clock;
	struct sl_shm_shared *shared[SL_MAX_RULES]; /* shared=NAME segments, by rule */
};

uint64_t sl_sup_now_ns(void);
/* Answer a notification: val or -err, or CONTINUE. 0, or -errno (ENOENT:
 * the call is gone). */
int sl_sup_answer(struct sl_sup *s, uint64_t id, int64_t val, int err);
int sl_sup_continue(struct sl_sup *s, uint64_t id);
/* Whether the notification is still waiting for its answer. */
bool sl_sup_valid(const struct sl_sup *s, uint64_t id);
/* A free call slot (zeroed, used, dup -1) or NULL when SL_SUP_CALLS_MAX calls
 * are held. */
struct sl_sup_call *sl_sup_call_new(struct sl_sup *s, const struct seccomp_notif *req,
				    struct sl_sup_thread *th);
/* Release a call: refund what it still holds, close its dup. */
void sl_sup_call_free(struct sl_sup *s, struct sl_sup_call *c);
/* Log once per message key (a small set of warnings). */
void sl_sup_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- sock.c, io.c: handlers ---------------------------------------------- */

/* A new notification: answer it now or hold it (a call slot). */
void sl_sup_on_socket(struct sl_sup *s, const struct seccomp_notif *req);
void sl_sup_on_connect(struct sl_sup *s, const struct seccomp_notif *req);
void sl_sup_on_accept(struct sl_sup *s, const struct seccomp_notif *req);
void sl_sup_on_send(struct sl_sup *s, const struct seccomp_notif *req);
void sl_sup_on_recv(struct sl_sup *s, const struct seccomp_notif *req);
void sl_sup_on_sendfile(struct sl_sup *s, const struct seccomp_notif *req);
/* Advance a held call (its deadline came, or its fd is ready). Returns true
 * when the call is finished (answered or dead) and its slot may be freed. */
bool sl_sup_step(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);
bool sl_sup_step_connect(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);
bool sl_sup_step_accept(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);
bool sl_sup_step_send(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);
bool sl_sup_step_recv(struct sl_sup *s, struct sl_sup_call *c, uint64_t now_ns);

/* sock.c: install srcfd in the target at a free fd >= SL_SUP_FD_BASE and
 * answer the notification with its number: that number, or -errno. */
int sl_sup_place(struct sl_sup *s, struct sl_sup_thread *th, uint64_t id, int srcfd, bool cloexec);
/* The socket's address family bits, type bits and peer (getpeername). */
void sl_sup_classify(int fd, unsigned *fam, unsigned *type, struct sl_addr *peer);

#endif /* SLUICE_SUPERVISE_INTERNAL_H */
