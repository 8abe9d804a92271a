/* SPDX-License-Identifier: MIT */
/*
 * host.c - the host's load and CPU figures for system protection (turn.c):
 * the 1-minute load average from sysinfo(2), the CPUs' times from the first
 * line of /proc/stat, as the preload reads them (shim/turn.c).
 */
#include "host.h"

#include <fcntl.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "adaptive.h"

bool sl_sup_host_load1(uint64_t *milli)
{
	struct sysinfo si;
	if (sysinfo(&si) != 0)
		return false;
	*milli = (uint64_t)si.loads[0] * 1000 >> SI_LOAD_SHIFT;
	return true;
}

bool sl_sup_host_cpu(uint64_t *busy, uint64_t *total)
{
	const int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char buf[256]; /* "cpu  user nice system idle ..." comes first */
	const ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	return n > 0 && sl_adapt_cpu_parse(buf, (size_t)n, busy, total);
}
