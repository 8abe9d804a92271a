/* SPDX-License-Identifier: MIT */
/*
 * bare_filter.c - run a program under a seccomp filter that traps nothing:
 * the floor every supervised program pays (any filter sends every system
 * call through the slow entry path and the BPF program), against which
 * bench/bench_supervise.sh measures supervised mode's own cost.
 *
 *   build/bench/bare_filter [--fd-check] PROGRAM [ARG]...
 *
 * The filter checks the architecture and the x32 bit like supervised mode's
 * (supervise/filter.c) and allows everything else. The kernel caches such a
 * filter's verdict per system call (it depends on no argument), so the
 * program never runs for write(2). --fd-check adds a test of write's fd
 * that allows either way, as supervised mode's fd >= 512 test does when it
 * lets a file write through: the verdict then depends on an argument and
 * the program runs for every write.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int first = 1;
	bool fd_check = argc > 1 && strcmp(argv[1], "--fd-check") == 0;
	first += fd_check;
	if (argc <= first) {
		fputs("usage: bare_filter [--fd-check] PROGRAM [ARG]...\n", stderr);
		return 2;
	}
	struct sock_filter ins[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		/* --fd-check: if (nr == write) { load fd; allow either way } */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_write, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args)),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 512, 0, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof(ins) / sizeof(ins[0]), ins};
	if (!fd_check) { /* skip the fd test: the last instruction alone */
		ins[6] = ins[10];
		prog.len = 7;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
		fprintf(stderr, "bare_filter: %s\n", strerror(errno));
		return 2;
	}
	execvp(argv[first], argv + first);
	fprintf(stderr, "bare_filter: %s: %s\n", argv[first], strerror(errno));
	return 127;
}
