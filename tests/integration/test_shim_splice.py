#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A zero-copy send into a throttled socket returns what the kernel's one
call would (shim/xfer.c, pipe_left): the pieces stop when the source has no
more to give, at every boundary.

Under SLUICE_SEND=10MiB/s,burst=64KiB (pieces of 64 KiB), a preloaded python
asks for 1 MiB each time, the pipe's write end still open (so that an empty
pipe would block):
  splice  pipe -> socket holding 65536, 131072 (exact multiples of the piece),
          100000, 1 and 196608 bytes: returns exactly that, within 5 s;
  sendfile  a file of 65536, 131072 and 100000 bytes, from offset 0: the
          same (the file's end, as natively).
The sink receives each byte-exact (length and sha256). The same again
under `sluice --supervise` (supervise/source.c moves those bytes). Before the fix a
splice whose pipe held an exact multiple of the piece never returned
(SIGALRM after 5 s ended it here).
"""
import hashlib
import json
import os
import subprocess
import sys

from shim_lib import BUILD, PAYLOAD_SRC, ROOT, Server, check, child_env, finish, payload

SLUICE = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "sluice")

SIZES = [65536, 131072, 100000, 1, 196608]
FILES = [65536, 131072, 100000]

CHILD = PAYLOAD_SRC + r'''
import fcntl, json, os, signal, socket, sys, tempfile, time
port = int(sys.argv[1])
splices, files = json.loads(sys.argv[2]), json.loads(sys.argv[3])
signal.signal(signal.SIGALRM, lambda *a: None)  # interrupts a hung call
out = []
def one(kind, n, call):
    s = socket.create_connection(("127.0.0.1", port))
    signal.alarm(5)
    t0 = time.monotonic()
    try:
        r = call(s.fileno())
    except OSError as e:
        r = "error %s" % e
    dt = time.monotonic() - t0
    signal.alarm(0)
    s.close()
    out.append({"kind": kind, "n": n, "r": r, "s": dt})
for n in splices:
    rd, wr = os.pipe()
    fcntl.fcntl(wr, 1031, 262144)  # F_SETPIPE_SZ: room for 192 KiB
    os.write(wr, payload(n))
    one("splice", n, lambda fd: os.splice(rd, fd, 1 << 20))
    os.close(rd); os.close(wr)
for n in files:
    with tempfile.TemporaryFile() as f:
        f.write(payload(n)); f.flush()
        one("sendfile", n, lambda fd: os.sendfile(fd, f.fileno(), 0, 1 << 20))
print(json.dumps(out))
'''


def run(supervised):
    what = "supervised" if supervised else "preload"
    srv = Server("sink")
    cmd = [sys.executable, "-c", CHILD, str(srv.port), json.dumps(SIZES), json.dumps(FILES)]
    if supervised:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("SLUICE_") and k != "LD_PRELOAD"}
        cmd = [SLUICE, "--supervise", "--send", "10MiB/s,burst=64KiB", "--"] + cmd
    else:
        env = child_env({"SLUICE_SEND": "10MiB/s,burst=64KiB"})
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    lines = [l for l in p.stdout.splitlines() if l.startswith("[")]
    check(p.returncode == 0 and lines, "%s: child ran (rc %d) %s"
          % (what, p.returncode, p.stderr[-300:]))
    res = json.loads(lines[-1]) if lines else []
    got = srv.wait_results(len(SIZES) + len(FILES))
    srv.stop()
    for r in res:
        print("measured: %s: %s of %d bytes, 1 MiB asked: returned %r in %.3f s"
              % (what, r["kind"], r["n"], r["r"], r["s"]))
        check(r["r"] == r["n"], "%s: %s %d: returns %d (%r)"
              % (what, r["kind"], r["n"], r["n"], r["r"]))
        check(r["s"] < 5, "%s: %s %d: within 5 s (%.3f)" % (what, r["kind"], r["n"], r["s"]))
    want = sorted((n, hashlib.sha256(payload(n)).hexdigest()) for n in SIZES + FILES)
    check(sorted(got) == want, "%s: the sink received each byte-exact (%d connections, %d wanted)"
          % (what, len(got), len(want)))


def main():
    run(False)
    run(True)
    finish()


if __name__ == "__main__":
    main()
