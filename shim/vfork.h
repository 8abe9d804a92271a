/* SPDX-License-Identifier: MIT */
/*
 * vfork.h - is this a child that shares its parent's memory (vfork, or
 * clone with CLONE_VM) and has not yet called exec?
 *
 * Such a child runs on its parent's memory: whatever a wrapper writes there
 * (fd classification, epoll registrations, conns slots, waiting connects)
 * is the parent's, though the child's fd table is its own. So the wrappers
 * that change the shim's tables (close, close_range, dup*, fcntl(F_DUPFD),
 * fclose, socket, socketpair, the calls that hand out fds, syscall()) call
 * the kernel and nothing else when sl__vm_child() is true: the parent's
 * tables go on describing the parent's fds, which is what they are.
 *
 * How it is known:
 *   - on x86-64, vfork is the shim's own (vfork.c, a few instructions of
 *     assembly, as glibc's): its child sets sl__vforked, a thread-local
 *     byte of the thread that called vfork (the child runs on that thread's
 *     TLS), and the parent clears it when it resumes, after the child's
 *     exec or exit. No system call is added anywhere.
 *   - a clone() with CLONE_VM but not CLONE_THREAD (the wrapper, or
 *     syscall(SYS_clone/clone3/vfork)) sets sl__vm_shared for good; from
 *     then on a wrapper about to change a table compares getpid() with the
 *     process's own pid (taken at load and after each fork). Elsewhere than
 *     x86-64 vfork is glibc's, and that test is always on.
 * glibc's posix_spawn, system and popen run their child through internal
 * calls that no preload sees: nothing to do there.
 */
#ifndef SLUICE_SHIM_VFORK_H
#define SLUICE_SHIM_VFORK_H

#include <stdatomic.h>
#include <stdbool.h>

#include "internal.h"

/* 1 in a vfork child until its exec or _exit (x86-64). Defined in vfork.c. */
extern __thread unsigned char sl__vforked __attribute__((tls_model("initial-exec")));
/* 1 once a CLONE_VM child may exist (always, where vfork is glibc's). */
extern _Atomic unsigned char sl__vm_shared;

/* The getpid() comparison (vfork.c). */
bool sl__vm_child_slow(void);

/* True in a child that shares this process's memory: one TLS load and one
 * global load in a process that never made such a child. */
static inline bool sl__vm_child(void)
{
	if (__builtin_expect(sl__vforked != 0, 0))
		return true;
	if (__builtin_expect(atomic_load_explicit(&sl__vm_shared, memory_order_relaxed) != 0, 0))
		return sl__vm_child_slow();
	return false;
}

/* A clone with these flags is about to be made (syscall(), clone()). */
void sl__vm_note_clone(unsigned long flags);

/* Take the process's pid, and again in each fork child (the constructor). */
void sl__vfork_init_unsync(void);

#endif /* SLUICE_SHIM_VFORK_H */
