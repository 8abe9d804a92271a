#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""eventloop.py - accuracy and CPU cost of throttling many connections of
one event loop (issue 8's bench).

nginx (one process: one epoll loop, edge-triggered, sendfile) serves a file
under `sluice --send RATE,per=fd,burst=BURST`; a client in this process
(not throttled; epoll through selectors) opens N connections at once and
downloads the file on each. For N = 1, 100 and 1000 it prints:
  - accuracy: each connection's time against the ideal (size - burst) / rate
    (a ratio below 1.000 would break the limit; above is slowness), as the
    median, the best and the worst connection;
  - nginx's CPU time (kernel rusage) per second of wall time, in all and per
    connection, i.e. what keeping N connections at their pace costs.

Usage: bench/eventloop.py [N...]     (SLUICE_BUILD selects the build)
"""
import os
import resource
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from eventloop_lib import nginx_setup  # noqa: E402  (the same nginx as the tests)
BUILD = os.environ.get("SLUICE_BUILD", "build")
SLUICE = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
SLUICE = os.path.join(SLUICE, "sluice")

RATE = 20000          # bytes/s per connection
BURST = 2000          # 100 ms of the rate: an nb wait is for 1000 B, 20 wake-ups/s
SIZE = 3 * RATE       # 3 s per download at the rate

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def download_all(port, n, timeout=60):
    """n concurrent GETs on one selector loop; returns each connection's
    (bytes of body, seconds from connect to EOF)."""
    sel = selectors.DefaultSelector()
    req = b"GET /f HTTP/1.0\r\nHost: x\r\n\r\n"
    conns = {}
    for i in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        conns[s] = {"t0": time.monotonic(), "sent": False, "buf": bytearray(), "t": None}
        sel.register(s, selectors.EVENT_WRITE)
    left, end = n, time.monotonic() + timeout
    while left and time.monotonic() < end:
        for key, ev in sel.select(1.0):
            s, c = key.fileobj, conns[key.fileobj]
            if not c["sent"]:
                s.send(req)
                c["sent"] = True
                sel.modify(s, selectors.EVENT_READ)
                continue
            try:
                b = s.recv(262144)
            except BlockingIOError:
                continue
            if b:
                c["buf"] += b
                continue
            c["t"] = time.monotonic() - c["t0"]
            sel.unregister(s)
            s.close()
            left -= 1
    out = []
    for s, c in conns.items():
        body = bytes(c["buf"]).partition(b"\r\n\r\n")[2]
        out.append((len(body), c["t"]))
        if c["t"] is None:
            s.close()
    return out


def run(n):
    d = tempfile.mkdtemp(prefix="sluice-bench-el-")
    port = free_port()
    argv = nginx_setup(d, port, {"f": os.urandom(SIZE)})
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    p = subprocess.Popen([SLUICE, "--send", "%dB/s,per=fd,burst=%dB" % (RATE, BURST), "--"] +
                         argv, env=env)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    ru0 = None
    try:
        with open("/proc/%d/stat" % p.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        ru0 = (int(fields[11]) + int(fields[12])) / tck
        t0 = time.monotonic()
        res = download_all(port, n)
        wall = time.monotonic() - t0
        with open("/proc/%d/stat" % p.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / tck - ru0
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
        shutil.rmtree(d, ignore_errors=True)
    ideal = (SIZE - BURST) / RATE
    done = [t for size, t in res if t is not None and size == SIZE]
    ratios = sorted(t / ideal for t in done)
    if not ratios:
        print("%5d  no download completed" % n)
        return
    print("%5d  %4d/%-4d  %6.3f  %6.3f  %6.3f   %7.3f  %9.1f   %5.1f"
          % (n, len(done), n, statistics.median(ratios), ratios[0], ratios[-1],
             cpu / wall, cpu / wall / n * 1e6, wall))


def main():
    ns = [int(a) for a in sys.argv[1:]] or [1, 100, 1000]
    lim = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(8192, lim[1]) if lim[1] != resource.RLIM_INFINITY else 8192
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(lim[0], want), lim[1]))
    if shutil.which("nginx") is None:
        print("eventloop: nginx not installed (scripts/deps.sh test installs it)")
        return 0
    print("nginx --send %dB/s,per=fd,burst=%dB; each connection downloads %d bytes "
          "(ideal %.3f s)" % (RATE, BURST, SIZE, (SIZE - BURST) / RATE))
    print("    N  complete   time/ideal: median  best   worst   nginx CPU s/s  "
          "CPU us/s per conn  wall s")
    for n in ns:
        run(n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
