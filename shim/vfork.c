/* SPDX-License-Identifier: MIT */
/*
 * vfork.c - vfork, clone, and telling a child that shares our memory apart
 * (vfork.h says why and what the wrappers do with it).
 *
 * vfork cannot be a C wrapper that calls glibc's: its child returns first,
 * on the parent's stack, and calls on into exec, overwriting the frame the
 * parent would return through. So on x86-64 it is glibc's own few
 * instructions: the return address is popped into %rdi (the kernel gives the
 * parent its own registers back when it resumes), the system call is made,
 * and the address pushed again. Between the two the child sets sl__vforked
 * and the parent clears it: the child runs on the TLS of the thread that
 * called vfork, and that thread does not run again before the child has
 * exec'd or exited. A failure sets errno in C (vfork_failed), reached by a
 * tail jump with the caller's return address in place.
 *
 * Not on x86-64: vfork stays glibc's, and sl__vm_shared starts at 1, so the
 * wrappers that change a table ask getpid() first (one system call on a
 * close of a tracked fd).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/types.h>
#include <unistd.h>

#include "real.h"
#include "vfork.h"

const int sl__vfork_anchor = 1;

__thread unsigned char sl__vforked __attribute__((tls_model("initial-exec")));

#if defined(__x86_64__)
_Atomic unsigned char sl__vm_shared;
#else
_Atomic unsigned char sl__vm_shared = 1;
#endif

/* The pid this memory belongs to; 0 before the constructor. */
static _Atomic int own_pid;

bool sl__vm_child_slow(void)
{
	int pid = atomic_load_explicit(&own_pid, memory_order_relaxed);
	if (pid == 0)
		return false; /* before the constructor: nothing is tracked yet */
	/* getpid never fails: errno is not touched. Nor may it be: a CLONE_VM
	 * child may run on a TLS its caller made (Chromium's chroot helper:
	 * a zeroed buffer), where errno's address is bogus (it segfaulted
	 * there, and the sandboxed zygote died). */
	return getpid() != pid;
}

void sl__vm_note_clone(unsigned long flags)
{
	if ((flags & CLONE_VM) && !(flags & CLONE_THREAD))
		atomic_store_explicit(&sl__vm_shared, 1, memory_order_relaxed);
}

static void vfork_atfork_child(void)
{
	atomic_store_explicit(&own_pid, (int)getpid(), memory_order_relaxed);
}

void sl__vfork_init_unsync(void)
{
	vfork_atfork_child();
	pthread_atfork(NULL, NULL, vfork_atfork_child);
}

/* clone(fn, stack, flags, arg, [ptid, tls, ctid]): noted, then glibc's.
 * The three optional arguments are read whatever flags say (as glibc's own
 * clone reads its registers): a missing one is a register the call ignores.
 * A CLONE_VM child may run on a TLS of its caller's making (Chromium's), so
 * what it reaches of ours (syscall, _exit) touches no TLS of libc's, errno
 * among it (sl__vm_child_slow). */
SL_EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	pid_t *ptid = va_arg(ap, pid_t *);
	void *tls = va_arg(ap, void *);
	pid_t *ctid = va_arg(ap, pid_t *);
	va_end(ap);
	sl__vm_note_clone((unsigned long)(unsigned)flags);
	return SL_REAL(clone)(fn, stack, flags, arg, ptid, tls, ctid);
}

#if defined(__x86_64__)
/* Reached by a tail jump from vfork with -errno in edi: sets errno,
 * returns -1 to vfork's caller. */
__attribute__((used, visibility("hidden"))) long sl__vfork_failed(int e);
__attribute__((used, visibility("hidden"))) long sl__vfork_failed(int e)
{
	errno = e;
	return -1;
}

__asm__(".text\n"
	".globl vfork\n"
	".type vfork, @function\n"
	".globl __vfork\n" /* glibc's other name for it */
	".type __vfork, @function\n"
	".p2align 4\n"
	"vfork:\n"
	"__vfork:\n"
	".cfi_startproc\n"
#ifdef __CET__
	"	endbr64\n"
#endif
	"	popq %rdi\n" /* the return address, kept where the child cannot touch it */
	".cfi_adjust_cfa_offset -8\n"
	".cfi_register %rip, %rdi\n"
	"	movl $58, %eax\n" /* __NR_vfork */
	"	syscall\n"
	"	pushq %rdi\n"
	".cfi_adjust_cfa_offset 8\n"
	".cfi_rel_offset %rip, 0\n"
	"	movq sl__vforked@gottpoff(%rip), %rcx\n"
	"	cmpq $-4095, %rax\n"
	"	jae 2f\n"
	"	testl %eax, %eax\n"
	"	setz %fs:(%rcx)\n" /* child: 1; parent, resumed: 0 */
	"	ret\n"
	"2:	movb $0, %fs:(%rcx)\n"
	"	negl %eax\n"
	"	movl %eax, %edi\n"
	"	jmp sl__vfork_failed\n"
	".cfi_endproc\n"
	".size vfork, .-vfork\n"
	".size __vfork, .-__vfork\n");
#endif
