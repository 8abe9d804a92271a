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
	*t = (struct sl_sup_traps){0};
	for (uint32_t i = 0; i < p->n_rules; i++) {
		switch (p->rules[i].op) {
		case SL_OP_CONNECT:
			t->connect = true;
			break;
		case SL_OP_ACCEPT:
			t->accept = true;
			break;
		case SL_OP_SEND:
			t->send = true;
			break;
		case SL_OP_RECV:
			t->recv = true;
			break;
		case SL_OP_CONNS:
			t->connect = t->accept = true;
			break;
		default:
			break;
		}
	}
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
	/* The calls a program makes most come first: every instruction before
	 * its test is paid by each write(2) to a file. */
	if (t->send)
		trap_fd(&p, __NR_write, 0);
	if (t->recv)
		trap_fd(&p, __NR_read, 0);
	if (t->send) {
		trap_fd(&p, __NR_writev, 0);
		trap_fd(&p, __NR_sendto, 0);
		trap_fd(&p, __NR_sendmsg, 0);
		trap_fd(&p, __NR_sendmmsg, 0);
		trap_fd(&p, __NR_pwritev2, 0);
		trap_fd(&p, __NR_sendfile, 0);
	}
	if (t->recv) {
		trap_fd(&p, __NR_readv, 0);
		trap_fd(&p, __NR_recvfrom, 0);
		trap_fd(&p, __NR_recvmsg, 0);
		trap_fd(&p, __NR_recvmmsg, 0);
		trap_fd(&p, __NR_preadv2, 0);
	}
	if (t->send || t->recv)
		trap_splice(&p);
	emit(&p,
	     (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1));
	emit(&p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, enosys));
	if (t->place)
		trap(&p, __NR_socket);
	if (t->place || t->accept) {
		trap(&p, __NR_accept);
		trap(&p, __NR_accept4);
	}
	if (t->connect)
		trap(&p, __NR_connect);
	emit(&p, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
	return p.n <= max ? p.n : -1;
}
