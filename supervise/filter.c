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
 *                                             or accept/conns rules exist
 *   connect                                   trapped with connect/conns rules
 *   read, readv, recvfrom, recvmsg,           trapped only for fd >= 512
 *   recvmmsg, preadv2 (recv rules);           (the sockets the supervisor
 *   write, writev, sendto, sendmsg,           placed there): file and pipe
 *   sendmmsg, pwritev2, sendfile (send)       I/O is never trapped
 *   splice                                    trapped when either fd >= 512
 *   everything else                           allowed
 *
 * The fd test reads the low 32 bits of the first argument, as the kernel
 * does (an int fd); a negative fd is trapped too and answered by the kernel
 * (the supervisor lets it continue).
 */
#include "filter.h"
#include "internal.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <stddef.h>
#include <sys/syscall.h>

#define X32_BIT 0x40000000u
#define OFF_NR offsetof(struct seccomp_data, nr)
#define OFF_ARCH offsetof(struct seccomp_data, arch)
#define OFF_ARG(i) (offsetof(struct seccomp_data, args) + 8 * (i)) /* low half (LE) */

void sl_sup_traps_of(const struct sl_policy *p, struct sl_sup_traps *t)
{
	uint32_t ops = 0; /* bit 1 << op of each rule's op */
	for (uint32_t i = 0; i < p->n_rules; i++)
		ops |= 1u << p->rules[i].op;
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

/* if (nr == NR) return NOTIF */
static void trap(struct prog *p, unsigned nr)
{
	emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
	emit(p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF));
}

/* if (nr == NR) return arg(i) >= base ? NOTIF : ALLOW */
static void trap_fd(struct prog *p, unsigned nr, unsigned arg)
{
	emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 4));
	emit(p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, OFF_ARG(arg)));
	emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, SL_SUP_FD_BASE, 0, 1));
	emit(p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF));
	emit(p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
}

/* splice(fd_in, off_in, fd_out, ...): trapped if either fd is high. */
static void trap_splice(struct prog *p)
{
	emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_splice, 0, 6));
	emit(p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, OFF_ARG(0)));
	emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, SL_SUP_FD_BASE, 3, 0));
	emit(p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, OFF_ARG(2)));
	emit(p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, SL_SUP_FD_BASE, 1, 0));
	emit(p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
	emit(p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF));
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
};

enum sl_sup_on sl_sup_on_of(long nr)
{
	for (size_t i = 0; i < sizeof(trapped) / sizeof(trapped[0]); i++)
		if (trapped[i].nr == (unsigned long)nr)
			return trapped[i].on;
	return SL_SUP_ON_NONE;
}

/* Whether the traps t catch system call nr (its entry: on). */
static bool traps_catch(const struct sl_sup_traps *t, unsigned nr, enum sl_sup_on on)
{
	switch (on) {
	case SL_SUP_ON_SEND:
		return t->send;
	case SL_SUP_ON_RECV:
		return t->recv;
	case SL_SUP_ON_SENDFILE: /* splice either way, sendfile out */
		return t->send || (nr == __NR_splice && t->recv);
	case SL_SUP_ON_SOCKET:
		return t->place;
	case SL_SUP_ON_ACCEPT:
		return t->place || t->accept;
	case SL_SUP_ON_CONNECT:
		return t->connect;
	default:
		return false;
	}
}

int sl_sup_filter_build(const struct sl_sup_traps *t, struct sock_filter *ins, int max)
{
	struct prog p = {ins, 0, max};
	const uint32_t enosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);

	emit(&p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, OFF_ARCH));
	emit(&p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
	emit(&p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, enosys));
	emit(&p, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, OFF_NR));
	emit(&p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 0, 1));
	emit(&p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, enosys));
	for (size_t i = 0; i < sizeof(trapped) / sizeof(trapped[0]); i++) {
		const unsigned nr = trapped[i].nr;
		if (nr == __NR_socket) { /* the data calls end here */
			emit(&p, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
							      __NR_io_uring_setup, 0, 1));
			emit(&p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, enosys));
		}
		if (!traps_catch(t, nr, trapped[i].on))
			continue;
		if (nr == __NR_splice)
			trap_splice(&p);
		else if (trapped[i].on <= SL_SUP_ON_SENDFILE)
			trap_fd(&p, nr, 0);
		else
			trap(&p, nr);
	}
	emit(&p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
	return p.n <= max ? p.n : -1;
}
