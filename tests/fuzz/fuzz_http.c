/* SPDX-License-Identifier: MIT */
/*
 * fuzz_http.c - libFuzzer target for the two parsers of `sluice stat
 * --listen` (cli/http.c): the ADDR:PORT text and the request head.
 *
 * Input: the first byte picks the parser (even: request head, odd: listen
 * text; bit 1 is --listen-any); the rest is the text, copied into a buffer
 * of exactly its size so ASan sees any read past it. Properties checked:
 *   - the request classifier returns one of its enum values, and a head it
 *     calls INCOMPLETE stays INCOMPLETE or becomes complete when cut
 *     shorter (never a document from a prefix of a BAD head);
 *   - the Host check passes only complete heads, and only loopback names;
 *   - the listen parser returns 0 with an AF_INET/AF_INET6 address that is
 *     loopback unless --listen-any, or -1 with a one-line message starting
 *     "--listen".
 * A violated property aborts, which libFuzzer reports with the input.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cli/http.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_http: %s\n", what);
	abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 16384)
		return 0;
	uint8_t mode = data[0];
	size_t n = size - 1;
	char *text = malloc(n + 1);
	if (text == NULL)
		return 0;
	memcpy(text, data + 1, n);
	if ((mode & 1) == 0) {
		enum sl_http_req r = sl__http_parse_request(text, n);
		if (r < SL_HTTP_INCOMPLETE || r > SL_HTTP_BAD)
			fail("request: value out of range");
		if (r == SL_HTTP_BAD && n > 0) {
			enum sl_http_req p = sl__http_parse_request(text, n - 1);
			if (p == SL_HTTP_METRICS || p == SL_HTTP_METRICS_HEAD ||
			    p == SL_HTTP_PAGE || p == SL_HTTP_PAGE_HEAD || p == SL_HTTP_API ||
			    p == SL_HTTP_API_HEAD)
				fail("request: a prefix of a bad head was served");
		}
		/* The bearer check: never a match for an empty token, nor for a
		 * head that holds no "Bearer tok1" line. */
		if (sl__http_bearer_ok(text, n, ""))
			fail("bearer: an empty token matched");
		if (sl__http_bearer_ok(text, n, "tok1") && memmem(text, n, "tok1", 4) == NULL)
			fail("bearer: matched a token the head does not hold");
		/* The Host check: only a complete head can pass, and one whose
		 * Host names a host passes only if it names a loopback one. */
		if (sl__http_host_loopback(text, n, NULL)) {
			if (head_end(text, n) == 0)
				fail("host: an incomplete head passed");
			const char *v;
			size_t vl;
			char low[64];
			if (header_value(text, head_end(text, n), "host:", &v, &vl)) {
				size_t k = vl < sizeof(low) ? vl : sizeof(low);
				for (size_t i = 0; i < k; i++)
					low[i] = (char)tolower((unsigned char)v[i]);
				if (memmem(low, k, "127.", 4) == NULL &&
				    memmem(low, k, "::", 2) == NULL &&
				    memmem(low, k, "localhost", 9) == NULL)
					fail("host: a non-loopback name passed");
			}
		}
	} else {
		text[n] = '\0';
		bool any = (mode & 2) != 0;
		struct sockaddr_storage ss;
		socklen_t len = 0;
		char err[256];
		err[0] = '\0';
		int rc = sl__http_parse_listen(text, any, &ss, &len, err, sizeof(err));
		if (rc == 0) {
			if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)
				fail("listen: accepted a family other than inet/inet6");
			if (!any && !sl__http_is_loopback((struct sockaddr *)&ss))
				fail("listen: accepted a non-loopback address without --listen-any");
		} else if (rc != -1 || strncmp(err, "--listen", 8) != 0 ||
			   strchr(err, '\n') != NULL) {
			fail("listen: refused without a one-line --listen message");
		}
	}
	free(text);
	return 0;
}
