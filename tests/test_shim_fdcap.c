/* SPDX-License-Identifier: MIT */
/*
 * test_shim_fdcap.c - the fd tables' fallback: when the address space for
 * tables as large as the RLIMIT_NOFILE hard limit cannot be reserved (a low
 * RLIMIT_AS, ulimit -v), the shim tracks SL_FD_MIN (65536) fds instead of
 * exiting 2 with "cannot map memory".
 *
 * The test binary defines getrlimit (RLIMIT_NOFILE hard limit 2^20), and a
 * constructor that runs before the shim's (priority 101) lowers RLIMIT_AS
 * to what the process maps now plus 200 MB: room for 65536 entries (about
 * 21 MB), not for 2^20 (about 340 MB). Under AddressSanitizer, whose shadow
 * memory needs terabytes of address space, it reports itself skipped.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "test_shim.h"

#if defined(__SANITIZE_ADDRESS__)
#define SL_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SL_TEST_ASAN 1
#endif
#endif

int getrlimit(__rlimit_resource_t res, struct rlimit *rl)
{
	static int (*next)(__rlimit_resource_t, struct rlimit *);
	if (next == NULL)
		*(void **)&next = dlsym(RTLD_NEXT, "getrlimit");
	int r = next(res, rl);
	if (r == 0 && res == RLIMIT_NOFILE)
		rl->rlim_max = 1u << 20;
	return r;
}

static __attribute__((unused)) unsigned long long vm_size_kb(void)
{
	char line[256];
	unsigned long long kb = 0;
	FILE *f = fopen("/proc/self/status", "re");
	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "VmSize:", 7) == 0)
			sscanf(line + 7, "%llu", &kb);
	if (f != NULL)
		fclose(f);
	return kb;
}

#ifndef SL_TEST_ASAN
__attribute__((constructor(101))) static void lower_as(void)
{
	unsigned long long limit = (vm_size_kb() + 200 * 1024) * 1024;
	struct rlimit rl = {limit, limit};
	setrlimit(RLIMIT_AS, &rl);
}
#endif

/* The shim's constructor ran under the low limit: 65536 entries, and a
 * policy with an fd-scoped rule (whose table is sized by the cap) loads. */
static void test_fdcap_fallback(void **state)
{
	(void)state;
#ifdef SL_TEST_ASAN
	puts("skipped: RLIMIT_AS cannot be lowered under AddressSanitizer");
#else
	assert_dec_equal(sl__fd_cap, SL_FD_MIN);
	use_policy("SLUICE_SEND", "1MiB/s,per=fd");
	assert_true(sl__st.ready);
	assert_non_null(sl__st.fd_lims);
	use_policy(NULL, NULL);
#endif
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fdcap_fallback),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
