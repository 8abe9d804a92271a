#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A process that forks and sandboxes its child with seccomp (issue 19,
part 2), without sshd: a preloaded python connects to a loopback peer,
forks, and the child installs (prctl(PR_SET_SECCOMP), through the shim's
wrapper) a filter that kills the process on getsockopt, getsockname,
getpeername, fcntl, fstat and newfstatat, the queries the shim would
otherwise make. Then, under --send 1MiB/s:
  classified  the socket connected before the fork is known in the child
              (the fork's prepare handler classified it) and throttled:
              512 KiB take >= 0.49 s (strict: (512 KiB - burst) / rate);
  no query    the child is not killed (SIGSYS) and exits 0;
  new socket  one made and connected after the filter cannot be
              classified: it passes through (512 KiB well under 0.45 s);
  connected   one the child connected just before its filter and never
              used is classified when the filter is noted: throttled.
x86_64 only (the filter's system call numbers); skips elsewhere (exit 77).
"""
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import LIB, Server, check, finish, run_child  # noqa: E402

CHILD = r'''
import ctypes, json, os, socket, struct, sys, time
port = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
s = socket.create_connection(("127.0.0.1", port))
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    # BPF: load the system call number; kill the process on the queries.
    ins = [(0x20, 0, 0, 0)]
    queries = [55, 51, 52, 72, 5, 262]
    for i, nr in enumerate(queries):
        ins.append((0x15, len(queries) - i, 0, nr))      # jeq nr -> kill
    ins.append((0x06, 0, 0, 0x7fff0000))                 # allow
    ins.append((0x06, 0, 0, 0x80000000))                 # kill process
    prog = b"".join(struct.pack("HBBI", *x) for x in ins)
    buf = ctypes.create_string_buffer(prog)
    fprog = struct.pack("HxxxxxxQ", len(ins), ctypes.addressof(buf))
    fbuf = ctypes.create_string_buffer(fprog)
    s3 = socket.create_connection(("127.0.0.1", port))  # connected, never used
    assert libc.prctl(38, 1, 0, 0, 0) == 0               # PR_SET_NO_NEW_PRIVS
    rc = libc.prctl(22, 2, ctypes.addressof(fbuf), 0, 0)  # PR_SET_SECCOMP, FILTER
    data = b"z" * (512 << 10)
    t0 = time.monotonic()
    s.sendall(data)
    t1 = time.monotonic()
    s2 = socket.create_connection(("127.0.0.1", port))
    t2 = time.monotonic()
    s2.sendall(data)
    t3 = time.monotonic()
    s3.sendall(data)
    t4 = time.monotonic()
    os.write(w, json.dumps({"prctl": rc, "old_s": t1 - t0, "new_s": t3 - t2,
                            "pre_s": t4 - t3}).encode())
    os._exit(0)
os.close(w)
_, status = os.waitpid(pid, 0)
out = os.read(r, 4096).decode()
res = json.loads(out) if out else {}
res["status"] = status
res["signal"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
print(json.dumps(res))
'''


def main():
    if platform.machine() != "x86_64":
        print("skip: the test's seccomp filter names x86_64 system call numbers")
        sys.exit(77)
    if not os.path.exists(LIB):
        check(False, "library %s exists" % LIB)
        finish()
    srv = Server("sink")
    try:
        rc, r, err = run_child(None, {"SLUICE_SEND": "1MiB/s"},
                               argv=[sys.executable, "-c", CHILD, str(srv.port)])
    finally:
        srv.stop()
    check(rc == 0 and r is not None, "parent ran (rc=%d, stderr %r)" % (rc, err[-300:]))
    if r is None:
        finish()
    print("measured: child status %d (signal %d): old socket 512 KiB in %s s, new in %s s"
          % (r["status"], r["signal"], r.get("old_s"), r.get("new_s")))
    check(r["signal"] == 0 and r["status"] == 0, "the sandboxed child was not killed (signal %d)"
          % r["signal"])
    check(r.get("prctl") == 0, "the filter was installed (prctl returned %s)" % r.get("prctl"))
    if "old_s" in r:
        burst = 5243  # 5 ms of the rate, rounded up (the README's floor)
        floor = ((512 << 10) - burst) / 1048576
        check(r["old_s"] >= floor, "the socket connected before fork is throttled in the "
              "sandbox (%.3f s >= %.3f s)" % (r["old_s"], floor))
        check(r["old_s"] < 1.5, "and at about the rate (%.3f s < 1.5 s)" % r["old_s"])
        check(r["new_s"] < 0.45, "a socket made in the sandbox passes through (%.3f s < 0.45 s)"
              % r["new_s"])
        check(r["pre_s"] >= floor, "a socket the child connected just before its filter is "
              "throttled in the sandbox (%.3f s >= %.3f s)" % (r["pre_s"], floor))
    finish()


if __name__ == "__main__":
    main()
