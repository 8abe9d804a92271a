/* SPDX-License-Identifier: MIT */
/*
 * shm_format.h - the layout of sluice's segments (segment.h), shared by the
 * preloaded library (shim/shm.c writes them) and the `sluice stat` / `sluice
 * set` commands (cli/stat.c, cli/set.c read and retune them).
 *
 * Overview
 * --------
 * Two kinds of file, both mode 0600, owned by the user, in the user's
 * private directory (segment.h: $XDG_RUNTIME_DIR/sluice, /run/sluice for
 * root, else /dev/shm/sluice-UID), opened and created only through
 * sl_seg_open:
 *
 *   shared-NAME   one limiter that every process of the user naming
 *                 shared=NAME draws from (struct sl_shm_shared), kept until
 *                 `sluice rm shared:NAME`;
 *   stat-PID      one process's status record: its rules, counters and
 *                 per=process limiters (struct sl_shm_stat and its arrays,
 *                 sl_shm_stat_size(n_rules) bytes), created at the process's
 *                 first socket a rule may apply to, removed by exit and
 *                 _exit, and by any later sluice process (or `sluice stat`)
 *                 once the process is gone.
 *
 * Nothing in a file is trusted: readers check the owner, mode, size, magic,
 * version and every limiter (sl_tunable_validate) before use.
 *
 * Implementation notes
 * --------------------
 * Fixed-width fields, no pointers, 64-byte alignment of every limiter; the
 * layouts are pinned by _Static_asserts. A change of layout bumps
 * SL_SHM_VERSION, and files of another version are refused.
 */
#ifndef SLUICE_SHM_FORMAT_H
#define SLUICE_SHM_FORMAT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "adaptive.h"
#include "count.h"
#include "params.h"
#include "policy.h"
#include "sluice_core.h"

#define SL_SHM_DIR "/dev/shm"
#define SL_SHM_MAGIC_SHARED 0x48534c53u /* "SLSH" little-endian */
#define SL_SHM_MAGIC_STAT 0x54534c53u   /* "SLST" */
#define SL_SHM_VERSION 6u               /* 6: the adaptive controller grew to 320 B */
#define SL_SHM_HOLDERS 64u              /* processes tracked per shared conns limiter */
#define SL_SHM_RECLAIMING 0xffffffffu   /* holder pid while its slots are given back */
#define SL_SHM_PROGRAM_MAX 64u
#define SL_SHM_SHARED_NAME "shared-%s" /* segment name of shared=NAME */
#define SL_SHM_STAT_NAME "stat-%d"     /* segment name of pid's record */
#define SL_SHM_STAT_PREFIX "stat-"
/* Format 1 put every file flat in /dev/shm: such files are ignored. */
#define SL_SHM_OLD_PREFIX "sluice-%u-" /* uid */
/* `sluice set` keeps retunes of one limiter this far apart: the grace period
 * sl_tunable_retune asks of its callers (see core/tunable.c). */
#define SL_SHM_RETUNE_GAP_NS 100000000ull

/* Connection slots one process holds in a shared conns limiter. */
struct sl_shm_holder {
	_Atomic uint32_t pid; /* 0: free */
	_Atomic uint32_t held;
};

/* shared-NAME */
struct sl_shm_shared {
	uint32_t magic;   /* SL_SHM_MAGIC_SHARED */
	uint32_t version; /* SL_SHM_VERSION */
	uint64_t size;    /* sizeof(struct sl_shm_shared) */
	uint32_t uid;
	uint32_t reserved0;
	char name[SL_SHARED_NAME_MAX];
	/* CLOCK_REALTIME ns of the last `sluice set` (0: never); written by
	 * `sluice set` under its flock, read for messages only. */
	_Atomic uint64_t set_ns;
	char rule[SL_RULE_TEXT_MAX]; /* canonical text of the rule that created it */
	struct sl_tunable lim;
	struct sl_shm_holder holders[SL_SHM_HOLDERS];
	/* shared=NAME with redis=KEY: the host's pool of units leased from
	 * Redis for every process here, and who renews it (lease_pool.c).
	 * Unused (zero) for other rules. */
	_Atomic uint64_t renewer;   /* (heartbeat ms << 32) | pid; 0 = nobody */
	_Atomic uint32_t state;     /* enum sl_pool_state: Redis as the renewer sees it */
	_Atomic uint32_t takeovers; /* renewers that followed a silent one */
	uint8_t pad1[SL_CACHELINE - 16];
	struct sl_limiter bank; /* concurrency: free slots = units in hand */
	/* shared=NAME with conns:adaptive: the one controller of the host's
	 * limit (engine/adaptive.h); zero for other rules. */
	struct sl_adapt adapt;
};

/* stat-PID: this header, then n_rules limiters, counters and rule texts
 * (sl_shm_stat_lims, _stats, _rule); sl_shm_stat_size(n_rules) bytes. */
struct sl_shm_stat {
	uint32_t magic;   /* SL_SHM_MAGIC_STAT */
	uint32_t version; /* SL_SHM_VERSION */
	uint64_t size;    /* sl_shm_stat_size(n_rules) */
	uint32_t pid;
	uint32_t uid;
	uint64_t start_ticks; /* field 22 of /proc/PID/stat: tells a reused pid */
	uint32_t n_rules;
	uint32_t active; /* the rules apply to this program */
	/* st_dev and st_ino of /proc/PID/exe when the file was made (0: not
	 * known): a record left by the image before an exec into a program
	 * without rules names another executable. */
	uint64_t exe_dev;
	uint64_t exe_ino;
	_Atomic uint64_t unclassified; /* fds that passed through unclassified in a
	                                  seccomp sandbox (shim/sandbox.h) */
	_Atomic uint32_t sandboxed;    /* the process installed a seccomp filter */
	uint8_t pad0[128 - 68];
	char program[SL_SHM_PROGRAM_MAX];
};

/* Per-thread counters: what a preloaded thread's calls paid by its credit
 * count (shim/credit.h), apart from the rule's struct sl_rstats, so that
 * the hot path adds to a line no other thread writes, without a lock
 * prefix. A record has SL_SHM_TSLOTS slots of sl_shm_stat_trules(n_rules)
 * rules each; a thread owns one slot at a time (the shim hands them out)
 * and a slot keeps its counts when its thread exits: the next owner adds
 * to them. A rule's counts are its struct sl_rstats plus, over every slot,
 * calls to calls and admitted (a call counted here was admitted) and bytes
 * to bytes (sl_shm_stat_tsum).
 *
 * Each word is written by its slot's owner alone, with plain loads and
 * stores (8 bytes, aligned: never torn on the architectures sluice builds
 * for); readers load it relaxed (__atomic_load_n) and may see it a call
 * behind. A supervised program's record leaves them zero. */
#define SL_SHM_TSLOTS 64u /* threads of one process that count apart at once */
#define SL_SHM_TRULES 8u  /* rules 0..7 may count there */
struct sl_tcount {
	uint64_t calls; /* calls admitted (each also counts as admitted) */
	uint64_t bytes;
};

/* A conns:adaptive rule as `sluice stat` shows it (engine/adaptive.h):
 * the process's copy, written when a window of its controller closes and
 * the process ends a turn (shim/turn.c), read relaxed. The controller
 * itself is in memory a fork's children share, or in a shared= segment.
 * valid 0: no window yet (or not an adaptive rule). */
struct sl_shm_adapt {
	_Atomic uint64_t limit;      /* the limit in force */
	_Atomic uint64_t in_flight;  /* turns holding a slot */
	_Atomic uint64_t noload_ns;  /* the no-load (least) latency */
	_Atomic uint64_t latency_ns; /* the last window's mean latency */
	_Atomic uint64_t probes;     /* no-load probes done */
	_Atomic uint64_t updates;    /* windows closed */
	_Atomic uint32_t probing;    /* 1 during a probe */
	_Atomic uint32_t valid;
	/* A system protection's view (sl_shm_stat_sys) only: the thresholds
	 * the last window found exceeded (SL_ADAPT_OVER_*), the peak
	 * completion rate (turns/s). */
	_Atomic uint32_t over;
	_Atomic uint32_t rate;
};

/* The rules of a record of n rules that have per-thread counters. */
static inline uint32_t sl_shm_stat_trules(uint32_t n)
{
	return n < SL_SHM_TRULES ? n : SL_SHM_TRULES;
}

/* Bytes of a record of n rules: per rule, its per=process limiter (unused
 * for shared= rules, whose limiter is the shared file's, and for other
 * scopes), its counters and its canonical text; then the per-thread
 * counters; then per rule its conns:adaptive view, then per rule its system
 * protection view, then per rule its conns:adaptive client view. */
static inline size_t sl_shm_stat_size(uint32_t n)
{
	return sizeof(struct sl_shm_stat) +
	       (size_t)n * (sizeof(struct sl_tunable) + sizeof(struct sl_rstats) +
			    SL_RULE_TEXT_MAX + 3 * sizeof(struct sl_shm_adapt)) +
	       (size_t)SL_SHM_TSLOTS * sl_shm_stat_trules(n) * sizeof(struct sl_tcount);
}

static inline struct sl_tunable *sl_shm_stat_lims(const struct sl_shm_stat *r)
{
	return (struct sl_tunable *)(void *)((char *)(uintptr_t)r + sizeof(*r));
}

static inline struct sl_rstats *sl_shm_stat_stats(const struct sl_shm_stat *r)
{
	return (struct sl_rstats *)(void *)(sl_shm_stat_lims(r) + r->n_rules);
}

static inline char *sl_shm_stat_rule(const struct sl_shm_stat *r, uint32_t i)
{
	return (char *)(sl_shm_stat_stats(r) + r->n_rules) + (size_t)i * SL_RULE_TEXT_MAX;
}

/* Slot `slot`'s counters of rule i (i < sl_shm_stat_trules(n_rules)). */
static inline struct sl_tcount *sl_shm_stat_tcount(const struct sl_shm_stat *r, uint32_t slot,
						   uint32_t i)
{
	struct sl_tcount *t = (struct sl_tcount *)(void *)sl_shm_stat_rule(r, r->n_rules);
	return t + (size_t)slot * sl_shm_stat_trules(r->n_rules) + i;
}

/* Rule i's conns:adaptive view. */
static inline struct sl_shm_adapt *sl_shm_stat_adapt(const struct sl_shm_stat *r, uint32_t i)
{
	struct sl_shm_adapt *a = (struct sl_shm_adapt *)(void *)sl_shm_stat_tcount(r, SL_SHM_TSLOTS,
										   0);
	return a + i;
}

/* Rule i's system protection view (load1=, cpu=, rt=), the same figures. */
static inline struct sl_shm_adapt *sl_shm_stat_sys(const struct sl_shm_stat *r, uint32_t i)
{
	return sl_shm_stat_adapt(r, r->n_rules + i);
}

/* The view of a front end's slot index x: x / SL_MAX_RULES its kind (0:
 * conns:adaptive, 1: system protection, 2: conns:adaptive's client
 * limit), x % SL_MAX_RULES its rule. */
static inline struct sl_shm_adapt *sl_shm_stat_slot(const struct sl_shm_stat *r, uint32_t x)
{
	return sl_shm_stat_adapt(r, x / SL_MAX_RULES * r->n_rules + x % SL_MAX_RULES);
}

/* Write the turns in flight and, if its window or limit changed since the
 * last write, a controller's figures w into view v (the front ends: at a
 * turn's end). Relaxed: figures for `sluice stat`. */
static inline void sl_shm_adapt_put(struct sl_shm_adapt *v, const struct sl_adapt_view *w,
				    uint64_t in_flight)
{
	atomic_store_explicit(&v->in_flight, in_flight, memory_order_relaxed);
	if (atomic_load_explicit(&v->valid, memory_order_relaxed) &&
	    atomic_load_explicit(&v->updates, memory_order_relaxed) == w->updates &&
	    atomic_load_explicit(&v->limit, memory_order_relaxed) == w->limit)
		return;
	atomic_store_explicit(&v->limit, w->limit, memory_order_relaxed);
	atomic_store_explicit(&v->noload_ns, w->noload_ns, memory_order_relaxed);
	atomic_store_explicit(&v->latency_ns, w->latency_ns, memory_order_relaxed);
	atomic_store_explicit(&v->probes, w->probes, memory_order_relaxed);
	atomic_store_explicit(&v->updates, w->updates, memory_order_relaxed);
	atomic_store_explicit(&v->probing, w->probing, memory_order_relaxed);
	atomic_store_explicit(&v->over, w->over, memory_order_relaxed);
	atomic_store_explicit(&v->rate, w->rate < UINT32_MAX ? (uint32_t)w->rate : UINT32_MAX,
			      memory_order_relaxed);
	atomic_store_explicit(&v->valid, 1, memory_order_relaxed);
}

/* Rule i's conns:adaptive client view: the limit on the requests of the
 * connections the program opens. */
static inline struct sl_shm_adapt *sl_shm_stat_client(const struct sl_shm_stat *r, uint32_t i)
{
	return sl_shm_stat_adapt(r, 2 * r->n_rules + i);
}

/* Rule i's per-thread counts summed over the slots. */
static inline struct sl_tcount sl_shm_stat_tsum(const struct sl_shm_stat *r, uint32_t i)
{
	struct sl_tcount sum = {0, 0};
	if (i >= sl_shm_stat_trules(r->n_rules))
		return sum;
	for (uint32_t s = 0; s < SL_SHM_TSLOTS; s++) {
		const struct sl_tcount *t = sl_shm_stat_tcount(r, s, i);
		/* Relaxed: independent counters, written by one thread each
		 * with plain stores (above); nothing hangs on them. */
		sum.calls += __atomic_load_n(&t->calls, __ATOMIC_RELAXED);
		sum.bytes += __atomic_load_n(&t->bytes, __ATOMIC_RELAXED);
	}
	return sum;
}

/* Rule i's counters as `sluice stat` and SLUICE_STATS show them, into
 * *out (a snapshot): its struct sl_rstats and its threads' own counts. */
static inline void sl_shm_stat_counts(const struct sl_shm_stat *r, uint32_t i,
				      struct sl_rstats *out)
{
	sl_count_copy(out, &sl_shm_stat_stats(r)[i]);
	const struct sl_tcount own = sl_shm_stat_tsum(r, i);
	sl_count_add(&out->calls, own.calls);
	sl_count_add(&out->admitted, own.calls);
	sl_count_add(&out->bytes, own.bytes);
}

_Static_assert(offsetof(struct sl_shm_shared, rule) == 64, "sl_shm_shared layout");
_Static_assert(offsetof(struct sl_shm_shared, lim) % SL_CACHELINE == 0, "sl_shm_shared layout");
_Static_assert(offsetof(struct sl_shm_shared, renewer) == 64 + 256 + 576 + 8 * SL_SHM_HOLDERS,
	       "sl_shm_shared layout");
_Static_assert(offsetof(struct sl_shm_shared, bank) % SL_CACHELINE == 0, "sl_shm_shared layout");
_Static_assert(sizeof(struct sl_shm_shared) ==
		       64 + 256 + 576 + 8 * SL_SHM_HOLDERS + 64 + 192 + sizeof(struct sl_adapt),
	       "sl_shm_shared layout");
_Static_assert(offsetof(struct sl_shm_shared, adapt) % SL_CACHELINE == 0, "sl_shm_shared layout");
_Static_assert(sizeof(struct sl_rstats) == 112, "sl_rstats layout");
_Static_assert(offsetof(struct sl_shm_shared, set_ns) == 56, "sl_shm_shared layout");
_Static_assert(offsetof(struct sl_shm_stat, program) == 128, "sl_shm_stat layout");
_Static_assert(sizeof(struct sl_shm_stat) % SL_CACHELINE == 0, "sl_shm_stat layout");
_Static_assert(sizeof(struct sl_tunable) % SL_CACHELINE == 0, "sl_shm_stat layout");
_Static_assert(sizeof(struct sl_rstats) % 8 == 0, "sl_shm_stat layout");
_Static_assert(SL_RULE_TEXT_MAX % 8 == 0 && sizeof(struct sl_tcount) == 16, "sl_shm_stat layout");
_Static_assert(sizeof(struct sl_shm_adapt) == 64, "sl_shm_stat layout");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "32-bit atomics must be lock-free");

/* The start time (field 22, clock ticks since boot) in the text of a
 * /proc/PID/stat file; 0 if it cannot be read. The command name (field 2)
 * may hold spaces and parentheses: fields are counted after its last ')'. */
static inline uint64_t sl_shm_start_ticks(const char *stat_text)
{
	const char *p = strrchr(stat_text, ')');
	for (int field = 2; p != NULL && field < 22; field++)
		p = strchr(p + 1, ' ');
	uint64_t v = 0;
	for (p = p != NULL ? p + 1 : NULL; p != NULL && *p >= '0' && *p <= '9'; p++)
		v = v * 10 + (uint64_t)(*p - '0');
	return v;
}

/*
 * Why the open file st (fstat of a file of one of the layouts above, of
 * `want` bytes) must not be used by user uid, or NULL if it may: another
 * owner, any access for group or others, not a regular file, another size.
 */
static inline const char *sl_shm_check_file(const struct stat *st, unsigned uid, size_t want)
{
	if (!S_ISREG(st->st_mode))
		return "not a regular file";
	if (st->st_uid != uid)
		return "owned by another user";
	if ((st->st_mode & 077) != 0)
		return "readable or writable by other users (mode must be 0600)";
	if ((size_t)st->st_size != want)
		return (size_t)st->st_size < want ? "truncated (smaller than the format's size)"
						  : "larger than the format's size";
	return NULL;
}

/* Why a mapped shared segment (size checked) must not be used for rule text
 * `rule` by uid, or NULL. `rule` NULL: any rule (sluice set). */
static inline const char *sl_shm_check_shared(const struct sl_shm_shared *s, unsigned uid,
					      const char *name, const char *rule)
{
	if (s->magic != SL_SHM_MAGIC_SHARED)
		return "not a sluice shared limiter (bad magic)";
	if (s->version != SL_SHM_VERSION)
		return "written by another version of sluice (format version differs)";
	if (s->size != sizeof(*s) || s->uid != uid ||
	    strncmp(s->name, name, sizeof(s->name)) != 0 ||
	    memchr(s->rule, 0, sizeof(s->rule)) == NULL)
		return "corrupt header";
	if (!sl_tunable_validate(&s->lim))
		return "corrupt limiter";
	if (s->adapt.magic != 0 && !sl_adapt_valid(&s->adapt))
		return "corrupt adaptive state";
	if (rule != NULL && strcmp(s->rule, rule) != 0)
		return "created with different parameters";
	return NULL;
}

#endif /* SLUICE_SHM_FORMAT_H */
