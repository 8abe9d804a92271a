/* SPDX-License-Identifier: MIT */
/*
 * breaker.c - circuit breaking on connect (SLUICE_BREAK, break: rules): the
 * shim's side of core/breaker.c.
 *
 * Each break rule has one breaker (per=process) or one per destination
 * address and port (per=peer, the default: a table of SL_BRK_PEERS
 * breakers, claimed by a CAS on the key's 64-bit hash; a full table leaves
 * further destinations unbroken, logged once). The breakers live in
 * the segment break-PID (shm_break.h, segment.h), which `sluice stat` reads;
 * a fork child shares its parent's. A connect that a matching
 * breaker refuses fails at once with the rule's errno and makes no system
 * call; otherwise it goes to the rules' connect (connect.c) and its outcome
 * is reported:
 *   - success: connect returned 0, or a non-blocking connect's
 *     getsockopt(SO_ERROR) gave 0 on a socket past SYN_SENT; a connect
 *     slower than slow= counts as a failure instead (for a non-blocking
 *     one, until the program looked at SO_ERROR);
 *   - failure: ECONNREFUSED, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH or
 *     ECONNRESET, returned by connect or given by SO_ERROR later;
 *   - neither: any other error, a refusal by sluice's own rate or conns
 *     rules, or a non-blocking connect whose outcome the program never
 *     asked for (if the fd is connected again, its TCP state tells: a
 *     socket past SYN_SENT, not closed, counts as a success). A probe that ends this way
 *     is replaced after open= (the core's lost probe).
 * Non-blocking outcomes are tracked for fds below SL_BRK_FDS.
 *
 * Transitions are logged at info level, with the destination for per=peer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>

#include "act.h"
#include "addr.h"
#include "breaker.h"
#include "clock.h"
#include "connect.h"
#include "internal.h"
#include "log.h"
#include "real.h"
#include "record.h"
#include "sandboxed.h"
#include "segment.h"
#include "shm_break.h"
#include "state.h"

#define SL_BRK_PEERS SL_SHM_BREAK_PEERS
#define SL_BRK_FDS 65536u

struct brk_rule {
	struct sl_break spec;
	struct sl_shm_break_rule *sh; /* its breakers, in brk_shm */
	_Atomic int full_logged;
};

/* A non-blocking connect whose outcome is not known yet. */
struct brk_pend {
	_Atomic uint32_t rules; /* break rules it counts for; 0 = none */
	uint32_t probes;        /* of which it is the probe */
	uint64_t start_ns;
	struct sl_breaker *b[SL_MAX_BREAKS];
};

uint32_t sl__break_n;
static struct brk_rule brk_rules[SL_MAX_BREAKS];
static struct brk_pend *brk_pend; /* [SL_BRK_FDS], mapped once */
/* The breakers: the segment break-PID of the user's private directory (for
 * `sluice stat`), or private memory if it cannot be made. */
static struct sl_shm_break *brk_shm;
static bool brk_is_file;
static pid_t brk_owner; /* the process that created the segment */

static void brk_name(char *out, size_t cap, int pid)
{
	snprintf(out, cap, SL_SHM_BREAK_NAME, pid);
}

/* A new segment's content: zero (the magic is written once it is filled). */
static int brk_zero(void *map, size_t size, void *arg)
{
	(void)map;
	(void)size;
	(void)arg;
	return 0;
}

/* Map this process's breaker segment, fresh (built aside and renamed over
 * whatever a dead process of the same pid left), else private memory. */
static struct sl_shm_break *brk_map(void)
{
	char name[32], err[SL_ERR_MAX];
	struct sl_seg seg;
	brk_name(name, sizeof(name), (int)getpid());
	if (sl_seg_open(name, SL_SEG_WRITE | SL_SEG_REPLACE, sizeof(struct sl_shm_break), brk_zero,
			NULL, &seg, err, sizeof(err)) >= 0) {
		brk_is_file = true;
		brk_owner = getpid();
		return seg.map;
	}
	sl_log(SL_LOG_INFO,
	       "circuit breakers kept in private memory (sluice stat will not see "
	       "them): %s",
	       err);
	brk_is_file = false;
	return sl__map(sizeof(struct sl_shm_break));
}

/* Remove the segment at exit (only its creator: a fork child shares it). */
__attribute__((destructor)) static void brk_fini(void)
{
	if (!brk_is_file || getpid() != brk_owner)
		return;
	char name[32];
	brk_name(name, sizeof(name), (int)getpid());
	sl_seg_unlink(name);
}

int sl__break_init_unsync(const struct sl_policy *p, uint64_t now_ns)
{
	sl__break_n = 0;
	if (p->n_breaks == 0)
		return 0;
	if (brk_pend == NULL)
		brk_pend = sl__map(sizeof(struct brk_pend) * SL_BRK_FDS);
	if (brk_shm == NULL)
		brk_shm = brk_map();
	if (brk_pend == NULL || brk_shm == NULL) {
		sl_log(SL_LOG_ERROR, "cannot map memory for the breakers: %s", strerror(errno));
		return -1;
	}
	memset(brk_pend, 0, sizeof(struct brk_pend) * SL_BRK_FDS);
	struct sl_shm_break *h = brk_shm;
	/* Relaxed: unpublished until the magic below. */
	h->magic = 0;
	for (uint32_t i = 0; i < p->n_breaks && i < SL_MAX_BREAKS; i++) {
		struct brk_rule *r = &brk_rules[i];
		const struct sl_break *s = &p->breaks[i];
		r->spec = *s;
		r->sh = &h->rules[i];
		sl_break_format(s, r->sh->text, sizeof(r->sh->text));
		r->sh->scope = s->scope;
		atomic_store_explicit(&r->full_logged, 0, memory_order_relaxed);
		bool ok = sl_breaker_init(&r->sh->proc, s->window_ns, s->open_ns, s->errors,
					  s->ratio_pct, s->min, now_ns);
		for (unsigned k = 0; k < SL_BRK_PEERS && ok; k++) {
			struct sl_shm_break_peer *e = &r->sh->peers[k];
			atomic_store_explicit(&e->key, 0, memory_order_relaxed);
			atomic_store_explicit(&e->ready, 0, memory_order_relaxed);
			ok = sl_breaker_init(&e->b, s->window_ns, s->open_ns, s->errors,
					     s->ratio_pct, s->min, now_ns);
		}
		if (!ok) {
			sl_log(SL_LOG_ERROR, "breaker %u (%s): the core refuses its parameters",
			       i + 1, r->sh->text);
			return -1;
		}
	}
	h->version = SL_SHM_BREAK_VERSION;
	h->size = sizeof(*h);
	h->pid = (uint32_t)getpid();
	h->uid = (uint32_t)getuid();
	h->n = p->n_breaks;
	/* Release: `sluice stat` sees everything above once it sees the
	 * magic (its acquire fence after mapping). */
	atomic_thread_fence(memory_order_release);
	h->magic = SL_SHM_MAGIC_BREAK;
	sl__break_n = p->n_breaks;
	return 0;
}

/* FNV-1a of the destination, never 0. */
static uint64_t brk_hash(const struct sl_addr *a)
{
	uint64_t h = 1469598103934665603ull;
	const uint8_t head[3] = {a->family, (uint8_t)(a->port >> 8), (uint8_t)a->port};
	for (unsigned i = 0; i < 3; i++)
		h = (h ^ head[i]) * 1099511628211ull;
	for (unsigned i = 0; i < 16; i++)
		h = (h ^ a->addr[i]) * 1099511628211ull;
	return h | 1;
}

/* The breaker of rule r for destination a; NULL if the table is full. */
static struct sl_breaker *brk_of(struct brk_rule *r, const struct sl_addr *a)
{
	if (r->spec.scope != SL_SCOPE_PEER)
		return &r->sh->proc;
	const uint64_t h = brk_hash(a);
	for (unsigned k = 0; k < SL_BRK_PEERS; k++) {
		struct sl_shm_break_peer *e = &r->sh->peers[(h + k) % SL_BRK_PEERS];
		/* Acquire: pairs with the claim below (the address for logs). */
		uint64_t cur = atomic_load_explicit(&e->key, memory_order_acquire);
		if (cur == 0) {
			/* Acq_rel: one claimer per slot; the breaker in it was
			 * initialised before the table was published (init). */
			if (atomic_compare_exchange_strong_explicit(&e->key, &cur, h,
								    memory_order_acq_rel,
								    memory_order_acquire)) {
				e->family = a->family;
				e->port = a->port;
				memcpy(e->addr, a->addr, sizeof(e->addr));
				/* Release: the address, for logs and stat. */
				atomic_store_explicit(&e->ready, 1, memory_order_release);
				return &e->b;
			}
		}
		if (cur == h)
			return &e->b;
	}
	if (atomic_exchange_explicit(&r->full_logged, 1, memory_order_relaxed) == 0)
		sl_log(SL_LOG_WARN,
		       "breaker (%s): more than %u destinations; further ones are not "
		       "broken",
		       r->sh->text, SL_BRK_PEERS);
	return NULL;
}

/* Does break rule r apply to destination a (family bit fam)? */
static bool brk_match(const struct sl_break *r, unsigned fam, const struct sl_addr *a)
{
	if (!(r->families & fam))
		return false;
	if ((r->port_lo != 0 || r->port_hi != UINT16_MAX) &&
	    (fam == SL_FAM_UNIX || a->port < r->port_lo || a->port > r->port_hi))
		return false;
	if (r->to.family == 0)
		return true;
	if (r->to.family != a->family)
		return false;
	const unsigned whole = r->to.prefix / 8, bits = r->to.prefix % 8;
	if (memcmp(r->to.addr, a->addr, whole) != 0)
		return false;
	return bits == 0 ||
	       ((r->to.addr[whole] ^ a->addr[whole]) & (0xffu << (8 - bits)) & 0xffu) == 0;
}

static bool brk_failure_errno(int e)
{
	return e == ECONNREFUSED || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH ||
	       e == ECONNRESET;
}

/* Log a state change of rule i's breaker b (for destination a, per=peer). */
static void brk_log(unsigned i, const struct sl_addr *a, struct sl_breaker *b,
		    enum sl_brk_change ch, uint64_t now)
{
	if (ch == SL_BRK_NO_CHANGE || SL_LOG_INFO > sl__log_level)
		return;
	const struct brk_rule *r = &brk_rules[i];
	char dst[INET6_ADDRSTRLEN + 16] = "";
	if (r->spec.scope == SL_SCOPE_PEER && (a->family == 4 || a->family == 6)) {
		char ip[INET6_ADDRSTRLEN];
		inet_ntop(a->family == 4 ? AF_INET : AF_INET6, a->addr, ip, sizeof(ip));
		snprintf(dst, sizeof(dst), a->family == 4 ? " to %s:%u" : " to [%s]:%u", ip,
			 a->port);
	}
	struct sl_brk_view v;
	sl_breaker_view(b, now, &v);
	const double open_s = (double)r->spec.open_ns / 1e9;
	switch (ch) {
	case SL_BRK_OPENED:
		sl_log(SL_LOG_INFO,
		       "breaker %u (%s)%s: closed -> open for %.3f s (%llu of %llu "
		       "connects failed in the window)",
		       i + 1, r->sh->text, dst, open_s, (unsigned long long)v.failures,
		       (unsigned long long)v.attempts);
		break;
	case SL_BRK_PROBING:
		sl_log(SL_LOG_INFO, "breaker %u (%s)%s: open -> half-open (one probe connect)",
		       i + 1, r->sh->text, dst);
		break;
	case SL_BRK_CLOSED_AGAIN:
		sl_log(SL_LOG_INFO, "breaker %u (%s)%s: half-open -> closed (the probe connected)",
		       i + 1, r->sh->text, dst);
		break;
	case SL_BRK_REOPENED:
		sl_log(SL_LOG_INFO,
		       "breaker %u (%s)%s: half-open -> open for %.3f s (the probe "
		       "failed)",
		       i + 1, r->sh->text, dst, open_s);
		break;
	case SL_BRK_NO_CHANGE:
		break;
	}
}

/* The shortest slow= of the breakers of `rules` (UINT64_MAX: none). */
static uint64_t brk_slow_ns(uint32_t rules)
{
	uint64_t slow = UINT64_MAX;
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		const uint64_t s = brk_rules[__builtin_ctz(rest)].spec.slow_ns;
		slow = s != 0 && s < slow ? s : slow;
	}
	return slow;
}

/* Report one outcome to the breakers of `rules`. */
static void brk_report(uint32_t rules, uint32_t probes, struct sl_breaker *const *bs, bool failure,
		       uint64_t now)
{
	for (uint32_t rest = rules; rest != 0; rest &= rest - 1) {
		const unsigned i = (unsigned)__builtin_ctz(rest);
		enum sl_brk_change ch;
		sl_breaker_report(bs[i], now, failure, (probes >> i) & 1, &ch);
		/* The destination is only for the log line: find it back. */
		struct sl_addr a = {0};
		if (brk_rules[i].spec.scope == SL_SCOPE_PEER) {
			const struct sl_shm_break_peer *e =
				(const struct sl_shm_break_peer
					 *)(const void *)((const char *)bs[i] -
							  offsetof(struct sl_shm_break_peer, b));
			a.family = e->family;
			a.port = e->port;
			memcpy(a.addr, e->addr, sizeof(a.addr));
		}
		brk_log(i, &a, bs[i], ch, now);
	}
}

/* The TCP state of fd (TCP_CLOSE when unknown). errno is preserved. */
static int brk_tcp_state(int fd)
{
	struct tcp_info ti;
	socklen_t l = sizeof(ti);
	if (sl__sandboxed()) /* no query of ours in a seccomp sandbox */
		return TCP_CLOSE;
	int saved = errno;
	int st = SL_REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0 ? ti.tcpi_state
									      : TCP_CLOSE;
	errno = saved;
	return st;
}

/* Settle fd's pending connect, if any: true if it is still connecting (a
 * connect() again on it is the kernel's to answer). An entry whose socket
 * got established unseen counts as a success; any other, as nothing. */
static bool brk_still_pending(int fd, uint64_t now)
{
	if ((unsigned)fd >= SL_BRK_FDS)
		return false;
	struct brk_pend *pd = &brk_pend[fd];
	/* Acquire: pairs with the release store that published the entry. */
	if (atomic_load_explicit(&pd->rules, memory_order_acquire) == 0)
		return false;
	const int st = brk_tcp_state(fd);
	if (st == TCP_SYN_SENT)
		return true;
	const uint32_t rules = atomic_exchange_explicit(&pd->rules, 0, memory_order_acq_rel);
	/* Past SYN_SENT and not closed: it connected (a fresh socket on a
	 * reused fd number, or a failed connect, is TCP_CLOSE). */
	if (rules != 0 && st != TCP_CLOSE && st != TCP_SYN_SENT)
		brk_report(rules, pd->probes, pd->b, false, now);
	return false;
}

int sl__break_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	if (sl__busy || !sl__st.active)
		return sl__connect(fd, sa, len);
	sl__rec_publish(); /* a break rule applies: sluice stat shows us */
	const int saved = errno;
	struct sl_addr dst;
	sl_addr_from(&dst, sa, len);
	const unsigned fam = dst.family == 4   ? SL_FAM_INET
			     : dst.family == 6 ? SL_FAM_INET6
			     : dst.family == 1 ? SL_FAM_UNIX
					       : 0;
	uint64_t now = sl__clock_ns();
	if (fam == 0 || brk_still_pending(fd, now)) {
		errno = saved;
		return sl__connect(fd, sa, len);
	}
	struct sl_breaker *bs[SL_MAX_BREAKS] = {0};
	uint32_t rules = 0, probes = 0;
	for (uint32_t i = 0; i < sl__break_n; i++) {
		if (!brk_match(&brk_rules[i].spec, fam, &dst))
			continue;
		struct sl_breaker *b = brk_of(&brk_rules[i], &dst);
		if (b == NULL)
			continue;
		enum sl_brk_change ch;
		const enum sl_brk_verdict v = sl_breaker_enter(b, now, &ch);
		brk_log(i, &dst, b, ch, now);
		if (v == SL_BRK_FAIL) {
			/* Open: no system call. A probe this call took for an
			 * earlier rule is replaced after open= (lost probe). */
			sl_log(SL_LOG_DEBUG, "breaker %u refuses connect on fd %d", i + 1, fd);
			errno = sl_break_errno(&brk_rules[i].spec);
			return -1;
		}
		bs[i] = b;
		rules |= (uint32_t)1 << i;
		probes |= v == SL_BRK_PROBE ? (uint32_t)1 << i : 0;
	}
	sl__call_refused = 0;
	errno = saved;
	const int r = sl__connect(fd, sa, len);
	const int e = errno;
	if (rules == 0) {
		errno = e;
		return r;
	}
	const uint64_t end = sl__clock_ns(), slow = brk_slow_ns(rules);
	if (r == 0) {
		brk_report(rules, probes, bs, end - now > slow, end);
	} else if (sl__call_refused) {
		/* Refused by sluice's own rules: says nothing of the peer. */
	} else if ((e == EINPROGRESS || e == EINTR) && (unsigned)fd < SL_BRK_FDS) {
		struct brk_pend *pd = &brk_pend[fd];
		memcpy(pd->b, bs, sizeof(bs));
		pd->probes = probes;
		pd->start_ns = now;
		/* Release: publishes the entry to sl__break_soerror. */
		atomic_store_explicit(&pd->rules, rules, memory_order_release);
	} else if (brk_failure_errno(e)) {
		brk_report(rules, probes, bs, true, end);
	}
	errno = e;
	return r;
}

void sl__break_soerror(int fd, int err)
{
	if (sl__break_n == 0 || (unsigned)fd >= SL_BRK_FDS || brk_pend == NULL)
		return;
	struct brk_pend *pd = &brk_pend[fd];
	/* Acquire: pairs with the release store in sl__break_connect. */
	if (atomic_load_explicit(&pd->rules, memory_order_acquire) == 0)
		return;
	/* 0 is also what a connect still in progress reports (SYN_SENT, or
	 * CLOSE while a deferred connect waits for its rate slot, ready.c);
	 * past them (established, or already closed by the peer) it
	 * connected. */
	if (err == 0) {
		const int st = brk_tcp_state(fd);
		if (st == TCP_SYN_SENT || st == TCP_CLOSE)
			return;
	}
	if (err != 0 && !brk_failure_errno(err)) {
		atomic_store_explicit(&pd->rules, 0, memory_order_relaxed);
		return;
	}
	/* Acq_rel: exactly one caller reports the outcome. */
	const uint32_t rules = atomic_exchange_explicit(&pd->rules, 0, memory_order_acq_rel);
	if (rules == 0)
		return;
	const uint64_t now = sl__clock_ns(), slow = brk_slow_ns(rules);
	brk_report(rules, pd->probes, pd->b, err != 0 || now - pd->start_ns > slow, now);
}

/* Sum of one rule's counters over its breakers. */
static void brk_sum(const struct brk_rule *r, uint64_t c[5])
{
	const struct sl_breaker *one = &r->sh->proc;
	const unsigned n = r->spec.scope == SL_SCOPE_PEER ? SL_BRK_PEERS : 1;
	for (unsigned k = 0; k < n; k++) {
		const struct sl_breaker *b = r->spec.scope == SL_SCOPE_PEER ? &r->sh->peers[k].b
									    : one;
		/* Relaxed: counters for a report. */
		c[0] += atomic_load_explicit(&b->attempts, memory_order_relaxed);
		c[1] += atomic_load_explicit(&b->failures, memory_order_relaxed);
		c[2] += atomic_load_explicit(&b->fast_fails, memory_order_relaxed);
		c[3] += atomic_load_explicit(&b->probes, memory_order_relaxed);
		c[4] += atomic_load_explicit(&b->trips, memory_order_relaxed);
	}
}

size_t sl__break_stats_json(char *buf, size_t len)
{
	size_t n = 0;
	if (len == 0)
		return 0;
	buf[0] = '\0';
	if (sl__break_n == 0)
		return 0;
	n += (size_t)snprintf(buf + n, len - n, ",\"breakers\":[");
	for (uint32_t i = 0; i < sl__break_n && n < len; i++) {
		uint64_t c[5] = {0};
		brk_sum(&brk_rules[i], c);
		n += (size_t)snprintf(buf + n, len - n,
				      "%s{\"index\":%u,\"breaker\":\"%s\",\"attempts\":%llu,"
				      "\"failures\":%llu,\"fast_fails\":%llu,\"probes\":%llu,"
				      "\"trips\":%llu}",
				      i ? "," : "", i + 1, brk_rules[i].sh->text,
				      (unsigned long long)c[0], (unsigned long long)c[1],
				      (unsigned long long)c[2], (unsigned long long)c[3],
				      (unsigned long long)c[4]);
	}
	if (n < len)
		n += (size_t)snprintf(buf + n, len - n, "]");
	return n < len ? n : len - 1;
}
