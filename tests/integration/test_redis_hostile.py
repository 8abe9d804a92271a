#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A hostile or broken Redis cannot exhaust a throttled program (shim/redis.c:
get_reply bounds each reply to 1 MiB and the connection's timeout).

A fake Redis on 127.0.0.1 answers SCRIPT LOAD with a SHA1 and every EVALSHA
with "$2000000000" followed by an endless stream of bytes. A preloaded python
under SLUICE_SEND=1MiB/s,redis=k,on-error=open sends to a sink for 8 s. Its
RSS grows by at most 64 MiB over the 8 s, it logs the refused reply (one
warning), it keeps sending (on-error=open), and it exits 0 when told.
Before the cap the program's RSS grew by 2.8-3.0 GB in 8 s.
"""
import os
import socket
import subprocess
import sys
import threading
import time

from shim_lib import Server, check, child_env, finish

SHA = b"0123456789abcdef0123456789abcdef01234567"


class Hostile(Server):
    """Speaks just enough RESP: +OK, a SHA1 for SCRIPT, a giant bulk for EVALSHA
    (shim_lib.Server's accept loop, this serving of each connection)."""

    def __init__(self):
        self.streamed = 0
        super().__init__("hostile")

    def _serve(self, c):
        buf = b""
        c.settimeout(10)
        try:
            while not self.stopping:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
                if b"EVALSHA" in buf.upper():
                    c.sendall(b"$2000000000\r\n")
                    chunk = b"x" * 65536
                    while not self.stopping:
                        c.sendall(chunk)
                        self.streamed += len(chunk)
                    return
                if b"SCRIPT" in buf.upper() and buf.endswith(b"\r\n"):
                    c.sendall(b"$40\r\n" + SHA + b"\r\n")
                    buf = b""
                elif buf.endswith(b"\r\n") and buf.count(b"\r\n") >= 3:
                    c.sendall(b"+OK\r\n")
                    buf = b""
        except OSError:
            pass
        finally:
            c.close()


CHILD = r"""
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
end = time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < end:
    s.send(b"y" * 1024)
    n += 1024
print(n, flush=True)
sys.stdin.read()
"""


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def main():
    red, sink = Hostile(), Server("sink")
    env = child_env({"SLUICE_SEND": "1MiB/s,redis=k,on-error=open",
                     "SLUICE_REDIS": "redis://127.0.0.1:%d" % red.port, "SLUICE_LOG": "warn"})
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(sink.port), "8"], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        time.sleep(0.5)
        first = rss_kib(p.pid) or 0
        peak = first
        end = time.monotonic() + 8
        while time.monotonic() < end and p.poll() is None:
            peak = max(peak, rss_kib(p.pid) or 0)
            time.sleep(0.1)
        sent = p.stdout.readline().strip()
        p.stdin.close()
        rc = p.wait(20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        red.stop()
        sink.stop()
    err = p.stderr.read()
    grew = (peak - first) / 1024.0
    print("measured: RSS %d KiB at 0.5 s, peak %d KiB (+%.1f MiB) over 8 s; the fake Redis "
          "streamed %.1f MiB; the program sent %s bytes" % (first, peak, grew,
                                                             red.streamed / 1048576.0, sent))
    check(grew <= 64, "RSS grew by at most 64 MiB (%.1f)" % grew)
    check(rc == 0, "the program exited normally (rc %d)" % rc)
    check(sent.isdigit() and int(sent) > 0, "it kept sending (on-error=open): %s bytes" % sent)
    check(err.count("a reply over 1 MiB") >= 1,
          "the refused reply is logged (%r)" % err[-300:])
    finish()


if __name__ == "__main__":
    main()
