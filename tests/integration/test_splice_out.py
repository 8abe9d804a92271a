#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A splice out of a throttled socket into a pipe does what the kernel's
does, throttled, in both modes (supervise/source.c, hold_sink; the preload's
splice wrapper).

Under --recv 1MiB/s,burst=64KiB a python downloads 2 MiB from a loopback
source by os.splice(socket, pipe, 1 MiB) and reads the pipe:
  blocking      a blocking socket and pipe: every call returns > 0 and at
                most the pipe's room (64 KiB), until the end (0);
  non-blocking  the socket and the pipe O_NONBLOCK, select() for readable:
                each call returns bytes or EAGAIN, never another error;
Each starts with the pipe full: non-blocking, the splice is EAGAIN;
blocking, it waits until a thread makes room 0.3 s later.
Each gets the 2 MiB byte-exact (length and sha256) in at least
(2 MiB - burst) / rate = 1.94 s and at most 6 s; no EINVAL. Supervised,
the splice used to fail with EINVAL (Go's TestSplice/tcp-to-pipe and
programs without a read fallback lost the transfer).
"""
import hashlib
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import SLUICE, Server, check, child_env, finish, payload  # noqa: E402

SIZE = 2 << 20
RATE = 1 << 20
BURST = 64 << 10

CHILD = r'''
import errno, fcntl, hashlib, json, os, select, socket, sys, time
port, nonblock = int(sys.argv[1]), sys.argv[2] == "1"
s = socket.create_connection(("127.0.0.1", port))
rd, wr = os.pipe()
if nonblock:
    s.setblocking(False)
    for fd in (rd, wr):
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
h, n, calls, eagain, errors, biggest = hashlib.sha256(), 0, 0, 0, [], 0
# First the pipe full (filled with a marker, drained before the data):
# non-blocking, the splice is EAGAIN; blocking, it waits for room, which a
# thread makes after 0.3 s.
fcntl.fcntl(wr, fcntl.F_SETFL, fcntl.fcntl(wr, fcntl.F_GETFL) | os.O_NONBLOCK)
filled = 0
try:
    while True:
        filled += os.write(wr, b"m" * 4096)
except BlockingIOError:
    pass
if not nonblock:
    fcntl.fcntl(wr, fcntl.F_SETFL, fcntl.fcntl(wr, fcntl.F_GETFL) & ~os.O_NONBLOCK)
def drain():
    time.sleep(0.3)
    left = filled
    while left:
        left -= len(os.read(rd, min(left, 65536)))
t0 = time.monotonic()
if nonblock:
    select.select([s], [], [], 5)
    try:
        os.splice(s.fileno(), wr, 1 << 20)
        full = "moved"
    except BlockingIOError:
        full = "EAGAIN"
    except OSError as e:
        full = errno.errorcode.get(e.errno, str(e.errno))
    drain()
else:
    import threading
    th = threading.Thread(target=drain)
    th.start()
    k = os.splice(s.fileno(), wr, 1 << 20)
    full = "waited %.2f s" % (time.monotonic() - t0)
    th.join()
    h.update(os.read(rd, k))
    n += k
    biggest = k
while True:
    if nonblock:
        select.select([s], [], [], 5)
    try:
        k = os.splice(s.fileno(), wr, 1 << 20)
    except BlockingIOError:
        eagain += 1
        continue
    except OSError as e:
        errors.append(errno.errorcode.get(e.errno, str(e.errno)))
        break
    calls += 1
    if k == 0:
        break
    biggest = max(biggest, k)
    left = k
    while left:
        try:
            b = os.read(rd, left)
        except BlockingIOError:
            continue
        h.update(b)
        left -= len(b)
        n += len(b)
print(json.dumps({"n": n, "sha": h.hexdigest(), "s": time.monotonic() - t0, "calls": calls,
                  "full": full,
                  "eagain": eagain, "errors": errors, "biggest": biggest}))
'''


def run(supervised, nonblock):
    what = "%s %s" % ("supervised" if supervised else "preload",
                      "non-blocking" if nonblock else "blocking")
    data = payload(SIZE)
    srv = Server("source", data)
    rule = "1MiB/s,burst=64KiB"  # RATE, BURST
    cmd = [sys.executable, "-c", CHILD, str(srv.port), "1" if nonblock else "0"]
    if supervised:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("SLUICE_") and k != "LD_PRELOAD"}
        cmd = [SLUICE, "--supervise", "--recv", rule, "--"] + cmd
    else:
        env = child_env({"SLUICE_RECV": rule})
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    srv.stop()
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    r = json.loads(lines[-1]) if lines else {}
    check(p.returncode == 0 and r and not r["errors"],
          "%s: splice ran, no error (rc %d, errors %s) %s"
          % (what, p.returncode, r.get("errors"), p.stderr[-300:]))
    if not r:
        return
    check(r["n"] == SIZE and r["sha"] == hashlib.sha256(data).hexdigest(),
          "%s: 2 MiB byte-exact (%d bytes in %d calls, largest %d, %d EAGAIN)"
          % (what, r["n"], r["calls"], r["biggest"], r["eagain"]))
    check(r["biggest"] <= 64 << 10, "%s: no call returned more than the pipe holds" % what)
    full_ok = r["full"] == "EAGAIN" if nonblock else (
        r["full"].startswith("waited") and float(r["full"].split()[1]) >= 0.29)
    check(full_ok, "%s: into a full pipe: %s (%s)"
          % (what, r["full"], "EAGAIN" if nonblock else "waits for room, >= 0.3 s"))
    floor = (SIZE - BURST) / RATE
    check(floor <= r["s"] <= 6, "%s: %.3f s (>= %.3f: never faster than the limit; <= 6)"
          % (what, r["s"], floor))


def main():
    for supervised in (False, True):
        for nonblock in (False, True):
            run(supervised, nonblock)


if __name__ == "__main__":
    main()
    finish()
