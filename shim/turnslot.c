/* SPDX-License-Identifier: MIT */
/*
 * turnslot.c - the slots a turn holds (turn.c): taking and giving them back,
 * the controllers a turn's end feeds (engine/adaptive.c: conns:adaptive's
 * and system protection's), the host's figures the latter needs, and the
 * views `sluice stat` shows.
 *
 * A slot bit b < TURN_GATE is adaptive rule b's (its limiter is the rule's,
 * sl__st.rule_lim[b]); b >= TURN_GATE, rule b - TURN_GATE's system
 * protection's (load1=, cpu=, rt=: a limiter of its own in the fork
 * family's table, open until a threshold is exceeded).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/sysinfo.h>

#include "adaptive.h"
#include "conn.h"
#include "count.h"
#include "log.h"
#include "real.h"
#include "sandboxed.h"
#include "shm.h"
#include "turn.h"
#include "turn_tab.h"

static uint64_t held_of(const struct sl_limiter *l)
{
	/* Relaxed: a figure for the controller. */
	return atomic_load_explicit(&l->u.tun.held, memory_order_relaxed);
}

/* Slot bit b's view in this process's status record (`sluice stat`): the
 * turns in flight at every turn's end, the controller's figures when a
 * window closed since. */
static void view_publish(unsigned b, const struct sl_adapt *a, const struct sl_limiter *l)
{
	if (sl__st.rec == NULL)
		return;
	struct sl_shm_adapt *v = sl_shm_stat_slot(sl__st.rec, b);
	struct sl_adapt_view w;
	sl_adapt_view(a, &w);
	sl_shm_adapt_put(v, &w, held_of(l));
}

/* The host's figures for the system protections (load1=, cpu=): read at
 * most every SL_ADAPT_HOST_EVERY_NS per process, by one thread (a CAS on
 * host_at), and handed to every protection. Not in a seccomp sandbox (no
 * call of ours there): the figures stay unknown. */
static _Atomic uint64_t host_at;
static uint64_t host_busy, host_total; /* the last /proc/stat reading */

/* Retune slot bit b's limiter to lim, the new limit its controller a
 * asked for (its lock held), then unlock. */
static void retune(unsigned b, struct sl_adapt *a, uint64_t lim, uint64_t now)
{
	struct sl_tunable *t = (struct sl_tunable *)(void *)sl__turn_lim(b);
	struct sl_params p = sl_tunable_current(t)->params;
	p.amount = lim;
	if (sl_tunable_retune(t, &p, now) != SL_OK)
		sl_log(SL_LOG_WARN, "rule %u: the %s limit %llu was refused", b % SL_MAX_RULES + 1,
		       b < TURN_GATE     ? "adaptive"
		       : b < TURN_CLIENT ? "system protection"
					 : "client",
		       (unsigned long long)lim);
	sl_adapt_unlock(a);
}

void sl__turn_host(uint64_t now)
{
	uint64_t at = atomic_load_explicit(&host_at, memory_order_relaxed);
	if ((sl__st.sys_load1_rules | sl__st.sys_cpu_rules) == 0 ||
	    (at != 0 && now - at < SL_ADAPT_HOST_EVERY_NS) || sl__sandboxed() ||
	    !atomic_compare_exchange_strong_explicit(&host_at, &at, now, memory_order_acquire,
						     memory_order_relaxed))
		return;
	const int saved = errno;
	uint64_t load = UINT64_MAX, cpu = UINT64_MAX;
	struct sysinfo si;
	if (sl__st.sys_load1_rules != 0 && sysinfo(&si) == 0)
		load = (uint64_t)si.loads[0] * 1000 >> SI_LOAD_SHIFT;
	int fd = sl__st.sys_cpu_rules != 0 ? open("/proc/stat", O_RDONLY | O_CLOEXEC) : -1;
	if (fd >= 0) {
		char buf[256];
		const ssize_t n = SL_REAL(read)(fd, buf, sizeof(buf));
		SL_REAL(close)(fd);
		uint64_t busy, total;
		if (n > 0 && sl_adapt_cpu_parse(buf, (size_t)n, &busy, &total)) {
			if (host_total != 0)
				cpu = sl_adapt_cpu_permille(host_busy, host_total, busy, total);
			host_busy = busy;
			host_total = total;
		}
	}
	for (uint32_t rest = sl__st.sys_rules; rest != 0; rest &= rest - 1) {
		const unsigned b = TURN_GATE + (unsigned)__builtin_ctz(rest);
		struct sl_adapt *a = sl__turn_adapt[b];
		uint64_t lim;
		sl_adapt_host(a, load, cpu);
		/* Over now: the limit at once, not at the next window's end. */
		if (sl_adapt_host_check(a, now, &lim)) {
			retune(b, a, lim, now);
			sl_log(SL_LOG_DEBUG,
			       "rule %u: system protection: the host is over: limit %llu",
			       b - TURN_GATE + 1, (unsigned long long)lim);
		}
	}
	errno = saved;
}

/* A turn of slot bit b ended (sample: it had bytes from start_ns): feed
 * the controller and retune the limiter if it asks for a new limit. */
void sl__turn_done(unsigned b, uint64_t start_ns, uint64_t now)
{
	struct sl_adapt *a = sl__turn_adapt[b];
	struct sl_limiter *l = sl__turn_lim(b);
	if (a == NULL || l == NULL)
		return;
	if (start_ns != 0 && now > start_ns)
		sl_adapt_sample(a, start_ns, now - start_ns);
	if (b >= TURN_GATE && b < TURN_CLIENT)
		sl__turn_host(now);
	uint64_t lim;
	const uint64_t before = atomic_load_explicit(&a->updates, memory_order_relaxed);
	if (sl_adapt_update(a, held_of(l), now, &lim))
		retune(b, a, lim, now);
	view_publish(b, a, l);
	if (sl__log_level >= SL_LOG_DEBUG &&
	    atomic_load_explicit(&a->updates, memory_order_relaxed) != before) {
		struct sl_adapt_view v;
		sl_adapt_view(a, &v);
		sl_log(SL_LOG_DEBUG,
		       "rule %u: %swindow: latency %.1f ms, no-load %.1f ms, %llu in flight, "
		       "limit %llu (%.2f)%s%s%s%s",
		       b % SL_MAX_RULES + 1,
		       b < TURN_GATE     ? ""
		       : b < TURN_CLIENT ? "system protection "
					 : "client ",
		       (double)v.latency_ns / 1e6, (double)v.noload_ns / 1e6,
		       (unsigned long long)held_of(l), (unsigned long long)v.limit,
		       (double)atomic_load_explicit(&a->limit_x, memory_order_relaxed) /
			       SL_ADAPT_ONE,
		       v.probing ? " probing" : "",
		       (v.over & SL_ADAPT_OVER_LOAD1) ? " over load1" : "",
		       (v.over & SL_ADAPT_OVER_CPU) ? " over cpu" : "",
		       (v.over & SL_ADAPT_OVER_RT) ? " over rt" : "");
	}
}

void sl__turn_release(unsigned base, uint64_t slots)
{
	for (uint64_t rest = slots; rest != 0; rest &= rest - 1)
		sl__conn_release(sl__turn_lim(base + (unsigned)__builtin_ctzll(rest)));
}

void sl__turn_started(unsigned base, uint64_t slots)
{
	for (uint64_t rest = slots; rest != 0; rest &= rest - 1) {
		const unsigned x = base + (unsigned)__builtin_ctzll(rest);
		if (sl__turn_adapt[x] != NULL)
			sl_adapt_started(sl__turn_adapt[x], held_of(sl__turn_lim(x)));
	}
}

void sl__turn_bound(unsigned b, uint64_t now_ns)
{
	if (b < TURN_SLOTS && sl__turn_adapt[b] != NULL)
		sl_adapt_refused(sl__turn_adapt[b], now_ns);
}

/* Take one of slot bit b now (a liveness sweep first if it is full). */
static bool take_one(unsigned b, uint64_t now)
{
	struct sl_limiter *l = sl__turn_lim(b);
	if (sl_limiter_acquire(l, 1, now, 0).verdict == SL_ADMIT ||
	    (sl__turn_sweep(now) && sl_limiter_acquire(l, 1, now, 0).verdict == SL_ADMIT)) {
		sl__shm_hold(l, 1);
		return true;
	}
	sl__turn_bound(b, now);
	return false;
}

bool sl__turn_take(unsigned base, uint64_t rules, uint64_t now)
{
	for (uint64_t rest = rules; rest != 0; rest &= rest - 1) {
		const unsigned b = (unsigned)__builtin_ctzll(rest);
		if (take_one(base + b, now))
			continue;
		sl__turn_release(base, rules & (((uint64_t)1 << b) - 1));
		return false;
	}
	return true;
}

uint64_t sl__turn_gates(uint32_t sys, uint64_t now_ns, int *refused)
{
	uint64_t got = 0;
	*refused = -1;
	if (sl__turn_fam == NULL || sl__sandboxed())
		return 0;
	sl__turn_host(now_ns); /* a flood while it was open: the host's over */
	for (uint32_t rest = sys; rest != 0; rest &= rest - 1) {
		const unsigned i = (unsigned)__builtin_ctz(rest), b = TURN_GATE + i;
		if (sl__turn_adapt[b] == NULL)
			continue;
		if (take_one(b, now_ns)) {
			got |= (uint64_t)1 << b;
			continue;
		}
		if (!sl_adapt_refuses(&sl__st.policy, (uint32_t)1 << i)) {
			/* Admitted, its turns uncounted by this protection. */
			sl_count_refused(&sl__st.stats[i]);
			sl_log(SL_LOG_INFO,
			       "dry-run: rule %u's system protection would refuse accept", i + 1);
			continue;
		}
		sl__turn_release(0, got);
		*refused = (int)i;
		return 0;
	}
	return got;
}

uint64_t sl__turn_wait_ns(unsigned base, uint64_t rules)
{
	uint64_t lim = UINT64_MAX;
	for (uint64_t rest = rules; rest != 0; rest &= rest - 1) {
		const unsigned x = base + (unsigned)__builtin_ctzll(rest);
		const uint64_t w = sl_adapt_wait_ns(&sl__st.policy.rules[x % SL_MAX_RULES],
						    sl__turn_adapt[x]);
		lim = w < lim ? w : lim;
	}
	return lim;
}
