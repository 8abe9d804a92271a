/* SPDX-License-Identifier: MIT */
/*
 * fuzz_elf.c - libFuzzer target for the ELF decoder and the "#!" line parser
 * (policy/elfinfo.c) that the launcher and the shim share.
 *
 * Input: the bytes of a file. Properties checked: sl_elf_decode never reads
 * outside the file (the reader asserts every request) and answers 0, 1 or
 * -1; a file not starting with the ELF magic is 1; sl_elf_script's output is
 * NUL-terminated within its buffer and free of blanks. ASan catches the rest.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "elfinfo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct mem {
	const uint8_t *p;
	size_t n;
};

static long mem_read(void *ctx, void *buf, size_t len, uint64_t off)
{
	const struct mem *m = ctx;
	if (len == 0 || len > (64u << 10))
		abort(); /* the decoder never asks for nothing, or for a lot */
	if (off >= m->n)
		return 0;
	size_t k = m->n - (size_t)off < len ? m->n - (size_t)off : len;
	memcpy(buf, m->p + off, k);
	return (long)k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mem m = {.p = data, .n = size};
	struct sl_elf_src src = {.read = mem_read, .ctx = &m};
	struct sl_elf_info info;
	int rc = sl_elf_decode(&src, &info);
	if (rc < -1 || rc > 1)
		abort();
	if ((size < 4 || memcmp(data,
				"\x7f"
				"ELF",
				4) != 0) &&
	    rc != 1)
		abort();
	char out[64];
	int s = sl_elf_script((const char *)data, size, out, sizeof(out));
	if (s != 0 && (memchr(out, '\0', sizeof(out)) == NULL || strpbrk(out, " \t\n") != NULL ||
		       out[0] == '\0'))
		abort();
	return 0;
}
