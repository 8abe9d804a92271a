/* SPDX-License-Identifier: MIT */
/*
 * test_supervise.c - the supervisor's pure parts: the seccomp filter (run
 * here by a small classic-BPF interpreter over crafted seccomp_data), rule
 * matching, and admission over core/ with exact instants (the clock is an
 * argument: every wait below is exact).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "test_core.h"
#include "test_policy.h"

#include "../engine/match.h"
#include "../supervise/admit.h"
#include "../supervise/filter.h"
#include "../supervise/state.h"

/* ---- a classic BPF interpreter for the instructions the filter uses ---- */

static uint32_t bpf_run(const struct sock_filter *ins, int n, const struct seccomp_data *d)
{
	uint32_t a = 0;
	for (int pc = 0; pc < n; pc++) {
		const struct sock_filter *f = &ins[pc];
		switch (f->code) {
		case BPF_LD | BPF_W | BPF_ABS:
			assert_true(f->k + 4 <= sizeof(*d));
			memcpy(&a, (const char *)d + f->k, 4);
			break;
		case BPF_JMP | BPF_JEQ | BPF_K:
			pc += a == f->k ? f->jt : f->jf;
			break;
		case BPF_JMP | BPF_JGE | BPF_K:
			pc += a >= f->k ? f->jt : f->jf;
			break;
		case BPF_RET | BPF_K:
			return f->k;
		default:
			fail_msg("unexpected BPF instruction %#x at %d", f->code, pc);
		}
	}
	fail_msg("the filter fell off its end");
	return 0;
}

/* The filter's answer to nr(a0, a1, a2) under policy p (with --trap-stdio
 * if stdio). */
static uint32_t verdict3(const struct sl_policy *p, bool stdio, uint32_t nr, uint64_t a0,
			 uint64_t a1, uint64_t a2)
{
	struct sl_sup_traps t;
	struct sock_filter ins[256];
	sl_sup_traps_of(p, &t);
	t.stdio = stdio;
	int n = sl_sup_filter_build(&t, ins, 256);
	assert_true(n > 0);
	struct seccomp_data d = {.nr = (int)nr, .arch = AUDIT_ARCH_X86_64, .args = {a0, a1, a2}};
	return bpf_run(ins, n, &d);
}

static uint32_t verdict(const struct sl_policy *p, uint32_t arch, uint32_t nr, uint64_t a0,
			uint64_t a2)
{
	struct sl_sup_traps t;
	struct sock_filter ins[256];
	sl_sup_traps_of(p, &t);
	int n = sl_sup_filter_build(&t, ins, 256);
	assert_true(n > 0);
	struct seccomp_data d = {.nr = (int)nr, .arch = arch, .args = {a0, 0, a2}};
	return bpf_run(ins, n, &d);
}

#define X86 AUDIT_ARCH_X86_64
#define NOTIF SECCOMP_RET_USER_NOTIF
#define ALLOW SECCOMP_RET_ALLOW
#define NOSYS (SECCOMP_RET_ERRNO | ENOSYS)

static void test_supervise_filter_send(void **state)
{
	(void)state;
	struct sl_policy p = policy_of("send:1MiB/s");
	assert_dec_equal(verdict(&p, X86, SYS_write, 1, 0), ALLOW); /* a file, stdout */
	assert_dec_equal(verdict(&p, X86, SYS_write, 511, 0), ALLOW);
	assert_dec_equal(verdict(&p, X86, SYS_write, 512, 0), NOTIF);         /* a placed socket */
	assert_dec_equal(verdict(&p, X86, SYS_write, 0xffffffffu, 0), NOTIF); /* fd -1 */
	assert_dec_equal(verdict(&p, X86, SYS_sendto, 900, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_sendmmsg, 900, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_sendfile, 512, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_read, 900, 0), ALLOW); /* no recv rule */
	assert_dec_equal(verdict(&p, X86, SYS_socket, 2, 0), NOTIF); /* placement */
	assert_dec_equal(verdict(&p, X86, SYS_accept4, 3, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_connect, 3, 0), ALLOW);  /* no connect rule */
	assert_dec_equal(verdict(&p, X86, SYS_splice, 3, 700), NOTIF); /* fd_out high */
	assert_dec_equal(verdict(&p, X86, SYS_splice, 700, 3), NOTIF); /* fd_in high */
	assert_dec_equal(verdict(&p, X86, SYS_splice, 3, 4), ALLOW);
	assert_dec_equal(verdict(&p, X86, SYS_getpid, 0, 0), ALLOW);
}

/* A placed socket moved (dup, dup2, dup3, fcntl(F_DUPFD*) of fd >= 512) is
 * seen; --trap-stdio traps the sends and receives of fds 0-2 too. */
static void test_supervise_filter_moves(void **state)
{
	(void)state;
	struct sl_policy p = policy_of("send:1MiB/s;recv:1MiB/s");
	assert_dec_equal(verdict3(&p, false, SYS_dup2, 600, 1, 0), NOTIF);
	assert_dec_equal(verdict3(&p, false, SYS_dup3, 600, 0, 0), NOTIF);
	assert_dec_equal(verdict3(&p, false, SYS_dup, 600, 0, 0), NOTIF);
	assert_dec_equal(verdict3(&p, false, SYS_dup2, 5, 1, 0), ALLOW); /* not ours */
	assert_dec_equal(verdict3(&p, false, SYS_fcntl, 600, F_DUPFD, 0), NOTIF);
	assert_dec_equal(verdict3(&p, false, SYS_fcntl, 600, F_DUPFD_CLOEXEC, 3), NOTIF);
	assert_dec_equal(verdict3(&p, false, SYS_fcntl, 600, F_GETFL, 0), ALLOW);
	assert_dec_equal(verdict3(&p, false, SYS_fcntl, 5, F_DUPFD, 0), ALLOW);
	assert_dec_equal(verdict3(&p, false, SYS_write, 1, 0, 0), ALLOW);
	assert_dec_equal(verdict3(&p, false, SYS_read, 0, 0, 0), ALLOW);
	for (uint64_t fd = 0; fd < 3; fd++) {
		assert_dec_equal(verdict3(&p, true, SYS_write, fd, 0, 0), NOTIF);
		assert_dec_equal(verdict3(&p, true, SYS_read, fd, 0, 0), NOTIF);
		assert_dec_equal(verdict3(&p, true, SYS_sendfile, fd, 9, 0), NOTIF);
	}
	assert_dec_equal(verdict3(&p, true, SYS_write, 3, 0, 0), ALLOW);
	assert_dec_equal(verdict3(&p, true, SYS_write, 511, 0, 0), ALLOW);
	assert_dec_equal(verdict3(&p, true, SYS_write, 512, 0, 0), NOTIF);
	assert_dec_equal(verdict3(&p, true, SYS_writev, 0xffffffffu, 0, 0), NOTIF); /* fd -1 */
	assert_dec_equal(verdict3(&p, true, SYS_dup2, 600, 1, 0), NOTIF);
	assert_dec_equal(verdict3(&p, true, SYS_openat, 1, 0, 0), ALLOW);
	/* No byte rule: no socket is placed, none is moved. */
	p = policy_of("connect:10/s");
	assert_dec_equal(verdict3(&p, false, SYS_dup2, 600, 1, 0), ALLOW);
}

static void test_supervise_filter_refusals(void **state)
{
	(void)state;
	struct sl_policy p = policy_of("connect:10/s");
	assert_dec_equal(verdict(&p, X86, SYS_io_uring_setup, 4, 0), NOSYS);
	assert_dec_equal(verdict(&p, AUDIT_ARCH_I386, 20, 0, 0), NOSYS); /* int $0x80 getpid */
	assert_dec_equal(verdict(&p, X86, 0x40000000u | SYS_write, 1, 0), NOSYS); /* x32 */
	assert_dec_equal(verdict(&p, X86, SYS_connect, 3, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_socket, 2, 0),
			 ALLOW); /* no byte rule: no placement */
	assert_dec_equal(verdict(&p, X86, SYS_accept, 3, 0), ALLOW);
	assert_dec_equal(verdict(&p, X86, SYS_write, 900, 0), ALLOW);
	p = policy_of("conns:4;recv:1MiB/s");
	assert_dec_equal(verdict(&p, X86, SYS_connect, 3, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_accept, 3, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_recvmsg, 600, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_preadv2, 600, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_write, 600, 0), ALLOW);
}

/* conns:adaptive alone: accept and connect are trapped (connect's handler
 * takes no slot of the adaptive rules: a client's turns are its requests),
 * the sends and receives of fds >= 512 too (where the accepted connections
 * and the client's stream sockets are placed: their turns), never a
 * file's; socket() of a stream (placed high), not of a datagram socket; no
 * move of a high fd. */
static void test_supervise_filter_turns(void **state)
{
	(void)state;
	struct sl_policy p = policy_of("connect:10/s;conns:adaptive");
	struct sl_sup_traps t;
	sl_sup_traps_of(&p, &t);
	assert_dec_equal(t.turns, 0x2);
	assert_false(t.place);
	assert_dec_equal(verdict(&p, X86, SYS_accept4, 3, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_connect, 3, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_socket, 2, 0), ALLOW);
	assert_dec_equal(verdict3(&p, false, SYS_socket, 2, SOCK_STREAM, 0), NOTIF);
	assert_dec_equal(verdict3(&p, false, SYS_socket, 2, SOCK_DGRAM, 0), ALLOW);
	assert_dec_equal(verdict(&p, X86, SYS_write, 1, 0), ALLOW);
	assert_dec_equal(verdict(&p, X86, SYS_read, 511, 0), ALLOW);
	assert_dec_equal(verdict(&p, X86, SYS_write, 600, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_recvfrom, 600, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_sendfile, 600, 0), NOTIF);
	assert_dec_equal(verdict(&p, X86, SYS_dup2, 600, 0), ALLOW);
	p = policy_of("conns:100");
	sl_sup_traps_of(&p, &t);
	assert_dec_equal(t.turns, 0);
	assert_dec_equal(verdict(&p, X86, SYS_write, 600, 0), ALLOW);
}

/* ---- matching and admission ------------------------------------------- */

struct fixture {
	struct sl_sup s;
	struct sl_sup_proc proc;
	struct sl_sup_thread th;
	struct sl_sup_call c;
};

static struct fixture *fixture(const char *rules)
{
	struct fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->s.policy = policy_of(rules);
	f->proc.tgid = 100;
	f->proc.fddir = -1;
	f->th.tid = 100;
	f->th.pidfd = -1;
	f->th.proc = &f->proc;
	f->c.th = &f->th;
	f->c.kind = SL_SUP_SEND;
	f->c.dup = -1;
	return f;
}

static void fixture_free(struct fixture *f)
{
	free(f->th.lims);
	sl_sup_proc_free_rows(&f->proc);
	free(f->s.peers);
	free(f);
}

static void test_supervise_match(void **state)
{
	(void)state;
	struct fixture *f = fixture("send:1MiB/s,to=10.0.0.0/8;send:2MiB/s,port=443;connect:5/s;"
				    "recv:1MiB/s,family=unix");
	struct sl_addr in10 = {.family = 4, .port = 80, .addr = {10, 1, 2, 3}};
	struct sl_addr in11 = {.family = 4, .port = 443, .addr = {11, 0, 0, 1}};
	assert_dec_equal(sl_sup_match(&f->s, SL_OP_SEND, SL_FAM_INET, SL_TYPE_STREAM, &in10), 0x1);
	assert_dec_equal(sl_sup_match(&f->s, SL_OP_SEND, SL_FAM_INET, SL_TYPE_STREAM, &in11), 0x2);
	assert_dec_equal(sl_sup_match(&f->s, SL_OP_SEND, SL_FAM_INET, SL_TYPE_STREAM, NULL), 0);
	assert_dec_equal(sl_sup_match(&f->s, SL_OP_CONNECT, SL_FAM_INET6, SL_TYPE_STREAM, NULL),
			 0x4);
	assert_dec_equal(sl_sup_match(&f->s, SL_OP_CONNECT, SL_FAM_INET, SL_TYPE_DGRAM, NULL), 0);
	assert_dec_equal(sl_sup_match(&f->s, SL_OP_RECV, SL_FAM_INET, SL_TYPE_STREAM, NULL), 0);
	assert_dec_equal(sl_sup_match(&f->s, SL_OP_RECV, SL_FAM_UNIX, SL_TYPE_STREAM, NULL), 0x8);
	assert_true(sl_sup_may_match(&f->s, SL_OP_SEND, SL_FAM_INET, SL_TYPE_DGRAM));
	assert_false(sl_sup_may_match(&f->s, SL_OP_RECV, SL_FAM_INET, SL_TYPE_STREAM));
	assert_true(sl_match_needs_addr(&f->s.policy, SL_OP_SEND)); /* to=, port= */
	assert_false(sl_match_needs_addr(&f->s.policy, SL_OP_RECV));
	assert_false(sl_match_needs_addr(&f->s.policy, SL_OP_CONNECT));
	assert_dec_equal(sl_addr_fam_bit(AF_INET6), SL_FAM_INET6);
	assert_dec_equal(sl_addr_type_bit(SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC),
			 SL_TYPE_STREAM);
	fixture_free(f);
}

#define T0 (1000 * SEC)

static enum sl_sup_verdict admit(struct fixture *f, uint64_t bytes, uint64_t at, uint64_t *wait,
				 int *err)
{
	*wait = 12345;
	*err = 0;
	return sl_sup_admit(&f->s, &f->c, bytes, 1, at, wait, err);
}

/* 1000 B/s, burst 100 B: 1 ms per byte. */
static void test_supervise_admit_token(void **state)
{
	(void)state;
	struct fixture *f = fixture("send:1000B/s,burst=100B");
	uint64_t w;
	int e;
	f->c.rules = 0x1;
	f->c.start_ns = T0;
	assert_dec_equal(sl_sup_piece_cap(&f->s, &f->c, T0), 100);
	assert_dec_equal(admit(f, 100, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 0);
	assert_dec_equal(admit(f, 100, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 100 * MS);
	/* Only 30 of that piece were sent: 70 come back, the next 70 wait
	 * only as long as the 30 did. */
	sl_sup_refund(&f->s, &f->c, 70);
	assert_false(f->c.granted);
	assert_dec_equal(admit(f, 70, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 100 * MS);
	assert_dec_equal(admit(f, 1, T0 + 100 * MS, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 1 * MS);
	/* A whole grant given back (a cancelled call). */
	sl_sup_refund(&f->s, &f->c, UINT64_MAX);
	assert_dec_equal(admit(f, 1, T0 + 100 * MS, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 1 * MS);
	fixture_free(f);
}

static void test_supervise_admit_actions(void **state)
{
	(void)state;
	uint64_t w;
	int e;
	/* reject: police, the rule's errno (send: EAGAIN by default). */
	struct fixture *f = fixture("send:1000B/s,burst=100B,action=reject");
	f->c.rules = 0x1;
	f->c.start_ns = T0;
	assert_dec_equal(admit(f, 100, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(admit(f, 1, T0, &w, &e), SL_SUP_REFUSE);
	assert_dec_equal(e, EAGAIN);
	fixture_free(f);
	/* max-delay 50 ms, counted from the call's start. */
	f = fixture("send:1000B/s,burst=100B,max-delay=50ms,errno=ETIMEDOUT");
	f->c.rules = 0x1;
	f->c.start_ns = T0;
	assert_dec_equal(admit(f, 100, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(admit(f, 40, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 40 * MS);
	assert_dec_equal(admit(f, 20, T0 + 10 * MS, &w, &e), SL_SUP_REFUSE);
	assert_dec_equal(e, ETIMEDOUT);
	fixture_free(f);
	/* A sliding window cannot reserve: RETRY with its hint; dry-run
	 * always goes. Messages count calls, bytes do not. */
	f = fixture("send:2/s,algo=sliding;send:1/s,action=dry-run");
	f->c.rules = 0x3;
	f->c.start_ns = T0;
	assert_dec_equal(admit(f, 5000, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 0);
	assert_dec_equal(admit(f, 5000, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(admit(f, 5000, T0, &w, &e), SL_SUP_RETRY);
	/* 2 in the first window: the estimate drops below 2 half-way into the
	 * next one. */
	assert_true(w > SEC && w <= 3 * SEC / 2);
	assert_dec_equal(sl_sup_piece_cap(&f->s, &f->c, T0), SL_SUP_PIECE_MAX); /* no byte rule */
	fixture_free(f);
}

static void test_supervise_admit_scopes(void **state)
{
	(void)state;
	uint64_t w;
	int e;
	struct fixture *f = fixture("send:1000B/s,burst=100B,per=fd");
	f->c.rules = 0x1;
	f->c.start_ns = T0;
	f->c.req.data.args[0] = 512;
	assert_dec_equal(admit(f, 100, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(admit(f, 100, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 100 * MS);
	f->c.req.data.args[0] = 513; /* another socket: its own bucket */
	assert_dec_equal(admit(f, 100, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 0);
	sl_sup_fd_reset(&f->proc, 512); /* a new socket took 512: a full bucket */
	f->c.req.data.args[0] = 512;
	assert_dec_equal(admit(f, 100, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 0);
	fixture_free(f);
	f = fixture("send:1000B/s,burst=100B,per=peer");
	f->c.rules = 0x1;
	f->c.start_ns = T0;
	f->c.peer = (struct sl_addr){.family = 4, .port = 1, .addr = {127, 0, 0, 1}};
	assert_dec_equal(admit(f, 100, T0, &w, &e), SL_SUP_GO);
	f->c.peer.port = 2; /* the same host: the same bucket */
	assert_dec_equal(admit(f, 100, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 100 * MS);
	f->c.peer.addr[3] = 2;
	assert_dec_equal(admit(f, 100, T0, &w, &e), SL_SUP_GO);
	assert_dec_equal(w, 0);
	fixture_free(f);
}

static void test_supervise_selects(void **state)
{
	(void)state;
	struct sl_policy p = policy_of("send:1MiB/s");
	assert_true(sl_policy_selects(&p, "netprog", "netprog"));
	char err[SL_ERR_MAX];
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_ONLY", "curl+wget", err, sizeof(err)), 0);
	assert_true(sl_policy_selects(&p, "busybox", "wget")); /* argv[0] of a multi-call binary */
	assert_true(sl_policy_selects(&p, "curl", "x"));
	assert_false(sl_policy_selects(&p, "busybox", "sh"));
	assert_false(sl_policy_selects(&p, "cur", "wge"));
	p = policy_of("send:1MiB/s");
	assert_dec_equal(sl_policy_parse_var(&p, "SLUICE_SKIP", "sh", err, sizeof(err)), 0);
	assert_false(sl_policy_selects(&p, "dash", "sh"));
	assert_true(sl_policy_selects(&p, "netprog", "netprog"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_supervise_filter_send),
		cmocka_unit_test(test_supervise_filter_moves),
		cmocka_unit_test(test_supervise_filter_refusals),
		cmocka_unit_test(test_supervise_filter_turns),
		cmocka_unit_test(test_supervise_match),
		cmocka_unit_test(test_supervise_admit_token),
		cmocka_unit_test(test_supervise_admit_actions),
		cmocka_unit_test(test_supervise_admit_scopes),
		cmocka_unit_test(test_supervise_selects),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
