/* SPDX-License-Identifier: MIT */
/*
 * elfinfo.h - what an executable's own bytes say about whether LD_PRELOAD can
 * reach its socket calls (elfinfo.c): shared by the launcher (cli/check.c, before
 * it execs the program) and the shim (shim/exec.c, before a preloaded
 * process execs another).
 *
 * A pure decoder: the caller reads the file (struct sl_elf_src), nothing here
 * allocates, opens, or sets errno, so the shim can use it between a fork and
 * an exec, and a fuzzer can feed it bytes.
 *
 * API: reentrant; every call works on the caller's data only.
 */
#ifndef SLUICE_POLICY_ELFINFO_H
#define SLUICE_POLICY_ELFINFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How the decoder reads the file: read(ctx, buf, len, off) puts up to len
 * bytes at offset off into buf and returns how many (0 at the end), or -1. */
struct sl_elf_src {
	long (*read)(void *ctx, void *buf, size_t len, uint64_t off);
	void *ctx;
};

/* What the ELF header and program headers of one file say. */
struct sl_elf_info {
	int elf_class;    /* ELFCLASS32 or ELFCLASS64 */
	int elf_data;     /* ELFDATA2LSB or ELFDATA2MSB */
	unsigned machine; /* e_machine (EM_X86_64, ...) */
	bool has_interp;  /* a PT_INTERP segment: the dynamic loader runs */
	bool is_go;       /* a Go toolchain note, section or build-info marker */
};

/*
 * Decode the ELF file behind src into *info. Both classes and both byte
 * orders are understood; every count and offset is bounds-checked. Go is
 * recognised by a PT_NOTE note named "Go", a section .note.go.buildid or
 * .go.buildinfo, or (a file without section headers only) the build-info
 * magic in its first 64 MiB. Returns 0, 1 if the file is not ELF, -1 if it
 * is truncated, inconsistent or unreadable.
 */
int sl_elf_decode(const struct sl_elf_src *src, struct sl_elf_info *info);

/* The interpreter line of a "#!" script: the first n bytes of the file in
 * buf. Writes the program to out: 1 if it is a path, 2 if it is a NAME to
 * look up in PATH ("#!/usr/bin/env [-S] NAME"), 0 if buf is no script (or
 * the name does not fit in outlen). */
int sl_elf_script(const char *buf, size_t n, char *out, size_t outlen);

#endif /* SLUICE_POLICY_ELFINFO_H */
