/* SPDX-License-Identifier: MIT */
/*
 * sandboxed.h - whether the process installed a seccomp filter on itself
 * (sandbox.h says what then changes): the one question every file may ask,
 * so its flag lives at the bottom, beside sl__busy (real.c), and asking it
 * ties no file to sandbox.c.
 *
 * API: thread-safe; sl__sandboxed() is one relaxed load.
 */
#ifndef SLUICE_SHIM_SANDBOXED_H
#define SLUICE_SHIM_SANDBOXED_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>

/* Nonzero once the process (one of its threads) asked for a seccomp filter. */
extern _Atomic int sl__sandbox_on;

/* True if the shim may make no query system call any more. Relaxed: the
 * flag is set before the filter's system call by the thread making it, and
 * only that thread is filtered until then (TSYNC filters other threads from
 * the same call on, after the store). */
static inline bool sl__sandboxed(void)
{
	return atomic_load_explicit(&sl__sandbox_on, memory_order_relaxed) != 0;
}

/* Block every signal in this thread, the old mask in *old: true; false,
 * nothing done, in a sandboxed process (no call it did not make). For a
 * section no handler of this thread may interrupt. */
static inline bool sl__signals_block(sigset_t *old)
{
	sigset_t all;
	return !sl__sandboxed() && sigfillset(&all) == 0 &&
	       pthread_sigmask(SIG_BLOCK, &all, old) == 0;
}

#endif /* SLUICE_SHIM_SANDBOXED_H */
