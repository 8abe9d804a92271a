/* SPDX-License-Identifier: MIT */
/*
 * http.h - the pure parts of `sluice stat --listen`: the ADDR:PORT text and
 * the HTTP request head a scraper sends.
 *
 * Overview
 * --------
 * Both parsers are pure functions of their text (no sockets, no
 * environment, no allocation), so the unit test and the libFuzzer target
 * (tests/fuzz/fuzz_http.c) exercise exactly what the server runs. The
 * server itself is metrics_http.c.
 *
 * API
 * ---
 * Every function is reentrant and thread-safe: no state outside its
 * arguments.
 */
#ifndef SLUICE_CLI_HTTP_H
#define SLUICE_CLI_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/*
 * Parse the --listen text into *addr and *len: "PORT" or ":PORT" (127.0.0.1),
 * "A.B.C.D:PORT" or "[IPV6]:PORT", numeric addresses only (no host names:
 * a name could resolve to anything), PORT a decimal 0 to 65535 (0: the
 * kernel chooses); a space, control or non-ASCII byte is refused. Unless `any`, the address must be a loopback one
 * (127.0.0.0 to 127.255.255.255, ::1, and ::ffff:127.x.y.z). Returns 0, or -1 with a one-line
 * reason (naming the text and what was expected) in err.
 */
int sl__http_parse_listen(const char *text, bool any, struct sockaddr_storage *addr, socklen_t *len,
			  char *err, size_t errlen);

/* True if addr is a loopback address (see above). */
bool sl__http_is_loopback(const struct sockaddr *addr);

/* What a request head asks for. */
enum sl_http_req {
	SL_HTTP_INCOMPLETE,   /* no blank line yet: read more */
	SL_HTTP_METRICS,      /* GET /metrics (a query string is ignored) */
	SL_HTTP_METRICS_HEAD, /* HEAD /metrics */
	SL_HTTP_PAGE,         /* GET / or /index.html: the live page */
	SL_HTTP_PAGE_HEAD,
	SL_HTTP_API, /* GET /api/stat: the page's data, JSON */
	SL_HTTP_API_HEAD,
	SL_HTTP_NOT_FOUND,  /* GET or HEAD of another path */
	SL_HTTP_BAD_METHOD, /* another method */
	SL_HTTP_BAD,        /* not an HTTP/1.x request line */
};

/*
 * Classify the request head in buf[0..len): the request line
 * "METHOD SP TARGET SP HTTP/1.D" ending in CRLF (or LF), then header lines
 * up to an empty line. Headers are not interpreted, but a control byte
 * other than CR, LF and TAB anywhere in the head makes it SL_HTTP_BAD, as
 * does a request line over 1024 bytes. buf need not be NUL-terminated.
 * Returns SL_HTTP_INCOMPLETE until the empty line has arrived (the caller
 * bounds how much it reads).
 */
enum sl_http_req sl__http_parse_request(const char *buf, size_t len);

/* True unless the complete request head buf[0..len) names, in its Host
 * header, a host other than "localhost" or a name under .localhost, a
 * 127.0.0.0/8 address, [::1] or `self` (this machine's name, or NULL),
 * with or without a port: a page of another site the browser was lured
 * to, whose name now resolves to 127.0.0.1 (DNS rebinding), names its own
 * host. A head without Host (HTTP/1.0) is taken as loopback. */
bool sl__http_host_loopback(const char *buf, size_t len, const char *self);

/* True if the complete request head buf[0..len) has an Authorization
 * header "Bearer TOKEN" (scheme in any case) whose TOKEN is `token`
 * (non-empty), compared in constant time. */
bool sl__http_bearer_ok(const char *buf, size_t len, const char *token);

#endif /* SLUICE_CLI_HTTP_H */
