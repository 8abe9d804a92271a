/* SPDX-License-Identifier: MIT */
/*
 * test_shim_real.c - the table of real functions (real.c): the slots of
 * the send and receive shapes start as lazy stubs, never NULL, which the
 * wrappers call without a test; the first call through a stub resolves
 * the symbol, makes the call, keeps errno, and leaves libc's function in
 * the slot. Slots of the other shapes start empty.
 */
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_shim.h"

static struct sl_real saved;

static int setup(void **state)
{
	(void)state;
	shim_setup(&saved, 1000000000ull);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	shim_teardown(&saved);
	return 0;
}

/* Which slots start as stubs: the send and receive shapes, not the rest. */
static void test_real_lazy_slots(void **state)
{
	(void)state;
	static const enum sl_real_slot lazy[] = {
		SL_REAL_send,       SL_REAL_sendto,     SL_REAL_sendmsg,        SL_REAL_write,
		SL_REAL_writev,     SL_REAL_sendfile,   SL_REAL_sendfile64,     SL_REAL_recv,
		SL_REAL_recvfrom,   SL_REAL_recvmsg,    SL_REAL_read,           SL_REAL_readv,
		SL_REAL___read_chk, SL_REAL___recv_chk, SL_REAL___recvfrom_chk,
	};
	for (size_t i = 0; i < sizeof(lazy) / sizeof(lazy[0]); i++)
		assert_non_null(sl__real_lazy_of(lazy[i]));
	static const enum sl_real_slot empty[] = {SL_REAL_connect, SL_REAL_close,  SL_REAL_fcntl,
						  SL_REAL_open,    SL_REAL_splice, SL_REAL_pipe};
	for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++)
		assert_null(sl__real_lazy_of(empty[i]));
	/* Resolved: no slot holds its stub any more. */
	assert_ptr_not_equal((void *)sl__real.write, sl__real_lazy_of(SL_REAL_write));
	assert_ptr_not_equal((void *)sl__real.recv, sl__real_lazy_of(SL_REAL_recv));
}

/* A call through a stub, as the wrappers make it (SL_REAL_SET): the bytes
 * go, errno is the caller's, and the slot then holds libc's write. */
static void test_real_lazy_write_resolves(void **state)
{
	(void)state;
	int p[2];
	assert_dec_equal(pipe(p), 0);
	void *stub = sl__real_lazy_of(SL_REAL_write);
	atomic_store(&sl__real.write, (ssize_t(*)(int, const void *, size_t))stub);
	errno = 1234;
	assert_dec_equal(SL_REAL_SET(write)(p[1], "ab", 2), 2);
	assert_dec_equal(errno, 1234);
	void *now = (void *)atomic_load(&sl__real.write);
	assert_ptr_not_equal(now, stub);
	assert_ptr_equal(now, dlsym(RTLD_NEXT, "write"));
	char buf[4] = {0};
	assert_dec_equal(SL_REAL(read)(p[0], buf, sizeof(buf)), 2);
	assert_string_equal(buf, "ab");
	/* The exported wrapper through a stub too (a pipe passes through). */
	atomic_store(&sl__real.read,
		     (ssize_t(*)(int, void *, size_t))sl__real_lazy_of(SL_REAL_read));
	assert_dec_equal(write(p[1], "c", 1), 1);
	memset(buf, 0, sizeof(buf));
	assert_dec_equal(read(p[0], buf, sizeof(buf)), 1);
	assert_string_equal(buf, "c");
	assert_ptr_equal((void *)atomic_load(&sl__real.read), dlsym(RTLD_NEXT, "read"));
	close(p[0]);
	close(p[1]);
}

int main(void)
{
	/* Link the wrappers even when ASan's interceptors define the names. */
	assert_dec_equal(sl__wrap_send_anchor + sl__wrap_recv_anchor + sl__wrap_sock_anchor, 3);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_real_lazy_slots, setup, teardown),
		cmocka_unit_test_setup_teardown(test_real_lazy_write_resolves, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
