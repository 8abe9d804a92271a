/* SPDX-License-Identifier: MIT */
/*
 * wrap_cred.c - setuid, seteuid, setreuid, setresuid: the status record is
 * published before the process changes its user (record.h).
 *
 * The record is a file of the starting user's private directory (0700,
 * segment.h), made on first need. A server that drops privileges
 * (memcached -u nobody, nginx and postgres workers, a program calling
 * setuid) can no longer make it there afterwards, and vanished from
 * `sluice stat`. So the file is made while the process is still its
 * starting user; its mapping stays usable after the change. Its removal at
 * exit then fails (the directory is not the new user's): the next
 * `sluice stat` or start of a process with rules removes it, as after a
 * SIGKILL. errno is the real call's.
 */
#include <unistd.h>

#include "real.h"
#include "record.h"
#include "state.h"

const int sl__wrap_cred_anchor = 1;

/* Before a call that may change the user: the record made now if it will
 * ever be. */
static void before_change(void)
{
	if (!sl__busy && sl__st.active)
		sl__rec_publish();
}

SL_EXPORT int setuid(uid_t uid)
{
	before_change();
	return SL_REAL(setuid)(uid);
}

SL_EXPORT int seteuid(uid_t uid)
{
	before_change();
	return SL_REAL(seteuid)(uid);
}

SL_EXPORT int setreuid(uid_t ruid, uid_t euid)
{
	before_change();
	return SL_REAL(setreuid)(ruid, euid);
}

SL_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid)
{
	before_change();
	return SL_REAL(setresuid)(ruid, euid, suid);
}
