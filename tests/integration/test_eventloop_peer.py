#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nginx (one process, epoll) under `sluice --accept 2/s,burst=1,per=peer`:
a throttled peer's connections are held by the shim (acchold.c), not waited
for inside accept, so the one event loop goes on serving everyone else.

  flood    a client on 127.0.0.2 opens 10 connections at once, each with a
           request: they are answered one per 1/2 s (the k-th no sooner
           than (k - 1) / 2 s, strict), all of them;
  others   meanwhile a client on 127.0.0.3 makes 5 requests, 0.6 s apart
           (its own limit never applies): each is answered in < 100 ms;
  CPU      nginx's CPU time stays under 0.2 s per wall second;
  poll, select  the same hand-over in a python server whose loop is poll()
           or select() (nginx's is epoll).
"""
import os
import shutil
import socket
import tempfile
import threading
import time

import eventloop_lib as el
from eventloop_lib import check, finish
from shim_lib import read_all

REQ = b"GET /small HTTP/1.0\r\nHost: localhost\r\n\r\n"


def flood(port, out):
    """10 connections from 127.0.0.2 at once; out gets each answer's time
    from the start (None for a failed one)."""
    t0 = time.monotonic()
    socks = []
    for _ in range(10):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.settimeout(20)
        s.connect(("127.0.0.1", port))
        s.sendall(REQ)
        socks.append(s)
    done = []
    lock = threading.Lock()

    def wait(s):
        try:
            ok = read_all(s).startswith(b"HTTP/1.1 200")
        except OSError:
            ok = False
        with lock:
            done.append(time.monotonic() - t0 if ok else None)
        s.close()

    ths = [threading.Thread(target=wait, args=(s,)) for s in socks]
    for t in ths:
        t.start()
    for t in ths:
        t.join(30)
    out.extend(done)


def others(port, out):
    """5 requests from 127.0.0.3, 0.6 s apart; out gets each one's time."""
    for _ in range(5):
        t0 = time.monotonic()
        try:
            s = socket.socket()
            s.bind(("127.0.0.3", 0))
            s.settimeout(10)
            s.connect(("127.0.0.1", port))
            s.sendall(REQ)
            ok = read_all(s).startswith(b"HTTP/1.1 200")
            s.close()
        except OSError:
            ok = False
        out.append(time.monotonic() - t0 if ok else None)
        time.sleep(0.6)


SERVER = r'''
import selectors, socket, sys, time
sel = getattr(selectors, sys.argv[1])()
lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen(64)
lst.setblocking(False)
print(lst.getsockname()[1], flush=True)
sel.register(lst, selectors.EVENT_READ)
end = time.monotonic() + 8
while time.monotonic() < end:
    for key, _ in sel.select(0.5):
        try:
            c, _ = lst.accept()
        except BlockingIOError:
            continue
        c.setblocking(True)
        c.sendall(b"x")
        c.close()
'''


def python_server(selector):
    """A single-threaded python server (selectors.<selector>: poll.c's poll
    or select) at --accept 2/s,burst=1,per=peer: 4 connections from
    127.0.0.2 at once, then one from 127.0.0.3 answered at once."""
    import subprocess
    import sys
    from shim_lib import child_env
    p = subprocess.Popen([sys.executable, "-c", SERVER, selector], stdout=subprocess.PIPE,
                         text=True, env=child_env({"SLUICE_ACCEPT": "2/s,burst=1,per=peer"}))
    try:
        port = int(p.stdout.readline())
        t0 = time.monotonic()
        socks = []
        for _ in range(4):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
            socks.append(s)
        time.sleep(0.2)
        s3 = socket.socket()
        s3.bind(("127.0.0.3", 0))
        s3.settimeout(5)
        t3 = time.monotonic()
        s3.connect(("127.0.0.1", port))
        got3 = s3.recv(1)
        t3 = time.monotonic() - t3
        times = []
        for s in socks:
            try:
                times.append(time.monotonic() - t0 if s.recv(1) == b"x" else None)
            except OSError:
                times.append(None)
        got = sorted(x for x in times if x is not None)
        print("measured: %s: 127.0.0.2 answered at %s s, 127.0.0.3 in %.3f s" % (
            selector, ", ".join("%.3f" % x for x in got), t3))
        check(got3 == b"x" and t3 < 0.1,
              "%s: 127.0.0.3 is answered at once (%.3f s)" % (selector, t3))
        check(len(got) == 4 and all(x >= k * 0.5 - 0.02 for k, x in enumerate(got)) and
              got[-1] < 3.5, "%s: 127.0.0.2's 4 connections are handed over 1/2 s apart" % selector)
    finally:
        p.kill()
        p.wait()


def main():
    python_server("PollSelector")
    python_server("SelectSelector")
    if not el.have("nginx"):
        finish()
    d = tempfile.mkdtemp(prefix="sluice-peer-")
    port = el.free_port()
    argv = el.nginx_setup(d, port, {"small": b"s" * 1000})
    ng = el.Proc(["--accept", "2/s,burst=1,per=peer"], argv)
    try:
        check(el.wait_port(port), "nginx listens on 127.0.0.1:%d" % port)
        fl, ot = [], []
        a = threading.Thread(target=flood, args=(port, fl))
        b = threading.Thread(target=others, args=(port, ot))
        t0 = time.monotonic()
        a.start()
        time.sleep(0.2)
        b.start()
        a.join(40)
        b.join(40)
        wall = time.monotonic() - t0
    finally:
        ng.stop()
        shutil.rmtree(d, ignore_errors=True)
    got = sorted(x for x in fl if x is not None)
    print("measured: 127.0.0.2's 10 answers at %s s" % ", ".join("%.3f" % x for x in got))
    print("measured: 127.0.0.3's 5 answers took %s s" % ", ".join(
        "-" if x is None else "%.3f" % x for x in ot))
    check(len(got) == 10, "flood: all 10 connections answered (%d)" % len(got))
    check(all(x >= k * 0.5 - 0.02 for k, x in enumerate(got)),
          "flood: one answer per 1/2 s at most (the k-th no sooner than k/2 s)")
    check(len(got) == 10 and got[-1] < 4.5 + 2.0, "flood: the last within about 4.5 s (%.3f s)"
          % (got[-1] if got else -1))
    check(len(ot) == 5 and all(x is not None and x < 0.1 for x in ot),
          "others: each of 127.0.0.3's 5 requests answered in < 100 ms while 127.0.0.2 waits")
    per = ng.cpu / ng.wall
    print("measured: nginx used %.3f s CPU in %.2f s wall (%.3f CPU s/s, clients ran %.2f s)"
          % (ng.cpu, ng.wall, per, wall))
    check(per < 0.2, "nginx: CPU %.3f s per wall second < 0.2" % per)
    finish()


if __name__ == "__main__":
    main()
