/* SPDX-License-Identifier: MIT */
/*
 * fdwait.c - a call on an fd another thread is classifying waits for it
 * (fd.c's fd_rec_slow; fd.h).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "clock.h"
#include "fd.h"

/* fd + 1 while this thread classifies fd (0: none): a signal handler that
 * interrupts the classification and calls on the same fd must not wait for
 * itself. */
__thread int sl__fd_classifying __attribute__((tls_model("initial-exec")));

/* Wait for another thread's classification of fd (BUSY in b): sched_yield
 * at first, then 50 us sleeps (the shim's clock_nanosleep, the one sleep a
 * sandboxed process allows it: sandbox.h). However long it takes (the classifier may
 * be off the CPU, or be publishing the record: a file, an mmap): a call
 * that passed instead went unthrottled and uncounted (a per=process send
 * beside 3 other tests: one of 80 sends free). Returns the bits once BUSY
 * is gone; the thread that classifies it itself (re-entered from a signal
 * handler): b, still BUSY. */
uint8_t sl__fd_wait_classified(int fd, uint8_t b)
{
	if (sl__fd_classifying == fd + 1)
		return b;
	for (unsigned spins = 0; b & SL_FDB_BUSY; spins++) {
		if (spins < 1000) {
			sched_yield();
		} else {
			(void)sl__sleep_until(sl__clock_ns() + 50000u);
		}
		b = atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire);
	}
	return b;
}
