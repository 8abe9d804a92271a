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
 *                 already set (inherited, or by an earlier --send) to another
 *                 value, "send:SPEC" is appended to SLUICE_RULES instead, so
 *                 both limits apply. The same SPEC twice is kept once.
 *                 --connect, --accept, --recv and --conns work alike.
 *   --rules RULES sets SLUICE_RULES, or appends ";RULES" to it.
 *   --stats PATH  sets SLUICE_STATS (a flag wins over the environment), made
 *                 absolute against the current directory.
 * To drop an inherited limit, unset it: `env -u SLUICE_SEND sluice ...`.
 *
 * Exit status: the program's own once exec succeeds; 2 for a usage, policy
 * or library-location error; 127 if the program is not found; 126 if it is
 * found but cannot be executed.
 */
#include "internal.h"
#include "policy.h"

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
	OPT_STATS,
	OPT_CHECK,
	OPT_VERSION,
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
	{"stats", required_argument, NULL, OPT_STATS},
	{"verbose", no_argument, NULL, 'v'},
	{"check", no_argument, NULL, OPT_CHECK},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, OPT_VERSION},
	{NULL, 0, NULL, 0},
};

static void usage(FILE *out)
{
	fputs("Usage: sluice [OPTION]... [--] PROGRAM [ARG]...\n"
	      "       sluice --check [OPTION]... [[--] PROGRAM]\n"
	      "       sluice stat [--json | --prometheus] [--watch[=SECONDS]] [PID]\n"
	      "       sluice set PID|shared:NAME 'OP:SPEC'\n"
	      "Run PROGRAM with its socket calls delayed or refused by rate limits.\n"
	      "\n"
	      "  --connect SPEC  limit connect() calls         e.g. --connect 10/s\n"
	      "  --accept SPEC   limit accept() calls          e.g. --accept 5/s,action=reject\n"
	      "  --send SPEC     limit bytes or messages sent  e.g. --send 1MiB/s\n"
	      "  --recv SPEC     limit bytes or messages read  e.g. --recv 512KiB/s,burst=64KiB\n"
	      "  --conns SPEC    limit open connections        e.g. --conns 4\n"
	      "  --rules RULES   OP:SPEC rules separated by ';' e.g. --rules 'connect:5/s;recv:1MiB/s'\n"
	      "  --stats PATH    write counters to PATH when the program exits\n"
	      "  -v, --verbose   print the rules in canonical form and the library to stderr\n"
	      "      --check     validate and print the rules (and check PROGRAM), run nothing\n"
	      "  -h, --help      print this help\n"
	      "      --version   print the version\n"
	      "\n"
	      "A flag sets the matching SLUICE_* variable; if that variable is already set to\n"
	      "another value, the flag adds an OP:SPEC rule to SLUICE_RULES instead. Every\n"
	      "matching rule applies. SPEC: RATE or COUNT, then ,OPTION=VALUE... (see sluice(1)).\n"
	      "\n"
	      "Environment (read by libsluice.so in PROGRAM, validated here first):\n",
	      out);
	for (size_t i = 0; i < sl_policy_nvars; i++)
		fprintf(out, "  %-20s %s\n  %-20s   e.g. %s=\"%s\"\n", sl_policy_vars[i].name,
			sl_policy_vars[i].help, "", sl_policy_vars[i].name,
			sl_policy_vars[i].example);
	fputs("  SLUICE_LIBRARY       libsluice.so to preload instead of the one found beside\n"
	      "                       sluice (read by the launcher only, not passed on)\n"
	      "                         e.g. SLUICE_LIBRARY=\"/opt/sluice/lib/sluice/libsluice.so\"\n"
	      "\n"
	      "Exit status: PROGRAM's; 2 on a usage or policy error; 127 if PROGRAM is not\n"
	      "found; 126 if it cannot be executed.\n",
	      out);
}

static int usage_error(void)
{
	fputs("Try 'sluice --help' for more information.\n", stderr);
	return EXIT_USAGE;
}

/* Append "sep" + text to the variable `name` (or set it if unset). */
static int env_append(const char *name, const char *sep, const char *text)
{
	char buf[ENV_VALUE_MAX];
	const char *cur = getenv(name);
	int n = cur == NULL || cur[0] == '\0' ? snprintf(buf, sizeof(buf), "%s", text)
					      : snprintf(buf, sizeof(buf), "%s%s%s", cur, sep, text);
	if (n < 0 || (size_t)n >= sizeof(buf)) {
		fprintf(stderr, "sluice: %s would be longer than %zu bytes\n", name, sizeof(buf) - 1);
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
static void print_policy(FILE *out, const char *prefix, const struct sl_policy *p,
			 const char *lib)
{
	char text[SL_RULE_TEXT_MAX];

	fprintf(out, "%slibrary: %s\n", prefix, lib);
	for (uint32_t i = 0; i < p->n_rules; i++) {
		sl_rule_format(&p->rules[i], text, sizeof(text));
		fprintf(out, "%srule: %s\n", prefix, text);
	}
	if (p->stats_file[0] != '\0')
		fprintf(out, "%sstats: %s\n", prefix, p->stats_file);
	if (p->redis.kind != SL_REDIS_NONE) { /* the password is masked */
		char redis[SL_PATH_MAX + SL_REDIS_HOST_MAX + SL_REDIS_CRED_MAX + 32];
		sl_redis_format(&p->redis, redis, sizeof(redis));
		fprintf(out, "%sredis: %s\n", prefix, redis);
	}
}

/* Resolve PROGRAM, warn if it cannot be throttled. Returns 0 or an exit
 * status (127 not found, 126 not executable). */
static int check_program(const char *name, const char *lib)
{
	char path[PATH_MAX];
	int rc = sl__cli_resolve_program(name, path, sizeof(path));
	if (rc == EXIT_NOTFOUND)
		fprintf(stderr, "sluice: %s: command not found\n", name);
	else if (rc != 0)
		fprintf(stderr, "sluice: %s: cannot execute: %s\n", name,
			strchr(name, '/') != NULL ? "not an executable file" : "permission denied");
	else
		sl__cli_warn_unthrottlable(stderr, path, lib);
	return rc;
}

int main(int argc, char **argv)
{
	bool verbose = false, check = false;
	int c;

	/* Subcommands (to run a program called stat or set: sluice -- stat). */
	if (argc >= 2 && strcmp(argv[1], "stat") == 0)
		return sl__cli_stat(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "set") == 0)
		return sl__cli_set(argc - 1, argv + 1);

	while ((c = getopt_long(argc, argv, "+vh", long_opts, NULL)) != -1) {
		int rc = 0;
		switch (c) {
		case OPT_CONNECT:
		case OPT_ACCEPT:
		case OPT_SEND:
		case OPT_RECV:
		case OPT_CONNS:
			rc = apply_rate_flag((enum sl_op)(c - 256), optarg);
			break;
		case OPT_RULES:
			rc = apply_rules_flag(optarg);
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
		case 'h':
			usage(stdout);
			return 0;
		case OPT_VERSION:
			printf("sluice %s\n", SL_VERSION);
			return 0;
		default:
			return usage_error();
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
		int rc = check_program(prog[0], lib);
		if (rc != 0 || check)
			return rc;
	} else {
		return 0;
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
