/* SPDX-License-Identifier: MIT */
/*
 * http.c - parse the --listen address and a scraper's request head (http.h).
 *
 * The server has three documents (/metrics, the page at /, its data at
 * /api/stat), so the request parser only has to tell their GET and HEAD
 * from everything else, strictly: a head that is not an HTTP/1.x request
 * line is refused with 400 rather than guessed at.
 */
#include "http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

bool sl__http_is_loopback(const struct sockaddr *addr)
{
	if (addr->sa_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
		return (ntohl(a->sin_addr.s_addr) >> 24) == 127;
	}
	if (addr->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)addr)->sin6_addr;
		if (IN6_IS_ADDR_LOOPBACK(a))
			return true;
		return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
	}
	return false;
}

/* A decimal port 0..65535 spanning all of s. */
static int parse_port(const char *s, unsigned *port)
{
	unsigned v = 0;
	if (*s == '\0' || strlen(s) > 5)
		return -1;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (unsigned)(*s - '0');
	}
	if (v > 65535)
		return -1;
	*port = v;
	return 0;
}

int sl__http_parse_listen(const char *text, bool any, struct sockaddr_storage *addr, socklen_t *len,
			  char *err, size_t errlen)
{
	char host[64];
	const char *port_text;
	memset(addr, 0, sizeof(*addr));
	for (size_t i = 0; text[i] != '\0'; i++)
		if ((unsigned char)text[i] <= ' ' || (unsigned char)text[i] >= 0x7f) {
			snprintf(err, errlen,
				 "--listen: expected [ADDR:]PORT, found byte 0x%02x at offset %zu",
				 (unsigned char)text[i], i);
			return -1;
		}
	if (text[0] == '[') {
		const char *close = strchr(text, ']');
		if (close == NULL || close[1] != ':' ||
		    (size_t)(close - text - 1) >= sizeof(host)) {
			snprintf(err, errlen, "--listen %s: expected [IPV6]:PORT, e.g. [::1]:9464",
				 text);
			return -1;
		}
		memcpy(host, text + 1, (size_t)(close - text - 1));
		host[close - text - 1] = '\0';
		port_text = close + 2;
	} else {
		const char *colon = strrchr(text, ':');
		if (colon == NULL) {
			snprintf(host, sizeof(host), "127.0.0.1");
			port_text = text;
		} else {
			if (strchr(text, ':') != colon || (size_t)(colon - text) >= sizeof(host)) {
				snprintf(err, errlen,
					 "--listen %s: expected ADDR:PORT with an IPv4 address or "
					 "[IPV6]:PORT, e.g. 127.0.0.1:9464",
					 text);
				return -1;
			}
			memcpy(host, text, (size_t)(colon - text));
			host[colon - text] = '\0';
			if (host[0] == '\0')
				snprintf(host, sizeof(host), "127.0.0.1");
			port_text = colon + 1;
		}
	}
	unsigned port;
	if (parse_port(port_text, &port) != 0) {
		snprintf(err, errlen,
			 "--listen %s: expected a port from 0 to 65535 after the address, "
			 "got \"%s\"",
			 text, port_text);
		return -1;
	}
	struct sockaddr_in *a4 = (struct sockaddr_in *)addr;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)addr;
	if (text[0] != '[' && inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)port);
		*len = sizeof(*a4);
	} else if (text[0] == '[' && inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*a6);
	} else {
		snprintf(err, errlen,
			 "--listen %s: \"%s\" is not a numeric %s address (host names are not "
			 "resolved)",
			 text, host, text[0] == '[' ? "IPv6" : "IPv4");
		return -1;
	}
	if (!any && !sl__http_is_loopback((struct sockaddr *)addr)) {
		snprintf(err, errlen,
			 "--listen %s: not a loopback address; add --listen-any to serve the "
			 "counters to other hosts",
			 text);
		return -1;
	}
	return 0;
}

/* The index just past the first "\n\n" or "\n\r\n" in buf, or 0. */
static size_t head_end(const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (i + 1 < len && buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

enum sl_http_req sl__http_parse_request(const char *buf, size_t len)
{
	enum { LINE_MAX_BYTES = 1024 };
	size_t end = head_end(buf, len);
	if (end == 0) {
		const char *nl = memchr(buf, '\n', len);
		size_t line = nl != NULL ? (size_t)(nl - buf) : len;
		return line > LINE_MAX_BYTES ? SL_HTTP_BAD : SL_HTTP_INCOMPLETE;
	}
	for (size_t i = 0; i < end; i++) {
		unsigned char c = (unsigned char)buf[i];
		if ((c < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f)
			return SL_HTTP_BAD;
	}
	const char *nl = memchr(buf, '\n', end);
	size_t line = (size_t)(nl - buf);
	if (line > 0 && buf[line - 1] == '\r')
		line--;
	if (line == 0 || line > LINE_MAX_BYTES)
		return SL_HTTP_BAD;
	/* METHOD SP TARGET SP VERSION, each non-empty, single spaces. */
	const char *sp1 = memchr(buf, ' ', line);
	if (sp1 == NULL || sp1 == buf)
		return SL_HTTP_BAD;
	const char *target = sp1 + 1;
	const char *sp2 = memchr(target, ' ', line - (size_t)(target - buf));
	if (sp2 == NULL || sp2 == target)
		return SL_HTTP_BAD;
	const char *version = sp2 + 1;
	size_t vlen = line - (size_t)(version - buf);
	if (vlen != 8 || memcmp(version, "HTTP/1.", 7) != 0 || version[7] < '0' || version[7] > '9')
		return SL_HTTP_BAD;
	size_t mlen = (size_t)(sp1 - buf), tlen = (size_t)(sp2 - target);
	for (size_t i = 0; i < mlen; i++)
		if (buf[i] < 'A' || buf[i] > 'Z')
			return SL_HTTP_BAD;
	if (memchr(target, '\t', tlen) != NULL || target[0] != '/')
		return SL_HTTP_BAD;
	bool get = mlen == 3 && memcmp(buf, "GET", 3) == 0;
	bool head = mlen == 4 && memcmp(buf, "HEAD", 4) == 0;
	if (!get && !head)
		return SL_HTTP_BAD_METHOD;
	size_t path = strcspn(target, "? ");
	if (path > tlen)
		path = tlen;
	if (path == 8 && memcmp(target, "/metrics", 8) == 0)
		return get ? SL_HTTP_METRICS : SL_HTTP_METRICS_HEAD;
	if (path == 1 || (path == 11 && memcmp(target, "/index.html", 11) == 0))
		return get ? SL_HTTP_PAGE : SL_HTTP_PAGE_HEAD;
	if (path == 9 && memcmp(target, "/api/stat", 9) == 0)
		return get ? SL_HTTP_API : SL_HTTP_API_HEAD;
	return SL_HTTP_NOT_FOUND;
}

/* The value of header `name` (lower case, with its colon) in the complete
 * head buf[0..end), trimmed, in *v and *vlen; false if there is none. The
 * first such header counts. */
static bool header_value(const char *buf, size_t end, const char *name, const char **v,
			 size_t *vlen)
{
	const size_t nlen = strlen(name);
	for (const char *p = memchr(buf, '\n', end); p != NULL && (size_t)(p - buf) + 1 < end;) {
		const char *line = p + 1;
		const char *nl = memchr(line, '\n', end - (size_t)(line - buf));
		size_t n = nl != NULL ? (size_t)(nl - line) : end - (size_t)(line - buf);
		if (n > 0 && line[n - 1] == '\r')
			n--;
		if (n >= nlen && strncasecmp(line, name, nlen) == 0) {
			const char *b = line + nlen, *e = line + n;
			while (b < e && (*b == ' ' || *b == '\t'))
				b++;
			while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
				e--;
			*v = b;
			*vlen = (size_t)(e - b);
			return true;
		}
		p = nl;
	}
	return false;
}

bool sl__http_host_loopback(const char *buf, size_t len, const char *self)
{
	const size_t end = head_end(buf, len);
	const char *v;
	size_t n;
	if (end == 0)
		return false;
	if (!header_value(buf, end, "host:", &v, &n))
		return true; /* HTTP/1.0 without a name: nothing to rebind */
	char host[64];
	size_t h = n;
	if (n > 0 && v[0] == '[') {
		const char *close = memchr(v, ']', n);
		if (close == NULL)
			return false;
		h = (size_t)(close - v) + 1;
	} else {
		const char *colon = memchr(v, ':', n);
		h = colon != NULL ? (size_t)(colon - v) : n;
	}
	/* After the name: nothing, or ":" and a port. */
	if (h < n && (v[h] != ':' || h + 1 == n || h + 6 < n))
		return false;
	for (size_t i = h + 1; i < n; i++)
		if (v[i] < '0' || v[i] > '9')
			return false;
	if (h == 0 || h >= sizeof(host))
		return false;
	memcpy(host, v, h);
	host[h] = '\0';
	const size_t ll = strlen(".localhost");
	if (strcasecmp(host, "localhost") == 0 ||
	    (h > ll && strcasecmp(host + h - ll, ".localhost") == 0) ||
	    (self != NULL && self[0] != '\0' && strcasecmp(host, self) == 0))
		return true;
	struct sockaddr_in a4 = {.sin_family = AF_INET};
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
	if (inet_pton(AF_INET, host, &a4.sin_addr) == 1)
		return sl__http_is_loopback((struct sockaddr *)&a4);
	if (h > 2 && host[0] == '[') {
		host[h - 1] = '\0';
		return inet_pton(AF_INET6, host + 1, &a6.sin6_addr) == 1 &&
		       sl__http_is_loopback((struct sockaddr *)&a6);
	}
	return false;
}

bool sl__http_bearer_ok(const char *buf, size_t len, const char *token)
{
	const size_t tlen = strlen(token), end = head_end(buf, len);
	const char *v;
	size_t n;
	if (tlen == 0 || end == 0 || !header_value(buf, end, "authorization:", &v, &n))
		return false;
	/* "Bearer" (any case), spaces, then the token, compared in time that
	 * does not depend on where they differ. */
	if (n <= 7 || strncasecmp(v, "bearer", 6) != 0 || (v[6] != ' ' && v[6] != '\t'))
		return false;
	size_t k = 7;
	while (k < n && (v[k] == ' ' || v[k] == '\t'))
		k++;
	size_t vl = n - k;
	unsigned char diff = vl != tlen;
	for (size_t i = 0; i < tlen; i++)
		diff |= (unsigned char)(token[i] ^ (i < vl ? v[k + i] : 0));
	return diff == 0;
}
