#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""wrk (an epoll load generator: non-blocking connects, one event loop)
under `sluice --connect 4/s,burst=1`, against an HTTP server in this process
that answers each request after 50 ms.

  --connect   the k-th connection reaches the server no sooner than
              (k - 1) / 4 s after wrk was started (strict);
  not slowed  the first connection is already making requests while the
              later ones wait for their connect slots (in place, wrk's
              connect loop would sleep before its event loop ever ran),
              and keeps doing so at the server's pace;
  no hang     every one of the 12 connections gets requests through, and
              wrk ends by itself (wrk first makes one connection of its own
              to check the address: it is counted, and makes no request);
  CPU         wrk's CPU time per wall second stays low.
"""
import socket
import threading
import time

import eventloop_lib as el
from eventloop_lib import check, finish

RATE, CONNS, SECONDS, DELAY = 4, 12, 5, 0.05


class Server:
    """Keep-alive HTTP/1.1 server, one thread per connection; records when
    each connection was accepted and when each of its requests came."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []  # (accepted at, [request times])
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            rec = (time.monotonic(), [])
            with self.lock:
                self.conns.append(rec)
            threading.Thread(target=self._serve, args=(c, rec[1]), daemon=True).start()

    def _serve(self, c, reqs):
        buf = b""
        with c:
            while True:
                try:
                    b = c.recv(65536)
                except OSError:
                    return
                if not b:
                    return
                buf += b
                while b"\r\n\r\n" in buf:
                    _, _, buf = buf.partition(b"\r\n\r\n")
                    reqs.append(time.monotonic())
                    time.sleep(DELAY)
                    try:
                        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    except OSError:
                        return

    def close(self):
        self.sock.close()


def main():
    if not el.have("wrk"):
        finish()
    srv = Server()
    t0 = time.monotonic()
    wrk = el.Proc(["--connect", "%d/s,burst=1" % RATE],
                  ["wrk", "-t1", "-c%d" % CONNS, "-d%ds" % SECONDS, "--timeout", "5s",
                   "http://127.0.0.1:%d/" % srv.port])
    out, err = wrk.wait(SECONDS + 30)
    srv.close()
    check(wrk.rc == 0, "wrk ended by itself (rc=%s)" % wrk.rc)
    if wrk.rc != 0:
        print("wrk: %s %s" % (out[-500:], err[-500:]))
    with srv.lock:
        conns = sorted((a, list(r)) for a, r in srv.conns)
    check(len(conns) == CONNS + 1, "the server saw %d connections (%d)"
          % (CONNS + 1, len(conns)))
    for k, (at, reqs) in enumerate(conns):
        since = at - t0
        check(since >= k / RATE, "connection %d reached the server %.3f s after wrk "
              "started, >= %d / %d s" % (k + 1, since, k, RATE))
        if k > 0:
            check(len(reqs) > 0, "connection %d made requests (%d)" % (k + 1, len(reqs)))
    if len(conns) > 2:
        last = conns[-1][0]
        first_reqs = conns[1][1]
        early = [t for t in first_reqs if t < last]
        print("measured: wrk: %d connections accepted over %.3f s (rate %d/s, burst 1); "
              "its first load connection made %d requests before the last one was accepted"
              % (len(conns), last - conns[0][0], RATE, len(early)))
        check(last - conns[0][0] < 3 * CONNS / RATE, "connects are not wildly slower")
        # Each request waits DELAY: while the others wait for their connect
        # slots, the first load connection must keep going at about that pace.
        span = last - conns[1][0]
        check(len(early) >= 0.5 * span / DELAY,
              "the first load connection was not held up by the throttled connects: %d requests "
              "in %.2f s (about %.0f at the server's pace)" % (len(early), span, span / DELAY))
    wrk.check_cpu("wrk")
    finish()


if __name__ == "__main__":
    main()
