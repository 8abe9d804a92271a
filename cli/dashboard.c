/* SPDX-License-Identifier: MIT */
/*
 * dashboard.c - the page `sluice stat --listen` serves at /: dashboard.html,
 * built into the launcher (.incbin: the file is the source, nothing to
 * install beside the binary), with the tables of every process (stat.c's
 * FMT_HTML) where its marker stands. The script in the page draws what
 * /api/stat (sl__cli_stat_api) gives it every second; the server keeps no
 * history, so nothing is sampled while nobody looks.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* dashboard.html, NUL-terminated. */
__asm__(".pushsection .rodata\n"
	".global sl__dashboard_page\n"
	".type sl__dashboard_page, @object\n"
	"sl__dashboard_page:\n"
	".incbin \"cli/dashboard.html\"\n"
	".byte 0\n"
	".size sl__dashboard_page, . - sl__dashboard_page\n"
	".popsection\n");
extern const char sl__dashboard_page[];

int sl__cli_dashboard(FILE *out)
{
	static const char marker[] = "<!--TABLES-->";
	const char *at = strstr(sl__dashboard_page, marker);
	if (at == NULL)
		return -1;
	fwrite(sl__dashboard_page, 1, (size_t)(at - sl__dashboard_page), out);
	if (sl__cli_stat_html(out) != 0)
		return -1;
	fputs(at + sizeof(marker) - 1, out);
	return ferror(out) ? -1 : 0;
}
