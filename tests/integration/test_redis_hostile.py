#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A hostile or broken Redis cannot exhaust a throttled program (shim/redis.c:
get_reply bounds each reply to 1 MiB and the connection's timeout).

A fake Redis on 127.0.0.1 answers SCRIPT LOAD with a SHA1 and every EVALSHA
with "$2000000000" followed by an endless stream of bytes (then with
"*2000000000" and an endless stream of ":1" elements, and the same array
inside another). A preloaded python
under SLUICE_SEND=1MiB/s,redis=k,on-error=open sends to a sink for 8 s. Its
peak RSS is at most 64 MiB above the same program's under a local rule, it logs the refused reply (one
warning: over 1 MiB; for the array, on a loaded machine, possibly slower than the connection's timeout),
it keeps sending (on-error=open), and it exits 0 when told.
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

    def __init__(self, head, unit):
        self.head, self.unit = head, unit
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
                    c.sendall(self.head)
                    chunk = self.unit * (65536 // len(self.unit))
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
    time.sleep(0.001)  # on-error=open passes everything: no busy loop beside other tests
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


def run(name, head, unit, control=None, reasons=("over 1 MiB",)):
    """The child against a fake Redis answering head + unit...; with
    control=None a local rule instead (no Redis): its peak RSS. The refusal
    logged must give one of `reasons`."""
    red, sink = Hostile(head, unit), Server("sink")
    rule = {"SLUICE_SEND": "1MiB/s,redis=k,on-error=open",
            "SLUICE_REDIS": "redis://127.0.0.1:%d" % red.port, "SLUICE_LOG": "warn"}
    env = child_env(rule if control is not None else {"SLUICE_SEND": "1MiB/s"})
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(sink.port), "8"], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        peak = 0
        end = time.monotonic() + 8.5
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
    if control is None:
        print("measured: %s: peak RSS %d KiB" % (name, peak))
        return peak
    grew = (peak - control) / 1024.0
    print("measured: %s: peak RSS %d KiB (+%.1f MiB over the run without Redis); the fake Redis "
          "streamed %.1f MiB; the program sent %s bytes" % (name, peak, grew,
                                                             red.streamed / 1048576.0, sent))
    check(grew <= 64, "%s: RSS at most 64 MiB above the run without Redis (%.1f)" % (name, grew))
    check(rc == 0, "%s: the program exited normally (rc %d)" % (name, rc))
    check(sent.isdigit() and int(sent) > 0, "%s: it kept sending (on-error=open): %s bytes"
          % (name, sent))
    check(any(err.count("a reply " + r) >= 1 for r in reasons),
          "%s: the refused reply is logged (%r)" % (name, err[-300:]))


def main():
    base = run("a local rule, no Redis", b"", b"x")
    run("a 2 GB bulk", b"$2000000000\r\n", b"x", base)
    # An array announcing more than 65536 elements is refused when its count
    # comes: hiredis would allocate 2e9 pointers (16 GB of address space)
    # and, when the dropped reply is freed, read every one of them (2.4 GB
    # of RSS in 8 s here, a kernel without a shared zero page; before, the
    # 1 MiB cap refused it after 262144 elements, +18 MiB).
    run("an array of 2e9 integers", b"*2000000000\r\n", b":1\r\n", base,
        ("with an array over 65536 elements",))
    run("an array of 2e9 integers inside an array", b"*1\r\n*2000000000\r\n", b":1\r\n", base,
        ("with an array over 65536 elements",))
    finish()


if __name__ == "__main__":
    main()
