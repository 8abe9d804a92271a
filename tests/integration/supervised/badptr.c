/* SPDX-License-Identifier: MIT */
/*
 * badptr.c - socket calls with bad buffer and address pointers, built with
 * `gcc -static` by tests/integration/test_supervise_badptr.py, which runs it
 * natively and supervised and compares the two outputs line by line.
 *
 *   badptr PORT
 *
 * The peer on 127.0.0.1:PORT reads one byte per connection: 'S' (the
 * connection's sends follow; it counts what arrives) or 'R' (it sends
 * 16384 bytes and closes). A buffer "edge" is one readable page followed
 * by an unmapped one. Prints one line per case: its name, the result and
 * errno's name, and for a receive how many of the 16384 bytes the stream
 * still delivered afterwards (what the call consumed shows there).
 */
#define _GNU_SOURCE /* strerrorname_np */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static int port;
static unsigned char *page; /* one readable page, then an unmapped one */
static long pg;

static int dial(char what)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((unsigned short)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    write(fd, &what, 1) != 1) {
		perror("badptr: connect");
		exit(1);
	}
	if (what == 'R') { /* the peer's 16384 bytes are all queued */
		struct timespec ts = {0, 100 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return fd;
}

static void show(const char *name, ssize_t r, int e)
{
	printf("%-36s %zd %s", name, r, r < 0 ? strerrorname_np(e) : "-");
}

/* After a receive case: what the stream still delivers. */
static void rest(int fd, ssize_t got)
{
	static unsigned char b[65536];
	long total = got > 0 ? got : 0;
	ssize_t k;
	while ((k = read(fd, b, sizeof(b))) > 0)
		total += k;
	printf(" delivered %ld\n", total);
	close(fd);
}

static void send_case(const char *name, ssize_t (*call)(int))
{
	int fd = dial('S');
	errno = 0;
	ssize_t r = call(fd);
	show(name, r, errno);
	printf("\n");
	close(fd);
}

static void recv_case(const char *name, ssize_t (*call)(int))
{
	int fd = dial('R');
	errno = 0;
	ssize_t r = call(fd);
	show(name, r, errno);
	rest(fd, r);
}

static ssize_t w_null(int fd)
{
	return write(fd, NULL, 100);
}
static ssize_t w_one(int fd)
{
	return write(fd, (void *)1, 100);
}
static ssize_t w_edge(int fd)
{
	return write(fd, page, (size_t)pg + 4096);
}
static ssize_t wv_half(int fd)
{
	struct iovec v[2] = {{page, 100}, {(void *)1, 100}};
	return writev(fd, v, 2);
}
static ssize_t wv_array(int fd)
{
	return writev(fd, (struct iovec *)1, 2);
}
static ssize_t st_addr(int fd)
{
	return sendto(fd, page, 100, 0, (struct sockaddr *)1, 16);
}
static ssize_t r_null(int fd)
{
	return read(fd, NULL, 100);
}
static ssize_t r_edge(int fd)
{
	return read(fd, page, (size_t)pg + 4096);
}
static ssize_t rv_half(int fd)
{
	struct iovec v[2] = {{page, 100}, {(void *)1, 100}};
	return readv(fd, v, 2);
}
static ssize_t rf_both(int fd)
{
	return recvfrom(fd, page, 100, 0, (struct sockaddr *)1, (socklen_t *)2);
}
static ssize_t rf_len(int fd)
{
	return recvfrom(fd, page, 100, 0, (struct sockaddr *)page, (socklen_t *)(page + pg));
}
static ssize_t rf_neg(int fd)
{
	socklen_t *len = (socklen_t *)(page + 64);
	*len = (socklen_t)-1;
	return recvfrom(fd, page + 128, 100, 0, (struct sockaddr *)page, len);
}
static ssize_t rm_name(int fd)
{
	struct iovec v = {page, 100};
	struct msghdr m = {.msg_name = (void *)1, .msg_namelen = 16, .msg_iov = &v, .msg_iovlen = 1};
	return recvmsg(fd, &m, 0);
}
static ssize_t r_waitall(int fd)
{
	return recv(fd, page, (size_t)pg + 4096, MSG_WAITALL);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: badptr PORT\n");
		return 2;
	}
	port = atoi(argv[1]);
	pg = sysconf(_SC_PAGESIZE);
	page = mmap(NULL, 2 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		    0);
	if (page == MAP_FAILED || munmap(page + pg, (size_t)pg) != 0)
		return 1;
	memset(page, 'A', (size_t)pg);
	setvbuf(stdout, NULL, _IOLBF, 0);
	send_case("write(NULL, 100)", w_null);
	send_case("write((void *)1, 100)", w_one);
	send_case("write(a page + 4096 unmapped)", w_edge);
	send_case("writev({ok, 100}, {bad, 100})", wv_half);
	send_case("writev(bad iovec array)", wv_array);
	send_case("sendto(bad address)", st_addr);
	recv_case("read(NULL, 100)", r_null);
	recv_case("read(a page + 4096 unmapped)", r_edge);
	recv_case("readv({ok, 100}, {bad, 100})", rv_half);
	recv_case("recvfrom(bad address, bad length)", rf_both);
	recv_case("recvfrom(ok address, unmapped length)", rf_len);
	recv_case("recvfrom(length -1)", rf_neg);
	recv_case("recvmsg(bad msg_name)", rm_name);
	recv_case("recv(a page + unmapped, MSG_WAITALL)", r_waitall);
	return 0;
}
