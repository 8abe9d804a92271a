#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An fd that stops being its socket through a path no wrapper sees (issue
19, part 1): glibc's closefrom() closes with its internal close_range and
fopen() opens with its internal openat, neither through the PLT. The shim's
record of the old socket is then stale; the inode it kept is compared with
the fd's (one fstat) when a rule is about to act on the fd, so the file is
never held back as the socket was.

Under --send 1MiB/s (and then --recv 1MiB/s), a preloaded python connects
to a loopback peer, sends a byte, closes the socket with closefrom, fopens
a file on the same fd number, and writes (reads) 4 MiB there with os.write
(os.read): both at disk speed (< 1 s; as the socket, 4 s), every byte in
one call each as a file gives them, and the file intact. A socket opened
after that is throttled again (the rule still works: >= 0.45 s for 512 KiB
at 1 MiB/s, strict).
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import LIB, Server, check, finish, run_child  # noqa: E402

CHILD = r'''
import ctypes, json, os, socket, sys, time
port, path, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fileno.argtypes = [ctypes.c_void_p]
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"x")
n = s.detach()
libc.closefrom(n)                      # glibc's own close_range: unseen
fp = libc.fopen(path.encode(), b"r+")  # glibc's own openat: unseen
fd = libc.fileno(fp)
size = 4 << 20
t0 = time.monotonic()
if mode == "send":
    data = bytes(range(256)) * (size // 256)
    got = os.write(fd, data)
else:
    got = len(os.read(fd, size))
t1 = time.monotonic()
s2 = socket.create_connection(("127.0.0.1", port))
t2 = time.monotonic()
if mode == "send":
    s2.sendall(b"y" * (512 << 10))
t3 = time.monotonic()
print(json.dumps({"sock_fd": n, "file_fd": fd, "one_call": got, "file_s": t1 - t0,
                  "sock_s": t3 - t2}))
'''


def one(mode, srv, d):
    path = os.path.join(d, "f-" + mode)
    with open(path, "wb") as f:
        f.write(bytes(range(256)) * ((4 << 20) // 256) if mode == "recv" else b"")
    flag = {"send": {"SLUICE_SEND": "1MiB/s"}, "recv": {"SLUICE_RECV": "1MiB/s"}}[mode]
    rc, r, err = run_child(None, flag, argv=[sys.executable, "-c", CHILD, str(srv.port), path,
                                             mode])
    check(rc == 0 and r is not None, "%s: child ran (rc=%d)" % (mode, rc))
    if r is None:
        return
    print("measured: %s: socket fd %d, file fd %d: 4 MiB in %.3f s, %d bytes in one call"
          % (mode, r["sock_fd"], r["file_fd"], r["file_s"], r["one_call"]))
    check(r["file_fd"] == r["sock_fd"], "%s: the file got the socket's fd number" % mode)
    check(r["file_s"] < 1.0, "%s: 4 MiB on the file at disk speed (%.3f s < 1 s; as the "
          "socket: 4 s)" % (mode, r["file_s"]))
    check(r["one_call"] == 4 << 20, "%s: one call moved all 4 MiB, as a file does (%d)"
          % (mode, r["one_call"]))
    with open(path, "rb") as f:
        check(f.read() == bytes(range(256)) * ((4 << 20) // 256), "%s: file intact" % mode)
    if mode == "send":
        check(r["sock_s"] >= 0.45, "send: a new socket is throttled again (512 KiB in %.3f s "
              ">= 0.45 s)" % r["sock_s"])


def main():
    if not os.path.exists(LIB):
        check(False, "library %s exists" % LIB)
        finish()
    srv = Server("sink")
    d = tempfile.mkdtemp(prefix="sluice-fdident-%d-" % os.getpid())
    try:
        one("send", srv, d)
        one("recv", srv, d)
    finally:
        srv.stop()
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)
    finish()


if __name__ == "__main__":
    main()
