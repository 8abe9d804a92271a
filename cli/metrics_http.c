/* SPDX-License-Identifier: MIT */
/*
 * metrics_http.c - `sluice stat --listen ADDR:PORT`: serve GET /metrics, the
 * text `sluice stat --prometheus` prints, rendered afresh for each scrape,
 * until SIGINT or SIGTERM.
 *
 * One thread multiplexes every connection with ppoll(2), so a slow or
 * silent client never delays another: each connection has SL_HTTP_TIMEOUT_MS
 * in total to send its request head (at most SL_HTTP_REQ_MAX bytes) and
 * take the answer, and is closed when that runs out. At most SL_HTTP_CONNS
 * are open at once; when a new one arrives with all taken, what each has
 * sent is read (a complete head is answered), then the oldest connection
 * still sending its request is closed to make room (an idle connection
 * cannot lock scrapers out). Every answer carries
 * "Connection: close": a scraper reconnects per scrape, which on loopback
 * costs less than rendering. Rendering reads /dev/shm like `sluice stat`
 * (stat.c) and takes about a millisecond per hundred rules.
 *
 * Who: the counters are this user's, so a scraper on this host (a loopback
 * peer) is served only if the kernel names its socket's owner (peer.c, as
 * identd does) as this user, root, or an --allow-user; a peer on another
 * host (--listen-any) only with the --token-file's bearer token
 * (Prometheus's `authorization` scrape option). Decided when the
 * connection is accepted; the request is read either way, so the client
 * gets an answer.
 *
 * Answers: 200 for GET or HEAD /metrics (any query string ignored), 403 for
 * a scraper who may not read them, 401 (WWW-Authenticate: Bearer) for a
 * remote one without the token, 404 for another path, 405 for another
 * method, 400 for a head that is not HTTP/1.x, 431 for a head over
 * SL_HTTP_REQ_MAX, 500 if the text cannot be rendered (the user's private
 * directory is unusable, say).
 */
#include "http.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#define SL_HTTP_CONNS 32
#define SL_HTTP_REQ_MAX 8192
#define SL_HTTP_TIMEOUT_MS 5000

/* What a connection's peer may have (decided when it is accepted). */
enum peer_access {
	PEER_OK,     /* this user, root, or an --allow-user */
	PEER_DENIED, /* another local user, or one the kernel cannot name: 403 */
	PEER_TOKEN,  /* not on this host: only with the bearer token, else 401 */
};

struct conn {
	int fd; /* -1: free */
	enum peer_access access;
	uint64_t start_ms; /* accepted at; the deadline is start_ms + timeout */
	size_t rlen;       /* request bytes read so far */
	char *out;         /* the answer, malloc'd; NULL while reading */
	size_t olen, off;
	char req[SL_HTTP_REQ_MAX];
};

static volatile sig_atomic_t stop_signal;
static bool loopback_only;  /* not --listen-any: a Host header must name loopback */
static char self_name[256]; /* gethostname(): a Host this machine answers to */

static void on_stop(int sig)
{
	stop_signal = sig;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void conn_close(struct conn *c)
{
	close(c->fd);
	free(c->out);
	c->fd = -1;
	c->out = NULL;
	c->rlen = c->olen = c->off = 0;
}

/* The documents: what asks for each, its type and how it is rendered. */
static const struct {
	enum sl_http_req get, head;
	const char *type;
	int (*render)(FILE *out);
} docs[] = {
	{SL_HTTP_METRICS, SL_HTTP_METRICS_HEAD, "text/plain; version=0.0.4; charset=utf-8",
	 sl__cli_stat_prometheus},
	{SL_HTTP_PAGE, SL_HTTP_PAGE_HEAD, "text/html; charset=utf-8", sl__cli_dashboard},
	{SL_HTTP_API, SL_HTTP_API_HEAD, "application/json", sl__cli_stat_api},
};

/* The page runs a script: it may talk to this server only, and nothing
 * may frame it. */
#define PAGE_HEADERS                                                                               \
	"Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; "                \
	"style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'; base-uri 'none'; "         \
	"form-action 'none'; frame-ancestors 'none'\r\n"                                           \
	"X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n"

/* Build the answer for what the head asked: c->out holds status line,
 * headers and (but for HEAD) the body. */
static void conn_answer(struct conn *c, enum sl_http_req what, const struct sl_metrics_access *acc)
{
	char *body = NULL;
	size_t blen = 0;
	const char *status = "200 OK", *type = "";
	const char *extra = "";
	int doc = -1;
	for (int i = 0; i < (int)(sizeof(docs) / sizeof(docs[0])); i++)
		if (what == docs[i].get || what == docs[i].head)
			doc = i;
	if (doc >= 0 && c->access == PEER_TOKEN && acc->token[0] != '\0' &&
	    sl__http_bearer_ok(c->req, c->rlen, acc->token))
		c->access = PEER_OK;
	if (doc >= 0 && c->access == PEER_DENIED) {
		status = "403 Forbidden";
	} else if (doc >= 0 && c->access == PEER_TOKEN) {
		status = "401 Unauthorized";
		extra = "WWW-Authenticate: Bearer\r\n";
	} else if (doc >= 0 && loopback_only &&
		   !sl__http_host_loopback(c->req, c->rlen, self_name)) {
		/* A loopback listener asked by another name: a page of another
		 * site, its name rebound to 127.0.0.1, reading ours. */
		status = "403 Forbidden";
	} else if (doc >= 0) {
		FILE *m = open_memstream(&body, &blen);
		type = docs[doc].type;
		extra = docs[doc].get == SL_HTTP_METRICS ? "" : PAGE_HEADERS;
		if (m == NULL || docs[doc].render(m) != 0 || fclose(m) != 0) {
			free(body);
			body = NULL;
			extra = "";
			status = "500 Internal Server Error";
		}
	} else if (what == SL_HTTP_NOT_FOUND) {
		status = "404 Not Found";
	} else if (what == SL_HTTP_BAD_METHOD) {
		status = "405 Method Not Allowed";
		extra = "Allow: GET, HEAD\r\n";
	} else if (what == SL_HTTP_INCOMPLETE) { /* the head outgrew the buffer */
		status = "431 Request Header Fields Too Large";
	} else {
		status = "400 Bad Request";
	}
	if (body == NULL) {
		/* An error's body is its status line, for a human with curl. */
		type = "text/plain; charset=utf-8";
		if (asprintf(&body, "%s\n", status) < 0)
			body = NULL;
		blen = body != NULL ? strlen(body) : 0;
	}
	bool head_only = doc >= 0 && what == docs[doc].head;
	int n = asprintf(&c->out,
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
			 "Cache-Control: no-store\r\nConnection: close\r\n\r\n%.*s",
			 status, type, blen, extra, head_only ? 0 : (int)blen,
			 body != NULL ? body : "");
	free(body);
	if (n < 0) {
		c->out = NULL;
		conn_close(c);
		return;
	}
	c->olen = (size_t)n;
	c->off = 0;
}

/* Read what c's client sent; answer once the head is complete. */
static void conn_read(struct conn *c, const struct sl_metrics_access *acc)
{
	ssize_t n = recv(c->fd, c->req + c->rlen, sizeof(c->req) - c->rlen, 0);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		conn_close(c);
		return;
	}
	if (n < 0)
		return;
	c->rlen += (size_t)n;
	enum sl_http_req what = sl__http_parse_request(c->req, c->rlen);
	if (what == SL_HTTP_INCOMPLETE && c->rlen < sizeof(c->req))
		return;
	conn_answer(c, what, acc);
}

/* Send more of c's answer; close when all is sent. */
static void conn_write(struct conn *c)
{
	ssize_t n = send(c->fd, c->out + c->off, c->olen - c->off, MSG_NOSIGNAL);
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR)
			conn_close(c);
		return;
	}
	c->off += (size_t)n;
	if (c->off == c->olen) {
		/* Half-close, then drop what the client sent beyond the head:
		 * closing with unread bytes would send a reset, which may
		 * destroy the answer before the client has read it. */
		char sink[512];
		shutdown(c->fd, SHUT_WR);
		while (recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
			;
		conn_close(c);
	}
}

static void print_endpoint(const struct sockaddr_storage *ss)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		port = ntohs(a->sin_port);
		printf("sluice stat: serving http://%s:%u/metrics\n"
		       "sluice stat: the live page: http://%s:%u/\n",
		       host, port, host, port);
	} else {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		port = ntohs(a->sin6_port);
		printf("sluice stat: serving http://[%s]:%u/metrics\n"
		       "sluice stat: the live page: http://[%s]:%u/\n",
		       host, port, host, port);
	}
	fflush(stdout);
}

int sl__cli_access_user(struct sl_metrics_access *acc, const char *name)
{
	const struct passwd *pw = getpwnam(name);
	char *end;
	unsigned long v = strtoul(name, &end, 10);
	if (pw == NULL && (name[0] < '0' || name[0] > '9' || *end != '\0' || v >= UINT32_MAX)) {
		fprintf(stderr, "sluice stat: --allow-user %s: no such user (a name or a uid)\n",
			name);
		return 2;
	}
	if (acc->n_allow == sizeof(acc->allow) / sizeof(acc->allow[0])) {
		fprintf(stderr, "sluice stat: --allow-user: at most %zu users\n",
			sizeof(acc->allow) / sizeof(acc->allow[0]));
		return 2;
	}
	acc->allow[acc->n_allow++] = pw != NULL ? (uint32_t)pw->pw_uid : (uint32_t)v;
	return 0;
}

int sl__cli_access_token(struct sl_metrics_access *acc, const char *path)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	const char *why = NULL;
	ssize_t n = -1;
	if (fd < 0 || fstat(fd, &st) != 0)
		why = strerror(errno);
	else if (!S_ISREG(st.st_mode))
		why = "not a regular file";
	else if (st.st_uid != geteuid())
		why = "not owned by you";
	else if (st.st_mode & 077)
		why = "readable or writable by others (chmod 600 it)";
	else if ((n = read(fd, acc->token, sizeof(acc->token) - 1)) < 0)
		why = strerror(errno);
	if (fd >= 0)
		close(fd);
	if (why == NULL) {
		acc->token[n] = '\0';
		acc->token[strcspn(acc->token, "\r\n")] = '\0';
		for (const char *p = acc->token; *p != '\0' && why == NULL; p++)
			if (*p <= ' ' || *p == 0x7f)
				why = "the token has a space or a control byte";
		if (why == NULL && acc->token[0] == '\0')
			why = "empty first line";
	}
	if (why != NULL) {
		memset(acc->token, 0, sizeof(acc->token));
		fprintf(stderr, "sluice stat: --token-file %s: %s\n", path, why);
		return 2;
	}
	return 0;
}

/* Who the peer of accepted connection fd is, for acc. */
static enum peer_access peer_access(int fd, const struct sl_metrics_access *acc)
{
	static bool warned;
	struct sockaddr_storage peer;
	socklen_t pl = sizeof(peer);
	if (getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
		return PEER_DENIED;
	if (!sl__http_is_loopback((struct sockaddr *)&peer))
		return PEER_TOKEN;
	uint32_t uid;
	if (sl__cli_peer_uid(fd, &uid) != 0) {
		if (!warned)
			fprintf(stderr,
				"sluice stat: --listen: the kernel does not name a scraper's user "
				"(NETLINK_SOCK_DIAG: %s); such scrapers get 403\n",
				strerror(errno));
		warned = true;
		return PEER_DENIED;
	}
	if (uid == (uint32_t)geteuid() || uid == 0)
		return PEER_OK;
	for (unsigned i = 0; i < acc->n_allow; i++)
		if (acc->allow[i] == uid)
			return PEER_OK;
	return PEER_DENIED;
}

int sl__cli_metrics_serve(const char *listen_text, bool any, const struct sl_metrics_access *acc)
{
	static struct conn conns[SL_HTTP_CONNS];
	struct sockaddr_storage ss;
	socklen_t sslen;
	char err[256];
	loopback_only = !any;
	if (gethostname(self_name, sizeof(self_name) - 1) != 0)
		self_name[0] = '\0';
	if (sl__http_parse_listen(listen_text, any, &ss, &sslen, err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice stat: %s\n", err);
		return 2;
	}
	int lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(lfd, (struct sockaddr *)&ss, sslen) != 0 || listen(lfd, 64) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&ss, &sslen) != 0) {
		fprintf(stderr, "sluice stat: --listen %s: %s\n", listen_text, strerror(errno));
		if (lfd >= 0)
			close(lfd);
		return 1;
	}
	/* SIGINT and SIGTERM stay blocked except inside ppoll(), so one that
	 * arrives between the loop's test and the wait still ends the wait. */
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigset_t stops, waitmask;
	sigemptyset(&stops);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	sigprocmask(SIG_BLOCK, &stops, &waitmask);
	sigdelset(&waitmask, SIGINT);
	sigdelset(&waitmask, SIGTERM);
	for (int i = 0; i < SL_HTTP_CONNS; i++)
		conns[i].fd = -1;
	print_endpoint(&ss);
	if (any && acc->token[0] == '\0')
		fputs("sluice stat: --listen-any without --token-file: scrapers on other hosts get "
		      "401\n",
		      stderr);

	struct pollfd pfd[SL_HTTP_CONNS + 1];
	int map[SL_HTTP_CONNS + 1];
	while (!stop_signal) {
		uint64_t now = mono_ms();
		int n = 0, timeout = -1, reading = 0;
		for (int i = 0; i < SL_HTTP_CONNS; i++) {
			struct conn *c = &conns[i];
			if (c->fd < 0)
				continue;
			if (now >= c->start_ms + SL_HTTP_TIMEOUT_MS) {
				conn_close(c);
				continue;
			}
			int left = (int)(c->start_ms + SL_HTTP_TIMEOUT_MS - now);
			timeout = timeout < 0 || left < timeout ? left : timeout;
			reading += c->out == NULL;
			pfd[n] = (struct pollfd){c->fd, c->out == NULL ? POLLIN : POLLOUT, 0};
			map[n++] = i;
		}
		int used = n;
		/* Poll the listener while a slot is free or a reader can make room. */
		if (used < SL_HTTP_CONNS || reading > 0) {
			pfd[n] = (struct pollfd){lfd, POLLIN, 0};
			map[n++] = -1;
		}
		struct timespec ts = {timeout / 1000, (long)(timeout % 1000) * 1000000};
		int r = ppoll(pfd, (nfds_t)n, timeout < 0 ? NULL : &ts, &waitmask);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "sluice stat: ppoll: %s\n", strerror(errno));
			break;
		}
		for (int k = 0; k < n; k++) {
			if (pfd[k].revents == 0 || map[k] < 0)
				continue;
			struct conn *c = &conns[map[k]];
			if (c->fd < 0)
				continue;
			if (c->out == NULL && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
				conn_read(c, acc);
			else if (c->out != NULL && (pfd[k].revents & (POLLOUT | POLLHUP | POLLERR)))
				conn_write(c);
		}
		if (n > used && (pfd[used].revents & POLLIN)) {
			for (;;) {
				int slot = -1, oldest = -1;
				for (int i = 0; i < SL_HTTP_CONNS && slot < 0; i++)
					if (conns[i].fd < 0)
						slot = i;
				/* All taken: first what came on each one still
				 * reading is read (a complete head is answered, not
				 * dropped: closed with its request unread, its
				 * client would see a reset). */
				for (int i = 0; i < SL_HTTP_CONNS && slot < 0; i++)
					if (conns[i].out == NULL)
						conn_read(&conns[i], acc);
				for (int i = 0; i < SL_HTTP_CONNS && slot < 0; i++)
					if (conns[i].fd < 0)
						slot = i;
				for (int i = 0; i < SL_HTTP_CONNS && slot < 0; i++)
					if (conns[i].fd >= 0 && conns[i].out == NULL &&
					    (oldest < 0 ||
					     conns[i].start_ms < conns[oldest].start_ms))
						oldest = i;
				if (slot < 0 && oldest < 0)
					break;
				int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
				if (fd < 0) {
					/* EAGAIN: none left. EMFILE and the like: try
					 * again in 10 ms rather than spin on poll. */
					if (errno != EAGAIN && errno != EINTR &&
					    errno != ECONNABORTED)
						nanosleep(&(struct timespec){0, 10000000}, NULL);
					break;
				}
				if (slot < 0) {
					conn_close(&conns[oldest]);
					slot = oldest;
				}
				conns[slot] = (struct conn){.fd = fd,
							    .access = peer_access(fd, acc),
							    .start_ms = mono_ms()};
			}
		}
	}
	for (int i = 0; i < SL_HTTP_CONNS; i++)
		if (conns[i].fd >= 0)
			conn_close(&conns[i]);
	close(lfd);
	return stop_signal ? 0 : 1;
}
