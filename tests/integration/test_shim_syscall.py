#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Raw I/O through libc's syscall() is throttled like the libc call of the
same name (shim/wrap_fd.c, raw_io).

libuv (Debian 12's 1.44: dig, node's UDP) sends datagrams with
syscall(SYS_sendmmsg); those used to pass unthrottled (100 dig queries
under --send 50/s in 0.033 s). Checked here, in a preloaded python that
calls syscall() through ctypes (the program's own symbol lookup, so the
preloaded syscall() is the one it gets), against a loopback peer in the
parent:

  sendto    40 datagrams by syscall(SYS_sendto) under SLUICE_SEND=50/s take
            at least 39/50 s (burst 1), and the peer gets each, exactly;
  sendmmsg  40 datagrams in 4 syscall(SYS_sendmmsg) calls of 10: the same;
  recvfrom  40 queued datagrams read by syscall(SYS_recvfrom) under
            SLUICE_RECV=50/s: at least 39/50 s, contents exact;
  pass      on a pipe (no rule matches) syscall(SYS_write/SYS_read) return
            what the kernel does; a bad fd gives -1 and EBADF;
  dig       (when installed) 100 queries to a loopback DNS responder under
            --send 50/s: 100 answers in at least 1.9 s.
"""
import os
import socket
import struct
import subprocess
import sys
import threading
import time

from shim_lib import check, child_env, finish, run_child, check_dig

NRS = {"x86_64": {"read": 0, "write": 1, "sendto": 44, "recvfrom": 45, "sendmmsg": 307},
       "aarch64": {"read": 63, "write": 64, "sendto": 206, "recvfrom": 207, "sendmmsg": 269}}
MACHINE = os.uname().machine
N, RATE = 40, 50

CHILD = r"""
import ctypes, json, os, socket, struct, sys, time
NR = json.loads(sys.argv[1]); mode = sys.argv[2]; port = int(sys.argv[3]); n = int(sys.argv[4])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
addr = ctypes.create_string_buffer(struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port),
                                               socket.inet_aton("127.0.0.1")), 16)
res = {}
t0 = time.monotonic()
if mode == "sendto":
    for i in range(n):
        b = b"dgram %03d" % i
        r = libc.syscall(L(NR["sendto"]), L(s.fileno()), ctypes.c_char_p(b), L(len(b)), L(0),
                         addr, L(16))
        assert r == len(b), (r, ctypes.get_errno())
elif mode == "sendmmsg":
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    class msghdr(ctypes.Structure):
        _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                    ("iov", ctypes.POINTER(iovec)), ("iovlen", ctypes.c_size_t),
                    ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                    ("flags", ctypes.c_int)]
    class mmsghdr(ctypes.Structure):
        _fields_ = [("hdr", msghdr), ("len", ctypes.c_uint)]
    sent = 0
    keep = []
    while sent < n:
        k = min(10, n - sent)
        vec = (mmsghdr * k)()
        for j in range(k):
            b = ctypes.create_string_buffer(b"dgram %03d" % (sent + j), 9)
            io = iovec(ctypes.cast(b, ctypes.c_void_p), 9)
            keep += [b, io]
            vec[j].hdr.name = ctypes.cast(addr, ctypes.c_void_p)
            vec[j].hdr.namelen = 16
            vec[j].hdr.iov = ctypes.pointer(io)
            vec[j].hdr.iovlen = 1
        r = libc.syscall(L(NR["sendmmsg"]), L(s.fileno()), vec, L(k), L(0))
        assert r > 0, (r, ctypes.get_errno())
        sent += r
elif mode == "recvfrom":
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1], flush=True)
    sys.stdin.readline()  # the peer has queued its datagrams
    t0 = time.monotonic()
    got = []
    buf = ctypes.create_string_buffer(64)
    for i in range(n):
        r = libc.syscall(L(NR["recvfrom"]), L(s.fileno()), buf, L(64), L(0), None, None)
        assert r > 0, (r, ctypes.get_errno())
        got.append(buf.raw[:r].decode())
    res["got"] = got
elif mode == "pass":
    rd, wr = os.pipe()
    r1 = libc.syscall(L(NR["write"]), L(wr), ctypes.c_char_p(b"abc"), L(3))
    buf = ctypes.create_string_buffer(8)
    r2 = libc.syscall(L(NR["read"]), L(rd), buf, L(8))
    ctypes.set_errno(0)
    r3 = libc.syscall(L(NR["sendto"]), L(-1), ctypes.c_char_p(b"x"), L(1), L(0), None, L(0))
    res.update(write=r1, read=r2, data=buf.raw[:r2].decode(), bad=r3, errno=ctypes.get_errno())
res["elapsed"] = time.monotonic() - t0
print(json.dumps(res))
"""


class Sink:
    """A UDP socket in the parent collecting datagrams."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.got = []
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        idle = 0
        while idle < 20:
            try:
                self.got.append(self.sock.recv(64).decode())
                idle = 0
            except socket.timeout:
                idle += 1


def sends(mode):
    sink = Sink()
    rc, res, err = run_child(None, {"SLUICE_SEND": "%d/s" % RATE},
                             argv=[sys.executable, "-c", CHILD, __import__("json").dumps(NRS[MACHINE]),
                                   mode, str(sink.port), str(N)])
    check(rc == 0 and res is not None, "%s: the child ran (%s)" % (mode, err[-300:]))
    if res is None:
        return
    deadline = time.monotonic() + 5
    while len(sink.got) < N and time.monotonic() < deadline:
        time.sleep(0.05)
    low = (N - 1) / RATE
    print("measured: syscall(SYS_%s): %d datagrams in %.3f s (at least %.3f s)"
          % (mode, N, res["elapsed"], low))
    # 1 ms for the two clocks (the shim's sleeps end on its own reading).
    check(res["elapsed"] >= low - 0.001, "%s: %d datagrams at %d/s take at least %.2f s: %.3f s"
          % (mode, N, RATE, low, res["elapsed"]))
    check(res["elapsed"] <= 3 * low + 1, "%s: and not far more: %.3f s" % (mode, res["elapsed"]))
    want = ["dgram %03d" % i for i in range(N)]
    check(sorted(sink.got) == want, "%s: the peer got each datagram once, exactly (%d)"
          % (mode, len(sink.got)))


def receives():
    p = subprocess.Popen([sys.executable, "-c", CHILD, __import__("json").dumps(NRS[MACHINE]),
                          "recvfrom", "0", str(N)],
                         env=child_env({"SLUICE_RECV": "%d/s" % RATE}), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    port = int(p.stdout.readline())
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(N):
        s.sendto(b"dgram %03d" % i, ("127.0.0.1", port))
    p.stdin.write("go\n")
    p.stdin.flush()
    out, err = p.communicate(timeout=60)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    check(p.returncode == 0 and bool(lines), "recvfrom: the child ran (%s)" % err[-300:])
    if not lines:
        return
    res = __import__("json").loads(lines[-1])
    low = (N - 1) / RATE
    print("measured: syscall(SYS_recvfrom): %d datagrams in %.3f s" % (N, res["elapsed"]))
    check(res["elapsed"] >= low - 0.001, "recvfrom: %d datagrams at %d/s take at least %.2f s: %.3f s"
          % (N, RATE, low, res["elapsed"]))
    check(res["got"] == ["dgram %03d" % i for i in range(N)],
          "recvfrom: each datagram read once, in order, exactly")


def passes():
    rc, res, err = run_child(None, {"SLUICE_SEND": "1/s", "SLUICE_RECV": "1/s"},
                             argv=[sys.executable, "-c", CHILD, __import__("json").dumps(NRS[MACHINE]),
                                   "pass", "0", "0"])
    check(res is not None and res["write"] == 3 and res["read"] == 3 and res["data"] == "abc",
          "pass: syscall(SYS_write/SYS_read) on a pipe under 1/s rules: 3 and 3 bytes, at once "
          "(%s)" % res)
    check(res is not None and res["bad"] == -1 and res["errno"] == 9,
          "pass: syscall(SYS_sendto) on fd -1: -1 and EBADF (%s)" % res)


def main():
    if MACHINE not in NRS:
        print("skip: no system call numbers for %s here" % MACHINE)
        sys.exit(77)
    sends("sendto")
    sends("sendmmsg")
    receives()
    passes()
    check_dig("SLUICE_SEND", 50)
    finish()


if __name__ == "__main__":
    main()
