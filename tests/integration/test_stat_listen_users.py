#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""sluice stat --listen serves only the users who may read the counters
(cli/metrics_http.c, cli/peer.c: the kernel names the owner of each
loopback scraper's socket, as identd does).

Run as root (skipped, 77, otherwise). User A is nobody: a preloaded python of
A's sends under SLUICE_SEND=1MiB/s and idles, and A runs `sluice stat
--listen 127.0.0.1:0`. Scrapes of GET /metrics from 127.0.0.1:
  - by A: 200 with sluice_ lines; by root: 200 with them;
  - by B (daemon): 403 and no sluice_ line;
  - with --allow-user daemon: B's scrape 200 with them;
  - 16 of A's scrapers at once: all 200 with them.
--token-file: a file readable by others is refused (exit 2, named); with a
0600 token file, a scrape carrying `Authorization: Bearer TOKEN` is still
decided by its user on loopback (the token is for peers on other hosts).
Before cli/peer.c every local user got every line.
"""
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from shim_lib import BUILD, LIB, ROOT, Server, check, finish

SLUICE = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "sluice")
PY = "/usr/bin/python3"

SCRAPE = r"""
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n" + sys.argv[2].encode() + b"\r\n")
d = b""
while True:
    c = s.recv(65536)
    if not c:
        break
    d += c
sys.stdout.write(d.decode(errors="replace"))
"""


def env_of(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLUICE_") and k not in ("XDG_RUNTIME_DIR", "LD_PRELOAD")}
    env["HOME"] = "/"
    env.update(extra or {})
    return env


def as_user(uid):
    return {} if uid == 0 else {"user": uid, "group": pwd.getpwuid(uid).pw_gid,
                                "extra_groups": []}


def scrape(port, uid, header=""):
    p = subprocess.run([PY, "-c", SCRAPE, str(port), header], env=env_of(), capture_output=True,
                       text=True, timeout=30, cwd="/", **as_user(uid))
    status = p.stdout.split("\n", 1)[0].strip()
    return status, sum(1 for l in p.stdout.splitlines() if l.startswith("sluice_"))


def listen(uid, extra_args=()):
    p = subprocess.Popen([SLUICE, "stat", "--listen", "127.0.0.1:0"] + list(extra_args),
                         env=env_of(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd="/", **as_user(uid))
    line = p.stdout.readline()
    port = int(line.rsplit(":", 1)[1].split("/")[0]) if "serving" in line else 0
    return p, port


def main():
    if os.geteuid() != 0:
        print("skip: needs root (runs users nobody and daemon)")
        sys.exit(77)
    a, b = pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("daemon").pw_uid
    shm = "/dev/shm/sluice-%d" % a
    had_dir = os.path.exists(shm)
    srv = Server("sink")
    prog = subprocess.Popen(
        [PY, "-c", "import socket, sys, time\ns = socket.create_connection(('127.0.0.1', %d))\n"
         "s.sendall(b'x' * 4096)\nprint('sent', flush=True)\nsys.stdin.read()" % srv.port],
        env=env_of({"LD_PRELOAD": LIB, "SLUICE_SEND": "1MiB/s"}), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, cwd="/", **as_user(a))
    tmp = tempfile.mkdtemp(prefix="sl-listen-")
    try:
        check(prog.stdout.readline().strip() == "sent", "A's throttled program runs")
        p, port = listen(a)
        try:
            check(port > 0, "A's sluice stat --listen serves (port %d)" % port)
            for who, uid, want in (("A", a, True), ("root", 0, True), ("B", b, False)):
                status, n = scrape(port, uid)
                print("measured: scrape by %s: %s, %d sluice_ lines" % (who, status, n))
                if want:
                    check(" 200 " in status and n > 0, "%s: 200 with sluice_ lines" % who)
                else:
                    check(" 403 " in status and n == 0, "%s: 403, no sluice_ line" % who)
            res = []
            ts = [threading.Thread(target=lambda: res.append(scrape(port, a))) for _ in range(16)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            ok = sum(1 for st, n in res if " 200 " in st and n > 0)
            check(ok == 16, "16 of A's scrapers at once: all 200 with lines (%d)" % ok)
        finally:
            p.terminate()
            p.wait(10)
        p, port = listen(a, ["--allow-user", "daemon"])
        try:
            status, n = scrape(port, b)
            print("measured: with --allow-user daemon, B: %s, %d sluice_ lines" % (status, n))
            check(" 200 " in status and n > 0, "--allow-user daemon: B gets 200 with lines")
        finally:
            p.terminate()
            p.wait(10)
        tok = os.path.join(tmp, "token")
        with open(tok, "w") as f:
            f.write("s3cret-token\n")
        os.chown(tmp, a, -1)
        os.chown(tok, a, -1)
        os.chmod(tok, 0o644)
        r = subprocess.run([SLUICE, "stat", "--listen", "127.0.0.1:0", "--token-file", tok],
                           env=env_of(), capture_output=True, text=True, timeout=20, cwd="/",
                           **as_user(a))
        check(r.returncode == 2 and "readable or writable by others" in r.stderr,
              "a token file readable by others: exit 2, named (%r)" % r.stderr.strip())
        os.chmod(tok, 0o600)
        p, port = listen(a, ["--token-file", tok])
        try:
            status, n = scrape(port, b, "Authorization: Bearer s3cret-token\r\n")
            check(" 403 " in status and n == 0,
                  "on loopback the token does not stand in for the user: B 403 (%s)" % status)
            status, n = scrape(port, a, "Authorization: Bearer wrong\r\n")
            check(" 200 " in status and n > 0, "A with any header: 200 (%s)" % status)
        finally:
            p.terminate()
            p.wait(10)
    finally:
        prog.stdin.close()
        prog.wait(10)
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        if not had_dir:
            shutil.rmtree(shm, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
