/* SPDX-License-Identifier: MIT */
/*
 * rawcall.h - a transfer's system call made by the shim itself, where
 * glibc's own function would make exactly that call and nothing more.
 *
 * glibc's send, write, recv and the rest (2.36, x86-64) test
 * __libc_single_threaded, then make the bare system call (one thread), or
 * the same call between enabling and restoring asynchronous cancellation
 * (more threads). A wrapper that calls glibc's function has work left
 * after the system call, so it returns twice after it (glibc's function,
 * then its own), and such returns cost here: the kernel's own calls
 * overwrite the processor's return stack, so they are mispredicted.
 * bench/ab_pair.c measured 1.5 % of a matched 1-byte send on loopback
 * (bench/README.md). So the hot path of one rule's credit (hotr_NAME,
 * xfer_hot.h; sl__io_raw, xfer_recv.h), in a single-threaded process,
 * makes the call itself as glibc's one-thread branch does: the same number
 * and arguments (send is sendto with no address, recv is recvfrom with
 * none), errno set the same way. The same system calls in the same order,
 * as strace, seccomp and ptrace see them. The other paths (a call that
 * waits, takes a slice, or falls under two rules) call glibc's function.
 *
 * When: the slot still holds the glibc function it was resolved to
 * (sl__real.libc[slot], set by sl__real_resolve only when dlsym found the
 * symbol in the object that defines __libc_single_threaded: not another
 * interposer's, and not a test's fake put in the slot since), and
 * __libc_single_threaded is true when the call is made, read where glibc
 * reads it. A process with more threads calls glibc's function, so
 * cancellation stays glibc's. x86-64 only; elsewhere the function is
 * always called.
 */
#ifndef SLUICE_SHIM_RAWCALL_H
#define SLUICE_SHIM_RAWCALL_H

#include <errno.h>
#include <stdbool.h>
#include <sys/syscall.h>
#include <sys/types.h>

#include "real.h"

/* Whether a call through slot `slot`, which holds fn now, may be made as
 * its bare system call (above). */
static inline __attribute__((always_inline)) bool sl__raw_ok(const void *fn, enum sl_real_slot slot)
{
#if SL_RAWCALL
	return fn == atomic_load_explicit(&sl__real.libc[slot], memory_order_relaxed) &&
	       *sl__real.single != 0; /* a plain read, as glibc's */
#else
	(void)fn;
	(void)slot;
	return false;
#endif
}

/* System call nr with six arguments, the kernel's result (-errno on failure). */
static inline __attribute__((always_inline)) long sl__raw6(long nr, long a1, long a2, long a3,
							   long a4, long a5, long a6)
{
#if SL_RAWCALL
	register long r10 __asm__("r10") = a4;
	register long r8 __asm__("r8") = a5;
	register long r9 __asm__("r9") = a6;
	long r;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "0"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return r;
#else
	(void)nr, (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6;
	return -ENOSYS;
#endif
}

/* errno = -r, and -1 (rawcall.c): out of line, so that a hot path keeps no
 * register for it. */
ssize_t sl__raw_fail(long r) __attribute__((cold));

/* The kernel's result as glibc returns it: -1 and errno on failure. */
static inline __attribute__((always_inline)) ssize_t sl__raw_ret(long r)
{
	if (__builtin_expect((unsigned long)r > -4096UL, 0))
		return sl__raw_fail(r);
	return r;
}

/* Whether slot `name` may be called as its system call now. */
#define SL_RAW_OK(name) sl__raw_ok((const void *)SL_REAL_LOAD(name), SL_REAL_##name)

#endif /* SLUICE_SHIM_RAWCALL_H */
