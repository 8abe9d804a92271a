/* SPDX-License-Identifier: MIT */
/*
 * test_cli_elf.c - the launcher's ELF reader, program lookup and LD_PRELOAD
 * editing, on files crafted byte by byte.
 *
 * Real binaries of every class and byte order are not available on one host,
 * so each test writes a minimal ELF image (header, program headers, section
 * headers, notes) into a temporary directory, in the class and byte order it
 * wants, and checks what sl__elf_inspect makes of it. The launcher's sources
 * are included directly: they are not in any library the tests link.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_assert.h"

#include "../cli/check.c"
#include "../cli/elf.c"
#include "../policy/elfinfo.c"
#include "../cli/env.c"

#include <sys/stat.h>

/*
 * The Makefile links every unit test with the shim's archive, and the shim
 * defines open, read and close, so its objects (and its constructor, which
 * validates SLUICE_* and exits on an unknown name) end up in this binary.
 * The test runner itself sets SLUICE_TEST_FILTER, SLUICE_SANITIZER and the
 * like. This constructor runs first (a numbered priority runs before the
 * default) and removes them: this test is about the launcher's files only.
 */
__attribute__((constructor(101))) static void drop_sluice_env(void)
{
	extern char **environ;
	char name[128];
	for (size_t i = 0; environ[i] != NULL;) {
		size_t len = strcspn(environ[i], "=");
		if (strncmp(environ[i], "SLUICE_", 7) != 0 || len >= sizeof(name)) {
			i++;
			continue;
		}
		memcpy(name, environ[i], len);
		name[len] = '\0';
		unsetenv(name); /* shifts the later entries down */
	}
}

/* Fixture: a private temporary directory, removed afterwards. */
struct dir {
	char path[64];
};

static int dir_setup(void **state)
{
	static struct dir d;
	snprintf(d.path, sizeof(d.path), "/tmp/sluice-test-elf-XXXXXX");
	if (mkdtemp(d.path) == NULL)
		return -1;
	*state = &d;
	return 0;
}

static int dir_teardown(void **state)
{
	struct dir *d = *state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->path);
	return system(cmd) == 0 ? 0 : -1;
}

/* A little-endian or big-endian writer into a byte image. */
struct image {
	unsigned char b[4096];
	bool big_endian;
	bool is64;
};

static void put(struct image *im, size_t off, uint64_t v, size_t size)
{
	for (size_t i = 0; i < size; i++) {
		size_t k = im->big_endian ? size - 1 - i : i;
		im->b[off + k] = (unsigned char)(v >> (8 * i));
	}
}

/* A word of the file's class: 4 bytes for ELFCLASS32, 8 for ELFCLASS64. */
static size_t word(const struct image *im)
{
	return im->is64 ? 8 : 4;
}

enum { PH_OFF = 0x100, SH_OFF = 0x400, NOTE_OFF = 0x800, STR_OFF = 0x900 };

/* ELF header with phnum program headers at PH_OFF and shnum section headers
 * at SH_OFF (section 1 is the name table). */
static void elf_header(struct image *im, bool is64, bool big_endian, unsigned phnum, unsigned shnum)
{
	memset(im, 0, sizeof(*im));
	im->is64 = is64;
	im->big_endian = big_endian;
	memcpy(im->b, ELFMAG, SELFMAG);
	im->b[EI_CLASS] = is64 ? ELFCLASS64 : ELFCLASS32;
	im->b[EI_DATA] = big_endian ? ELFDATA2MSB : ELFDATA2LSB;
	im->b[EI_VERSION] = EV_CURRENT;
	size_t w = word(im);
	put(im, 16, ET_EXEC, 2);
	put(im, 18, is64 ? EM_X86_64 : EM_PPC, 2);
	put(im, 24 + w, PH_OFF, w);                 /* e_phoff */
	put(im, 24 + 2 * w, shnum ? SH_OFF : 0, w); /* e_shoff */
	size_t tail = 24 + 3 * w + 4;               /* after e_flags */
	put(im, tail, is64 ? 64 : 52, 2);           /* e_ehsize */
	put(im, tail + 2, is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr), 2);
	put(im, tail + 4, phnum, 2);
	put(im, tail + 6, is64 ? sizeof(Elf64_Shdr) : sizeof(Elf32_Shdr), 2);
	put(im, tail + 8, shnum, 2);
	put(im, tail + 10, shnum ? 1 : 0, 2); /* e_shstrndx */
}

/* Program header i: type, file offset and size. */
static void elf_phdr(struct image *im, unsigned i, uint32_t type, uint64_t off, uint64_t size)
{
	size_t base = PH_OFF + i * (im->is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr));
	put(im, base, type, 4);
	if (im->is64) {
		put(im, base + offsetof(Elf64_Phdr, p_offset), off, 8);
		put(im, base + offsetof(Elf64_Phdr, p_filesz), size, 8);
	} else {
		put(im, base + offsetof(Elf32_Phdr, p_offset), off, 4);
		put(im, base + offsetof(Elf32_Phdr, p_filesz), size, 4);
	}
}

/* Section header i: name offset into the name table, file offset, size. */
static void elf_shdr(struct image *im, unsigned i, uint32_t name, uint64_t off, uint64_t size)
{
	size_t base = SH_OFF + i * (im->is64 ? sizeof(Elf64_Shdr) : sizeof(Elf32_Shdr));
	put(im, base, name, 4);
	if (im->is64) {
		put(im, base + offsetof(Elf64_Shdr, sh_offset), off, 8);
		put(im, base + offsetof(Elf64_Shdr, sh_size), size, 8);
	} else {
		put(im, base + offsetof(Elf32_Shdr, sh_offset), off, 4);
		put(im, base + offsetof(Elf32_Shdr, sh_size), size, 4);
	}
}

/* Sections: 0 null, 1 the name table, 2 named `name`. */
static void elf_named_section(struct image *im, const char *name)
{
	static const char names[] = "\0.shstrtab";
	memcpy(im->b + STR_OFF, names, sizeof(names));
	strcpy((char *)im->b + STR_OFF + sizeof(names), name);
	elf_shdr(im, 1, 1, STR_OFF, sizeof(names) + strlen(name) + 1);
	elf_shdr(im, 2, (uint32_t)sizeof(names), 0, 0);
}

static const char *write_image(const struct dir *d, const char *name, const void *data, size_t len)
{
	static char path[128];
	snprintf(path, sizeof(path), "%s/%s", d->path, name);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_dec_equal(fwrite(data, 1, len, f), len);
	assert_dec_equal(fclose(f), 0);
	assert_dec_equal(chmod(path, 0755), 0);
	return path;
}

/* Write the image as `name`, inspect it (which must succeed) and compare. */
static void expect_info(void **state, const char *name, const struct image *im, int elf_class,
			unsigned machine, bool has_interp, bool is_go)
{
	struct sl_elf_info info;
	const char *p = write_image(*state, name, im->b, sizeof(im->b));
	assert_dec_equal(sl__elf_inspect(p, &info), 0);
	assert_dec_equal(info.elf_class, elf_class);
	assert_dec_equal(info.elf_data, im->big_endian ? ELFDATA2MSB : ELFDATA2LSB);
	assert_dec_equal(info.machine, machine);
	assert_dec_equal(info.has_interp, has_interp);
	assert_dec_equal(info.is_go, is_go);
}

static void test_cli_elf_dynamic_64le(void **state)
{
	struct image im;
	elf_header(&im, true, false, 2, 0);
	elf_phdr(&im, 0, PT_LOAD, 0, 0x100);
	elf_phdr(&im, 1, PT_INTERP, 0x200, 28);
	expect_info(state, "dyn64", &im, ELFCLASS64, EM_X86_64, true, false);
}

static void test_cli_elf_static_32be(void **state)
{
	struct image im;
	elf_header(&im, false, true, 1, 2);
	elf_phdr(&im, 0, PT_LOAD, 0, 0x100);
	elf_named_section(&im, ".text");
	expect_info(state, "static32", &im, ELFCLASS32, EM_PPC, false, false);
}

static void test_cli_elf_go_section_32be(void **state)
{
	struct image im;
	elf_header(&im, false, true, 1, 3);
	elf_phdr(&im, 0, PT_INTERP, 0x200, 20);
	elf_named_section(&im, ".go.buildinfo");
	expect_info(state, "go32", &im, ELFCLASS32, EM_PPC, true, true);
}

/* A Go build-ID note in a PT_NOTE segment, after a GNU note. */
static void test_cli_elf_go_note_64be(void **state)
{
	struct image im;
	elf_header(&im, true, true, 1, 0);
	size_t o = NOTE_OFF;
	put(&im, o, 4, 4), put(&im, o + 4, 4, 4), put(&im, o + 8, 3, 4);
	memcpy(im.b + o + 12, "GNU", 4); /* desc: 4 bytes of zero */
	o += 20;
	put(&im, o, 3, 4), put(&im, o + 4, 8, 4), put(&im, o + 8, 4, 4);
	memcpy(im.b + o + 12, "Go\0", 4);
	elf_phdr(&im, 0, PT_NOTE, NOTE_OFF, 20 + 24);
	expect_info(state, "gonote", &im, ELFCLASS64, EM_X86_64, false, true);
}

/* No section headers at all: the build-info magic is found by scanning,
 * here placed across the boundary of the first 64 KiB chunk. */
static void test_cli_elf_go_magic_scan(void **state)
{
	static unsigned char big[SCAN_CHUNK + 4096];
	struct image im;
	struct sl_elf_info info;
	elf_header(&im, true, false, 1, 0);
	elf_phdr(&im, 0, PT_INTERP, 0x200, 28);
	memcpy(big, im.b, sizeof(im.b));
	memcpy(big + SCAN_CHUNK - 5, go_buildinfo_magic, sizeof(go_buildinfo_magic) - 1);
	const char *p = write_image(*state, "gomagic", big, sizeof(big));
	assert_dec_equal(sl__elf_inspect(p, &info), 0);
	assert_true(info.is_go);
	/* The same file without the magic is not Go. */
	memset(big + SCAN_CHUNK - 5, 0, sizeof(go_buildinfo_magic) - 1);
	p = write_image(*state, "nomagic", big, sizeof(big));
	assert_dec_equal(sl__elf_inspect(p, &info), 0);
	assert_false(info.is_go);
}

static void test_cli_elf_corrupt(void **state)
{
	struct image im;
	struct sl_elf_info info;
	/* Program headers past the end of the file. */
	elf_header(&im, true, false, 4, 0);
	put(&im, 24 + 8, 0x10000, 8);
	const char *p = write_image(*state, "badph", im.b, sizeof(im.b));
	assert_dec_equal(sl__elf_inspect(p, &info), -1);
	/* A truncated header. */
	p = write_image(*state, "short", im.b, 30);
	assert_dec_equal(sl__elf_inspect(p, &info), -1);
	/* An unknown class. */
	im.b[EI_CLASS] = 7;
	p = write_image(*state, "class7", im.b, sizeof(im.b));
	assert_dec_equal(sl__elf_inspect(p, &info), -1);
	/* Not ELF at all. */
	p = write_image(*state, "script", "#!/bin/sh\n", 10);
	assert_dec_equal(sl__elf_inspect(p, &info), 1);
	assert_dec_equal(sl__elf_inspect("/nonexistent/sluice", &info), -1);
}

/* Warnings for a static file and for a script whose interpreter it is. */
static void test_cli_elf_warnings(void **state)
{
	struct dir *d = *state;
	struct image im;
	char script[256], buf[1024];
	elf_header(&im, true, false, 1, 0);
	elf_phdr(&im, 0, PT_LOAD, 0, 0x100);
	char interp[128];
	snprintf(interp, sizeof(interp), "%s", write_image(d, "static", im.b, sizeof(im.b)));
	int n = snprintf(script, sizeof(script), "#!%s -x\necho hi\n", interp);
	const char *sp = write_image(d, "run.sh", script, (size_t)n);

	FILE *out = fmemopen(buf, sizeof(buf), "w");
	assert_non_null(out);
	assert_dec_equal(sl__cli_warn_unthrottlable(out, sp, NULL), 1);
	fclose(out);
	assert_non_null(strstr(buf, "statically linked"));
	assert_non_null(strstr(buf, "(interpreter of "));
}

static void test_cli_resolve_program(void **state)
{
	struct dir *d = *state;
	char out[PATH_MAX];
	const char *p = write_image(d, "tool", "#!/bin/sh\n", 10);
	char dirs[256];
	snprintf(dirs, sizeof(dirs), "/nonexistent:%s", d->path);
	char *saved = getenv("PATH") ? strdup(getenv("PATH")) : NULL;

	setenv("PATH", dirs, 1);
	assert_dec_equal(sl__cli_resolve_program("tool", out, sizeof(out)), 0);
	assert_string_equal(out, p);
	assert_dec_equal(sl__cli_resolve_program("no-such-tool", out, sizeof(out)), 127);
	assert_dec_equal(chmod(p, 0644), 0);
	if (geteuid() != 0) /* root may execute anything with an x bit only */
		assert_dec_equal(sl__cli_resolve_program("tool", out, sizeof(out)), 126);
	assert_dec_equal(sl__cli_resolve_program(d->path, out, sizeof(out)), 126);
	assert_dec_equal(sl__cli_resolve_program("", out, sizeof(out)), 127);
	if (saved != NULL)
		setenv("PATH", saved, 1);
	free(saved);
}

static void test_cli_preload_join(void **state)
{
	(void)state;
	char out[256];
	assert_dec_equal(sl__cli_preload_join(NULL, "/l/libsluice.so", out, sizeof(out)), 0);
	assert_string_equal(out, "/l/libsluice.so");
	assert_dec_equal(sl__cli_preload_join("  ", "/l/libsluice.so", out, sizeof(out)), 0);
	assert_string_equal(out, "/l/libsluice.so");
	assert_dec_equal(sl__cli_preload_join("/a.so /b.so", "/l/libsluice.so", out, sizeof(out)),
			 0);
	assert_string_equal(out, "/l/libsluice.so /a.so /b.so");
	assert_dec_equal(sl__cli_preload_join("/a.so:/b.so", "/l/libsluice.so", out, sizeof(out)),
			 0);
	assert_string_equal(out, "/l/libsluice.so:/a.so:/b.so");
	/* Already there, anywhere in the list: unchanged. */
	assert_dec_equal(sl__cli_preload_join("/a.so:/l/libsluice.so", "/l/libsluice.so", out,
					      sizeof(out)),
			 0);
	assert_string_equal(out, "/a.so:/l/libsluice.so");
	/* A prefix of the library's path is another file. */
	assert_dec_equal(sl__cli_preload_join("/l/libsluice.so.1", "/l/libsluice.so", out,
					      sizeof(out)),
			 0);
	assert_string_equal(out, "/l/libsluice.so /l/libsluice.so.1");
	assert_dec_equal(sl__cli_preload_join("/a.so", "/l/libsluice.so", out, 8), -1);
}

/* The same file under another name (a symbolic link) is not added twice. */
static void test_cli_preload_join_same_file(void **state)
{
	struct dir *d = *state;
	char lib[128], link[128], out[512];
	snprintf(lib, sizeof(lib), "%s", write_image(d, "libsluice.so", "x", 1));
	snprintf(link, sizeof(link), "%s/alias.so", d->path);
	assert_dec_equal(symlink(lib, link), 0);
	assert_dec_equal(sl__cli_preload_join(link, lib, out, sizeof(out)), 0);
	assert_string_equal(out, link);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli_elf_dynamic_64le),
		cmocka_unit_test(test_cli_elf_static_32be),
		cmocka_unit_test(test_cli_elf_go_section_32be),
		cmocka_unit_test(test_cli_elf_go_note_64be),
		cmocka_unit_test(test_cli_elf_go_magic_scan),
		cmocka_unit_test(test_cli_elf_corrupt),
		cmocka_unit_test(test_cli_elf_warnings),
		cmocka_unit_test(test_cli_resolve_program),
		cmocka_unit_test(test_cli_preload_join),
		cmocka_unit_test(test_cli_preload_join_same_file),
	};
	return cmocka_run_group_tests(tests, dir_setup, dir_teardown);
}
