#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""adaptive.py - conns:adaptive side by side with no limit and fixed conns
limits (make bench, bench_adaptive.sh).

The server and client are tests/integration/adaptive_lib.py's: 40 ms of
simulated CPU per request, processor-shared on 1, then 4, then 1 cores
(capacity 25, 100, 25 requests/s), phases of 8 s; an open-loop client at
3x, 1.5x, 3x the capacity with a 1 s deadline, a new connection per
request (and, for the last row, 50 keep-alive connections). Each row's
figures are from 3 s into each phase: goodput (answers within the
deadline per second), p50 and p99 of the answers' latency. The target
(issue 45): goodput >= 80 % of the capacity and p99 <= 3x the unloaded
latency in every phase. All on 127.0.0.1.

Environment: SL_BUILD (build), BENCH_PHASE_S (8).
"""
import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("SL_BUILD", "build")
SLUICE = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "sluice")
LIB = os.path.join(ROOT, "tests", "integration", "adaptive_lib.py")
PHASE_S = float(os.environ.get("BENCH_PHASE_S", "8"))
ROWS = [("no sluice", None, 0), ("--conns 2,action=reject", "2,action=reject", 0),
        ("--conns 4,action=reject", "4,action=reject", 0),
        ("--conns 8,action=reject", "8,action=reject", 0),
        ("--conns adaptive,action=reject", "adaptive,action=reject", 0),
        ("--conns adaptive,action=reject, 50 keep-alive connections",
         "adaptive,action=reject", 50)]


def run(rule, keepalive):
    t0 = time.time() + 1.5
    argv = [sys.executable, LIB, "serve", "--t0", repr(t0), "--phase-s", str(PHASE_S)]
    if rule:
        argv = [SLUICE, "--conns", rule, "--"] + argv
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        port = p.stdout.readline().strip()
        base = json.loads(subprocess.run([sys.executable, LIB, "unloaded", "--port", port],
                                         capture_output=True, text=True,
                                         timeout=60).stdout)["median"]
        cmd = [sys.executable, LIB, "load", "--port", port, "--t0", repr(t0), "--phase-s",
               str(PHASE_S)]
        if keepalive:
            cmd += ["--keepalive", str(keepalive)]
        res = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                        timeout=PHASE_S * 3 + 60).stdout)
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    return base, res


def cell(ph, base):
    p50 = "-" if ph["p50"] is None else "%.0f" % (ph["p50"] * 1000)
    p99 = "-" if ph["p99"] is None else "%.0f" % (ph["p99"] * 1000)
    ok = ph["goodput"] >= 0.8 * ph["capacity"] and ph["p99"] is not None and \
        ph["p99"] <= 3 * base
    return "%.1f/%.0f, %s/%s ms%s" % (ph["goodput"], ph["capacity"], p50, p99,
                                       "" if ok else " ✗"), ok


def main():
    if not os.access(SLUICE, os.X_OK):
        print("bench_adaptive: %s missing: run make first" % SLUICE, file=sys.stderr)
        return 1
    print("| limit | 1 core, 3x | 4 cores, 1.5x | 1 core, 3x | unloaded | every phase |")
    print("|---|---|---|---|---|---|")
    for name, rule, keepalive in ROWS:
        base, res = run(rule, keepalive)
        cells = [cell(ph, base) for ph in res]
        print("| %s | %s | %.0f ms | %s |" % (name, " | ".join(c[0] for c in cells),
                                             base * 1000,
                                             "met" if all(c[1] for c in cells) else "missed"),
              flush=True)
    print("\nEach cell: goodput/capacity per s, p50/p99 of the answers (ms), from 3 s into "
          "the phase; ✗: goodput < 80 % of the capacity or p99 > 3x unloaded.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
