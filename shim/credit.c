/* SPDX-License-Identifier: MIT */
/*
 * credit.c - thread-local credit (credit.h): taking a slice, giving it
 * back, and the thread-exit and fork handlers.
 */
#include <pthread.h>

#include "clock.h"
#include "credit.h"
#include "fd.h"
#include "params.h"
#include "sandboxed.h"
#include "scope.h"

__thread struct sl_credit sl__credit[SL_CREDIT_RULES] __attribute__((tls_model("initial-exec")));
__thread struct sl_credit_slice sl__credit_slice[SL_CREDIT_RULES]
	__attribute__((tls_model("initial-exec")));
int (*sl__credit_span)(uint64_t ns, uint64_t *ticks) = sl__clock_tsc_span;

/* The per-thread counter slots (shm_format.h): owner[s] is 1 while a
 * thread counts in slot s; used, how many are. tslot: this thread's slot
 * + 1, 0 none yet, -1 none ever (it is exiting, or a sandboxed process's
 * fork child, which counts in its parent's record). */
static _Atomic uint32_t tslot_owner[SL_SHM_TSLOTS];
static _Atomic uint32_t tslot_used;
static __thread int tslot __attribute__((tls_model("initial-exec")));

static pthread_key_t credit_key;
static pthread_once_t credit_once = PTHREAD_ONCE_INIT;
static bool credit_key_ok;
static __thread bool credit_keyed __attribute__((tls_model("initial-exec")));

/* The bucket of keyed rule i (d) for a call on fd (published): a per=peer
 * rule's entry pinned for the fd as the fast path pins it (sl__fast_lim),
 * NULL if it cannot be. */
static struct sl_limiter *keyed_lim(const struct sl_fast_rule *d, unsigned i, int fd)
{
	return d->how == SL_FAST_FD_BUCKET ? sl__fd_lim(fd, i)
					   : sl__peer_fd_lim(fd, i, &sl__fdrecs[fd].peer);
}

/* The bucket a keyed credit (key) came from, if its fd still names that
 * socket; else NULL. */
static struct sl_limiter *keyed_home(const struct sl_fast_rule *d, unsigned i, uint64_t key)
{
	const int fd = (int)(key & (SL_FD_LIMIT - 1));
	if ((unsigned)fd >= sl__fd_cap ||
	    !(atomic_load_explicit(&sl__fdbits[fd], memory_order_acquire) & SL_FDB_READY) ||
	    sl__fd_credit_key(fd, sl__fdrecs[fd].ino) != key)
		return NULL;
	/* Never a new pin: the one the credit was taken under, if kept. */
	return d->how == SL_FAST_FD_BUCKET ? sl__fd_lim(fd, i) : sl__peer_fd_cached(fd, i);
}

/* Give back this thread's credit of fast rule i at now: a per=process
 * rule's to the slot it came from if the head is still at its generation
 * (a retired slot's is dropped); a per=thread rule's to this thread's own
 * bucket, unless the thread is exiting (its slot may already be another
 * thread's: the bucket ends with the thread anyway); a per=fd or per=peer
 * rule's to its fd's bucket if the fd names the same socket. The bucket
 * never holds more than its burst (sl_gcra_refund). */
static void credit_return(unsigned i, uint64_t now, bool exiting)
{
	struct sl_credit *c = &sl__credit[i];
	if (c->units == 0)
		return;
	const struct sl_fast_rule *d = &sl__st.fast[i];
	if (d->how == SL_FAST_PROC_BUCKET || sl__credit_windowed(d->how)) {
		uint64_t gen;
		struct sl_limiter *s = sl__fast_slot(d->lim, &gen);
		/* A window's units go back to the window they were taken in
		 * (named by the take's clock), which takes none once over. */
		if (gen == c->gen)
			(void)sl_fast_undo(s, c->units, sl__credit_windowed(d->how) ? c->at : now);
	} else if (d->how == SL_FAST_THREAD_BUCKET && !exiting) {
		struct sl_limiter *s = sl__thread_lim(i);
		if (s != NULL)
			(void)sl_fast_undo(s, c->units, now);
	} else if (sl__fast_keyed(d)) {
		struct sl_limiter *s = keyed_home(d, i, c->key);
		if (s != NULL)
			(void)sl_fast_undo(s, c->units, now);
	}
	c->units = 0;
}

static void credit_return_all(uint64_t now, bool exiting)
{
	for (unsigned i = 0; i < SL_CREDIT_RULES; i++)
		credit_return(i, now, exiting);
}

void sl__credit_return_one(unsigned i, uint64_t now)
{
	credit_return(i, now, false);
}

void sl__credit_return_all(uint64_t now)
{
	credit_return_all(now, false);
}

/* This thread's counters of rule i, its slot claimed if it has none:
 * NULL if every slot is taken (or it may claim none). */
static struct sl_tcount *tcount_here(unsigned i)
{
	if (sl__st.rec == NULL || i >= sl_shm_stat_trules(sl__st.rec->n_rules))
		return NULL;
	/* Relaxed: a hint, to spare threads past the last slot the scan. */
	if (tslot == 0 && atomic_load_explicit(&tslot_used, memory_order_relaxed) < SL_SHM_TSLOTS) {
		for (uint32_t s = 0; s < SL_SHM_TSLOTS; s++) {
			uint32_t free = 0;
			/* Acquire: pairs with the release of the slot's last
			 * owner (credit_exit): its adds happen before ours. */
			if (atomic_load_explicit(&tslot_owner[s], memory_order_relaxed) == 0 &&
			    atomic_compare_exchange_strong_explicit(&tslot_owner[s], &free, 1,
								    memory_order_acquire,
								    memory_order_relaxed)) {
				atomic_fetch_add_explicit(&tslot_used, 1, memory_order_relaxed);
				tslot = (int)s + 1;
				break;
			}
		}
	}
	return tslot > 0 ? sl_shm_stat_tcount(sl__st.rec, (uint32_t)tslot - 1, i) : NULL;
}

static void credit_exit(void *v)
{
	(void)v;
	/* A thread's exit: sl__busy keeps a wrapped call the clock might make
	 * (none today) out of the rules; a later destructor's sends are
	 * throttled again. */
	const int busy = sl__busy;
	sl__busy = 1;
	credit_return_all(sl__clock_ns(), true);
	/* The slot goes to the next thread, and no call of this one counts
	 * there again: every credit is void (a call of 0 units could spend
	 * one still), and no slot is claimed anew. */
	for (unsigned i = 0; i < SL_CREDIT_RULES; i++)
		sl__credit[i].until = 0;
	if (tslot > 0) {
		/* Release: this thread's adds to the slot happen before the
		 * next owner's (tcount_here's acquire). */
		atomic_store_explicit(&tslot_owner[tslot - 1], 0, memory_order_release);
		atomic_fetch_sub_explicit(&tslot_used, 1, memory_order_relaxed);
	}
	tslot = -1;
	sl__busy = busy;
}

static void credit_key_make(void)
{
	credit_key_ok = pthread_key_create(&credit_key, credit_exit) == 0;
}

/* Register this thread's exit handler, once per thread. Without a key (the
 * process has none left) the thread takes no credit. */
static bool credit_keyed_here(void)
{
	if (credit_keyed)
		return true;
	/* A sandboxed thread takes none: a key's value may need an allocation
	 * (glibc: keys past the 32nd), a system call its filter did not plan
	 * (sandbox.h). */
	if (sl__sandboxed())
		return false;
	pthread_once(&credit_once, credit_key_make);
	if (!credit_key_ok || pthread_setspecific(credit_key, (void *)1) != 0)
		return false;
	credit_keyed = true;
	return true;
}

/* The slice of rule i at its parameters now and the ns it is worth: 0 if
 * credit cannot pay (the rate is not a plain amount per period). */
static uint64_t slice_of(unsigned i, uint64_t *ns)
{
	const struct sl_params p = sl__rule_now(i);
	if (p.amount == 0 || p.period_ns == 0)
		return 0;
	const uint64_t piece = sl_piece_max(&sl__st.policy.rules[i], &p) / 8;
	/* 1 ms of the rate, rounded down; no overflow in 128 bits. */
	const unsigned __int128 per_ms = (unsigned __int128)p.amount * 1000000u / p.period_ns;
	const uint64_t slice = per_ms < piece ? (uint64_t)per_ms : piece;
	*ns = (uint64_t)((unsigned __int128)slice * p.period_ns / p.amount);
	return slice;
}

/* n units of fast rule i from its bucket s (a per=thread, per=fd or
 * per=peer rule's) or its tunable head (per=process), no credit: the
 * call's units alone. */
static bool take_plain(const struct sl_fast_rule *d, struct sl_limiter *s, uint64_t n, uint64_t now)
{
	switch (d->how) {
	case SL_FAST_PROC_BUCKET:
		return sl_fast_take_tunable_gcra(d->lim, n, now);
	case SL_FAST_PROC_FIXED:
		return sl_fast_take_tunable_fixed(d->lim, n, now);
	case SL_FAST_PROC_SLIDING:
		return sl_fast_take_tunable(d->lim, n, now);
	default:
		return sl_fast_take_gcra(&s->u.gcra, n, now);
	}
}

/* A slice of n units from slot s of rule d at now: true if taken. */
static bool take_slice(const struct sl_fast_rule *d, struct sl_limiter *s, uint64_t n, uint64_t now)
{
	switch (d->how) {
	case SL_FAST_PROC_FIXED:
		return sl_fast_take_fixed(&s->u.fixed, n, now);
	case SL_FAST_PROC_SLIDING:
		return sl_sliding_acquire(&s->u.sliding, n, now).verdict == SL_ADMIT;
	default:
		return sl_fast_take_gcra(&s->u.gcra, n, now);
	}
}

/* Cut *span (TSC ticks) to what is left at now of the aligned window of
 * slot s (a fixed or sliding window's: epoch, length), less
 * SL_CREDIT_WINDOW_GUARD_NS (the TSC line may be off by a microsecond): a
 * slice taken in a window is spent before its end. false if too little is
 * left, or its ticks cannot be said: no slice. */
#define SL_CREDIT_WINDOW_GUARD_NS 10000u
static bool window_span(const struct sl_limiter *s, uint64_t now, uint64_t *span)
{
	const bool fixed = s->kind == SL_KIND_FIXED;
	const uint64_t epoch = fixed ? s->u.fixed.epoch_ns : s->u.sliding.epoch_ns;
	const uint64_t window = fixed ? s->u.fixed.window_ns : s->u.sliding.window_ns;
	const uint64_t in = (now > epoch ? now - epoch : 0) % window;
	uint64_t left = 0;
	if (window - in <= SL_CREDIT_WINDOW_GUARD_NS ||
	    sl__credit_span(window - in - SL_CREDIT_WINDOW_GUARD_NS, &left) <= 0)
		return false;
	if (left < *span)
		*span = left;
	return true;
}

bool sl__credit_take(unsigned i, const struct sl_fast_rule *d, uint64_t n, uint64_t now, bool plain,
		     int fd)
{
	credit_return(i, now, false);
	struct sl_credit *c = &sl__credit[i];
	struct sl_credit_slice *k = &sl__credit_slice[i];
	uint64_t gen;
	struct sl_limiter *s;
	if (d->how == SL_FAST_PROC_BUCKET || sl__credit_windowed(d->how)) {
		s = sl__fast_slot(d->lim, &gen);
	} else {
		/* The thread's, the fd's or the peer's bucket, never retuned;
		 * the head's generation still voids the slice size on a
		 * `sluice set`. Without it (no per=thread slot yet, a per=peer
		 * entry that cannot be pinned) the general path decides. */
		s = d->how == SL_FAST_THREAD_BUCKET ? sl__thread_lim(i) : keyed_lim(d, i, fd);
		if (s == NULL)
			return false;
		gen = atomic_load_explicit(&d->lim->u.tun.gen, memory_order_relaxed);
	}
	if (k->gen1 != gen + 1) {
		uint64_t ns = 0, ticks = 0;
		const uint64_t slice = slice_of(i, &ns);
		const int span = slice > 1 ? sl__credit_span(ns, &ticks) : -1;
		if (span == 0) /* no line yet: ask again next time */
			return plain && take_plain(d, s, n, now);
		k->max_n = span > 0 && credit_keyed_here() ? slice : 0;
		k->gen1 = gen + 1;
		k->span = ticks;
	}
	const uint64_t slice = k->max_n;
	const bool windowed = sl__credit_windowed(d->how);
	uint64_t span = k->span;
	if (windowed && !window_span(s, now, &span))
		return plain && take_plain(d, s, n, now);
	struct sl_tcount *cnt = n < slice ? tcount_here(i) : NULL;
	if (cnt != NULL && take_slice(d, s, slice, now)) {
		if ((d->how == SL_FAST_PROC_BUCKET || windowed) &&
		    !sl__fast_tunable_kept(d->lim, s, gen, slice, now))
			return plain && take_plain(d, s, n, now);
		c->cnt = cnt;
		c->units = slice - n;
		c->gen = gen;
		c->at = now;
		c->windowed = windowed;
		c->until = sl__credit_tsc() + span;
		return true;
	}
	return plain && take_plain(d, s, n, now);
}

void sl__credit_reset_unsync(void)
{
	for (unsigned i = 0; i < SL_CREDIT_RULES; i++) {
		sl__credit[i] = (struct sl_credit){0};
		sl__credit_slice[i] = (struct sl_credit_slice){0};
	}
	/* Relaxed: one thread (init, or the fork child, whose record and
	 * counters are its own: stats.c resets them). A sandboxed process's
	 * child counts in its parent's record, whose slots the parent's
	 * threads own: it claims none. */
	for (uint32_t s = 0; s < SL_SHM_TSLOTS; s++)
		atomic_store_explicit(&tslot_owner[s], 0, memory_order_relaxed);
	atomic_store_explicit(&tslot_used, 0, memory_order_relaxed);
	tslot = sl__sandboxed() ? -1 : 0;
}
