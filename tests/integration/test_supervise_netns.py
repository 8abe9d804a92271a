#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A supervised program that enters a network namespace of its own keeps
the kernel's answer: its new sockets are made there, not in the
supervisor's (supervise/sock.c, other_netns).

A python connects socket A to a server on the host's 127.0.0.1, then calls
unshare(CLONE_NEWUSER | CLONE_NEWNET) (no privilege needed) and tries the
same address with socket B, as the `unshare -rn` command does:
  - natively and under `sluice --supervise --send 1MiB/s`: A connects, B
    fails (ENETUNREACH: the new namespace has no loopback up). Before the
    fix the supervisor made B in its own namespace, where it connected.
  - supervised: one warning names the process and says its new sockets
    pass unthrottled; A, made before, is still throttled (256 KiB sent on
    it take >= (256 KiB - burst) / rate).
Skipped (77) where the kernel refuses unprivileged user namespaces.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import SLUICE, Server, check, finish  # noqa: E402

CHILD = r'''
import ctypes, errno, json, os, socket, sys, time
port = int(sys.argv[1])
out = {}
a = socket.create_connection(("127.0.0.1", port))
out["a"] = "connected"
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000 | 0x40000000) != 0:  # CLONE_NEWUSER | CLONE_NEWNET
    out["unshare"] = errno.errorcode.get(ctypes.get_errno(), "?")
else:
    out["unshare"] = "ok"
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        out["b"] = "connected"
    except OSError as e:
        out["b"] = errno.errorcode.get(e.errno, str(e.errno))
t0 = time.monotonic()
a.sendall(b"a" * 262144)
out["a_s"] = time.monotonic() - t0
a.close()
print(json.dumps(out))
'''


def run(supervised):
    srv = Server("sink")
    cmd = [sys.executable, "-c", CHILD, str(srv.port)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_") and k != "LD_PRELOAD"}
    if supervised:
        cmd = [SLUICE, "--supervise", "--send", "1MiB/s,burst=64KiB", "--"] + cmd
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    srv.stop()
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    return p, json.loads(lines[-1]) if lines else {}


def main():
    p, native = run(False)
    if native.get("unshare") != "ok":
        print("skip: unprivileged user namespaces refused here (%s)" % native.get("unshare"))
        sys.exit(77)
    check(native.get("a") == "connected" and native.get("b") == "ENETUNREACH",
          "natively: A connects, B in the new namespace gets %s" % native.get("b"))
    p, sup = run(True)
    check(p.returncode == 0 and sup.get("a") == "connected" and sup.get("unshare") == "ok",
          "supervised: A connects, unshare works (rc %d) %s" % (p.returncode, p.stderr[-300:]))
    check(sup.get("b") == native.get("b"),
          "supervised: B gets the kernel's answer too: %s (native %s)"
          % (sup.get("b"), native.get("b")))
    warns = [l for l in p.stderr.splitlines() if "another network namespace" in l]
    check(len(warns) == 1 and "pass unthrottled" in warns[0],
          "supervised: one warning names it: %r" % warns)
    floor = (262144 - 65536) / 1048576
    check(sup.get("a_s", 0) >= floor,
          "supervised: A (made before) is still throttled: %.3f s (>= %.3f)"
          % (sup.get("a_s", 0), floor))


if __name__ == "__main__":
    main()
    finish()
