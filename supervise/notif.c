/* SPDX-License-Identifier: MIT */
/*
 * notif.c - answering a notification (SECCOMP_IOCTL_NOTIF_SEND), asking
 * whether it is still waiting (SECCOMP_IOCTL_NOTIF_ID_VALID); the clock and
 * the warnings.
 */
#include "notif.h"
#include "state.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <time.h>

uint64_t sl_sup_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sl_sup_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sluice: warning: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

int sl_sup_answer(struct sl_sup *s, uint64_t id, int64_t val, int err)
{
	struct seccomp_notif_resp r = {.id = id, .val = err != 0 ? 0 : val, .error = -err};
	if (ioctl(s->listener, SECCOMP_IOCTL_NOTIF_SEND, &r) != 0)
		return -errno;
	return 0;
}

int sl_sup_continue(struct sl_sup *s, uint64_t id)
{
	struct seccomp_notif_resp r = {.id = id, .flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE};
	if (ioctl(s->listener, SECCOMP_IOCTL_NOTIF_SEND, &r) != 0)
		return -errno;
	return 0;
}

bool sl_sup_valid(const struct sl_sup *s, uint64_t id)
{
	return ioctl(s->listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
}
