#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A program that drops privileges stays in `sluice stat` (shim/wrap_cred.c).

The status record is a file of the starting user's private directory
(0700), made on first need; a process that had become nobody before that
could not make it, and vanished from `sluice stat` while still throttled.
Run as root (skipped, 77, otherwise), against a loopback peer:

  setuid   a python that calls setgid/setuid(nobody), then connects and
           sends 64 KiB under SLUICE_SEND=1MiB/s: `sluice stat --json` by
           root lists its pid with the send rule and the bytes sent, and
           the send was throttled (at least (64 KiB - burst) / 1 MiB/s);
  memcached  (when installed) `memcached -u nobody` under a connect rule,
           after a client connected: listed by pid while it runs.
"""
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time

from shim_lib import BUILD, ROOT, Server, check, child_env, finish

SLUICE = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "sluice")
N = 65536

# A system python: the test's own may live under /root, which nobody
# cannot read (its codecs would fail to import after the drop).
DROP = r"""
import encodings.idna, os, socket, sys, time
port, uid = int(sys.argv[1]), int(sys.argv[2])
os.setgid(uid)
os.setuid(uid)
s = socket.socket()
s.connect(("127.0.0.1", port))
t0 = time.monotonic()
s.sendall(b"z" * %d)
print("sent %%.6f %%d" %% (time.monotonic() - t0, os.geteuid()), flush=True)
sys.stdin.read()
""" % N


def stat_pids():
    p = subprocess.run([SLUICE, "stat", "--json"], capture_output=True, text=True, timeout=30)
    try:
        return {q["pid"]: q for q in json.loads(p.stdout).get("processes", [])}
    except ValueError:
        print("stat --json: %r %r" % (p.stdout[-300:], p.stderr[-300:]))
        return {}


def test_setuid(nobody):
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    srv = Server("sink")
    p = subprocess.Popen([py, "-c", DROP, str(srv.port), str(nobody)],
                         env=child_env({"SLUICE_SEND": "1MiB/s"}), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    check(len(line) == 3 and line[0] == "sent" and int(line[2]) == nobody,
          "setuid: the child became uid %d and sent (%r)" % (nobody, line))
    procs = stat_pids()
    rec = procs.get(p.pid, {})
    rules = rec.get("rules", [{}])
    check(p.pid in procs, "setuid: sluice stat (root) lists the process that became nobody "
          "(%d; listed: %s)" % (p.pid, sorted(procs)))
    check(rules[0].get("rule") == "send:1MiB/s" and rules[0].get("bytes") == N,
          "setuid: its send rule counted the %d bytes (%r)" % (N, rules[0]))
    if len(line) == 3:
        low = (N - 1048576 * 5 // 1000) / 1048576
        check(float(line[1]) >= low - 0.001, "setuid: still throttled after the drop: %.3f s "
              "(at least %.3f s)" % (float(line[1]), low))
    p.stdin.close()
    p.wait(30)
    srv.stop()


def test_memcached():
    mc = shutil.which("memcached")
    if mc is None:
        print("not run: memcached (Debian: memcached, which scripts/deps.sh test installs)")
        return
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    port = ls.getsockname()[1]
    ls.close()
    p = subprocess.Popen([mc, "-u", "nobody", "-l", "127.0.0.1", "-p", str(port), "-U", "0"],
                         env=child_env({"SLUICE_ACCEPT": "100/s"}), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    ok = False
    for _ in range(100):
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=1)
            c.sendall(b"version\r\n")
            ok = c.recv(100).startswith(b"VERSION")
            c.close()
            break
        except OSError:
            time.sleep(0.05)
    check(ok, "memcached: answers on loopback")
    time.sleep(0.2)
    procs = stat_pids()
    rec = procs.get(p.pid, {})
    check(p.pid in procs, "memcached -u nobody: listed by sluice stat (%d; listed: %s)"
          % (p.pid, sorted(procs)))
    check(rec.get("rules", [{}])[0].get("calls", 0) >= 1,
          "memcached: its accept rule counted the connection (%r)" % rec.get("rules"))
    p.terminate()
    p.wait(10)


def main():
    if os.geteuid() != 0:
        print("skip: privilege drop needs root")
        sys.exit(77)
    nobody = pwd.getpwnam("nobody").pw_uid
    test_setuid(nobody)
    test_memcached()
    finish()


if __name__ == "__main__":
    main()
