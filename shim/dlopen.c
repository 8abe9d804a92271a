/* SPDX-License-Identifier: MIT */
/*
 * dlopen.c - a library loaded with RTLD_DEEPBIND is named in one warning.
 *
 * RTLD_DEEPBIND makes the library look up its symbols in its own
 * dependencies first, libc among them, before the global scope the
 * preloaded library is in: its send, recv and connect are libc's, and no
 * rule sees them (PHP loads its extensions so: its curl downloads ran
 * unthrottled, "calls": 0). The first such library of a process is named
 * in one warning that says --supervise throttles them; each later one at
 * SLUICE_LOG=info (PHP loads its 16 extensions so: 16 warnings, most of
 * them about libraries that make no socket call). The load itself is
 * unchanged.
 *
 * dlopen must stay the caller's call: glibc finds the caller's link map
 * (its RUNPATH, $ORIGIN, namespace) from the return address. So on x86-64
 * the exported dlopen is a few instructions that keep the arguments, ask
 * sl__dlopen_hook (which notes the load and returns glibc's dlopen), and
 * jump to it with the caller's return address in place. Elsewhere dlopen is
 * not interposed, and such a library goes unwarned.
 */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "log.h"
#include "state.h"

const int sl__dlopen_anchor = 1;

#if defined(__x86_64__)
typedef void *(*dlopen_fn)(const char *, int);
static _Atomic(dlopen_fn) real_dlopen;
static _Atomic uint64_t warned[16]; /* hashes of the paths named */
static _Atomic bool warned_once;    /* the warning was given */

__attribute__((used, visibility("hidden"))) dlopen_fn sl__dlopen_hook(const char *file, int mode);
__attribute__((used, visibility("hidden"))) dlopen_fn sl__dlopen_hook(const char *file, int mode)
{
	dlopen_fn fn = atomic_load_explicit(&real_dlopen, memory_order_acquire);
	if (fn == NULL) {
		int busy = sl__busy;
		sl__busy = 1;
		fn = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
		sl__busy = busy;
		atomic_store_explicit(&real_dlopen, fn, memory_order_release);
	}
	if ((mode & RTLD_DEEPBIND) && file != NULL && !sl__busy && sl__st.active &&
	    sl__st.policy.n_rules > 0 &&
	    sl__log_first(warned, sizeof(warned) / sizeof(warned[0]), file)) {
		if (!atomic_exchange(&warned_once, true))
			sl__log_write(SL_LOG_WARN,
				      "%s is loaded with RTLD_DEEPBIND: its socket calls (and those "
				      "of any library loaded so after it; SLUICE_LOG=info names "
				      "them) go to libc past the preloaded library and run "
				      "unthrottled (sluice --supervise throttles them)",
				      file);
		else
			sl_log(SL_LOG_INFO,
			       "%s is loaded with RTLD_DEEPBIND too: its socket calls "
			       "run unthrottled",
			       file);
	}
	return fn;
}

__asm__(".text\n"
	".globl dlopen\n"
	".type dlopen, @function\n"
	".p2align 4\n"
	"dlopen:\n"
	".cfi_startproc\n"
#ifdef __CET__
	"	endbr64\n"
#endif
	"	pushq %rdi\n"
	".cfi_adjust_cfa_offset 8\n"
	"	pushq %rsi\n"
	".cfi_adjust_cfa_offset 8\n"
	"	subq $8, %rsp\n" /* the call below on a 16-byte boundary */
	".cfi_adjust_cfa_offset 8\n"
	"	call sl__dlopen_hook\n"
	"	addq $8, %rsp\n"
	".cfi_adjust_cfa_offset -8\n"
	"	popq %rsi\n"
	".cfi_adjust_cfa_offset -8\n"
	"	popq %rdi\n"
	".cfi_adjust_cfa_offset -8\n"
	"	jmp *%rax\n" /* glibc's dlopen, returning to our caller */
	".cfi_endproc\n"
	".size dlopen, .-dlopen\n");
#endif
