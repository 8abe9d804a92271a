/* SPDX-License-Identifier: MIT */
/*
 * rawcall.c - the failure of a system call the shim made itself
 * (rawcall.h), out of line.
 */
#include "rawcall.h"

__attribute__((noinline)) ssize_t sl__raw_fail(long r)
{
	errno = (int)-r;
	return -1;
}
