/* SPDX-License-Identifier: MIT */
/*
 * elfinfo.c - the ELF decoder of elfinfo.h, without allocation: tables are read one
 * record at a time through the caller's reader, names a few bytes at a time.
 *
 * Field offsets come from <elf.h>'s structs, whose layout is the one the
 * ELF specification defines; every field is decoded with the file's byte
 * order, so a big-endian 32-bit file is read correctly on a little-endian
 * 64-bit host.
 */
#include "elfinfo.h"

#include <elf.h>
#include <string.h>

#define RECORDS_MAX (1u << 16) /* program or section headers looked at */
#define NOTE_MAX (64u << 10)   /* largest PT_NOTE segment walked */
#define SCAN_MAX (64u << 20)   /* bytes scanned for the Go build-info magic */
#define SCAN_CHUNK 4096u

static const char go_buildinfo_magic[] = "\xff Go buildinf:";

struct elf_file {
	const struct sl_elf_src *src;
	bool is64;
	bool big_endian;
};

/* Decode an unsigned integer of `size` bytes (2, 4 or 8) at p. */
static uint64_t get_uint(const struct elf_file *f, const unsigned char *p, size_t size)
{
	uint64_t v = 0;
	for (size_t i = 0; i < size; i++) {
		size_t k = f->big_endian ? i : size - 1 - i;
		v = (v << 8) | p[k];
	}
	return v;
}

/* A field's offset and size for the file's class. */
#define ELF_FIELD(f, type, field)                                                                  \
	((f)->is64 ? offsetof(Elf64_##type, field) : offsetof(Elf32_##type, field)),               \
		((f)->is64 ? sizeof(((Elf64_##type *)0)->field)                                    \
			   : sizeof(((Elf32_##type *)0)->field))

static uint64_t get_field(const struct elf_file *f, const unsigned char *rec, size_t off,
			  size_t size)
{
	return get_uint(f, rec + off, size);
}

/* Read exactly len bytes at off. Returns 0, or -1 (error or short file). */
static int read_at(const struct elf_file *f, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		if (off + done < off)
			return -1;
		long n = f->src->read(f->src->ctx, (char *)buf + done, len - done, off + done);
		if (n <= 0)
			return -1;
		done += (size_t)n;
	}
	return 0;
}

/* Read record i of a table at off of entries of entsize bytes (the first
 * min bytes of it, at most 64). */
static int read_record(const struct elf_file *f, unsigned char *rec, uint64_t off, uint64_t i,
		       uint64_t entsize, size_t min)
{
	if (entsize < min || i > (UINT64_MAX - off) / entsize)
		return -1;
	return read_at(f, rec, min, off + i * entsize);
}

/* True if the notes of a segment [off, off + len) hold one named "Go".
 * Notes are 4-byte aligned records: namesz, descsz, type, name, desc. */
static bool notes_have_go(const struct elf_file *f, uint64_t off, uint64_t len)
{
	uint64_t pos = 0;
	while (len - pos >= 12) {
		unsigned char h[12], name[3];
		if (read_at(f, h, sizeof(h), off + pos) != 0)
			return false;
		uint64_t namesz = get_uint(f, h, 4), descsz = get_uint(f, h + 4, 4);
		uint64_t name_pad = (namesz + 3) & ~(uint64_t)3;
		uint64_t desc_pad = (descsz + 3) & ~(uint64_t)3;
		pos += 12;
		if (name_pad > len - pos || desc_pad > len - pos - name_pad)
			return false;
		if ((namesz == 2 || namesz == 3) && read_at(f, name, namesz, off + pos) == 0 &&
		    memcmp(name, "Go", 2) == 0 && (namesz == 2 || name[2] == '\0'))
			return true;
		pos += name_pad + desc_pad;
	}
	return false;
}

/* Scan the first SCAN_MAX bytes for the Go build-info magic. Chunks overlap
 * by the magic's length so a match across a boundary is found. */
static bool scan_for_go_magic(const struct elf_file *f)
{
	const size_t mlen = sizeof(go_buildinfo_magic) - 1;
	unsigned char buf[SCAN_CHUNK];
	for (uint64_t off = 0; off < SCAN_MAX;) {
		long n = f->src->read(f->src->ctx, buf, sizeof(buf), off);
		if (n < (long)mlen)
			return false;
		if (memmem(buf, (size_t)n, go_buildinfo_magic, mlen) != NULL)
			return true;
		off += (uint64_t)n - (mlen - 1);
	}
	return false;
}

/* Walk the program headers: PT_INTERP and Go notes. */
static int inspect_segments(const struct elf_file *f, uint64_t phoff, uint64_t phnum,
			    uint64_t phentsize, struct sl_elf_info *info)
{
	size_t min = f->is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr);
	unsigned char ph[sizeof(Elf64_Phdr)];
	if (phnum > RECORDS_MAX)
		return -1;
	for (uint64_t i = 0; i < phnum; i++) {
		if (read_record(f, ph, phoff, i, phentsize, min) != 0)
			return -1;
		uint64_t type = get_field(f, ph, ELF_FIELD(f, Phdr, p_type));
		if (type == PT_INTERP)
			info->has_interp = true;
		if (type != PT_NOTE || info->is_go)
			continue;
		uint64_t off = get_field(f, ph, ELF_FIELD(f, Phdr, p_offset));
		uint64_t size = get_field(f, ph, ELF_FIELD(f, Phdr, p_filesz));
		if (size != 0 && size <= NOTE_MAX && off <= UINT64_MAX - size)
			info->is_go = notes_have_go(f, off, size);
	}
	return 0;
}

/* True if the NUL-terminated name at [at, end) of the string table is s. */
static bool name_is(const struct elf_file *f, uint64_t at, uint64_t end, const char *s)
{
	size_t n = strlen(s) + 1;
	char buf[32];
	return n <= sizeof(buf) && at < end && end - at >= n && read_at(f, buf, n, at) == 0 &&
	       memcmp(buf, s, n) == 0;
}

/* Look for the Go sections by name. Returns 0, or -1 on a corrupt table. */
static int inspect_sections(const struct elf_file *f, uint64_t shoff, uint64_t shnum,
			    uint64_t shentsize, uint64_t shstrndx, struct sl_elf_info *info)
{
	size_t min = f->is64 ? sizeof(Elf64_Shdr) : sizeof(Elf32_Shdr);
	unsigned char sh[sizeof(Elf64_Shdr)];
	if (shnum > RECORDS_MAX || read_record(f, sh, shoff, 0, shentsize, min) != 0)
		return -1;
	if (shstrndx == SHN_XINDEX)
		shstrndx = get_field(f, sh, ELF_FIELD(f, Shdr, sh_link));
	if (shstrndx == SHN_UNDEF || shstrndx >= shnum)
		return 0; /* no section names: nothing to look for */
	if (read_record(f, sh, shoff, shstrndx, shentsize, min) != 0)
		return -1;
	uint64_t str_off = get_field(f, sh, ELF_FIELD(f, Shdr, sh_offset));
	uint64_t str_size = get_field(f, sh, ELF_FIELD(f, Shdr, sh_size));
	if (str_size == 0 || str_off > UINT64_MAX - str_size)
		return -1;
	for (uint64_t i = 0; i < shnum && !info->is_go; i++) {
		if (read_record(f, sh, shoff, i, shentsize, min) != 0)
			return -1;
		uint64_t name = get_field(f, sh, ELF_FIELD(f, Shdr, sh_name));
		if (name >= str_size)
			continue;
		uint64_t at = str_off + name, end = str_off + str_size;
		info->is_go = name_is(f, at, end, ".note.go.buildid") ||
			      name_is(f, at, end, ".go.buildinfo");
	}
	return 0;
}

/* Walk the tables the ELF header hdr points to. */
static int inspect_open(const struct elf_file *f, const unsigned char *hdr,
			struct sl_elf_info *info)
{
	uint64_t phoff = get_field(f, hdr, ELF_FIELD(f, Ehdr, e_phoff));
	uint64_t phnum = get_field(f, hdr, ELF_FIELD(f, Ehdr, e_phnum));
	uint64_t phentsize = get_field(f, hdr, ELF_FIELD(f, Ehdr, e_phentsize));
	uint64_t shoff = get_field(f, hdr, ELF_FIELD(f, Ehdr, e_shoff));
	uint64_t shnum = get_field(f, hdr, ELF_FIELD(f, Ehdr, e_shnum));
	uint64_t shentsize = get_field(f, hdr, ELF_FIELD(f, Ehdr, e_shentsize));
	uint64_t shstrndx = get_field(f, hdr, ELF_FIELD(f, Ehdr, e_shstrndx));

	info->machine = (unsigned)get_field(f, hdr, ELF_FIELD(f, Ehdr, e_machine));

	/* With 0xffff or more entries the true counts live in section 0:
	 * e_phnum == PN_XNUM means sh_info, e_shnum == 0 means sh_size. */
	if (shoff != 0 && (phnum == PN_XNUM || shnum == 0)) {
		size_t min = f->is64 ? sizeof(Elf64_Shdr) : sizeof(Elf32_Shdr);
		unsigned char sh0[sizeof(Elf64_Shdr)];
		if (read_record(f, sh0, shoff, 0, shentsize, min) != 0)
			return -1;
		if (phnum == PN_XNUM)
			phnum = get_field(f, sh0, ELF_FIELD(f, Shdr, sh_info));
		if (shnum == 0)
			shnum = get_field(f, sh0, ELF_FIELD(f, Shdr, sh_size));
	}
	if (phnum != 0 && inspect_segments(f, phoff, phnum, phentsize, info) != 0)
		return -1;
	if (!info->is_go && shoff != 0 && shnum != 0 &&
	    inspect_sections(f, shoff, shnum, shentsize, shstrndx, info) != 0)
		return -1;
	if (!info->is_go && (shoff == 0 || shnum == 0))
		info->is_go = scan_for_go_magic(f);
	return 0;
}

int sl_elf_decode(const struct sl_elf_src *src, struct sl_elf_info *info)
{
	unsigned char hdr[sizeof(Elf64_Ehdr)];
	struct elf_file f = {.src = src};
	memset(info, 0, sizeof(*info));
	long n = src->read(src->ctx, hdr, sizeof(hdr), 0);
	if (n < 0)
		return -1;
	/* A short first read is taken as the file's end, as before. */
	if ((size_t)n < EI_NIDENT || memcmp(hdr, ELFMAG, SELFMAG) != 0)
		return 1;
	info->elf_class = hdr[EI_CLASS];
	info->elf_data = hdr[EI_DATA];
	f.is64 = hdr[EI_CLASS] == ELFCLASS64;
	f.big_endian = hdr[EI_DATA] == ELFDATA2MSB;
	if ((hdr[EI_CLASS] != ELFCLASS32 && hdr[EI_CLASS] != ELFCLASS64) ||
	    (hdr[EI_DATA] != ELFDATA2LSB && hdr[EI_DATA] != ELFDATA2MSB) ||
	    (size_t)n < (f.is64 ? sizeof(Elf64_Ehdr) : sizeof(Elf32_Ehdr)))
		return -1;
	return inspect_open(&f, hdr, info);
}

/* The next word of s[*i..n) (blank-separated, ends at a newline) into w;
 * returns its length, 0 if none or it does not fit. */
static size_t next_word(const char *s, size_t n, size_t *i, char *w, size_t wlen)
{
	while (*i < n && (s[*i] == ' ' || s[*i] == '\t'))
		(*i)++;
	size_t start = *i;
	while (*i < n && s[*i] != ' ' && s[*i] != '\t' && s[*i] != '\n' && s[*i] != '\0')
		(*i)++;
	size_t len = *i - start;
	if (len == 0 || len >= wlen)
		return 0;
	memcpy(w, s + start, len);
	w[len] = '\0';
	return len;
}

int sl_elf_script(const char *buf, size_t n, char *out, size_t outlen)
{
	char arg[256];
	size_t i = 2;
	if (n < 3 || buf[0] != '#' || buf[1] != '!' || next_word(buf, n, &i, out, outlen) == 0)
		return 0;
	const char *base = strrchr(out, '/');
	base = base != NULL ? base + 1 : out;
	if (strcmp(base, "env") != 0 || next_word(buf, n, &i, arg, sizeof(arg)) == 0)
		return 1;
	/* "#!/usr/bin/env [-S] NAME": the program that runs is NAME. */
	if (strcmp(arg, "-S") == 0 && next_word(buf, n, &i, arg, sizeof(arg)) == 0)
		return 1;
	if (arg[0] == '-' || strlen(arg) >= outlen)
		return 1;
	memcpy(out, arg, strlen(arg) + 1);
	return 2;
}
