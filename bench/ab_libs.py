#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ab_libs.py - two builds of libsluice.so against no preload, side by side.

Each round runs `build/bench/flow overhead send1 N` (N matched 1-byte sends
to a sink on 127.0.0.1) four times, interleaved: no preload, OLD, NEW, no
preload; the no-preload time of a round is the mean of its two runs. Printed
per rule: the median no-preload ns per call and the medians (and ranges) of
the per-round ratios old/none, new/none and new/old, so a noisy moment of a
shared machine hits every side of a round.

    python3 bench/ab_libs.py OLD_LIB NEW_LIB [ROUNDS] [RULE ...]
    python3 bench/ab_libs.py /tmp/old/build/libsluice.so build/libsluice.so 31 1GiB/s 1GiB/s,per=fd

RULE is a SLUICE_SEND value (default 1GiB/s: never limits 1-byte sends).
Loopback only; every run is bounded (N calls, 120 s).
"""
import os
import socket
import statistics
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOW = os.path.join(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")), "bench", "flow")
CALLS = 84000


def sink():
    """A listener on 127.0.0.1 that drains every connection; its port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)

    def drain(c):
        while c.recv(1 << 20):
            pass
        c.close()

    def accept():
        while True:
            c, _ = srv.accept()
            threading.Thread(target=drain, args=(c,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv.getsockname()[1]


def run(port, lib, rule):
    """ns per call of one run (lib None: no preload)."""
    env = dict(os.environ)
    if lib:
        env["LD_PRELOAD"] = os.path.abspath(lib)
        env["SLUICE_SEND"] = rule
    out = subprocess.run([FLOW, "overhead", "send1", str(CALLS), "127.0.0.1", str(port)],
                         env=env, capture_output=True, text=True, timeout=120, check=True)
    return float(out.stdout.split()[1])


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    old, new = argv[1], argv[2]
    rounds = int(argv[3]) if len(argv) > 3 else 21
    rules = argv[4:] or ["1GiB/s"]
    port = sink()
    for rule in rules:
        ro, rn, base = [], [], []
        for _ in range(rounds):
            a = run(port, None, rule)
            o = run(port, old, rule)
            n = run(port, new, rule)
            b = run(port, None, rule)
            none = (a + b) / 2
            ro.append(o / none)
            rn.append(n / none)
            base.append(none)
        rel = [n / o for n, o in zip(rn, ro)]
        print("%s: none %.0f ns; old/none %.3f (%.2f-%.2f); new/none %.3f (%.2f-%.2f); "
              "new/old %.3f (%.2f-%.2f)" % (
                  rule, statistics.median(base), statistics.median(ro), min(ro), max(ro),
                  statistics.median(rn), min(rn), max(rn), statistics.median(rel), min(rel),
                  max(rel)))


if __name__ == "__main__":
    main(sys.argv)
