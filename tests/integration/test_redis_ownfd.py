#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The Redis lease link's socket is the library's own (shim/ownfd.c): a
program that closes every fd >= 3 and then writes a file gets its own lines
in the file, and nothing of the lease thread's.

Against a private redis-server, preloaded pythons under
SLUICE_CONNECT=200/s,redis=k,lease=4 (a renewal every few connects) connect to a loopback sink for 3 s while the
lease thread renews; each, 1 s in, closes its fds (one case each):
  close_range  os.closerange(3, 65536)  (CPython: close_range(2))
  close        close() of every fd 3..1023 one by one
  syscall      syscall(SYS_close_range, 3, ~0U, 0) through ctypes
  dup2         dup2() of a file onto every fd 3..1023
then opens (or keeps, for dup2) a data file, dup()s it onto the 60 lowest
free numbers (where a program's next files go), and writes 200 numbered lines
while it goes on connecting. The file must hold exactly those lines (no
`EVALSHA`, no `sluice:`), its last write must land, and the process must
still be throttled by Redis afterwards (connects keep going through, at
most rate * t + burst in all). Before ownfd.c the file received the lease
thread's `*7 $7 EVALSHA ... sluice:{k}` and lost writes.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import Server, check, child_env, finish  # noqa: E402
from test_redis import Redis  # noqa: E402

CHILD = r"""
import ctypes, json, os, socket, sys, time
port, path, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
t0 = time.monotonic()
def connect_some(until):
    n = 0
    while time.monotonic() < until:
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            n += 1
        except OSError:
            pass
    return n
before = connect_some(t0 + 1.0)
if mode == "close_range":
    os.closerange(3, 65536)
elif mode == "close":
    for fd in range(3, 1024):
        libc.close(fd)
elif mode == "syscall":
    libc.syscall(436, 3, 0xffffffff, 0)  # SYS_close_range on x86-64
elif mode == "dup2":
    keep = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd in range(3, 1024):
        if fd != keep:
            libc.dup2(keep, fd)
f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
# The lowest free numbers (where the program's next files go) all name it.
for _ in range(60):
    os.dup(f)
for i in range(200):
    os.write(f, b"line %d\n" % i)
    if i % 20 == 0:
        connect_some(time.monotonic() + 0.1)
after = connect_some(time.monotonic() + 1.0)
os.write(f, b"last\n")
os.close(f)
print(json.dumps({"before": before, "after": after, "s": time.monotonic() - t0}))
"""


def main():
    if shutil.which("redis-server") is None:
        print("skip: no redis-server")
        sys.exit(77)
    redis, srv = Redis(), Server("hold")
    tmp = tempfile.mkdtemp(prefix="sl-ownfd-")
    want = "".join("line %d\n" % i for i in range(200)) + "last\n"
    try:
        for mode in ("close_range", "close", "syscall", "dup2"):
            path = os.path.join(tmp, mode + ".data")
            env = child_env({"SLUICE_CONNECT": "200/s,redis=own%s,lease=4" % mode,
                             "SLUICE_REDIS": "redis://127.0.0.1:%d" % redis.port})
            p = subprocess.run([sys.executable, "-c", CHILD, str(srv.port), path, mode], env=env,
                               capture_output=True, text=True, timeout=60)
            got = open(path).read() if os.path.exists(path) else ""
            res = None
            for line in p.stdout.splitlines():
                if line.startswith("{"):
                    res = json.loads(line)
            print("measured: %s: rc %d, file %d bytes (%d wanted), %s" % (
                mode, p.returncode, len(got), len(want), res))
            check(p.returncode == 0 and res is not None,
                  "%s: the program ran to its end (%r)" % (mode, p.stderr[-300:]))
            check(got == want, "%s: the file holds exactly its own 201 lines%s" % (
                mode, "" if got == want else " (%r...)" % got[:80]))
            check("EVALSHA" not in got and "sluice:" not in got,
                  "%s: nothing of the lease thread's in it" % mode)
            if res is not None:
                # Still throttled through Redis: at most rate * t + burst.
                total = res["before"] + res["after"]
                check(total <= 200 * res["s"] + 210 and res["after"] > 0,
                      "%s: still throttled after the closes (%d connects in %.2f s, %d after)"
                      % (mode, total, res["s"], res["after"]))
    finally:
        srv.stop()
        redis.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
