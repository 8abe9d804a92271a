#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A host pool: shared=NAME with redis=KEY, against a private redis-server
(test_redis.Redis: temp dir, unix socket, killed on every way out).

  alone     1 process at send:10MiB/s,redis=KEY,lease=1MiB for 6 s: the
            EVALSHA calls per second one process makes at that rate.
  pool      8 processes at send:10MiB/s,shared=NAME,redis=KEY,lease=1MiB
            for 6 s: combined within +2%/-5% of 10 MiB/s (bytes the sink
            received; alone too), and EVALSHA per second at most 1.2x
            what the one process made alone.
  takeover  the same 8 for 8 s, the renewer (read from the shared
            segment) SIGKILLed 3 s in: another process renews within 2
            lease periods (1MiB at 10MiB/s: 100 ms each, measured by
            polling the segment), and the sink's rate over the run holds
            within 5%.
"""
import mmap
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_redis import Redis, collect, spawn  # noqa: E402
from shim_lib import check, finish, seg_path  # noqa: E402

RATE = 10 * 1024 * 1024
LEASE_S = 0.1  # lease=1MiB at 10MiB/s
CHUNK = 16384
RENEWER_OFF = 64 + 256 + 576 + 8 * 64  # struct sl_shm_shared's renewer word


class Sink:
    """Reads every connection to EOF, keeping (time, bytes) of each read."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.reads, self.lock, self.stopping = [], threading.Lock(), False
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        with c:
            while True:
                try:
                    b = c.recv(1 << 20)
                except OSError:
                    return
                if not b:
                    return
                with self.lock:
                    self.reads.append((time.monotonic(), len(b)))

    def between(self, lo, hi):
        with self.lock:
            return sum(n for t, n in self.reads if lo <= t <= hi)

    def stop(self):
        self.stopping = True
        self.sock.close()


def segment(name):
    path = seg_path("shared-" + name)
    end = time.monotonic() + 10
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.01)
    f = open(path, "rb")
    return f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)


def renewer(m):
    return struct.unpack_from("<Q", m, RENEWER_OFF)[0] & 0xFFFFFFFF


def run(redis, sink, sl, procs, dur, kill_at=None, seg=None):
    """procs senders for dur s; returns (start, end, EVALSHA/s, takeover s)."""
    before = redis.stat("evalsha")
    t0 = time.monotonic()
    ps = [spawn("send", sink.port, dur, 0, sl, [str(CHUNK)]) for _ in range(procs)]
    took = None
    if kill_at is not None:
        f, m = segment(seg)
        time.sleep(max(0, t0 + kill_at - time.monotonic()))
        old = renewer(m)
        victim = [p for p in ps if p.pid == old]
        check(len(victim) == 1, "takeover: the renewer (pid %d) is one of ours" % old)
        if victim:
            killed = time.monotonic()
            victim[0].send_signal(signal.SIGKILL)
            while renewer(m) in (old, 0) and time.monotonic() < killed + 5:
                time.sleep(0.001)
            took = time.monotonic() - killed
        m.close()
        f.close()
    for p in ps:
        collect(p)
    t1 = time.monotonic()
    rts = (redis.stat("evalsha") - before) / (t1 - t0)
    return t0, t1, rts, took


# Below the rate, at least 15 % is allowed whatever tol: a sender or sink
# kept off the CPU delivers less, never more. make test's first wave
# (lintian beside) once took 170 ms from the alone case's 4.6 s window:
# -3.71 % (-0.00 to -0.43 % here beside busy loops and a build); on a day
# this VM's system calls cost about 1 us (3 to 4 times the usual), two CI
# runs gave -12.11 % and -7.25 % (-0.04 to +0.11 % alone that day, -0.77
# and +0.50 % beside two busy loops). Above the rate, tol stays strict.
SLOW = 0.15


def check_rate(name, sink, t0, t1, tol):
    lo, hi = t0 + 1.0, t1 - 0.7  # started, and not yet winding down
    got = sink.between(lo, hi) / (hi - lo)
    slow = max(tol, SLOW)
    print("measured: %s: %.0f B/s at the sink over %.2f s (%.2f%% from %d)"
          % (name, got, hi - lo, 100 * (got - RATE) / RATE, RATE))
    check(-slow * RATE <= got - RATE <= tol * RATE,
          "%s: combined %.0f B/s within +%g%%/-%g%% of %d"
          % (name, got, 100 * tol, 100 * slow, RATE))


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if shutil.which("redis-server") is None:
        check(False, "redis-server is installed (scripts/deps.sh test)")
        finish()
    redis, sink = Redis(), Sink()
    tag = "p%d" % os.getpid()
    names = []
    try:
        url = "unix://" + redis.sock
        sl = {"SLUICE_SEND": "10MiB/s,redis=%sa,lease=1MiB" % tag, "SLUICE_REDIS": url}
        t0, t1, alone, _ = run(redis, sink, sl, 1, 6.0)
        print("measured: alone: 1 process, %.1f EVALSHA/s" % alone)
        check_rate("alone", sink, t0, t1, 0.02)

        names.append(tag + "b")
        sl = {"SLUICE_SEND": "10MiB/s,shared=%sb,redis=%sb,lease=1MiB" % (tag, tag),
              "SLUICE_REDIS": url}
        t0, t1, pool, _ = run(redis, sink, sl, 8, 6.0)
        print("measured: pool: 8 processes, %.1f EVALSHA/s (%.2fx alone)"
              % (pool, pool / max(alone, 1e-9)))
        check_rate("pool", sink, t0, t1, 0.02)
        check(pool <= 1.2 * alone, "pool: %.1f EVALSHA/s at most 1.2 x %.1f (alone)"
              % (pool, alone))

        names.append(tag + "c")
        log = os.path.join(redis.dir, "pool.log")
        sl = {"SLUICE_SEND": "10MiB/s,shared=%sc,redis=%sc,lease=1MiB" % (tag, tag),
              "SLUICE_REDIS": url, "SLUICE_LOG": "info", "SLUICE_LOG_FILE": log}
        t0, t1, rts, took = run(redis, sink, sl, 8, 8.0, kill_at=3.0, seg=tag + "c")
        text = open(log).read() if os.path.exists(log) else ""
        print("measured: takeover: a new renewer %.3f s after the SIGKILL (%d takeover "
              "lines); %.1f EVALSHA/s" % (took or -1, text.count("renews the host pool"), rts))
        check(took is not None and took <= 2 * LEASE_S,
              "takeover: another process renews within 2 lease periods (%.3f s)" % (took or -1))
        check_rate("takeover", sink, t0, t1, 0.05)
    finally:
        sink.stop()
        redis.stop()
        for n in names:
            try:
                os.unlink(seg_path("shared-" + n))
            except OSError:
                pass
    finish()


if __name__ == "__main__":
    main()
