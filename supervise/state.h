/* SPDX-License-Identifier: MIT */
/*
 * state.h - the supervisor's state, as plain types: the supervisor,
 * its supervised processes and threads, one held call. No functions: every
 * file of the supervisor reads these, none of them owns them all.
 *
 * API: the supervisor's one thread (internal.h).
 */
#ifndef SLUICE_SUPERVISE_STATE_H
#define SLUICE_SUPERVISE_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/seccomp.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "addr.h"
#include "filter.h"
#include "internal.h"
#include "kernel.h"
#include "policy.h"
#include "sluice_core.h"

struct sl_sup_fdrow;  /* admit.c: the per=fd limiters of one fd */
struct sl_sup_peer;   /* admit.c: a per=peer entry */
struct sl_shm_stat;   /* the status record (stat.c) */
struct sl_shm_shared; /* a shared=NAME segment (shared.c) */
struct sl_sup_turns;  /* turns: limiters, controllers, connections (turn_state.h) */

/* What the supervisor learnt of one socket fd of a process (describe.c):
 * valid while the fd still names inode (dev, ino); the file's O_NONBLOCK
 * and SO_SNDTIMEO as they were then (fcntl and setsockopt are not trapped:
 * refreshed by the full path every SL_SUP_FDCLASS_REFRESH uses). */
struct sl_sup_fdclass {
	bool valid;
	bool nonblock;    /* O_NONBLOCK on the file */
	bool sndtimeo_ok; /* sndtimeo_ns read (a blocking send saw it) */
	unsigned fam, type;
	dev_t dev;
	ino_t ino;
	uint64_t sndtimeo_ns;
	uint32_t uses; /* fast-path hits since the last full look */
};

/* A supervised process (thread group). */
struct sl_sup_proc {
	pid_t tgid;
	int pidfd;        /* process pidfd: readable once it has exited */
	int fddir;        /* /proc/TGID/fd, to find free fd numbers */
	int next_fd;      /* where the downward search for a free high fd starts */
	uint32_t placed;  /* sockets placed (place.c: the search starts at the top again) */
	bool unreachable; /* pidfd_getfd refused (EPERM): passes unthrottled */
	bool pass;        /* unreachable, or left out by SLUICE_ONLY/SKIP */
	bool low_fd_warned;
	bool netns_warned;  /* made a socket in a network namespace not ours */
	uint32_t lims_init; /* per=process limiters initialised, by rule */
	struct sl_limiter lims[SL_MAX_RULES];
	struct sl_sup_fdrow **fdrows; /* per=fd limiters, indexed by fd */
	size_t n_fdrows;
	struct sl_sup_fdclass *fdcls; /* socket classes, indexed by fd (describe.c) */
	size_t n_fdcls;
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
	int fddir; /* /proc/TGID/task/TID/fd (O_PATH), opened on first use, or -1 */
	struct sl_sup_proc *proc;
	uint32_t lims_init;         /* per=thread limiters initialised, by rule */
	struct sl_limiter *lims;    /* [SL_MAX_RULES], allocated on first use */
	unsigned refs;              /* held calls pointing here */
	struct sl_sup_thread *next; /* hash chain */
};

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
	uint64_t sig_ns, sig_gap_ns;    /* SL_SUP_WAIT_IO: next look for a signal (loop.c) */
	/* sendfile and splice into the socket: their source (io.c). */
	int src_fd;           /* our duplicate of it, or -1: the program's memory */
	bool src_pipe;        /* a pipe (peeked with tee), else a file (pread) */
	int64_t src_pos;      /* a file's offset where the call began */
	uint64_t src_off_ptr; /* where the call's offset lives, 0: the file's own */
	/* A splice out of the socket: the pipe it fills (our duplicate), or -1;
	 * SL_SUP_WAIT_IO waits on wait_fd (the pipe, for room) if >= 0, else on
	 * dup. */
	int dst_pipe;
	int wait_fd;
	/* conns rules of a connect or accept (conns.c). */
	uint32_t conns_rules; /* matched */
	uint32_t conns_held;  /* slots taken, not yet handed to a connection */
	bool conns_taken;
	struct sl_limiter *conns_lim[SL_MAX_RULES];
	/* Gates (system protection, turn.c) of an accept: rules whose gate
	 * slot it took, not yet handed to the connection's first turn. */
	uint32_t gates_held;
	/* A receive that may start or end a turn on its connection (turn.c),
	 * a send that may start a client's (client.c). */
	ino_t turn_ino;        /* its socket's inode: the turn step comes first; 0: none
			      * (a connect: its socket's, for client_rules) */
	bool turn_waiting;     /* the request is there: waiting for a slot ... */
	uint64_t turn_until;   /* ... until this instant, then reset */
	uint32_t client_rules; /* a connect: the adaptive rules of its client turns */
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
	bool moved_warned;   /* a socket moved where it is not trapped (sock.c) */
	int send_needs_addr; /* 0 unknown, 1 no, 2 a send rule needs the peer (io.c) */
	/* target.c */
	struct sl_sup_thread **threads; /* open hash on tid */
	size_t threads_cap, n_threads;
	struct sl_sup_proc **procs; /* open hash on tgid */
	size_t procs_cap, n_procs;
	/* admit.c: per=peer limiters */
	struct sl_sup_peer *peers;
	struct sl_shm_shared *shared[SL_MAX_RULES]; /* shared=NAME segments, by rule */
	struct sl_sup_turns *turns;                 /* turns (turn.c, gate.c), made on first use */
};

#endif /* SLUICE_SUPERVISE_STATE_H */
