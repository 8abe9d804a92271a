#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Supervised mode: the supervisor's socket installs never replace a file the
program opened itself.

The supervisor makes a supervised program's sockets and installs them at a
number >= 512 it checked free (SECCOMP_IOCTL_NOTIF_ADDFD with SETFD, which
replaces what is there). A program with 600 files open gets its next
open() at 600, 601, ... (the kernel's lowest free number): sockets placed
upward from 512 met those numbers, and an install replaced a file the
program had just opened (a /dev/null fd became a socket in 5 of 14 runs).
fdrace (supervised/fdrace.c) opens 600 files, then 2 threads open files
and 2 threads make sockets, 3000 each, checking every fd's kind when made
and when closed. Under --supervise --send, in RUNS runs: none hangs, every
call succeeds, no fd is of the wrong kind or changes kind, the 600 first
files are still files, and every socket is below 1024 (select() can watch
it). The same program natively is the control."""
import json
import subprocess

from supervise_lib import SLUICE, build_c, check, env_clean, run_main

RUNS = 8
ITERS = 3000


def run(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env_clean(), timeout=60)
    except subprocess.TimeoutExpired:
        return None, "timed out after 60 s"
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        return None, "rc=%d %s" % (r.returncode, r.stderr[-300:])
    return json.loads(lines[-1]), r.stderr


def clean(res, low):
    return (res is not None and res["low"] == low and res["errors"] == 0
            and res["opens"] == 2 * ITERS and res["socks"] == 2 * ITERS
            and res["wrong_new"] == 0 and res["changed"] == 0 and res["low_changed"] == 0)


def body():
    prog = build_c("fdrace")
    native, err = run([prog, "600", "2", str(ITERS)])
    print("measured: native: %s" % (native or err))
    check(clean(native, 600), "natively no fd changes kind (the control)")
    results = []
    for _ in range(RUNS):
        res, err = run([SLUICE, "--supervise", "--send", "1GB/s", "--", prog, "600", "2",
                        str(ITERS)])
        results.append(res)
        if res is None:
            print("measured: supervised run failed: %s" % err)
    print("measured: supervised, %d runs: %s" % (RUNS, [
        None if r is None else (r["changed"], r["wrong_new"], r["low_changed"], r["max_sock"])
        for r in results]))
    check(all(r is not None for r in results),
          "none of %d supervised runs hangs or fails" % RUNS)
    check(all(clean(r, 600) for r in results),
          "600 low files + concurrent open/socket: every call succeeds, no fd is of the wrong "
          "kind or changes kind, in %d of %d runs" % (sum(clean(r, 600) for r in results), RUNS))
    socks = [r["max_sock"] for r in results if r is not None]
    check(bool(socks) and all(512 <= m < 1024 for m in socks),
          "every socket was placed at 512..1023 (highest per run: %s)" % socks)
    res, err = run([SLUICE, "--supervise", "--send", "1GB/s", "--", prog, "0", "2", "500"])
    check(res is not None and res["changed"] == 0 and res["wrong_new"] == 0
          and 512 <= res["max_sock"] < 1024,
          "with no low files: sockets placed at 512..1023, none replaced (%s)" % (res or err))


if __name__ == "__main__":
    run_main(body)
