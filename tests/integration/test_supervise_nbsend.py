#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A non-blocking send of 16 MiB to a peer that does not read, repeated, in
both modes: the first call moves what the socket buffer takes and a later
one gets EAGAIN, as without sluice, and the peer then receives exactly the
bytes the calls reported. Before, the supervisor answered every such call
with one piece (its 256 KiB bounce buffer) even under a rule that never
limits, so the buffer never filled in CPython's test_socket
testWriteNonBlocking (11 calls) and the test skipped itself under
--supervise. Under a limiting rule (1 MiB/s, burst 5243 B) the bytes moved
stay within the burst plus the rate times the time taken, in both modes."""
import json
import os
import subprocess
import sys

from supervise_lib import SLUICE, check, env_clean, run_main

PROG = r'''
import json, socket, sys, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname(), timeout=10); s, _ = l.accept()
c.setblocking(False)
big = b"x" * (16 << 20)
counts, total = [], 0
t0 = time.monotonic()
for i in range(8):
    try:
        n = c.send(big)
    except BlockingIOError:
        n = -1
    counts.append(n)
    total += max(n, 0)
el = time.monotonic() - t0
c.setblocking(True)
c.shutdown(socket.SHUT_WR)
s.settimeout(10)
got = 0
while True:
    b = s.recv(1 << 20)
    if not b:
        break
    got += len(b)
print(json.dumps({"counts": counts, "total": total, "got": got, "elapsed": el}))
'''

PIECE = 256 << 10  # supervise/internal.h SL_SUP_PIECE_MAX
RATE, BURST = 1 << 20, 5243  # --send 1MiB/s: burst 5 ms of the rate


def run(prefix):
    p = subprocess.run(prefix + [sys.executable, "-c", PROG], capture_output=True, text=True,
                       env=env_clean(), timeout=60)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    check(p.returncode == 0 and lines, "%s: ran (rc=%d, stderr=%r)"
          % (" ".join(prefix[1:]) or "native", p.returncode, p.stderr[-300:]))
    return json.loads(lines[-1]) if lines else {"counts": [], "total": -1, "got": -2,
                                                "elapsed": 0}


def body():
    native = run([])
    print("measured: native: %s" % native["counts"])
    for mode in ("--preload", "--supervise"):
        r = run([SLUICE, mode, "--send", "10GB/s", "--"])
        print("measured: %s, never limiting: %s" % (mode, r["counts"]))
        check(r["got"] == r["total"], "%s: the peer received exactly the %d bytes reported (%d)"
              % (mode, r["total"], r["got"]))
        first = r["counts"][0] if r["counts"] else 0
        nfirst = native["counts"][0] if native["counts"] else -1
        # Only a buffer that takes more than a piece natively tells the two
        # apart (loopback here: 3.9 MB; 4 MiB is Linux's default maximum).
        if nfirst > PIECE:
            check(first > PIECE, "%s: the first call moved more than one piece of %d B (%d; "
                  "native %d)" % (mode, PIECE, first, nfirst))
        else:
            print("note: native's first send took %d B, not more than a piece: not compared"
                  % nfirst)
        check(-1 in r["counts"], "%s: a later call found the buffer full: EAGAIN (%s)"
              % (mode, r["counts"]))
        r = run([SLUICE, mode, "--send", "1MiB/s", "--"])
        print("measured: %s, 1MiB/s: %s in %.3f s" % (mode, r["counts"], r["elapsed"]))
        check(r["got"] == r["total"], "%s, 1MiB/s: the peer received exactly the %d bytes "
              "reported (%d)" % (mode, r["total"], r["got"]))
        bound = BURST + RATE * r["elapsed"]
        check(0 < r["total"] <= bound, "%s, 1MiB/s: %d B moved, at most the burst + rate x "
              "%.3f s = %.0f B" % (mode, r["total"], r["elapsed"], bound))


if __name__ == "__main__":
    if not os.access(SLUICE, os.X_OK):
        print("SKIP: no %s" % SLUICE)
        sys.exit(77)
    run_main(body)
