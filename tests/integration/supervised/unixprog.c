/* SPDX-License-Identifier: MIT */
/*
 * unixprog.c - a unix stream client for test_supervise_unix.py, built with
 * `gcc -static` (only the supervisor sees its calls).
 *
 *   unixprog read|recv|recvmsg PATH FILE
 *
 * connects to the AF_UNIX stream socket at PATH and reads it to its end
 * with read(), recv() or recvmsg() in 64 KiB calls, writing what it gets
 * to FILE. It stops past 1 MiB, 4 times what the test sends (a
 * supervisor that performed a call without consuming its bytes would hand
 * the same data out again and again). Prints one JSON line: {"elapsed": seconds from the connect to the
 * end, "bytes": n, "calls": n, "eintr": n, "fd": the socket's fd}.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define UNIXPROG_MAX_BYTES (1ul << 20)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: unixprog read|recv|recvmsg PATH FILE\n");
		return 2;
	}
	const char *mode = argv[1];
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(argv[2]) >= sizeof(a.sun_path)) {
		fprintf(stderr, "unixprog: path too long\n");
		return 2;
	}
	strcpy(a.sun_path, argv[2]);
	int out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (out < 0) {
		perror("open");
		return 1;
	}
	double t0 = now();
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		perror("connect");
		return 1;
	}
	static unsigned char buf[65536];
	unsigned long bytes = 0;
	long calls = 0, eintr = 0;
	while (bytes <= UNIXPROG_MAX_BYTES) {
		ssize_t n;
		if (strcmp(mode, "recvmsg") == 0) {
			struct iovec iov = {buf, sizeof(buf)};
			struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
			n = recvmsg(fd, &mh, 0);
		} else if (strcmp(mode, "recv") == 0) {
			n = recv(fd, buf, sizeof(buf), 0);
		} else {
			n = read(fd, buf, sizeof(buf));
		}
		if (n < 0 && errno == EINTR) {
			eintr++;
			continue;
		}
		if (n < 0) {
			perror(mode);
			return 1;
		}
		if (n == 0)
			break;
		calls++;
		bytes += (unsigned long)n;
		if (write(out, buf, (size_t)n) != n) {
			perror("write file");
			return 1;
		}
	}
	double el = now() - t0;
	close(fd);
	close(out);
	printf("{\"elapsed\": %.6f, \"bytes\": %lu, \"calls\": %ld, \"eintr\": %ld, \"fd\": %d}\n",
	       el, bytes, calls, eintr, fd);
	return 0;
}
