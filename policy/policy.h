/* SPDX-License-Identifier: MIT */
/*
 * policy.h - the SLUICE_* rule language: parsing, validation, canonical
 * printing and error reporting.
 *
 * Overview
 * --------
 * policy/ turns the text of SLUICE_* variables into plain rule data (fixed
 * size structs, no pointers, no allocation) that the shim matches calls
 * against without any further parsing. It is a pure function of text: it
 * never reads the environment, resolves symbols or sets errno, so it can be
 * fuzzed and is shared by the preloaded library and the `sluice` launcher.
 *
 * Grammar (see README.md for the user documentation):
 *
 *   SLUICE_CONNECT / _ACCEPT / _SEND / _RECV / _CONNS = SPEC
 *   SLUICE_RULES = OP:SPEC ( ';' OP:SPEC )*      OP: connect accept send recv conns break
 *   SPEC   := LIMIT ( ',' OPTION )*
 *   LIMIT  := RATE (connect, accept, send, recv) | COUNT | 'adaptive' (conns)
 *   RATE   := AMOUNT '/' [NUMBER] PERIOD
 *   AMOUNT := NUMBER [UNIT]   UNIT: B KB MB GB (10^3) KiB MiB GiB (2^10): bytes;
 *                             none: calls (messages for send/recv)
 *   PERIOD := us | ms | s | min | h
 *   OPTION := burst=AMOUNT | algo=token|leaky|fixed|sliding
 *           | action=delay|reject|dry-run | max-delay=DURATION | errno '=' NAME
 *           | per=process|thread|fd|peer | to=CIDR[:PORT] | port=N[-M]
 *           | family=F(+F)* | type=T(+T)* | nonblock=eagain|sleep
 *           | shared=NAME
 *           | redis=KEY | on-error=local|open|closed | lease=AMOUNT
 *           | warmup=DURATION | cold=N
 *           | min=N | max=N | initial=N | algo=gradient2|vegas|aimd (conns adaptive)
 *           | load1=NUMBER | cpu=P% | cpu=FRACTION | rt=DURATION (accept, conns:
 *             system protection)
 *   SLUICE_REDIS = redis://[[USER]:PASS@]HOST[:PORT][/DB] | unix:///PATH
 *                | redis+cluster://[[USER]:PASS@]NODE(,NODE)*
 *                | redis+sentinel://[[USER]:PASS@]NODE(,NODE)* "/" MASTER [/DB]
 *                  NODE := HOST[:PORT]
 *
 * API and thread-safety
 * ---------------------
 * All functions are pure functions of their arguments and reentrant. Errors
 * are written as one line (no trailing newline) into a caller-provided buffer:
 *   SLUICE_SEND="1Mib/s": at column 2: unknown unit 'Mib' (expected B, KB, KiB, MB, MiB, GB, GiB)
 * Columns are 1-based byte offsets into the variable's value.
 */
#ifndef SLUICE_POLICY_H
#define SLUICE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SL_MAX_RULES 32        /* rules in one policy */
#define SL_ERR_MAX 512         /* recommended size of an error buffer */
#define SL_PATH_MAX 256        /* SLUICE_LOG_FILE, SLUICE_STATS */
#define SL_NAMES_MAX 256       /* SLUICE_ONLY / SLUICE_SKIP, '+'-separated */
#define SL_RULE_TEXT_MAX 256   /* canonical text of one rule */
#define SL_SHARED_NAME_MAX 32  /* shared=NAME: 1..31 of [A-Za-z0-9._-], NUL-padded */
#define SL_REDIS_KEY_MAX 48    /* redis=KEY, NUL included */
#define SL_REDIS_HOST_MAX 256  /* SLUICE_REDIS host name or address */
#define SL_REDIS_CRED_MAX 128  /* SLUICE_REDIS user name, password */
#define SL_REDIS_NODES_MAX 8   /* cluster seeds or sentinels in SLUICE_REDIS */
#define SL_REDIS_MASTER_MAX 64 /* sentinel master name, NUL included */
/* The longest canonical SLUICE_REDIS text of a TCP, cluster or sentinel
 * configuration (sl_redis_format), NUL included: scheme, user and ":***@",
 * every node as "[host]:port,", "/" master, "/" db. A unix:// one is
 * bounded by SL_PATH_MAX instead. */
#define SL_REDIS_TEXT_MAX                                                                          \
	(32 + SL_REDIS_CRED_MAX + SL_REDIS_NODES_MAX * (SL_REDIS_HOST_MAX + 9) +                   \
	 SL_REDIS_MASTER_MAX + 24)

enum sl_op {
	SL_OP_CONNECT = 0,
	SL_OP_ACCEPT = 1,
	SL_OP_SEND = 2,
	SL_OP_RECV = 3,
	SL_OP_CONNS = 4,
	SL_OP_COUNT = 5,
};

enum sl_unit {
	SL_UNIT_CALLS = 0, /* calls, or messages for send/recv */
	SL_UNIT_BYTES = 1,
};

enum sl_algo {
	SL_ALGO_TOKEN = 0,
	SL_ALGO_LEAKY = 1,
	SL_ALGO_FIXED = 2,
	SL_ALGO_SLIDING = 3,
};

/* algo= of a conns adaptive rule: how the limit follows the latency it
 * measures (engine/adaptive.c). */
enum sl_adapt_algo {
	SL_ADAPT_GRADIENT2 = 0, /* default */
	SL_ADAPT_VEGAS = 1,
	SL_ADAPT_AIMD = 2,
};
#define SL_ADAPT_MIN_DEFAULT 1u
#define SL_ADAPT_MAX_DEFAULT 1000u
#define SL_ADAPT_INITIAL_DEFAULT 20u
#define SL_ADAPT_LIMIT_MAX 1000000u /* the largest min=, max=, initial= */
#define SL_SYS_LOAD1_MAX 100000u    /* the largest load1= */

enum sl_action {
	SL_ACTION_DELAY = 0,
	SL_ACTION_REJECT = 1,
	SL_ACTION_DRYRUN = 2,
};

/* nonblock=: what a delay rule does to a call on a non-blocking socket
 * (O_NONBLOCK or MSG_DONTWAIT) that would have to wait. */
enum sl_nonblock {
	SL_NONBLOCK_EAGAIN = 0, /* default: transfer what is allowed now or fail
				   with EAGAIN; poll/select/epoll report the fd
				   when its tokens are there */
	SL_NONBLOCK_SLEEP = 1,  /* sleep in the call, as for blocking sockets */
};

enum sl_scope {
	SL_SCOPE_PROCESS = 0,
	SL_SCOPE_THREAD = 1,
	SL_SCOPE_FD = 2,
	SL_SCOPE_PEER = 3,
};

/* on-error= of a redis=KEY rule: what happens while Redis cannot answer. */
enum sl_on_error {
	SL_ON_ERROR_LOCAL = 0,  /* this process alone keeps the rule's rate */
	SL_ON_ERROR_OPEN = 1,   /* everything passes */
	SL_ON_ERROR_CLOSED = 2, /* everything is refused with the rule's errno */
};

/* family= bits */
#define SL_FAM_INET 0x1u
#define SL_FAM_INET6 0x2u
#define SL_FAM_UNIX 0x4u
/* type= bits */
#define SL_TYPE_STREAM 0x1u
#define SL_TYPE_DGRAM 0x2u

/* Bits of sl_rule.explicit_opts: which options the user wrote (defaults are
 * filled in either way; canonical printing prints every option that differs
 * from its default). */
#define SL_OPT_BURST (1u << 0)
#define SL_OPT_ALGO (1u << 1)
#define SL_OPT_ACTION (1u << 2)
#define SL_OPT_MAX_DELAY (1u << 3)
#define SL_OPT_ERRNO (1u << 4)
#define SL_OPT_PER (1u << 5)
#define SL_OPT_TO (1u << 6)
#define SL_OPT_PORT (1u << 7)
#define SL_OPT_FAMILY (1u << 8)
#define SL_OPT_TYPE (1u << 9)
#define SL_OPT_NONBLOCK (1u << 10)
#define SL_OPT_SHARED (1u << 11)
#define SL_OPT_REDIS (1u << 12)
#define SL_OPT_ON_ERROR (1u << 13)
#define SL_OPT_LEASE (1u << 14)
#define SL_OPT_WARMUP (1u << 15)
#define SL_OPT_COLD (1u << 16)
#define SL_OPT_MIN (1u << 17)
#define SL_OPT_MAX (1u << 18)
#define SL_OPT_INITIAL (1u << 19)
#define SL_OPT_LOAD1 (1u << 20)
#define SL_OPT_CPU (1u << 21)
#define SL_OPT_RT (1u << 22)

/* to=CIDR[:PORT] */
struct sl_cidr {
	uint8_t family;   /* 0: no address filter, 4: IPv4, 6: IPv6 */
	uint8_t prefix;   /* prefix length in bits (0..32 or 0..128) */
	uint8_t addr[16]; /* network byte order; bits past prefix are zero */
};

/* One rule, plain data. */
struct sl_rule {
	uint8_t op;                /* enum sl_op */
	uint8_t unit;              /* enum sl_unit (conns: calls) */
	uint8_t algo;              /* enum sl_algo (conns: unused) */
	uint8_t action;            /* enum sl_action */
	uint8_t scope;             /* enum sl_scope */
	uint8_t families;          /* SL_FAM_* bits */
	uint8_t types;             /* SL_TYPE_* bits */
	uint8_t nonblock;          /* enum sl_nonblock (action=delay only) */
	uint64_t amount;           /* units per period; conns: the count */
	uint64_t period_ns;        /* conns: 0 */
	uint64_t burst;            /* token: units at once (default filled in);
	                       leaky: queue capacity in units (0 = unbounded);
	                       windows and conns: 0 */
	uint64_t max_delay_ns;     /* UINT64_MAX: no maximum */
	int32_t err;               /* errno of a refusal; 0 = the operation's default */
	uint32_t explicit_opts;    /* SL_OPT_* given by the user */
	uint16_t port_lo, port_hi; /* inclusive; 0..65535 = any port */
	struct sl_cidr to;
	uint8_t reserved1[2];
	char shared[SL_SHARED_NAME_MAX]; /* shared=NAME, "" = not shared */
	/* Fleet-wide limit (redis=KEY): the key's name ("" = a local rule),
	 * what to do while Redis fails, and how many units one process
	 * leases at once (default filled in for redis rules, else 0). */
	char redis_key[SL_REDIS_KEY_MAX];
	uint64_t lease;
	uint8_t on_error; /* enum sl_on_error */
	/* Warm-up (algo=token): from cold the rate starts at rate / cold and
	 * climbs to the rate over warmup_ns (0 = no warm-up); cold is 3 unless
	 * given (0 without a warm-up). See core/warmup.c. */
	uint8_t cold;
	uint8_t reserved2[6];
	uint64_t warmup_ns;
	/* conns:adaptive: the limit is the library's, between adapt_min and
	 * adapt_max, starting at amount (initial=); adapt_algo is enum
	 * sl_adapt_algo. adaptive is 0 and the rest 0 for every other rule. */
	uint8_t adaptive;
	uint8_t adapt_algo;
	/* System protection (accept and conns; engine/adaptive.c, algo
	 * SL_ADAPT_SYSTEM): over any threshold given (0: not given), a new
	 * connection or request is admitted only while the turns in flight
	 * are at most the peak completion rate x the no-load latency.
	 * sys_cpu: cpu=, the host's busy time in 1/1000 (1..999);
	 * sys_load1: load1=, the host's 1-minute load average in 1/1000;
	 * sys_rt_ns: rt=, the mean latency of the turns. */
	uint16_t sys_cpu;
	uint32_t sys_load1;
	uint64_t adapt_min, adapt_max;
	uint64_t sys_rt_ns;
};

/* Whether rule r has system protection (load1=, cpu= or rt=). */
static inline bool sl_rule_system(const struct sl_rule *r)
{
	return r->sys_cpu != 0 || r->sys_load1 != 0 || r->sys_rt_ns != 0;
}

/*
 * A circuit breaker on connect (SLUICE_BREAK=SPEC, break:SPEC in
 * SLUICE_RULES, the launcher's --break SPEC):
 *   SPEC := OPTION ( ',' OPTION )*, errors= required
 *   OPTION := errors=N | errors=P% | min=K | window=DURATION | open=DURATION
 *           | slow=DURATION | errno NAME (with =) | per=process|peer | to=CIDR[:PORT]
 *           | port=N[-M] | family=F(+F)*
 * See shim/breaker.c and core/breaker.c.
 */
#define SL_MAX_BREAKS 8
#define SL_BREAK_MIN_DEFAULT 5 /* min= of errors=P% (Sentinel's minRequestAmount) */
#define SL_BREAK_WINDOW_DEFAULT_NS 10000000000ull
#define SL_BREAK_OPEN_DEFAULT_NS 5000000000ull

struct sl_break {
	uint32_t errors;   /* errors=N: failures in the window that open it; 0: ratio */
	uint8_t ratio_pct; /* errors=P%: 1..100; 0: count */
	uint8_t scope;     /* SL_SCOPE_PROCESS or SL_SCOPE_PEER (default) */
	uint8_t families;  /* SL_FAM_* bits */
	uint8_t reserved0;
	uint32_t min;       /* ratio: attempts needed in the window (default 5) */
	int32_t err;        /* errno of a broken connect; 0 = ECONNREFUSED */
	uint64_t window_ns; /* sliding window (default 10 s) */
	uint64_t open_ns;   /* how long it stays open (default 5 s) */
	uint64_t slow_ns;   /* a connect slower than this fails; 0 = none */
	uint16_t port_lo, port_hi;
	uint32_t explicit_opts; /* SL_BOPT_* given by the user */
	struct sl_cidr to;
	uint8_t reserved1[2];
};

/* Parse one break SPEC (var names the variable in messages, NULL:
 * SLUICE_BREAK). Same conventions as sl_rule_parse. */
int sl_break_parse(struct sl_break *b, const char *spec, const char *var, char *err, size_t errlen);
/* Canonical "break:SPEC", options that differ from their defaults in the
 * order errors, min, window, open, slow, errno, per, to, port, family.
 * Returns the length needed, like snprintf. */
size_t sl_break_format(const struct sl_break *b, char *buf, size_t len);
bool sl_break_equal(const struct sl_break *a, const struct sl_break *b);
/* The errno of a broken connect (err, or ECONNREFUSED). */
int sl_break_errno(const struct sl_break *b);

/* SLUICE_REDIS: where redis=KEY rules keep their state. */
enum sl_redis_kind {
	SL_REDIS_NONE = 0, /* not set */
	SL_REDIS_TCP = 1,
	SL_REDIS_UNIX = 2,
	SL_REDIS_CLUSTER = 3,  /* nodes[] are seeds of a Redis Cluster */
	SL_REDIS_SENTINEL = 4, /* nodes[] are sentinels watching `master` */
};

/* One HOST:PORT of a cluster's seeds or a sentinel list. */
struct sl_redis_node {
	char host[SL_REDIS_HOST_MAX]; /* name or address, IPv6 without [] */
	uint16_t port;
	uint8_t reserved[6];
};

struct sl_redis {
	uint32_t kind; /* enum sl_redis_kind */
	uint32_t db;   /* SELECT db; 0 = the default database */
	uint16_t port; /* TCP; 6379 unless given */
	uint8_t reserved[6];
	char host[SL_REDIS_HOST_MAX]; /* TCP: name or address, IPv6 without [] */
	char path[SL_PATH_MAX];       /* unix socket */
	char user[SL_REDIS_CRED_MAX]; /* "" = AUTH with the password only */
	char pass[SL_REDIS_CRED_MAX]; /* "" = no AUTH; never printed */
	/* CLUSTER and SENTINEL: the addresses given, in order (host and port
	 * above stay empty), and the sentinels' name of the master. USER,
	 * PASS and db are the data nodes' (sentinels are asked without AUTH). */
	uint32_t n_nodes;
	uint32_t reserved2;
	struct sl_redis_node nodes[SL_REDIS_NODES_MAX];
	char master[SL_REDIS_MASTER_MAX];
};

enum sl_log_level {
	SL_LOG_ERROR = 0,
	SL_LOG_WARN = 1,
	SL_LOG_INFO = 2,
	SL_LOG_DEBUG = 3,
};

enum sl_config_error {
	SL_CONFIG_ERROR_EXIT = 0, /* default: print the error, exit status 2 */
	SL_CONFIG_ERROR_WARN = 1, /* print a warning, run unthrottled */
};

/* Everything the SLUICE_* environment says. */
struct sl_policy {
	struct sl_rule rules[SL_MAX_RULES];
	uint32_t n_rules;
	uint32_t log_level;    /* enum sl_log_level, SLUICE_LOG */
	uint32_t config_error; /* enum sl_config_error, SLUICE_CONFIG_ERROR */
	uint32_t reserved;
	char log_file[SL_PATH_MAX];            /* SLUICE_LOG_FILE, "" = stderr */
	char stats_file[SL_PATH_MAX];          /* SLUICE_STATS, "" = none */
	char only[SL_NAMES_MAX];               /* SLUICE_ONLY, '+'-separated program names */
	char skip[SL_NAMES_MAX];               /* SLUICE_SKIP */
	struct sl_redis redis;                 /* SLUICE_REDIS */
	struct sl_break breaks[SL_MAX_BREAKS]; /* SLUICE_BREAK, break: rules */
	uint32_t n_breaks;
	uint32_t reserved2;
};

/* Fill *p with defaults (no rules, log level error, exit on config error). */
void sl_policy_init(struct sl_policy *p);

/* The name of names[0..n) nearest to s[0..len) (within two edits, case
 * ignored), for a "did you mean" hint; NULL if none is near. */
const char *sl_policy_suggest(const char *const *names, size_t n, const char *s, size_t len);

/*
 * Parse one SLUICE_* variable (name without '=', value) into *p, appending
 * rules. Returns 0 on success; -1 on error with one line in err (never
 * truncated mid-character, always NUL-terminated when errlen > 0) and *p
 * unchanged. An unknown SLUICE_ name is an error (usually a typo).
 */
int sl_policy_parse_var(struct sl_policy *p, const char *name, const char *value, char *err,
			size_t errlen);

/* Rules in SLUICE_RULES's syntax (OP:SPEC;...) from text that is no
 * variable (`sluice set PID SPEC`): as sl_policy_parse_var, its errors
 * naming the text `label` ("OP:SPEC="recv:1MB": at column 9: ..."). */
int sl_rules_parse_text(struct sl_policy *p, const char *label, const char *text, char *err,
			size_t errlen);

/*
 * Parse every SLUICE_* entry of an environment array ("NAME=value" strings,
 * NULL-terminated, like the process environment). Entries not starting
 * with "SLUICE_" are ignored. Same return convention; stops at the first
 * error. SLUICE_CONFIG_ERROR is read first: on error *p is unchanged except
 * p->config_error, which then already reflects a valid SLUICE_CONFIG_ERROR.
 */
int sl_policy_parse_env(struct sl_policy *p, const char *const *envp, char *err, size_t errlen);

/*
 * Parse one SPEC for a given operation (as the launcher's --send SPEC does);
 * `var` names the variable for error messages ("SLUICE_SEND").
 */
int sl_rule_parse(struct sl_rule *r, enum sl_op op, const char *spec, const char *var, char *err,
		  size_t errlen);

/*
 * Canonical form of one rule: "OP:SPEC" with every option that differs from
 * its default, in a fixed order, numbers in the largest exact unit. Parsing
 * the SPEC part back gives an equal rule. Returns the length that the full
 * text needs (like snprintf); the output is always NUL-terminated.
 */
size_t sl_rule_format(const struct sl_rule *r, char *buf, size_t len);

/*
 * Canonical text of SLUICE_REDIS with the password masked ("***"): safe for
 * logs and stats. Same return convention as sl_rule_format.
 */
size_t sl_redis_format(const struct sl_redis *r, char *buf, size_t len);

/* Whether rule r applies to a socket of these SL_FAM_* and SL_TYPE_* bits
 * (its family= and type= lists), and to an address: family 4 or 6 (0: not
 * known, which fits only rules without to= or port=), port in host order,
 * addr in network byte order (4 or 16 bytes used). */
bool sl_rule_fits_socket(const struct sl_rule *r, unsigned family, unsigned type);
bool sl_rule_fits_addr(const struct sl_rule *r, unsigned family, uint16_t port,
		       const uint8_t addr[16]);

/* Whether SLUICE_ONLY / SLUICE_SKIP let the rules apply to a program whose
 * executable's file name is exe_base and whose argv[0] without directory is
 * `invoked` (either name may match). */
bool sl_policy_selects(const struct sl_policy *p, const char *exe_base, const char *invoked);

/* True if two rules mean the same (explicit_opts ignored). */
bool sl_rule_equal(const struct sl_rule *a, const struct sl_rule *b);

/* Names for messages and stats: "connect", "token", "delay", "process". */
const char *sl_op_name(enum sl_op op);
const char *sl_algo_name(enum sl_algo a);
const char *sl_action_name(enum sl_action a);
const char *sl_scope_name(enum sl_scope s);
const char *sl_on_error_name(enum sl_on_error e);
const char *sl_adapt_algo_name(enum sl_adapt_algo a);

/* The errno a refusal of this rule uses for the given call (resolves err == 0
 * to the operation's default: connect ECONNREFUSED, accept ECONNABORTED,
 * send/recv EAGAIN, conns: ECONNREFUSED on connect, ECONNABORTED on accept). */
int sl_rule_errno(const struct sl_rule *r, enum sl_op call);

/* errno name <-> value for the errno option ("ECONNREFUSED" -> 111).
 * Unknown names give 0, unknown values NULL. */
int sl_errno_from_name(const char *name, size_t len);
const char *sl_errno_name(int err);

/* One line of help per known variable, for --help and docs. */
struct sl_var_info {
	const char *name;
	const char *example;
	const char *help;
};
extern const struct sl_var_info sl_policy_vars[];
extern const size_t sl_policy_nvars;

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_POLICY_H */
