/* SPDX-License-Identifier: MIT */
/*
 * sluice.c - the launcher: `sluice [OPTIONS] [--] PROGRAM [ARG...]`.
 *
 * The launcher does nothing the environment could not do by hand; it only
 * makes it safe. It turns flags into the SLUICE_* variables that
 * libsluice.so reads, validates the whole resulting environment with the same
 * parser the library uses (so a typo fails here, with exit status 2, instead
 * of inside the program), puts the library in front of LD_PRELOAD, warns when
 * the program cannot be throttled at all, and execs it in place (same pid,
 * same signals, same exit status).
 *
 * How flags combine with the environment. Rules only ever add limits: every
 * rule that matches a call applies, so adding one never loosens another.
 *   --send SPEC   sets SLUICE_SEND=SPEC when SLUICE_SEND is unset; when it is
 *                 already set (inherited) to another value, "send:SPEC" is
 *                 appended to SLUICE_RULES instead, so both limits apply; the
 *                 inherited value itself is kept once. --send given twice is a
 *                 usage error naming both values (two limits of one kind go
 *                 in --rules). --connect, --accept, --recv and --conns work
 *                 alike.
 *   --rules RULES sets SLUICE_RULES, or appends ";RULES" to it.
 *   --stats PATH  sets SLUICE_STATS (a flag wins over the environment), made
 *                 absolute against the current directory.
 * To drop an inherited limit, unset it: `env -u SLUICE_SEND sluice ...`.
 *
 * Two modes. Preloaded (the default for dynamically linked programs): the
 * library goes into LD_PRELOAD and the program is exec'd in place.
 * Supervised (--supervise, and chosen by itself for a program its ELF file
 * shows to be static or Go, which LD_PRELOAD cannot reach): the launcher
 * stays, runs the program under a seccomp filter and throttles its calls
 * itself (supervise/). --preload forces the first; -v says which runs.
 *
 * Exit status: the program's own once exec succeeds; 2 for a usage, policy
 * or library-location error; 127 if the program is not found; 126 if it is
 * found but cannot be executed.
 */
#include "internal.h"
#include "policy.h"
#include "supervise.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_USAGE 2
#define EXIT_NOEXEC 126
#define EXIT_NOTFOUND 127
#define ENV_VALUE_MAX 8192 /* longest SLUICE_RULES or LD_PRELOAD we build */

extern char **environ;

enum {
	OPT_CONNECT = 256 + SL_OP_CONNECT,
	OPT_ACCEPT = 256 + SL_OP_ACCEPT,
	OPT_SEND = 256 + SL_OP_SEND,
	OPT_RECV = 256 + SL_OP_RECV,
	OPT_CONNS = 256 + SL_OP_CONNS,
	OPT_RULES = 512,
	OPT_BREAK,
	OPT_STATS,
	OPT_CHECK,
	OPT_VERSION,
	OPT_SUPERVISE,
	OPT_PRELOAD,
	OPT_TRAP_STDIO,
};

/* The variable each rate flag sets, indexed by enum sl_op. */
static const char *const op_var[SL_OP_COUNT] = {
	"SLUICE_CONNECT", "SLUICE_ACCEPT", "SLUICE_SEND", "SLUICE_RECV", "SLUICE_CONNS",
};

static const struct option long_opts[] = {
	{"connect", required_argument, NULL, OPT_CONNECT},
	{"accept", required_argument, NULL, OPT_ACCEPT},
	{"send", required_argument, NULL, OPT_SEND},
	{"recv", required_argument, NULL, OPT_RECV},
	{"conns", required_argument, NULL, OPT_CONNS},
	{"rules", required_argument, NULL, OPT_RULES},
	{"break", required_argument, NULL, OPT_BREAK},
	{"stats", required_argument, NULL, OPT_STATS},
	{"verbose", no_argument, NULL, 'v'},
	{"check", no_argument, NULL, OPT_CHECK},
	{"supervise", no_argument, NULL, OPT_SUPERVISE},
	{"preload", no_argument, NULL, OPT_PRELOAD},
	{"trap-stdio", no_argument, NULL, OPT_TRAP_STDIO},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, OPT_VERSION},
	{NULL, 0, NULL, 0},
};

/* The rule options, for --help (sluice(1) and docs/rules.md say more). */
static const struct sl_var_info rule_opts[] = {
	{"burst=AMOUNT", "--send 1MiB/s,burst=64KiB",
	 "token bucket: how much passes at once [5 ms of the rate]"},
	{"algo=token|leaky|fixed|sliding", "--connect 3/7s,algo=sliding",
	 "token or leaky bucket, fixed or sliding window [token]"},
	{"action=delay|reject|dry-run", "--accept 50/s,action=reject",
	 "wait, fail the call, or only count and log [delay]"},
	{"max-delay=DURATION", "--send 1MiB/s,max-delay=2s",
	 "refuse instead of waiting longer than this [none]"},
	{"errno=NAME", "--connect 10/s,action=reject,errno=ETIMEDOUT",
	 "the error of a refused call [per operation]"},
	{"per=process|thread|fd|peer", "--recv 10MiB/s,per=fd", "who shares one limit [process]"},
	{"to=CIDR[:PORT]", "--connect 10/s,to=10.0.0.0/8:443",
	 "only these addresses (destination, listener or peer) [any]"},
	{"port=N[-M]", "--send 1MiB/s,port=8000-8080", "only these remote ports [any]"},
	{"family=inet|inet6|unix[+...]", "--send 1MiB/s,family=unix",
	 "only these socket families [inet+inet6]"},
	{"type=stream|dgram[+...]", "--send 100/s,type=dgram",
	 "only these socket types [stream; stream+dgram for send, recv]"},
	{"nonblock=eagain|sleep", "--send 1MiB/s,per=fd,nonblock=sleep",
	 "non-blocking sockets: fail with EAGAIN and wake poll/epoll when ready, or sleep in the call [eagain]"},
	{"shared=NAME", "--send 10MiB/s,shared=uploads",
	 "one limit for every process of this user naming NAME (host-wide)"},
	{"redis=KEY", "--connect 5000/s,redis=api",
	 "one token bucket on the SLUICE_REDIS server for every process naming KEY"},
	{"on-error=local|open|closed", "--connect 5000/s,redis=api,on-error=closed",
	 "redis= while Redis does not answer: own recent share, pass all, refuse all [local]"},
	{"lease=AMOUNT", "--send 100MiB/s,redis=up,lease=4MiB",
	 "redis=: units taken from the server at once [max(burst, 10 ms of the rate)]"},
};

/* One entry of --help: its name (alone on its line if longer than 20), its
 * help wrapped at word boundaries to 79 columns from column 23, then an
 * example at column 25, or further left if it would not fit. */
static void usage_entry(FILE *out, const char *name, const char *help, const char *eg)
{
	enum { COL = 23, WIDTH = 79 };
	int col = strlen(name) > 20
			  ? fprintf(out, "  %s\n%*s", name, COL - 1, "") - (int)strlen(name) - 3
			  : fprintf(out, "  %-20s", name);
	while (*help != '\0') {
		size_t word = strcspn(help, " ");
		if (col > COL && col + 1 + (int)word > WIDTH)
			col = fprintf(out, "\n%*s", COL - 1, "") - 1;
		col += fprintf(out, " %.*s", (int)word, help);
		help += word;
		help += strspn(help, " ");
	}
	int eg_col = WIDTH - 5 - (int)strlen(eg);
	eg_col = eg_col > COL + 2 ? COL + 2 : eg_col < 4 ? 4 : eg_col;
	fprintf(out, "\n%*se.g. %s\n", eg_col, "", eg);
}

static void usage(FILE *out)
{
	char eg[ENV_VALUE_MAX];

	fputs("Usage: sluice [OPTION]... [--] PROGRAM [ARG]...\n"
	      "       sluice --check [OPTION]... [[--] PROGRAM]\n"
	      "       sluice stat [--json | --prometheus] [--watch[=SECONDS]] [PID]\n"
	      "       sluice stat --listen [ADDR:]PORT [--listen-any]\n"
	      "       sluice set PID|shared:NAME 'OP:SPEC'\n"
	      "       sluice stat [--json] shared:NAME\n"
	      "       sluice rm [--force] shared:NAME\n"
	      "Run PROGRAM with its socket calls delayed or refused by rate limits.\n"
	      "\n"
	      "  --connect SPEC  limit connect() calls         e.g. --connect 10/s\n"
	      "  --accept SPEC   limit accept() calls          e.g. --accept 5/s,action=reject\n"
	      "  --send SPEC     limit bytes or messages sent  e.g. --send 1MiB/s\n"
	      "  --recv SPEC     limit bytes or messages read  e.g. --recv 512KiB/s,per=fd\n"
	      "  --conns SPEC    limit open connections        e.g. --conns 4\n"
	      "  --rules RULES   OP:SPEC rules separated by ';'\n"
	      "                                  e.g. --rules 'connect:5/s;recv:1MiB/s'\n"
	      "  --break SPEC    circuit breaker on connect: fail fast while a peer fails\n"
	      "                                  e.g. --break errors=5,window=10s,open=5s\n"
	      "  --stats PATH    write counters to PATH when the program exits (%p: the pid)\n"
	      "                          e.g. --stats \"$XDG_RUNTIME_DIR/sluice-%p.json\"\n"
	      "  -v, --verbose   print the library and the rules in canonical form to stderr\n"
	      "                                  e.g. sluice -v --send 1MiB/s -- curl ...\n"
	      "      --check     validate and print the rules (and check PROGRAM), run nothing\n"
	      "                                  e.g. sluice --check --conns 4 -- ./server\n"
	      "      --supervise throttle through a seccomp supervisor instead of LD_PRELOAD\n"
	      "                  (chosen by itself for static and Go programs)\n"
	      "                           e.g. sluice --supervise --recv 1MiB/s -- ./static\n"
	      "      --preload   always use the preloaded library (never supervise)\n"
	      "      --trap-stdio  supervised mode: throttle sockets moved to fds 0-2 too\n"
	      "                  (inetd-style servers; each of their stdio calls is trapped)\n"
	      "                  e.g. sluice --supervise --trap-stdio --send 1MiB/s -- httpd\n"
	      "  -h, --help      print this help\n"
	      "      --version   print the version\n"
	      "\n"
	      "A flag sets the matching SLUICE_* variable; if that variable is already set to\n"
	      "another value, the flag adds an OP:SPEC rule to SLUICE_RULES instead. Every\n"
	      "matching rule applies. OP is connect, accept, send, recv or conns.\n"
	      "\n"
	      "SPEC is RATE (COUNT for conns), then ,OPTION=VALUE... (see sluice(1)):\n"
	      "  RATE = AMOUNT/[N]PERIOD, AMOUNT = N[B|KB|MB|GB|KiB|MiB|GiB] (no unit: calls,\n"
	      "  messages for send and recv), PERIOD = us|ms|s|min|h   e.g. 100/s 1MiB/s 3/7s\n",
	      out);
	for (size_t i = 0; i < sizeof rule_opts / sizeof rule_opts[0]; i++)
		usage_entry(out, rule_opts[i].name, rule_opts[i].help, rule_opts[i].example);
	fputs("\nStatic and Go programs make system calls without libc, so LD_PRELOAD cannot\n"
	      "reach them: for those sluice stays as a supervisor (seccomp user notification,\n"
	      "Linux 5.14+) and holds their connect, accept, send and recv calls itself.\n"
	      "Not yet supervised: redis= rules and shared= conns (refused).\n"
	      "sluice stat and sluice set work for both modes.\n"
	      "\nOn a non-blocking socket (O_NONBLOCK, MSG_DONTWAIT) a delay never sleeps in the\n"
	      "call unless nonblock=sleep: send/recv move what the limit allows now or fail\n"
	      "with EAGAIN, accept fails with EAGAIN, connect returns EINPROGRESS and starts\n"
	      "when its slot comes; poll, select and epoll report the fd when it is ready.\n"
	      "\n"
	      "Subcommands (this user's processes and limiters only):\n",
	      out);
	usage_entry(out, "stat [--json|--prometheus] [--watch[=S]] [PID]",
		    "show running processes' rules, counters and available units",
		    "sluice stat --watch=2 1234");
	usage_entry(out, "set PID|shared:NAME 'OP:SPEC'",
		    "change a running limit (rate or count, burst) in place",
		    "sluice set shared:uploads 'send:20MiB/s'");
	usage_entry(out, "stat [--json] shared:NAME",
		    "show a shared limiter: its rule now and as created, who uses it",
		    "sluice stat --json shared:uploads");
	usage_entry(out, "rm [--force] shared:NAME",
		    "remove a shared limiter (refused while processes use it)",
		    "sluice rm shared:uploads");
	fputs("  (sluice stat --help, sluice set --help and sluice rm --help say more; to\n"
	      "  run a program called stat, set or rm: sluice -- stat.)\n"
	      "\n"
	      "Environment (read by libsluice.so in PROGRAM, validated here first):\n",
	      out);
	for (size_t i = 0; i < sl_policy_nvars; i++) {
		snprintf(eg, sizeof(eg), "%s=\"%s\"", sl_policy_vars[i].name,
			 sl_policy_vars[i].example);
		usage_entry(out, sl_policy_vars[i].name, sl_policy_vars[i].help, eg);
	}
	usage_entry(out, "SLUICE_LIBRARY",
		    "libsluice.so to preload instead of the one found beside sluice (read by the "
		    "launcher only, not passed on)",
		    "SLUICE_LIBRARY=\"/opt/sluice/lib/sluice/libsluice.so\"");
	fputs("The password of SLUICE_REDIS is never printed (--check and -v show it as ***).\n"
	      "\n"
	      "Exit status: PROGRAM's; 2 on a usage or policy error; 127 if PROGRAM is not\n"
	      "found; 126 if it cannot be executed. stat, set and rm: 0 on success, 1 if the\n"
	      "process or limiter is not found, 2 on a usage error or a SPEC set cannot apply.\n",
	      out);
}

static int usage_error(void)
{
	fputs("Try 'sluice --help' for more information.\n", stderr);
	return EXIT_USAGE;
}

/* An option getopt does not know: named, with the nearest one's name. */
static int unknown_option(const char *arg)
{
	const char *names[sizeof(long_opts) / sizeof(long_opts[0])];
	size_t n = 0;
	for (const struct option *o = long_opts; o->name != NULL; o++)
		names[n++] = o->name;
	if (strncmp(arg, "--", 2) != 0) {
		fprintf(stderr, "sluice: unknown option '%s'\n", arg);
		return usage_error();
	}
	const char *name = arg + 2;
	size_t len = strcspn(name, "=");
	const char *near = sl_policy_suggest(names, n, name, len);
	if (near != NULL)
		fprintf(stderr, "sluice: unknown option '--%.*s' (did you mean --%s?)\n", (int)len,
			name, near);
	else
		fprintf(stderr, "sluice: unknown option '--%.*s'\n", (int)len, name);
	return usage_error();
}

/* An option that takes a value given none (at the end, or before "--" or
 * another option). */
static int missing_value(const char *arg)
{
	static const char *const example[][2] = {
		{"--connect", "10/s"},
		{"--accept", "5/s"},
		{"--send", "1MiB/s"},
		{"--recv", "1MiB/s"},
		{"--conns", "4"},
		{"--rules", "'connect:5/s;recv:1MiB/s'"},
		{"--break", "errors=5,window=10s,open=5s"},
		{"--stats", "\"$XDG_RUNTIME_DIR/s-%p.json\""},
	};
	size_t len = strcspn(arg, "=");
	const char *eg = NULL;
	for (size_t i = 0; i < sizeof(example) / sizeof(example[0]); i++)
		if (strlen(example[i][0]) == len && strncmp(arg, example[i][0], len) == 0)
			eg = example[i][1];
	if (eg != NULL)
		fprintf(stderr, "sluice: %.*s: missing value (e.g. %.*s %s)\n", (int)len, arg,
			(int)len, arg, eg);
	else
		fprintf(stderr, "sluice: %.*s: missing value\n", (int)len, arg);
	return usage_error();
}

/* A rate flag given twice: which one was meant is a guess, so neither is;
 * two limits of one kind go in --rules. */
static int repeated_flag(enum sl_op op, const char *first, const char *second)
{
	fprintf(stderr,
		"sluice: --%s given twice ('%s' and '%s'): give it once, or both "
		"limits as --rules '%s:%s;%s:%s'\n",
		sl_op_name(op), first, second, sl_op_name(op), first, sl_op_name(op), second);
	return usage_error();
}

/* Append "sep" + text to the variable `name` (or set it if unset). */
static int env_append(const char *name, const char *sep, const char *text)
{
	char buf[ENV_VALUE_MAX];
	const char *cur = getenv(name);
	int n = cur == NULL || cur[0] == '\0'
			? snprintf(buf, sizeof(buf), "%s", text)
			: snprintf(buf, sizeof(buf), "%s%s%s", cur, sep, text);
	if (n < 0 || (size_t)n >= sizeof(buf)) {
		fprintf(stderr, "sluice: %s would be longer than %zu bytes\n", name,
			sizeof(buf) - 1);
		return -1;
	}
	return setenv(name, buf, 1);
}

/* Apply one rate flag (--send SPEC and friends): validate SPEC on its own so
 * that error columns point into what the user typed, then set or extend the
 * environment as described at the top of this file. */
static int apply_rate_flag(enum sl_op op, const char *spec)
{
	char flag[16];
	char err[SL_ERR_MAX];
	char rule_text[ENV_VALUE_MAX];
	struct sl_rule r;

	snprintf(flag, sizeof(flag), "--%s", sl_op_name(op));
	if (sl_rule_parse(&r, op, spec, flag, err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice: %s\n", err);
		return -1;
	}
	const char *cur = getenv(op_var[op]);
	if (cur == NULL)
		return setenv(op_var[op], spec, 1);
	if (strcmp(cur, spec) == 0)
		return 0;
	if ((size_t)snprintf(rule_text, sizeof(rule_text), "%s:%s", sl_op_name(op), spec) >=
	    sizeof(rule_text))
		return -1;
	return env_append("SLUICE_RULES", ";", rule_text);
}

/* --break SPEC: SLUICE_BREAK, or "break:SPEC" appended to SLUICE_RULES when
 * SLUICE_BREAK is already set to another value (every breaker applies). */
static int apply_break_flag(const char *spec)
{
	char err[SL_ERR_MAX];
	char rule_text[ENV_VALUE_MAX];
	struct sl_break b;

	if (sl_break_parse(&b, spec, "--break", err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice: %s\n", err);
		return -1;
	}
	const char *cur = getenv("SLUICE_BREAK");
	if (cur == NULL)
		return setenv("SLUICE_BREAK", spec, 1);
	if (strcmp(cur, spec) == 0)
		return 0;
	if ((size_t)snprintf(rule_text, sizeof(rule_text), "break:%s", spec) >= sizeof(rule_text))
		return -1;
	return env_append("SLUICE_RULES", ";", rule_text);
}

static int apply_rules_flag(const char *rules)
{
	char err[SL_ERR_MAX];
	struct sl_policy p;

	sl_policy_init(&p);
	if (sl_policy_parse_var(&p, "SLUICE_RULES", rules, err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice: --rules: %s\n", err);
		return -1;
	}
	return env_append("SLUICE_RULES", ";", rules);
}

/* --stats PATH: a relative PATH is made absolute here, because the library
 * writes the file at exit, after the program may have changed directory. */
static int apply_stats_flag(const char *path)
{
	char cwd[PATH_MAX];
	char abs[2 * PATH_MAX];

	if (path[0] == '/' || path[0] == '\0')
		return setenv("SLUICE_STATS", path, 1);
	if (getcwd(cwd, sizeof(cwd)) == NULL) {
		perror("sluice: --stats: getcwd");
		return -1;
	}
	snprintf(abs, sizeof(abs), "%s/%s", cwd, path);
	return setenv("SLUICE_STATS", abs, 1);
}

/* The rules and settings the program will run with, one per line. */
static void print_policy(FILE *out, const char *prefix, const struct sl_policy *p, const char *lib)
{
	char text[SL_RULE_TEXT_MAX];

	fprintf(out, "%slibrary: %s\n", prefix, lib);
	for (uint32_t i = 0; i < p->n_rules; i++) {
		sl_rule_format(&p->rules[i], text, sizeof(text));
		fprintf(out, "%srule: %s\n", prefix, text);
	}
	for (uint32_t i = 0; i < p->n_breaks; i++) {
		sl_break_format(&p->breaks[i], text, sizeof(text));
		fprintf(out, "%srule: %s\n", prefix, text);
	}
	if (p->stats_file[0] != '\0')
		fprintf(out, "%sstats: %s\n", prefix, p->stats_file);
	if (p->redis.kind != SL_REDIS_NONE) { /* the password is masked */
		char redis[SL_REDIS_TEXT_MAX + SL_PATH_MAX];
		sl_redis_format(&p->redis, redis, sizeof(redis));
		fprintf(out, "%sredis: %s\n", prefix, redis);
	}
}

enum mode { MODE_AUTO, MODE_SUPERVISE, MODE_PRELOAD };

/* Resolve PROGRAM, choose the mode, warn if the program cannot be
 * throttled. Returns 0 or an exit status (127 not found, 126 not
 * executable); *supervise says which mode runs. */
static int check_program(const char *name, const char *lib, enum mode mode, bool verbose,
			 bool *supervise)
{
	char path[PATH_MAX];
	char why[512];
	int rc = sl__cli_resolve_program(name, path, sizeof(path));
	*supervise = mode == MODE_SUPERVISE;
	if (rc == EXIT_NOTFOUND) {
		fprintf(stderr, "sluice: %s: command not found\n", name);
		return rc;
	}
	if (rc != 0) {
		fprintf(stderr, "sluice: %s: cannot execute: %s\n", name,
			strchr(name, '/') != NULL ? "not an executable file" : "permission denied");
		return rc;
	}
	const char *blind = sl__cli_preload_blind(path);
	if (mode == MODE_AUTO && blind != NULL) {
		const char *no = sl_supervise_unavailable(why, sizeof(why));
		if (no == NULL) {
			*supervise = true;
			if (verbose)
				fprintf(stderr,
					"sluice: %s is %s: supervised mode (--preload to use "
					"the library anyway)\n",
					path, blind);
		} else {
			fprintf(stderr, "sluice: %s is %s, and %s\n", path, blind, no);
		}
	}
	if (*supervise) {
		if (mode == MODE_SUPERVISE && verbose)
			fprintf(stderr, "sluice: supervised mode (--supervise)\n");
		sl__cli_warn_supervised(stderr, path);
		return 0;
	}
	if (verbose)
		fprintf(stderr, "sluice: preload mode%s\n",
			mode == MODE_PRELOAD ? " (--preload)" : "");
	sl__cli_warn_unthrottlable(stderr, path, lib);
	return 0;
}

int main(int argc, char **argv)
{
	bool verbose = false, check = false, supervise = false, trap_stdio = false;
	enum mode mode = MODE_AUTO;
	int c;

	/* Subcommands (to run a program called stat, set or rm: sluice -- stat). */
	if (argc >= 2 && strcmp(argv[1], "stat") == 0)
		return sl__cli_stat(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "set") == 0)
		return sl__cli_set(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "rm") == 0)
		return sl__cli_rm(argc - 1, argv + 1);

	const char *given[SL_OP_COUNT] = {NULL};
	opterr = 0; /* its messages name argv[0] and suggest nothing: ours below */
	while ((c = getopt_long(argc, argv, "+:vh", long_opts, NULL)) != -1) {
		int rc = 0;
		/* "--send --", "--send --recv ...": the value is missing. */
		if (optarg != NULL && optarg[0] == '-' && optarg[1] == '-')
			return missing_value(strchr(argv[optind - 1], '=') != NULL
						     ? argv[optind - 1]
						     : argv[optind - 2]);
		switch (c) {
		case OPT_CONNECT:
		case OPT_ACCEPT:
		case OPT_SEND:
		case OPT_RECV:
		case OPT_CONNS:
			if (given[c - 256] != NULL)
				return repeated_flag((enum sl_op)(c - 256), given[c - 256], optarg);
			given[c - 256] = optarg;
			rc = apply_rate_flag((enum sl_op)(c - 256), optarg);
			break;
		case OPT_RULES:
			rc = apply_rules_flag(optarg);
			break;
		case OPT_BREAK:
			rc = apply_break_flag(optarg);
			break;
		case OPT_STATS:
			rc = apply_stats_flag(optarg);
			break;
		case 'v':
			verbose = true;
			break;
		case OPT_CHECK:
			check = true;
			break;
		case OPT_SUPERVISE:
		case OPT_PRELOAD:
			if (mode != MODE_AUTO &&
			    mode != (c == OPT_SUPERVISE ? MODE_SUPERVISE : MODE_PRELOAD)) {
				fputs("sluice: --supervise and --preload exclude each other\n",
				      stderr);
				return usage_error();
			}
			mode = c == OPT_SUPERVISE ? MODE_SUPERVISE : MODE_PRELOAD;
			break;
		case OPT_TRAP_STDIO:
			trap_stdio = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case OPT_VERSION:
			printf("sluice %s\n", SL_VERSION);
			return 0;
		case ':':
			return missing_value(argv[optind - 1]);
		default:
			return unknown_option(argv[optind - 1]);
		}
		if (rc != 0)
			return EXIT_USAGE;
	}
	char **prog = argv + optind;
	if (prog[0] == NULL && !check) {
		fputs("sluice: no PROGRAM given\n", stderr);
		return usage_error();
	}

	/* SLUICE_LIBRARY is the launcher's alone: the library would reject it
	 * as an unknown SLUICE_ variable. */
	char override[PATH_MAX] = "";
	const char *ov = getenv("SLUICE_LIBRARY");
	if (ov != NULL)
		snprintf(override, sizeof(override), "%s", ov);
	unsetenv("SLUICE_LIBRARY");

	char err[SL_ERR_MAX];
	struct sl_policy policy;
	sl_policy_init(&policy);
	if (sl_policy_parse_env(&policy, (const char *const *)environ, err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice: %s\n", err);
		return EXIT_USAGE;
	}

	char lib[PATH_MAX];
	if (sl__cli_find_library(override, lib, sizeof(lib), err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice: %s\n", err);
		return EXIT_USAGE;
	}
	if (check)
		print_policy(stdout, "", &policy, lib);
	else if (verbose)
		print_policy(stderr, "sluice: ", &policy, lib);
	if (policy.n_rules == 0)
		fputs("sluice: warning: no rules given: nothing will be limited\n", stderr);

	if (prog[0] != NULL) {
		int rc = check_program(prog[0], lib, mode, verbose || check, &supervise);
		if (rc != 0 || check)
			return rc;
	} else {
		return 0;
	}
	if (supervise) {
		fflush(NULL);
		const struct sl_supervise_opts o = {.verbose = verbose, .trap_stdio = trap_stdio};
		return sl_supervise_run(prog, &policy, &o);
	}

	char preload[ENV_VALUE_MAX];
	if (sl__cli_preload_join(getenv("LD_PRELOAD"), lib, preload, sizeof(preload)) != 0) {
		fputs("sluice: LD_PRELOAD is too long\n", stderr);
		return EXIT_USAGE;
	}
	if (setenv("LD_PRELOAD", preload, 1) != 0) {
		perror("sluice: setenv");
		return EXIT_USAGE;
	}
	if (verbose)
		fprintf(stderr, "sluice: LD_PRELOAD=%s\n", preload);

	fflush(NULL);
	execvp(prog[0], prog);
	int e = errno;
	fprintf(stderr, "sluice: %s: %s\n", prog[0], strerror(e));
	return e == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
}
