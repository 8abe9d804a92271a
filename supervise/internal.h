/* SPDX-License-Identifier: MIT */
/*
 * internal.h - what the files of the supervisor share.
 *
 * Overview
 * --------
 * Supervised mode throttles programs that LD_PRELOAD cannot reach (static
 * binaries, Go programs) with seccomp user notification: a filter installed
 * in the program before exec, inherited by every descendant, hands chosen
 * system calls to the `sluice` process, which decides with the same engine/
 * (over core/ and policy/) as the shim, holds the calling thread while it
 * waits, and then lets the call continue or performs it on the program's
 * behalf. The files split by idea:
 *   kernel.c    the kernel's seccomp and pidfd features, checked at start;
 *   filter.c    the table of trapped calls: the classic BPF program built
 *               from it, and each call's handler (loop.c dispatches by it);
 *   launch.c    fork, filter, listener handoff over SCM_RIGHTS, exec, reap;
 *   loop.c      the notification loop: held calls, their deadlines and fds;
 *   target.c    the supervised threads and processes: pidfds, their fds
 *               (pidfd_getfd), their memory (process_vm_readv/writev);
 *   admit.c     limiter scopes, taking and giving back units: over engine/;
 *   conns.c     conns rules: slots held until the connection's fd closes;
 *   turn.c      conns:adaptive: a request's turn holds a slot from its first
 *               bytes to its answer; the engine's controller moves the limit;
 *   gate.c      system protection (load1=, cpu=, rt=): a rule's gate, a
 *               limit on the same turns; host.c: the host's load and CPU;
 *   stat.c      the status record `sluice stat` reads; shared.c: shared=;
 *   sock.c      socket, accept, connect; place.c: their fds (512-1023);
 *   io.c        the send and receive families, performed by the supervisor;
 *               source.c: sendfile and splice into a socket, as sends.
 *
 * Design: the program's sockets are created by the supervisor (socket and
 * accept emulated, the fd installed with SECCOMP_IOCTL_NOTIF_ADDFD at a free
 * number >= SL_SUP_FD_BASE), so the filter traps fd-based I/O only for fds
 * >= SL_SUP_FD_BASE and file I/O runs at the speed of a bare filter.
 *
 * Each file has its header beside it (kernel.h ... io.h); this one holds
 * the overview and the constants they share. What the supervisor decides is
 * engine/'s (which rules match, what each rule answers, piece sizes,
 * counters), the same code the preload decides with: these files trap,
 * describe the call, ask the engine, and answer or hold.
 *
 * Threading: the supervisor is one thread; nothing here is thread-safe.
 */
#ifndef SLUICE_SUPERVISE_INTERNAL_H
#define SLUICE_SUPERVISE_INTERNAL_H

#include <linux/seccomp.h>

#define SL_SUP_FD_BASE 512            /* sockets are placed at this fd or above */
#define SL_SUP_FD_TOP 1024            /* ... and below this one while the limit allows */
#define SL_SUP_CALLS_MAX 16384        /* calls held at once (one thread each) */
#define SL_SUP_IOV_MAX 1024           /* UIO_MAXIOV */
#define SL_SUP_PIECE_MAX (256u << 10) /* most bytes moved by one piece */
#define SL_SUP_SWEEP_NS 100000000ull  /* held calls re-validated this often */
#define SL_SUP_FDCLASS_REFRESH 256    /* fast sends between two full looks at a socket */

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

#endif /* SLUICE_SUPERVISE_INTERNAL_H */
