/* SPDX-License-Identifier: MIT */
/*
 * real.c - the table of real libc functions behind every wrapper.
 *
 * One struct sl_real holds one atomic pointer per intercepted symbol,
 * generated from SL_REAL_LIST. The constructor in init.c fills it with
 * sl_real_resolve_all(); a wrapper that runs earlier (another library's
 * constructor may call connect before ours runs) finds its slot empty and
 * resolves that one symbol itself. dlsym(RTLD_NEXT, ...) gives every racer
 * the same answer, so publishing with an atomic release store is enough: no
 * lock, no pthread_once (musl publishes its vDSO clock_gettime this way).
 *
 * A symbol the C library lacks (close_range before glibc 2.34, say) gets a
 * stub that fails with ENOSYS, logged once. The host is never exited.
 *
 * real.c and log.c call each other, and must: the logger writes through the
 * real write (never a wrapper, so that a log line is never throttled or
 * re-entered), and the resolver logs a missing symbol. The loop is bounded:
 * a missing write is published (as the stub) before it is logged.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#if defined(__GLIBC__)
#include <sys/single_threaded.h>
#endif

#include "log.h"
#include "real.h"
#include "sandboxed.h"

/* The lazy stubs of the send and receive shapes (real.h): a slot of those
 * shapes is never NULL, so their wrappers test no pointer. A stub resolves
 * its symbol and calls it; a call after that goes straight to libc. */
#define SL_LAZY_SEND(...) __VA_ARGS__
#define SL_LAZY_SEND_TFO(...) __VA_ARGS__
#define SL_LAZY_RECV(...) __VA_ARGS__
#define SL_LAZY_OWN(...)
#define SL_LAZY_NEWFD(...)
#define SL_LAZY_NEWFD_MODE(...)
#define SL_LAZY_NEWFD_PAIR(...)
#define SL_LAZY_DEF(ret, name, params, args, shape, fd)                                            \
	SL_LAZY_##shape(static ret lazy_##name params {                                            \
		return ((SL_REAL_TYPE(name))sl__real_resolve(SL_REAL_##name))args;                 \
	})
SL_REAL_LIST(SL_LAZY_DEF)
#undef SL_LAZY_DEF

_Alignas(SL_REAL_ALIGN) struct sl_real sl__real = {
#define SL_LAZY_INIT(ret, name, params, args, shape, fd) SL_LAZY_##shape(.name = lazy_##name, )
	SL_REAL_LIST(SL_LAZY_INIT)
#undef SL_LAZY_INIT
#if SL_RAWCALL
		.single = &__libc_single_threaded,
#endif
};

/* The slots a hot path may call as their system call (rawcall.h; the
 * calls themselves: sl__io_raw, xfer_recv.h): glibc's function is, with one
 * thread, that call alone. */
static const bool raw_slot[SL_REAL_COUNT] = {
	[SL_REAL_send] = true,     [SL_REAL_sendto] = true, [SL_REAL_sendmsg] = true,
	[SL_REAL_write] = true,    [SL_REAL_writev] = true, [SL_REAL_recv] = true,
	[SL_REAL_recvfrom] = true, [SL_REAL_read] = true,   [SL_REAL_readv] = true,
};

/* Each slot's lazy stub, NULL for a slot that starts empty. */
static void *const lazy_of[SL_REAL_COUNT] = {
#define SL_LAZY_TAB(ret, name, params, args, shape, fd)                                            \
	SL_LAZY_##shape([SL_REAL_##name] = (void *)lazy_##name, )
	SL_REAL_LIST(SL_LAZY_TAB)
#undef SL_LAZY_TAB
};

__thread int sl__busy __attribute__((tls_model("initial-exec")));
_Atomic int sl__sandbox_on; /* sandboxed.h */

static const char *const real_names[SL_REAL_COUNT] = {
#define SL_REAL_NAME(ret, name, params, args, shape, fd) #name,
	SL_REAL_LIST(SL_REAL_NAME)
#undef SL_REAL_NAME
};

/* Slots whose symbol was missing and already logged. Relaxed: a second log
 * line in a race is harmless, nothing else depends on the bit. */
static _Atomic uint64_t missing_logged[(SL_REAL_COUNT + 63) / 64];

void *sl__real_lazy_of(enum sl_real_slot slot)
{
	return lazy_of[slot];
}

/* The stand-in for a missing symbol: every intercepted function returns an
 * int or ssize_t, and -1 in a long register reads as -1 for both. */
static long real_enosys(void)
{
	errno = ENOSYS;
	return -1;
}

/* The address of slot i inside sl__real, as a generic atomic pointer. All
 * members are pointers of the same size and representation. */
static _Atomic(void *) *slot_ptr(enum sl_real_slot slot)
{
	return (_Atomic(void *) *)((char *)&sl__real + (size_t)slot * sizeof(void *));
}

_Static_assert(offsetof(struct sl_real, libc) == SL_REAL_COUNT * sizeof(void *),
	       "struct sl_real starts with a plain array of pointers");

/* Whether fn is glibc's own: defined in the object that defines
 * __libc_single_threaded (rawcall.h). */
static bool in_glibc(void *fn)
{
#if SL_RAWCALL
	Dl_info a, b;
	return dladdr(fn, &a) != 0 && dladdr((const void *)&__libc_single_threaded, &b) != 0 &&
	       a.dli_fbase == b.dli_fbase;
#else
	(void)fn;
	return false;
#endif
}

/*
 * Resolve one slot with dlsym(RTLD_NEXT) and publish it. Thread-safe and
 * idempotent; errno is preserved. A missing symbol gets the ENOSYS stub and
 * one warning.
 */
void *sl__real_resolve(enum sl_real_slot slot)
{
	int saved = errno;
	_Atomic(void *) *p = slot_ptr(slot);
	/* Acquire: the pointer is returned for a call (see SL_REAL). */
	void *was = atomic_load_explicit(p, memory_order_acquire);
	if (was != NULL && was != lazy_of[slot]) {
		errno = saved;
		return was;
	}
	void *fn = dlsym(RTLD_NEXT, real_names[slot]);
	bool missing = fn == NULL;
	if (missing)
		fn = (void *)real_enosys;
	if (!missing && raw_slot[slot] && in_glibc(fn))
		atomic_store_explicit(&sl__real.libc[slot], fn, memory_order_relaxed);
	/* Release pairs with the acquire load in SL_REAL(): whoever sees the
	 * pointer sees a resolved symbol. A racer stores the same value. */
	atomic_store_explicit(p, fn, memory_order_release);
	/* Logged after publishing, so that a missing write() cannot recurse. */
	uint64_t bit = (uint64_t)1 << (slot % 64);
	if (missing &&
	    !(atomic_fetch_or_explicit(&missing_logged[slot / 64], bit, memory_order_relaxed) &
	      bit))
		sl_log(SL_LOG_WARN, "%s not found in the C library: calls fail with ENOSYS",
		       real_names[slot]);
	errno = saved;
	return fn;
}

/* Resolve every empty slot (the constructor). Thread-safe. */
void sl_real_resolve_all(void)
{
	for (int i = 0; i < SL_REAL_COUNT; i++)
		sl__real_resolve((enum sl_real_slot)i);
}
