/*
 * elf.c - read just enough of an ELF executable to know whether LD_PRELOAD
 * can reach its socket calls.
 *
 * A preloaded library only works when the dynamic loader runs (the file has
 * a PT_INTERP segment) and when the program calls the C library's socket
 * functions. Go programs do not: the Go runtime issues raw system calls even
 * when it is dynamically linked for cgo. So this file answers two questions
 * from the file itself, never from its name: "is there a PT_INTERP?" and
 * "was this built by the Go toolchain?". The second is answered by, in order,
 * a PT_NOTE segment holding a note named "Go" (the Go build ID, present even
 * when section headers are stripped), a section called .note.go.buildid or
 * .go.buildinfo, and, only for a file without section headers, a scan of the
 * first SCAN_MAX bytes for the build-info magic "\xff Go buildinf:".
 *
 * Both ELF classes and both byte orders are decoded field by field with
 * explicit byte order, so a big-endian 32-bit file is read correctly on a
 * little-endian 64-bit host. Field offsets come from <elf.h>'s structs, whose
 * layout is the one the ELF specification defines. Every count and offset
 * read from the file is bounds-checked before use; a corrupt file gives -1,
 * never a crash or a huge allocation.
 */
#include "internal.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TABLE_MAX (4u << 20)  /* largest header table or string table read */
#define NOTE_MAX (64u << 10)  /* largest PT_NOTE segment read */
#define SCAN_MAX (64u << 20)  /* bytes scanned for the Go build-info magic */
#define SCAN_CHUNK (64u << 10)

static const char go_buildinfo_magic[] = "\xff Go buildinf:";

/* An open ELF file and how to decode it. */
struct elf_file {
	int fd;
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

/* Pick the field's offset and size for the file's class. */
#define ELF_FIELD(f, type, field)                                                          \
	((f)->is64 ? offsetof(Elf64_##type, field) : offsetof(Elf32_##type, field)),      \
		((f)->is64 ? sizeof(((Elf64_##type *)0)->field)                             \
			   : sizeof(((Elf32_##type *)0)->field))

static uint64_t get_field(const struct elf_file *f, const unsigned char *rec, size_t off,
			  size_t size)
{
	return get_uint(f, rec + off, size);
}

/* Read exactly len bytes at off. Returns 0, or -1 (short file: EINVAL). */
static int read_at(const struct elf_file *f, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = pread(f->fd, (char *)buf + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = EINVAL;
			return -1;
		}
		done += (size_t)n;
	}
	return 0;
}

/* Read a table of `count` records of `entsize` bytes at `off` into a new
 * buffer (freed by the caller). Returns NULL with errno on error. */
static unsigned char *read_table(const struct elf_file *f, uint64_t off, uint64_t count,
				 uint64_t entsize, size_t min_entsize)
{
	if (entsize < min_entsize || count == 0 || count > TABLE_MAX / entsize) {
		errno = EINVAL;
		return NULL;
	}
	unsigned char *buf = malloc((size_t)(count * entsize));
	if (buf == NULL)
		return NULL;
	if (read_at(f, buf, (size_t)(count * entsize), off) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* True if the notes in buf[0..len) hold one named "Go". Notes are 4-byte
 * aligned records: namesz, descsz, type, then name and desc, each padded. */
static bool notes_have_go(const struct elf_file *f, const unsigned char *buf, size_t len)
{
	size_t pos = 0;
	while (len - pos >= 12) {
		uint64_t namesz = get_uint(f, buf + pos, 4);
		uint64_t descsz = get_uint(f, buf + pos + 4, 4);
		uint64_t name_pad = (namesz + 3) & ~(uint64_t)3;
		uint64_t desc_pad = (descsz + 3) & ~(uint64_t)3;
		pos += 12;
		if (name_pad > len - pos || desc_pad > len - pos - name_pad)
			return false;
		if ((namesz == 2 || (namesz == 3 && buf[pos + 2] == '\0')) &&
		    memcmp(buf + pos, "Go", 2) == 0)
			return true;
		pos += (size_t)(name_pad + desc_pad);
	}
	return false;
}

/* Scan the file's first SCAN_MAX bytes for the Go build-info magic. Chunks
 * overlap by the magic's length so a match across a boundary is found. */
static bool scan_for_go_magic(const struct elf_file *f)
{
	const size_t mlen = sizeof(go_buildinfo_magic) - 1;
	unsigned char *buf = malloc(SCAN_CHUNK);
	bool found = false;
	uint64_t off = 0;

	if (buf == NULL)
		return false;
	while (!found && off < SCAN_MAX) {
		ssize_t n = pread(f->fd, buf, SCAN_CHUNK, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < (ssize_t)mlen)
			break;
		found = memmem(buf, (size_t)n, go_buildinfo_magic, mlen) != NULL;
		off += (uint64_t)n - (mlen - 1);
	}
	free(buf);
	return found;
}

/* Walk the program headers: PT_INTERP and Go notes. */
static int inspect_segments(const struct elf_file *f, uint64_t phoff, uint64_t phnum,
			    uint64_t phentsize, struct sl__elf_info *info)
{
	size_t min = f->is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr);
	unsigned char *tab = read_table(f, phoff, phnum, phentsize, min);
	if (tab == NULL)
		return -1;
	for (uint64_t i = 0; i < phnum; i++) {
		const unsigned char *ph = tab + i * phentsize;
		uint64_t type = get_field(f, ph, ELF_FIELD(f, Phdr, p_type));
		if (type == PT_INTERP)
			info->has_interp = true;
		if (type != PT_NOTE || info->is_go)
			continue;
		uint64_t off = get_field(f, ph, ELF_FIELD(f, Phdr, p_offset));
		uint64_t size = get_field(f, ph, ELF_FIELD(f, Phdr, p_filesz));
		unsigned char *note;
		if (size == 0 || size > NOTE_MAX || (note = malloc((size_t)size)) == NULL)
			continue;
		if (read_at(f, note, (size_t)size, off) == 0)
			info->is_go = notes_have_go(f, note, (size_t)size);
		free(note);
	}
	free(tab);
	return 0;
}

/* Look for the Go sections by name. Returns 0, or -1 on a corrupt table. */
static int inspect_sections(const struct elf_file *f, uint64_t shoff, uint64_t shnum,
			    uint64_t shentsize, uint64_t shstrndx, struct sl__elf_info *info)
{
	size_t min = f->is64 ? sizeof(Elf64_Shdr) : sizeof(Elf32_Shdr);
	unsigned char *tab = read_table(f, shoff, shnum, shentsize, min);
	unsigned char *names = NULL;
	int rc = -1;

	if (tab == NULL)
		return -1;
	if (shstrndx == SHN_XINDEX)
		shstrndx = get_field(f, tab, ELF_FIELD(f, Shdr, sh_link));
	if (shstrndx == SHN_UNDEF || shstrndx >= shnum) {
		rc = 0; /* no section names: nothing to look for */
		goto out;
	}
	const unsigned char *strsh = tab + shstrndx * shentsize;
	uint64_t str_off = get_field(f, strsh, ELF_FIELD(f, Shdr, sh_offset));
	uint64_t str_size = get_field(f, strsh, ELF_FIELD(f, Shdr, sh_size));
	names = read_table(f, str_off, str_size, 1, 1);
	if (names == NULL)
		goto out;
	for (uint64_t i = 0; i < shnum; i++) {
		uint64_t name = get_field(f, tab + i * shentsize, ELF_FIELD(f, Shdr, sh_name));
		if (name >= str_size)
			continue;
		const char *s = (const char *)names + name;
		size_t max = (size_t)(str_size - name);
		if (strnlen(s, max) == max)
			continue; /* not NUL-terminated inside the table */
		if (strcmp(s, ".note.go.buildid") == 0 || strcmp(s, ".go.buildinfo") == 0)
			info->is_go = true;
	}
	rc = 0;
out:
	free(names);
	free(tab);
	return rc;
}

/* Decode the ELF header in hdr (EI_NIDENT + enough bytes for the class) and
 * walk the tables it points to. */
static int inspect_open(struct elf_file *f, const unsigned char *hdr, struct sl__elf_info *info)
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
		unsigned char *sh0 = read_table(f, shoff, 1, shentsize, min);
		if (sh0 == NULL)
			return -1;
		if (phnum == PN_XNUM)
			phnum = get_field(f, sh0, ELF_FIELD(f, Shdr, sh_info));
		if (shnum == 0)
			shnum = get_field(f, sh0, ELF_FIELD(f, Shdr, sh_size));
		free(sh0);
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

int sl__elf_inspect(const char *path, struct sl__elf_info *info)
{
	unsigned char hdr[sizeof(Elf64_Ehdr)];
	struct elf_file f = {.fd = -1};
	int rc = -1;

	memset(info, 0, sizeof(*info));
	f.fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f.fd < 0)
		return -1;
	ssize_t n = pread(f.fd, hdr, sizeof(hdr), 0);
	if (n < 0)
		goto out;
	if ((size_t)n < EI_NIDENT || memcmp(hdr, ELFMAG, SELFMAG) != 0) {
		rc = 1;
		goto out;
	}
	info->elf_class = hdr[EI_CLASS];
	info->elf_data = hdr[EI_DATA];
	f.is64 = hdr[EI_CLASS] == ELFCLASS64;
	f.big_endian = hdr[EI_DATA] == ELFDATA2MSB;
	if ((hdr[EI_CLASS] != ELFCLASS32 && hdr[EI_CLASS] != ELFCLASS64) ||
	    (hdr[EI_DATA] != ELFDATA2LSB && hdr[EI_DATA] != ELFDATA2MSB) ||
	    (size_t)n < (f.is64 ? sizeof(Elf64_Ehdr) : sizeof(Elf32_Ehdr))) {
		errno = EINVAL;
		goto out;
	}
	rc = inspect_open(&f, hdr, info);
out:
	if (f.fd >= 0) {
		int saved = errno;
		close(f.fd);
		errno = saved;
	}
	return rc;
}
