/* SPDX-License-Identifier: MIT */
/*
 * filter.c - the classic BPF program that decides which system calls reach
 * the supervisor.
 *
 *   foreign architecture (i386 int $0x80)    ENOSYS: refused, never trapped
 *   x32 system call numbers (bit 30)          ENOSYS: refused
 *   io_uring_setup                            ENOSYS: programs fall back to
 *                                             plain system calls
 *   socket, accept, accept4                   trapped when sockets are
 *                                             placed (send or recv rules)
 *                                             or accept/conns rules exist;
 *                                             with conns:adaptive rules alone
 *                                             socket(SOCK_STREAM) only (a
 *                                             client's turns, client.c)
 *   connect                                   trapped with connect/conns rules
 *   read, readv, recvfrom, recvmsg,           trapped only for fd >= 512
 *   recvmmsg, preadv2 (recv rules);           (the sockets the supervisor
 *   write, writev, sendto, sendmsg,           placed there): file and pipe
 *   sendmmsg, pwritev2, sendfile (send;       I/O is never trapped
 *   both with conns:adaptive rules or
 *   system protection: turns)
 *   splice                                    trapped when either fd >= 512
 *   the send and receive calls on fds 0-2     trapped too with --trap-stdio
 *   dup, dup2, dup3, fcntl(F_DUPFD*)          trapped for fd >= 512 when
 *                                             sockets are placed (a socket
 *                                             moved below 512 is warned of)
 *   everything else                           allowed
 *
 * The fd test reads the low 32 bits of the first argument, as the kernel
 * does (an int fd); a negative fd is trapped too and answered by the kernel
 * (the supervisor lets it continue).
 */
#include "filter.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#define X32_BIT 0x40000000u
#define OFF_NR offsetof(struct seccomp_data, nr)
#define OFF_ARCH offsetof(struct seccomp_data, arch)
#define OFF_ARG(i) (offsetof(struct seccomp_data, args) + 8 * (i)) /* low half (LE) */

void sl_sup_traps_of(const struct sl_policy *p, struct sl_sup_traps *t)
{
	uint32_t ops = 0; /* bit 1 << op of each rule's op */
	t->turns = 0;
	t->gates = 0;
	for (uint32_t i = 0; i < p->n_rules; i++) {
		const struct sl_rule *r = &p->rules[i];
		ops |= 1u << r->op;
		if (r->op == SL_OP_CONNS && r->adaptive)
			t->turns |= (uint32_t)1 << i;
		if ((r->op == SL_OP_CONNS || r->op == SL_OP_ACCEPT) && sl_rule_system(r))
			t->gates |= (uint32_t)1 << i;
	}
	const uint32_t conns = 1u << SL_OP_CONNS;
	t->connect = ops & ((1u << SL_OP_CONNECT) | conns);
	t->accept = ops & ((1u << SL_OP_ACCEPT) | conns);
	t->send = ops & (1u << SL_OP_SEND);
	t->recv = ops & (1u << SL_OP_RECV);
	t->place = t->send || t->recv;
}

struct prog {
	struct sock_filter *ins;
	int n, max;
};

static void emit(struct prog *p, struct sock_filter f)
{
	if (p->n < p->max)
		p->ins[p->n] = f;
	p->n++;
}

/* The instructions, as they read. */
#define JEQ(k, jt, jf) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (k), (jt), (jf))
#define JGE(k, jt, jf) BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, (k), (jt), (jf))
#define LD(off) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off))
#define RET(v) BPF_STMT(BPF_RET | BPF_K, (v))
#define NOTIF RET(SECCOMP_RET_USER_NOTIF)
#define ALLOW RET(SECCOMP_RET_ALLOW)

/* Emit a test of system call nr: `if (nr == NR) { body }`, the body's n
 * instructions ending in returns (the JEQ skips them when nr differs). */
static void emit_test(struct prog *p, unsigned nr, const struct sock_filter *body, unsigned n)
{
	emit(p, (struct sock_filter)JEQ(nr, 0, n));
	for (unsigned i = 0; i < n; i++)
		emit(p, body[i]);
}
#define TEST(p, nr, ...)                                                                           \
	do {                                                                                       \
		const struct sock_filter body_[] = {__VA_ARGS__};                                  \
		emit_test(p, nr, body_, sizeof(body_) / sizeof(body_[0]));                         \
	} while (0)

/* if (nr == NR) return NOTIF */
static void trap(struct prog *p, unsigned nr)
{
	TEST(p, nr, NOTIF);
}

/* if (nr == NR) return arg(i) >= base || arg(i) < low ? NOTIF : ALLOW */
static void trap_fd(struct prog *p, unsigned nr, unsigned arg, unsigned low)
{
	if (low != 0)
		TEST(p, nr, LD(OFF_ARG(arg)), JGE(SL_SUP_FD_BASE, 1, 0), JGE(low, 1, 0), NOTIF,
		     ALLOW);
	else
		TEST(p, nr, LD(OFF_ARG(arg)), JGE(SL_SUP_FD_BASE, 0, 1), NOTIF, ALLOW);
}

/* socket(domain, SOCK_STREAM with or without SOCK_NONBLOCK, SOCK_CLOEXEC,
 * ...): NOTIF (by value: the flags are the only bits the kernel accepts
 * beside the type). */
static void trap_socket_stream(struct prog *p)
{
	TEST(p, __NR_socket, LD(OFF_ARG(1)), JEQ(SOCK_STREAM, 4, 0),
	     JEQ(SOCK_STREAM | SOCK_NONBLOCK, 3, 0), JEQ(SOCK_STREAM | SOCK_CLOEXEC, 2, 0),
	     JEQ(SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 1, 0), ALLOW, NOTIF);
}

/* fcntl(fd, F_DUPFD or F_DUPFD_CLOEXEC, ...) of a high fd: NOTIF. */
static void trap_fcntl_dup(struct prog *p)
{
	TEST(p, __NR_fcntl, LD(OFF_ARG(0)), JGE(SL_SUP_FD_BASE, 0, 3), LD(OFF_ARG(1)),
	     JEQ(F_DUPFD, 2, 0), JEQ(F_DUPFD_CLOEXEC, 1, 0), ALLOW, NOTIF);
}

/* splice(fd_in, off_in, fd_out, ...): trapped if either fd is high. */
static void trap_splice(struct prog *p)
{
	TEST(p, __NR_splice, LD(OFF_ARG(0)), JGE(SL_SUP_FD_BASE, 3, 0), LD(OFF_ARG(2)),
	     JGE(SL_SUP_FD_BASE, 1, 0), ALLOW, NOTIF);
}

/* Every system call the filter may trap, in the order it tests them: the
 * calls a program makes most come first, as every test before its own is
 * paid by each write(2) to a file. The data calls (up to splice) are
 * trapped for high fds only, the others whenever their group is on. */
static const struct {
	unsigned nr;
	enum sl_sup_on on;
} trapped[] = {
	{__NR_write, SL_SUP_ON_SEND},     {__NR_read, SL_SUP_ON_RECV},
	{__NR_writev, SL_SUP_ON_SEND},    {__NR_sendto, SL_SUP_ON_SEND},
	{__NR_sendmsg, SL_SUP_ON_SEND},   {__NR_sendmmsg, SL_SUP_ON_SEND},
	{__NR_pwritev2, SL_SUP_ON_SEND},  {__NR_sendfile, SL_SUP_ON_SENDFILE},
	{__NR_readv, SL_SUP_ON_RECV},     {__NR_recvfrom, SL_SUP_ON_RECV},
	{__NR_recvmsg, SL_SUP_ON_RECV},   {__NR_recvmmsg, SL_SUP_ON_RECV},
	{__NR_preadv2, SL_SUP_ON_RECV},   {__NR_splice, SL_SUP_ON_SENDFILE},
	{__NR_socket, SL_SUP_ON_SOCKET},  {__NR_accept, SL_SUP_ON_ACCEPT},
	{__NR_accept4, SL_SUP_ON_ACCEPT}, {__NR_connect, SL_SUP_ON_CONNECT},
	{__NR_dup, SL_SUP_ON_DUP},        {__NR_dup2, SL_SUP_ON_DUP},
	{__NR_dup3, SL_SUP_ON_DUP},       {__NR_fcntl, SL_SUP_ON_DUP},
};

enum sl_sup_on sl_sup_on_of(long nr)
{
	for (size_t i = 0; i < sizeof(trapped) / sizeof(trapped[0]); i++)
		if (trapped[i].nr == (unsigned long)nr)
			return trapped[i].on;
	return SL_SUP_ON_NONE;
}

bool sl_sup_traps_fd(const struct sl_sup_traps *t, long fd)
{
	return fd >= SL_SUP_FD_BASE || (t->stdio && fd >= 0 && fd < 3);
}

/* Whether the traps t catch system call nr (its entry: on). */
static bool traps_catch(const struct sl_sup_traps *t, unsigned nr, enum sl_sup_on on)
{
	switch (on) {
	case SL_SUP_ON_SEND: /* a send ends a turn, a receive may start one */
		return t->send || sl_sup_traps_turns(t);
	case SL_SUP_ON_RECV:
		return t->recv || sl_sup_traps_turns(t);
	case SL_SUP_ON_SENDFILE: /* splice either way, sendfile out */
		return t->send || sl_sup_traps_turns(t) || (nr == __NR_splice && t->recv);
	case SL_SUP_ON_SOCKET: /* conns:adaptive: a client's stream sockets */
		return t->place || t->turns != 0;
	case SL_SUP_ON_ACCEPT:
		return t->place || t->accept;
	case SL_SUP_ON_CONNECT:
		return t->connect;
	case SL_SUP_ON_DUP: /* a placed socket moved: supervise/sock.c says where */
		return t->place;
	default:
		return false;
	}
}

int sl_sup_filter_build(const struct sl_sup_traps *t, struct sock_filter *ins, int max)
{
	struct prog p = {ins, 0, max};
	const uint32_t enosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);

	const struct sock_filter head[] = {
		LD(OFF_ARCH), JEQ(AUDIT_ARCH_X86_64, 1, 0), RET(enosys), /* another ABI */
		LD(OFF_NR),   JGE(X32_BIT, 0, 1),           RET(enosys), /* x32 */
	};
	for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
		emit(&p, head[i]);
	for (size_t i = 0; i < sizeof(trapped) / sizeof(trapped[0]); i++) {
		const unsigned nr = trapped[i].nr;
		if (nr == __NR_socket) /* the data calls end here */
			TEST(&p, __NR_io_uring_setup, RET(enosys));
		if (!traps_catch(t, nr, trapped[i].on))
			continue;
		if (nr == __NR_splice)
			trap_splice(&p);
		else if (nr == __NR_socket && !t->place)
			trap_socket_stream(&p);
		else if (nr == __NR_fcntl)
			trap_fcntl_dup(&p);
		else if (trapped[i].on <= SL_SUP_ON_SENDFILE)
			trap_fd(&p, nr, 0, t->stdio ? 3 : 0); /* as sl_sup_traps_fd */
		else if (trapped[i].on == SL_SUP_ON_DUP)
			trap_fd(&p, nr, 0, 0);
		else
			trap(&p, nr);
	}
	emit(&p, (struct sock_filter)ALLOW);
	return p.n <= max ? p.n : -1;
}
