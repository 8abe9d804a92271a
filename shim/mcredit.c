/* SPDX-License-Identifier: MIT */
/*
 * mcredit.c - thread-local credit for a call under two or more rules
 * (credit.h: sl__mcredit_spend; fd.h: SL_FDR_MCREDIT): each rule's credit
 * is this thread's, as under one rule, and a call spends from every one of
 * them or from none. Buckets only (no window: a window's credit is spent
 * only in its window, and the plain path polices a sliding window last).
 */
#include <errno.h>

#include "act.h"
#include "clock.h"
#include "credit.h"
#include "mcredit.h"
#include "params.h"
#include "state.h"
#include "xfer.h"

/* sl__mcredit_spend's slow step (sl__busy set), when one credit is short:
 * true if this thread's credit of each rule of `rules` holds what a call of
 * n bytes takes of it (a send's sl__units, a receive's n), slices taken for
 * the rules whose credit is short (the call's units put back in: spent with
 * the others'); false if one's cannot be (not wanted: a keyed credit of
 * another fd, given back, or a call larger than a slice; or not there):
 * nothing of the call's is spent, and what a take left is credit. */
static bool mcredit_have(uint32_t rules, uint64_t key, size_t n, bool send, int fd)
{
	uint64_t now = 0;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		const unsigned i = (unsigned)__builtin_ctz(rest);
		const struct sl_fast_rule *d = &sl__st.fast[i];
		struct sl_credit *c = &sl__credit[i];
		const uint64_t u = send ? sl__units(i, n) : n;
		const uint64_t k = (sl__st.keyed_rules >> i & 1) ? key : 0;
		if (sl__credit_has(c, d, u, k))
			continue;
		const int e = errno;
		if (now == 0)
			now = sl__clock_ns();
		const bool took = sl__credit_wanted(i, d, u, k, now) &&
				  sl__credit_take(i, d, u, now, false, fd);
		errno = e;
		if (!took)
			return false;
		c->units += u;
	}
	return true;
}

/* Spend from this thread's credit of each rule of `rules` what a call of n
 * bytes takes of it, the TSC read once: true if each had it; false, none
 * spent (what was, put back). */
static __attribute__((noinline)) bool mcredit_spend_now(uint32_t rules, uint64_t key, size_t n,
							bool send)
{
	struct sl_credit *const base = sl__credit;
	const uint64_t tsc = sl__credit_tsc();
	const uint32_t bytes = send ? sl__st.byte_rules : ~0u;
	uint32_t done = 0;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		const unsigned i = (unsigned)__builtin_ctz(rest);
		struct sl_credit *c = &base[i];
		const uint64_t u = (bytes >> i & 1) ? n : 1;
		if (!sl__mcredit_ok(c, i, u, (sl__st.keyed_rules >> i & 1) ? key : 0, tsc)) {
			for (uint32_t back = done; back != 0; back &= back - 1) {
				const unsigned j = (unsigned)__builtin_ctz(back);
				base[j].units += (bytes >> j & 1) ? n : 1;
			}
			return false;
		}
		c->units -= u;
		done |= 1u << i;
	}
	return true;
}

/* sl__mcredit_spend past a first look that found a credit short: slices
 * taken, then the spend again; sl__busy cleared if it fails. */
static __attribute__((noinline)) bool mcredit_slow(uint32_t rules, uint64_t key, size_t n,
						   bool send, int fd)
{
	if (mcredit_have(rules, key, n, send, fd) && mcredit_spend_now(rules, key, n, send))
		return true;
	sl__busy = 0;
	return false;
}

bool sl__mcredit_spend(uint32_t rules, uint64_t key, size_t n, bool send, int fd)
{
	/* A record being rewritten may show the bit of one match and the
	 * rules of another: credit only if they are all lenders still. */
	const uint32_t lend = send ? sl__st.mcredit_rules
				   : sl__st.mcredit_rules & sl__st.byte_rules;
	if ((rules & ~lend) != 0)
		return false;
	/* Before the credits' loads and stores: the sl__busy protocol
	 * (xfer.h). */
	sl__busy = 1;
	const uint32_t second = rules & (rules - 1);
	if (__builtin_expect(second != 0 && (second & (second - 1)) == 0, 1)) {
		if (__builtin_expect(sl__mcredit_spend2((unsigned)__builtin_ctz(rules),
							(unsigned)__builtin_ctz(second), key, n,
							send),
				     1))
			return true;
	} else if (mcredit_spend_now(rules, key, n, send)) {
		return true;
	}
	return mcredit_slow(rules, key, n, send, fd);
}

ssize_t sl__mcredit_send_end(int fd, int flags, uint32_t rules, size_t total, ssize_t r)
{
	sl__busy = 0;
	if (__builtin_expect(r < 0 || (size_t)r != total, 0))
		return sl__fast_send_short(fd, flags, rules, total, r, 0);
	struct sl_credit *const base = sl__credit;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1)
		sl__credit_count(&base[__builtin_ctz(rest)], (uint64_t)r);
	return r;
}

ssize_t sl__mcredit_recv_end(uint32_t rules, size_t total, ssize_t r)
{
	if (__builtin_expect(r > 0, 1)) {
		for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
			struct sl_credit *c = &sl__credit[__builtin_ctz(rest)];
			c->units += total - (size_t)r;
			sl__credit_count(c, (uint64_t)r);
		}
		sl__busy = 0;
		return r;
	}
	/* Nothing came: the thread waited, or will; its credit goes back,
	 * the call's units with it. */
	const int e = errno;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1)
		sl__credit[__builtin_ctz(rest)].units += total;
	sl__credit_return_all(sl__clock_ns());
	sl__busy = 0;
	sl__stats_end(rules, r >= 0, 0);
	errno = e;
	return r;
}
