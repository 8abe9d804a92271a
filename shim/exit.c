/* SPDX-License-Identifier: MIT */
/*
 * exit.c - _exit and _Exit: remove this process's status record (record.c)
 * first, then end the process as the C library would (exit_group).
 *
 * exit() runs the destructor, which removes the record; _exit() runs
 * nothing, and it is how fork children (Python's multiprocessing, shells,
 * servers that fork per connection) usually end. A vfork child calling
 * _exit shares its parent's memory and pid-named record: the record's pid
 * tells it apart, and nothing is removed.
 */
#include <sys/syscall.h>
#include <unistd.h>

#include "anchors.h"
#include "internal.h"
#include "record.h"
#include "shm.h"

const int sl__exit_anchor = 1;

static _Noreturn void exit_now(int status)
{
	sl__shm_rec_remove();
	for (;;)
		syscall(SYS_exit_group, status);
}

SL_EXPORT void _exit(int status)
{
	exit_now(status);
}

SL_EXPORT void _Exit(int status)
{
	exit_now(status);
}
