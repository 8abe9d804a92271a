#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""redis-server (one thread, epoll) under `sluice --accept 10/s,burst=1`,
with redis-benchmark as the client.

  --accept    redis-benchmark -k 0 (a new connection per request): the k
              connections redis counts (INFO stats) between two points
              took at least (k - 1) / 10 s (strict, burst 1);
  not slowed  a client connected before the flood gets its PINGs answered
              at once while redis turns new connections away (in place, the
              loop would sleep up to 100 ms in accept for each);
  no hang     redis-benchmark completes every request;
  CPU         redis-server's CPU time per wall second stays low.
"""
import socket
import statistics
import subprocess
import threading
import time

import eventloop_lib as el
from eventloop_lib import check, finish

RATE, N = 10, 10


def ping_rtts(port, stop, out):
    """PING redis every 20 ms over one connection until stop is set."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        while not stop.is_set():
            t = time.monotonic()
            s.sendall(b"PING\r\n")
            if s.recv(64) != b"+PONG\r\n":
                out.append(float("inf"))
                return
            out.append(time.monotonic() - t)
            time.sleep(0.02)


def connections(s):
    """total_connections_received, asked over the connected socket s."""
    s.sendall(b"INFO stats\r\n")
    data = b""
    while b"total_connections_received:" not in data or not data.endswith(b"\r\n\r\n"):
        b = s.recv(65536)
        if not b:
            break
        data += b
    for line in data.decode().splitlines():
        if line.startswith("total_connections_received:"):
            return int(line.split(":")[1])
    return -1


def main():
    if not el.have("redis-server", "redis-benchmark"):
        finish()
    port = el.free_port()
    rd = el.Proc(["--accept", "%d/s,burst=1" % RATE],
                 ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"])
    try:
        check(el.wait_port(port), "redis listens on 127.0.0.1:%d" % port)
        time.sleep(0.15)
        ctl = socket.create_connection(("127.0.0.1", port), timeout=10)
        time.sleep(0.15)
        stop, rtts = threading.Event(), []
        pinger = threading.Thread(target=ping_rtts, args=(port, stop, rtts))
        pinger.start()
        time.sleep(0.3)
        c0 = connections(ctl)
        t0 = time.monotonic()
        b = subprocess.run(["redis-benchmark", "-p", str(port), "-c", "4", "-n", str(N),
                            "-k", "0", "-t", "ping", "-P", "1", "-q", "--csv"],
                           env=el.clean_env(), capture_output=True, text=True, timeout=60)
        c1 = connections(ctl)
        elapsed = time.monotonic() - t0
        stop.set()
        pinger.join(10)
        ctl.close()
    finally:
        rd.stop()
    check(b.returncode == 0, "redis-benchmark completed (rc=%d) %s" % (b.returncode, b.stderr[-300:]))
    k = c1 - c0
    print("measured: redis-benchmark -k 0 -n %d (PING_INLINE, PING_MBULK): %d connections "
          "accepted in %.3f s (%.2f/s)" % (N, k, elapsed, k / elapsed))
    check(k >= 2 * N, "every request had its own connection (%d >= %d)" % (k, 2 * N))
    check(elapsed >= (k - 1) / RATE, "%d accepts at %d/s,burst=1 took %.3f s >= %.3f s"
          % (k, RATE, elapsed, (k - 1) / RATE))
    check(elapsed < 3 * k / RATE + 2, "and %.3f s is not wildly more" % elapsed)
    fin = [r for r in rtts if r != float("inf")]
    check(len(fin) == len(rtts) and len(fin) > 10, "the connected client got every PONG (%d)"
          % len(rtts))
    if fin:
        med, worst = statistics.median(fin), max(fin)
        print("measured: PING round trips during the accept throttle: median %.2f ms, "
              "max %.2f ms, %d pings" % (med * 1e3, worst * 1e3, len(fin)))
        check(med < 0.02, "median PING %.2f ms < 20 ms: the loop is not stalled" % (med * 1e3))
    rd.check_cpu("redis-server")
    finish()


if __name__ == "__main__":
    main()
