/* SPDX-License-Identifier: MIT */
/*
 * test_cli_http.c - the --listen address parser and the request-head
 * classifier of `sluice stat --listen` (cli/http.c), and the message of
 * test_assert.h's assert_dec_equal.
 *
 * The launcher's sources are in no library the tests link, so http.c is
 * included directly (as test_cli_elf.c does with elf.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "test_assert.h"

#include "../cli/http.c"

struct listen_case {
	const char *text;
	bool any;
	int family; /* 0: refused */
	const char *addr;
	unsigned port;
	const char *err; /* refused: the whole message */
};

static const struct listen_case listen_cases[] = {
	{"9464", false, AF_INET, "127.0.0.1", 9464, NULL},
	{":0", false, AF_INET, "127.0.0.1", 0, NULL},
	{"127.0.0.1:65535", false, AF_INET, "127.0.0.1", 65535, NULL},
	{"127.45.6.7:80", false, AF_INET, "127.45.6.7", 80, NULL},
	{"[::1]:9464", false, AF_INET6, "::1", 9464, NULL},
	{"[::ffff:127.0.0.2]:1", false, AF_INET6, "::ffff:127.0.0.2", 1, NULL},
	{"0.0.0.0:9464", true, AF_INET, "0.0.0.0", 9464, NULL},
	{"[::]:9464", true, AF_INET6, "::", 9464, NULL},
	{"0.0.0.0:9464", false, 0, NULL, 0,
	 "--listen 0.0.0.0:9464: not a loopback address; add --listen-any to serve the counters "
	 "to other hosts"},
	{"[::]:1", false, 0, NULL, 0,
	 "--listen [::]:1: not a loopback address; add --listen-any to serve the counters to "
	 "other hosts"},
	{"128.0.0.1:1", false, 0, NULL, 0,
	 "--listen 128.0.0.1:1: not a loopback address; add --listen-any to serve the counters "
	 "to other hosts"},
	{"localhost:9464", false, 0, NULL, 0,
	 "--listen localhost:9464: \"localhost\" is not a numeric IPv4 address (host names are "
	 "not resolved)"},
	{"127.0.0.1:65536", false, 0, NULL, 0,
	 "--listen 127.0.0.1:65536: expected a port from 0 to 65535 after the address, got "
	 "\"65536\""},
	{"127.0.0.1:", false, 0, NULL, 0,
	 "--listen 127.0.0.1:: expected a port from 0 to 65535 after the address, got \"\""},
	{"127.0.0.1:+80", false, 0, NULL, 0,
	 "--listen 127.0.0.1:+80: expected a port from 0 to 65535 after the address, got "
	 "\"+80\""},
	{"::1:80", false, 0, NULL, 0,
	 "--listen ::1:80: expected ADDR:PORT with an IPv4 address or [IPV6]:PORT, e.g. "
	 "127.0.0.1:9464"},
	{"[::1]80", false, 0, NULL, 0, "--listen [::1]80: expected [IPV6]:PORT, e.g. [::1]:9464"},
	{"[127.0.0.1]:80", false, 0, NULL, 0,
	 "--listen [127.0.0.1]:80: \"127.0.0.1\" is not a numeric IPv6 address (host names are "
	 "not resolved)"},
	{"", false, 0, NULL, 0,
	 "--listen : expected a port from 0 to 65535 after the address, got \"\""},
};

static void test_http_listen_cases(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(listen_cases) / sizeof(listen_cases[0]); i++) {
		const struct listen_case *c = &listen_cases[i];
		struct sockaddr_storage ss;
		socklen_t len = 0;
		char err[256] = "";
		int rc = sl__http_parse_listen(c->text, c->any, &ss, &len, err, sizeof(err));
		print_message("--listen \"%s\"%s -> %d %s\n", c->text,
			      c->any ? " --listen-any" : "", rc, err);
		if (c->family == 0) {
			assert_dec_equal(rc, -1);
			assert_string_equal(err, c->err);
			continue;
		}
		assert_dec_equal(rc, 0);
		assert_dec_equal(ss.ss_family, c->family);
		char text[INET6_ADDRSTRLEN];
		if (c->family == AF_INET) {
			const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
			assert_dec_equal(len, sizeof(*a));
			assert_dec_equal(ntohs(a->sin_port), c->port);
			inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
		} else {
			const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
			assert_dec_equal(len, sizeof(*a));
			assert_dec_equal(ntohs(a->sin6_port), c->port);
			inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text));
		}
		assert_string_equal(text, c->addr);
	}
}

struct req_case {
	const char *head;
	enum sl_http_req want;
};

static const struct req_case req_cases[] = {
	{"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n", SL_HTTP_METRICS},
	{"GET /metrics HTTP/1.0\r\n\r\n", SL_HTTP_METRICS},
	{"GET /metrics?name[]=x HTTP/1.1\r\n\r\n", SL_HTTP_METRICS},
	{"GET /metrics HTTP/1.1\n\n", SL_HTTP_METRICS},
	{"HEAD /metrics HTTP/1.1\r\n\r\n", SL_HTTP_METRICS_HEAD},
	{"GET / HTTP/1.1\r\n\r\n", SL_HTTP_PAGE},
	{"GET /?x=1 HTTP/1.1\r\n\r\n", SL_HTTP_PAGE},
	{"HEAD / HTTP/1.1\r\n\r\n", SL_HTTP_PAGE_HEAD},
	{"GET /index.html HTTP/1.1\r\n\r\n", SL_HTTP_PAGE},
	{"GET /index.htm HTTP/1.1\r\n\r\n", SL_HTTP_NOT_FOUND},
	{"GET // HTTP/1.1\r\n\r\n", SL_HTTP_NOT_FOUND},
	{"GET /api/stat HTTP/1.1\r\n\r\n", SL_HTTP_API},
	{"HEAD /api/stat?t=5 HTTP/1.1\r\n\r\n", SL_HTTP_API_HEAD},
	{"GET /api/stats HTTP/1.1\r\n\r\n", SL_HTTP_NOT_FOUND},
	{"GET /api/ HTTP/1.1\r\n\r\n", SL_HTTP_NOT_FOUND},
	{"GET /metricsx HTTP/1.1\r\n\r\n", SL_HTTP_NOT_FOUND},
	{"GET /metric HTTP/1.1\r\n\r\n", SL_HTTP_NOT_FOUND},
	{"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", SL_HTTP_BAD_METHOD},
	{"DELETE /metrics HTTP/1.1\r\n\r\n", SL_HTTP_BAD_METHOD},
	{"get /metrics HTTP/1.1\r\n\r\n", SL_HTTP_BAD},
	{"GET /metrics HTTP/2.0\r\n\r\n", SL_HTTP_BAD},
	{"GET /metrics HTTP/1.1 x\r\n\r\n", SL_HTTP_BAD},
	{"GET  /metrics HTTP/1.1\r\n\r\n", SL_HTTP_BAD},
	{"GET metrics HTTP/1.1\r\n\r\n", SL_HTTP_BAD},
	{"GET /metrics\r\n\r\n", SL_HTTP_BAD},
	{"\r\n\r\n", SL_HTTP_BAD},
	{"GET /metrics HTTP/1.1\r\nX: a\001b\r\n\r\n", SL_HTTP_BAD},
	{"GET /metrics HTTP/1.1\r\n", SL_HTTP_INCOMPLETE},
	{"GET /metrics HTTP/1.1\r\nHost: x\r\n", SL_HTTP_INCOMPLETE},
	{"GET /met", SL_HTTP_INCOMPLETE},
	{"", SL_HTTP_INCOMPLETE},
};

static void test_http_request_cases(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(req_cases) / sizeof(req_cases[0]); i++) {
		print_message("case %zu\n", i);
		assert_dec_equal(sl__http_parse_request(req_cases[i].head,
							strlen(req_cases[i].head)),
				 req_cases[i].want);
	}
}

/* A head is classified from its bytes alone: the same head cut at every
 * length is INCOMPLETE until its last byte, and no byte past len is read
 * (the copy is exactly len bytes long, so ASan would see an overread). */
static void test_http_request_every_prefix(void **state)
{
	(void)state;
	const char *full = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
	size_t n = strlen(full);
	for (size_t len = 0; len <= n; len++) {
		char *copy = malloc(len ? len : 1);
		assert_non_null(copy);
		memcpy(copy, full, len);
		assert_dec_equal(sl__http_parse_request(copy, len),
				 len == n ? SL_HTTP_METRICS : SL_HTTP_INCOMPLETE);
		free(copy);
	}
}

/* A request line over 1024 bytes is refused before its end arrives. */
static void test_http_request_long_line(void **state)
{
	(void)state;
	static char buf[2048];
	memcpy(buf, "GET /", 5);
	memset(buf + 5, 'a', sizeof(buf) - 5);
	assert_dec_equal(sl__http_parse_request(buf, 1024), SL_HTTP_INCOMPLETE);
	assert_dec_equal(sl__http_parse_request(buf, 1025), SL_HTTP_BAD);
}

static void test_http_loopback(void **state)
{
	(void)state;
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(0x7f000001);
	assert_true(sl__http_is_loopback((struct sockaddr *)&a));
	a.sin_addr.s_addr = htonl(0x7fffffff);
	assert_true(sl__http_is_loopback((struct sockaddr *)&a));
	a.sin_addr.s_addr = htonl(0x80000000);
	assert_false(sl__http_is_loopback((struct sockaddr *)&a));
	a.sin_addr.s_addr = htonl(0x0a000001);
	assert_false(sl__http_is_loopback((struct sockaddr *)&a));
	struct sockaddr_un_like {
		sa_family_t family;
	} u = {AF_UNIX};
	assert_false(sl__http_is_loopback((struct sockaddr *)&u));
}

/* The Host check against DNS rebinding: loopback names and literals, with
 * or without a port, pass; any other name, a malformed port or a second
 * colon does not; no Host header passes. */
static void test_http_host(void **state)
{
	(void)state;
	static const struct {
		const char *host; /* NULL: no Host header */
		bool ok;
	} cases[] = {
		{NULL, true},
		{"localhost", true},
		{"LocalHost:9464", true},
		{"127.0.0.1", true},
		{"127.0.0.1:9464", true},
		{"127.255.3.4:1", true},
		{"[::1]", true},
		{"[::1]:9464", true},
		{"  127.0.0.1:80  ", true},
		{"box", true},
		{"BOX:9464", true},
		{"box.evil.example", false},
		{"grafana.localhost:3000", true},
		{".localhost", false},
		{"evil.example", false},
		{"evil.example:9464", false},
		{"localhost.evil.example", false},
		{"127.0.0.1.evil.example", false},
		{"128.0.0.1:9464", false},
		{"10.0.0.1", false},
		{"[::2]:9464", false},
		{"[::ffff:127.0.0.1]", true},
		{"[::1", false},
		{"127.0.0.1:", false},
		{"127.0.0.1:99999999", false},
		{"127.0.0.1:80:80", false},
		{"127.0.0.1:8x", false},
		{"", false},
		{"0x7f000001", false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char head[256];
		if (cases[i].host != NULL)
			snprintf(head, sizeof(head),
				 "GET / HTTP/1.1\r\nAccept: */*\r\nHost: %s\r\n\r\n",
				 cases[i].host);
		else
			snprintf(head, sizeof(head), "GET / HTTP/1.0\r\n\r\n");
		print_message("host %s\n", cases[i].host != NULL ? cases[i].host : "(none)");
		assert_int_equal(sl__http_host_loopback(head, strlen(head), "box"), cases[i].ok);
	}
	/* Only the head counts: a Host line in the body is not read. */
	const char *body = "GET / HTTP/1.1\r\n\r\nHost: evil.example\r\n\r\n";
	assert_true(sl__http_host_loopback(body, strlen(body), NULL));
	/* An incomplete head is never loopback. */
	const char *open_head = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n";
	assert_false(sl__http_host_loopback(open_head, strlen(open_head), NULL));
	/* Without a name of its own, "box" is another host. */
	const char *box = "GET / HTTP/1.1\r\nHost: box\r\n\r\n";
	assert_false(sl__http_host_loopback(box, strlen(box), NULL));
}

/* assert_dec_equal's failure message: expressions, then both values in
 * decimal, signed or unsigned by the operands' type. */
static void test_http_bearer(void **state)
{
	(void)state;
	static const struct {
		const char *head;
		const char *token;
		bool ok;
	} cases[] = {
		{"GET /metrics HTTP/1.1\r\nAuthorization: Bearer abc\r\n\r\n", "abc", true},
		{"GET /metrics HTTP/1.1\r\nauthorization:bearer   abc  \r\n\r\n", "abc", true},
		{"GET /metrics HTTP/1.1\nHost: x\nAUTHORIZATION: BEARER abc\n\n", "abc", true},
		{"GET /metrics HTTP/1.1\r\nAuthorization: Bearer abcd\r\n\r\n", "abc", false},
		{"GET /metrics HTTP/1.1\r\nAuthorization: Bearer ab\r\n\r\n", "abc", false},
		{"GET /metrics HTTP/1.1\r\nAuthorization: Basic abc\r\n\r\n", "abc", false},
		{"GET /metrics HTTP/1.1\r\nAuthorization: Bearerabc\r\n\r\n", "abc", false},
		{"GET /metrics HTTP/1.1\r\nX-Authorization: Bearer abc\r\n\r\n", "abc", false},
		{"GET /Authorization: Bearer abc HTTP/1.1\r\n\r\n", "abc", false},
		{"GET /metrics HTTP/1.1\r\nAuthorization: Bearer abc\r\n", "abc", false},
		{"GET /metrics HTTP/1.1\r\n\r\nAuthorization: Bearer abc\r\n\r\n", "abc", false},
		{"GET /metrics HTTP/1.1\r\nAuthorization: Bearer \r\n\r\n", "", false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool got = sl__http_bearer_ok(cases[i].head, strlen(cases[i].head), cases[i].token);
		if (got != cases[i].ok)
			fail_msg("case %zu (%s): %d, expected %d", i, cases[i].head, got,
				 cases[i].ok);
	}
}

static void test_assert_dec_message(void **state)
{
	(void)state;
	char buf[128];
	uint64_t wait_ns = 250000001;
	sl_test_dec_message(buf, sizeof(buf), "d.wait_ns", "250 * MS",
			    SL_TEST_IS_SIGNED(wait_ns + 250000000ull), wait_ns, 250000000ull);
	assert_string_equal(buf, "d.wait_ns == 250 * MS: 250000001 != 250000000");
	sl_test_dec_message(buf, sizeof(buf), "a", "b", SL_TEST_IS_SIGNED(UINT64_MAX + 0),
			    UINT64_MAX, 0);
	assert_string_equal(buf, "a == b: 18446744073709551615 != 0");
	int rc = -1;
	sl_test_dec_message(buf, sizeof(buf), "rc", "0", SL_TEST_IS_SIGNED(rc + 0), (uintmax_t)rc,
			    0);
	assert_string_equal(buf, "rc == 0: -1 != 0");
	/* A uint8_t or uint16_t promotes to int: signed, still right. */
	uint16_t port = 65535;
	sl_test_dec_message(buf, sizeof(buf), "port", "1", SL_TEST_IS_SIGNED(port + 1), port, 1);
	assert_string_equal(buf, "port == 1: 65535 != 1");
	assert_dec_equal(wait_ns, 250000001);
	assert_dec_equal(rc, -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_http_listen_cases),
		cmocka_unit_test(test_http_request_cases),
		cmocka_unit_test(test_http_request_every_prefix),
		cmocka_unit_test(test_http_request_long_line),
		cmocka_unit_test(test_http_loopback),
		cmocka_unit_test(test_http_bearer),
		cmocka_unit_test(test_http_host),
		cmocka_unit_test(test_assert_dec_message),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
