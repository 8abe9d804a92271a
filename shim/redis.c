/* SPDX-License-Identifier: MIT */
/*
 * redis.c - the Redis client glue of redis=KEY rules: hiredis through
 * dlopen, connect/AUTH/SELECT with bounded timeouts, and EVALSHA of the
 * GCRA script with SCRIPT LOAD on first use and again on NOSCRIPT (after a
 * server restart or SCRIPT FLUSH).
 *
 * hiredis is loaded only when a rule has redis=KEY, so programs without
 * Redis rules never map it, and sluice builds without its headers: the few
 * types and functions used are declared here from hiredis 0.14's ABI, which
 * the soname libhiredis.so.0.14 pins (Debian 12's libhiredis0.14).
 *
 * The connection's own socket calls are never throttled: the lease thread,
 * the only user of a connection, runs with sl__busy set (every wrapper
 * passes straight through), and the socket's fd is marked in the fd table
 * as passing every kind of call, in case another thread ever touches it.
 * The fd is the library's own (ownfd.h): high, close-on-exec, out of reach
 * of the program's close, close_range and dup2.
 * Nothing here prints the password: AUTH's error replies do not contain it.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "fd.h"
#include "log.h"
#include "ownfd.h"
#include "real.h"
#include "redis.h"
#include "redis_proto.h"

#define SL_HIREDIS_SONAME "libhiredis.so.0.14"

/* hiredis 0.14: the leading fields of redisContext (the reader and reply:
 * redis_proto.h). */
struct sl_rconn {
	int err;
	char errstr[128];
	int fd;
	int flags;
	char *obuf;
	struct sl_rreader *reader;
};
#define SL_HR_ERR_PROTOCOL 4 /* hiredis's REDIS_ERR_PROTOCOL */

/* One reply may bring at most this many bytes and take at most the
 * connection's timeout in all (hiredis 0.14 has neither limit: a server
 * answering "$2000000000" and streaming grew a throttled program by 3 GB in
 * 8 s). Sluice's replies are small: EVALSHA's seven integers, a SHA1, a
 * topology (CLUSTER SLOTS of a large cluster: some 100 KiB). */
#define SL_REDIS_REPLY_MAX (1u << 20)
/* ... and no array of it more than this many elements: hiredis allocates an
 * array's pointers when its count comes, and frees a dropped reply by
 * reading every one of them: "*2000000000" cost 16 GB of address space and,
 * on a kernel without a shared zero page for reads, 2.4 GB of RSS in 8 s
 * (the free scanning it). A topology has some thousands. */
#define SL_REDIS_ARRAY_MAX 65536

#define SL_HIREDIS_LIST(X)                                                                         \
	X(struct sl_rconn *, redisConnectWithTimeout, (const char *, int, const struct timeval))   \
	X(struct sl_rconn *, redisConnectUnixWithTimeout, (const char *, const struct timeval))    \
	X(int, redisSetTimeout, (struct sl_rconn *, const struct timeval))                         \
	X(int, redisAppendCommandArgv, (struct sl_rconn *, int, const char **, const size_t *))    \
	X(int, redisBufferWrite, (struct sl_rconn *, int *))                                       \
	X(int, redisBufferRead, (struct sl_rconn *))                                               \
	X(int, redisGetReplyFromReader, (struct sl_rconn *, void **))                              \
	X(void, freeReplyObject, (void *))                                                         \
	X(struct sl_rreader *, redisReaderCreate, (void))                                          \
	X(void, redisReaderFree, (struct sl_rreader *))                                            \
	X(void, redisFree, (struct sl_rconn *))

static struct {
#define SL_H_FIELD(ret, name, args) ret(*name) args;
	SL_HIREDIS_LIST(SL_H_FIELD)
#undef SL_H_FIELD
} sl_h;
static void *hiredis_lib;
static struct sl_rfuncs capped_fns; /* hiredis's own, create_array capped */
static void *(*hr_create_array)(const struct sl_rtask *, int);
static __thread bool array_capped; /* capped_array refused one (this thread's reply) */

/* An array of at most SL_REDIS_ARRAY_MAX elements, as hiredis makes it;
 * NULL for a longer one, which hiredis takes as out of memory: the reply
 * fails (get_reply says why). */
static void *capped_array(const struct sl_rtask *t, int elements)
{
	if (elements > SL_REDIS_ARRAY_MAX) {
		array_capped = true;
		return NULL;
	}
	return hr_create_array(t, elements);
}
static char script_sha[41];           /* the script's SHA1 once loaded; lease thread only */
static _Atomic uint64_t script_loads; /* SCRIPT LOAD replies */

int sl__redis_load(void)
{
	if (hiredis_lib != NULL)
		return 0;
	void *lib = dlopen(SL_HIREDIS_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		sl_log(SL_LOG_ERROR, "redis=KEY rules need %s (Debian: libhiredis0.14): %s",
		       SL_HIREDIS_SONAME, dlerror());
		return -1;
	}
#define SL_H_SYM(ret, name, args) {#name, (void **)&sl_h.name},
	static const struct {
		const char *name;
		void **slot;
	} syms[] = {SL_HIREDIS_LIST(SL_H_SYM)};
#undef SL_H_SYM
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].slot = dlsym(lib, syms[i].name);
		if (*syms[i].slot == NULL) {
			sl_log(SL_LOG_ERROR, "%s has no %s", SL_HIREDIS_SONAME, syms[i].name);
			dlclose(lib);
			return -1;
		}
	}
	/* hiredis's reply functions, with arrays capped (cap_arrays). */
	struct sl_rreader *r = sl_h.redisReaderCreate();
	if (r == NULL || r->fn == NULL) {
		sl_log(SL_LOG_ERROR, "%s: no reader", SL_HIREDIS_SONAME);
		if (r != NULL)
			sl_h.redisReaderFree(r);
		dlclose(lib);
		return -1;
	}
	capped_fns = *r->fn;
	hr_create_array = capped_fns.create_array;
	capped_fns.create_array = capped_array;
	sl_h.redisReaderFree(r);
	hiredis_lib = lib;
	return 0;
}

uint64_t sl__redis_script_loads(void)
{
	/* Relaxed: a counter for logs and tests. */
	return atomic_load_explicit(&script_loads, memory_order_relaxed);
}

static uint64_t reply_timeout_ns = 2000000000u; /* the connections' timeout */
/* Held while a connection's fd is used: a program's dup2 onto it waits,
 * then moves it (ownfd.h). */
static pthread_mutex_t redis_io = PTHREAD_MUTEX_INITIALIZER;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Mark c broken by a reply over the limits (said once per process): its
 * caller drops it, which is the rule's on-error path. */
static void *reply_refused(struct sl_rconn *c, const char *what)
{
	static _Atomic int warned;
	c->err = SL_HR_ERR_PROTOCOL;
	snprintf(c->errstr, sizeof(c->errstr), "a reply %s", what);
	if (!atomic_exchange_explicit(&warned, 1, memory_order_relaxed))
		sl_log(SL_LOG_WARN,
		       "Redis sent a reply %s: the connection is dropped and the rule's "
		       "on-error applies",
		       what);
	return NULL;
}

/* hiredis's redisGetReply, bounded: the command written, then reads until
 * a reply is complete, refused once it brought SL_REDIS_REPLY_MAX bytes
 * (each read adds at most 16 KiB to the reader) or took longer than the
 * connection's timeout in all. */
static void *get_reply(struct sl_rconn *c)
{
	int done = 0;
	do
		if (sl_h.redisBufferWrite(c, &done) != 0)
			return NULL;
	while (!done);
	const uint64_t deadline = mono_ns() + reply_timeout_ns;
	size_t got = 0;
	for (;;) {
		void *reply = NULL;
		array_capped = false;
		if (sl_h.redisGetReplyFromReader(c, &reply) != 0)
			return array_capped ? reply_refused(c, "with an array over 65536 elements")
					    : NULL;
		if (reply != NULL)
			return reply;
		const size_t before = c->reader->len - c->reader->pos;
		if (sl_h.redisBufferRead(c) != 0)
			return NULL;
		const size_t after = c->reader->len - c->reader->pos;
		got += after > before ? after - before : 0;
		if (got > SL_REDIS_REPLY_MAX)
			return reply_refused(c, "over 1 MiB");
		if (mono_ns() > deadline)
			return reply_refused(c, "slower than the connection's timeout");
	}
}

/* Run one command; NULL (reason in why) if the connection failed. */
static struct sl_hreply *redis_cmd(struct sl_rconn *c, int argc, const char **argv, char *why,
				   size_t whylen)
{
	size_t lens[8];
	for (int i = 0; i < argc && i < 8; i++)
		lens[i] = strlen(argv[i]);
	struct sl_hreply *r = NULL;
	pthread_mutex_lock(&redis_io);
	if (c->fd < 0) /* the program dup2()ed over it and no number was left */
		snprintf(c->errstr, sizeof(c->errstr), "connection lost"),
			c->err = SL_HR_ERR_PROTOCOL;
	else if (sl_h.redisAppendCommandArgv(c, argc, argv, lens) == 0)
		r = get_reply(c);
	pthread_mutex_unlock(&redis_io);
	if (r == NULL)
		snprintf(why, whylen, "%s", c->err != 0 ? c->errstr : "no reply");
	return r;
}

/* A command whose reply must not be an error (AUTH, SELECT). 0 or -1. */
static int redis_cmd_ok(struct sl_rconn *c, int argc, const char **argv, char *why, size_t whylen)
{
	struct sl_hreply *r = redis_cmd(c, argc, argv, why, whylen);
	if (r == NULL)
		return -1;
	int ok = r->type != SL_HR_ERROR;
	if (!ok)
		snprintf(why, whylen, "%s: %s", argv[0], r->str != NULL ? r->str : "error");
	sl_h.freeReplyObject(r);
	return ok ? 0 : -1;
}

struct sl_rconn *sl__redis_open(const struct sl_redis *cfg, uint64_t timeout_ns, char *why,
				size_t whylen)
{
	return cfg->kind == SL_REDIS_UNIX
		       ? sl__redis_open_at(cfg, cfg->path, 0, timeout_ns, why, whylen)
		       : sl__redis_open_at(cfg, cfg->host, cfg->port, timeout_ns, why, whylen);
}

void *sl__redis_zalloc(size_t size, char *why, size_t whylen)
{
	void *p = calloc(1, size);
	if (p == NULL)
		snprintf(why, whylen, "out of memory");
	return p;
}

struct sl_rconn *sl__redis_open_at(const struct sl_redis *cfg, const char *host, uint16_t port,
				   uint64_t timeout_ns, char *why, size_t whylen)
{
	struct timeval tv = {.tv_sec = (time_t)(timeout_ns / 1000000000u),
			     .tv_usec = (suseconds_t)(timeout_ns % 1000000000u / 1000u)};
	reply_timeout_ns = timeout_ns != 0 ? timeout_ns : 2000000000u; /* one for all */
	struct sl_rconn *c = port == 0 ? sl_h.redisConnectUnixWithTimeout(host, tv)
				       : sl_h.redisConnectWithTimeout(host, port, tv);
	if (c == NULL) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if (c->err != 0) {
		snprintf(why, whylen, "%s", c->errstr);
		sl_h.redisFree(c);
		return NULL;
	}
	/* Out of the program's way (ownfd.h): high, close-on-exec, never
	 * closed or replaced by the program; where that cannot be, marked
	 * as passing every call as before. Not under redis_io: a move takes
	 * ownfd's lock, then redis_io. */
	if (!sl__own_take(&c->fd, &redis_io) && (unsigned)c->fd < sl__fd_cap)
		/* Release: like a classification, publishes "pass every call"
		 * (pairs with the acquire in sl__fd_get; the fast path's relaxed
		 * load needs nothing more). */
		atomic_store_explicit(&sl__fdbits[c->fd], (uint8_t)(SL_FDB_READY | SL_FDB_PASS_ALL),
				      memory_order_release);
	sl_h.redisSetTimeout(c, tv);
	if (c->reader != NULL)
		c->reader->fn = &capped_fns;
	if (cfg == NULL)
		return c;
	char db[16];
	snprintf(db, sizeof(db), "%u", cfg->db);
	/* AUTH [USER] PASSWORD, then SELECT DB, each only when configured. */
	const char *auth[] = {"AUTH", cfg->user, cfg->pass};
	int auth_argc = 3;
	if (cfg->user[0] == '\0') {
		auth[1] = cfg->pass;
		auth_argc = 2;
	}
	const char *sel[] = {"SELECT", db};
	if ((cfg->pass[0] != '\0' && redis_cmd_ok(c, auth_argc, auth, why, whylen) < 0) ||
	    (cfg->db != 0 && redis_cmd_ok(c, 2, sel, why, whylen) < 0)) {
		sl_h.redisFree(c);
		return NULL;
	}
	return c;
}

void sl__redis_close(struct sl_rconn *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&redis_io);
	sl__own_drop(c->fd);
	sl_h.redisFree(c); /* closes the socket through our close(): forgotten */
	pthread_mutex_unlock(&redis_io);
}

void sl__redis_after_fork(void)
{
	pthread_mutex_init(&redis_io, NULL);
}

void sl__redis_abandon(struct sl_rconn *c)
{
	if (c == NULL || c->fd < 0)
		return;
	int fd = c->fd;
	sl__own_drop(fd);
	SL_REAL(close)(fd);
	sl__fd_forget(fd);
}

/* SCRIPT LOAD the GCRA script into script_sha. 0 or -1. */
static int redis_script_load(struct sl_rconn *c, char *why, size_t whylen)
{
	const char *argv[] = {"SCRIPT", "LOAD", sl__redis_gcra_lua};
	struct sl_hreply *r = redis_cmd(c, 3, argv, why, whylen);
	if (r == NULL)
		return -1;
	int ok = r->type == SL_HR_STRING && r->len == 40;
	if (ok) {
		memcpy(script_sha, r->str, 40);
		script_sha[40] = '\0';
		/* Relaxed: a counter. */
		atomic_fetch_add_explicit(&script_loads, 1, memory_order_relaxed);
		sl_log(SL_LOG_INFO, "redis: script loaded (sha %s)", script_sha);
	} else {
		snprintf(why, whylen, "SCRIPT LOAD: %s",
			 r->type == SL_HR_ERROR && r->str != NULL ? r->str : "unexpected reply");
	}
	sl_h.freeReplyObject(r);
	return ok ? 0 : -1;
}

/* The one-connection topology (redis://, unix://): its state is the
 * connection. */
static int one_open(void *t, const struct sl_redis *cfg, uint64_t timeout_ns, char *why,
		    size_t whylen)
{
	struct sl_rconn **c = t;
	*c = sl__redis_open(cfg, timeout_ns, why, whylen);
	return *c != NULL ? 0 : -1;
}

static int one_take(void *t, const char *key, double t_us, double tau_us, uint64_t want,
		    uint64_t *got, uint64_t *wait_ns, char *why, size_t whylen)
{
	return sl__redis_take_at(*(struct sl_rconn **)t, false, key, t_us, tau_us, want, got,
				 wait_ns, why, whylen);
}

static void one_close(void *t, bool abandon)
{
	struct sl_rconn *c = *(struct sl_rconn **)t;
	if (abandon)
		sl__redis_abandon(c);
	else
		sl__redis_close(c);
}

const struct sl_rtopo sl__rtopo_one = {
	.size = sizeof(struct sl_rconn *),
	.reach = one_open,
	.take = one_take,
	.drop = one_close,
};

struct sl_hreply *sl__redis_cmd(struct sl_rconn *c, int argc, const char **argv, char *why,
				size_t whylen)
{
	return redis_cmd(c, argc, argv, why, whylen);
}

void sl__redis_free_reply(struct sl_hreply *r)
{
	sl_h.freeReplyObject(r);
}

int sl__redis_take_at(struct sl_rconn *c, bool asking, const char *key, double t_us, double tau_us,
		      uint64_t want, uint64_t *got, uint64_t *wait_ns, char *why, size_t whylen)
{
	char t[40], tau[40], n[24];
	snprintf(t, sizeof(t), "%.6f", t_us);
	snprintf(tau, sizeof(tau), "%.6f", tau_us);
	snprintf(n, sizeof(n), "%llu", (unsigned long long)want);
	for (int attempt = 0; attempt < 2; attempt++) {
		if (script_sha[0] == '\0' && redis_script_load(c, why, whylen) < 0)
			return -1;
		/* ASKING holds for the next command only, so it goes after any
		 * SCRIPT LOAD, right before the EVALSHA it is for. */
		static const char *const ask[] = {"ASKING"};
		if (asking && redis_cmd_ok(c, 1, (const char **)ask, why, whylen) < 0)
			return c->err != 0 ? SL_REDIS_EIO : SL_REDIS_EREPLY;
		const char *argv[] = {"EVALSHA", script_sha, "1", key, t, tau, n};
		struct sl_hreply *r = redis_cmd(c, 7, argv, why, whylen);
		if (r == NULL)
			return SL_REDIS_EIO;
		if (r->type == SL_HR_ERROR && r->str != NULL &&
		    strncmp(r->str, "NOSCRIPT", 8) == 0) {
			/* The server lost its script cache (restart, SCRIPT FLUSH). */
			sl_h.freeReplyObject(r);
			script_sha[0] = '\0';
			continue;
		}
		int ok = r->type == SL_HR_ARRAY && r->elements == 2 &&
			 r->element[0]->type == SL_HR_INTEGER &&
			 r->element[1]->type == SL_HR_INTEGER && r->element[0]->integer >= 0 &&
			 r->element[1]->integer >= 0;
		if (ok) {
			uint64_t g = (uint64_t)r->element[0]->integer;
			*got = g < want ? g : want;
			*wait_ns = (uint64_t)r->element[1]->integer * 1000u;
		} else {
			snprintf(why, whylen, "EVALSHA: %s",
				 r->type == SL_HR_ERROR && r->str != NULL ? r->str
									  : "unexpected reply");
		}
		sl_h.freeReplyObject(r);
		return ok ? 0 : SL_REDIS_EREPLY;
	}
	snprintf(why, whylen, "EVALSHA: NOSCRIPT right after SCRIPT LOAD");
	return SL_REDIS_EREPLY;
}
