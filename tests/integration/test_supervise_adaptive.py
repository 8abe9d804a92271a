#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""conns:adaptive in supervised mode (supervise/turn.c): a server run with
`sluice --supervise --conns adaptive,...` on 127.0.0.1.

1. The limit is enforced on turns: a keep-alive server whose requests take
   50 ms (a sleep) answers each with the number of requests it had in
   progress; under `adaptive,min=1,max=3,initial=3` (delay) 12 clients of 8
   requests each see at most 3 in progress (and 3 at the start: the limit
   is used), all 96 answered, in at least 96 x 50 ms / 3.
2. action=reject resets a keep-alive connection whose request finds no
   slot: `max=1`, 4 clients: some requests are answered, some connections
   reset, never 2 requests in progress.
3. The limit moves: tests/integration/adaptive_lib.py's processor-sharing
   server (40 ms per request, 1, 4, then 1 core for 5 s each, open-loop load
   3x, 1.5x, 3x capacity, a new connection per request) under
   `adaptive,algo=aimd,initial=4,action=reject`: the limit the supervisor
   prints (-v), averaged over each phase's second half, goes up in the
   4-core phase and comes down in the last one; the goodput of
   the 4-core phase is above what a limit of 2 could give (50/s) and every
   answer comes in time.
"""
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

from supervise_lib import SLUICE, check, env_clean, run_main

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTIVE_LIB = os.path.join(HERE, "adaptive_lib.py")

# A threaded keep-alive server: "GET\n" -> "OK N\n" after WORK s (a sleep),
# N the requests in progress when this one started (itself included).
SERVER = r'''
import socket, sys, threading, time
work = float(sys.argv[1])
lock = threading.Lock()
busy = [0]
def serve(c):
    buf = b""
    try:
        while True:
            d = c.recv(4096)
            if not d:
                return
            buf += d
            while b"\n" in buf:
                _, buf = buf.split(b"\n", 1)
                with lock:
                    busy[0] += 1
                    n = busy[0]
                time.sleep(work)
                with lock:
                    busy[0] -= 1
                c.sendall(b"OK %d\n" % n)
    except OSError:
        pass
    finally:
        c.close()
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(128)
print(ls.getsockname()[1], flush=True)
while True:
    try:
        c = ls.accept()[0]
    except (ConnectionAbortedError, InterruptedError):
        continue
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


class Supervised:
    """`sluice -v --supervise --conns RULE -- ARGV` whose first line of
    output is its port; its stderr lines kept with their time.time()."""

    def __init__(self, rule, argv):
        self.p = subprocess.Popen([SLUICE, "-v", "--supervise", "--conns", rule, "--"] + argv,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env_clean())
        self.lines = []
        threading.Thread(target=self._err, daemon=True).start()
        got = []
        t = threading.Thread(target=lambda: got.append(self.p.stdout.readline()), daemon=True)
        t.start()
        t.join(20)
        self.port = int(got[0]) if got and got[0].strip().isdigit() else None

    def _err(self):
        for line in self.p.stderr:
            self.lines.append((time.time(), line.rstrip("\n")))

    def limits(self):
        """[(time.time(), limit)] of the limits the supervisor printed."""
        out = []
        for t, line in list(self.lines):
            m = re.search(r"rule 1: adaptive limit (\d+)", line)
            if m:
                out.append((t, int(m.group(1))))
        return out

    def stop(self):
        self.p.kill()
        self.p.wait()


def keepalive(port, n, out, lock):
    """n requests one after the other on a connection, opened again after a
    reset; out gets ("ok", N) or ("reset", None) for each."""
    s = f = None
    for _ in range(n):
        try:
            if s is None:
                s = socket.create_connection(("127.0.0.1", port), timeout=20)
                f = s.makefile("rb")
            s.sendall(b"GET\n")
            line = f.readline()
            why = repr(line)
        except OSError as e:
            line, why = b"", repr(e)
        with lock:
            if line.startswith(b"OK "):
                out.append(("ok", int(line.split()[1])))
            else:
                out.append(("reset", "%.3f %s" % (time.monotonic(), why)))
        if not line.startswith(b"OK ") and s is not None:
            s.close()
            s = f = None
    if s is not None:
        s.close()


def run_clients(port, clients, n):
    out, lock = [], threading.Lock()
    ts = [threading.Thread(target=keepalive, args=(port, n, out, lock), daemon=True)
          for _ in range(clients)]
    t = time.monotonic()
    for th in ts:
        th.start()
    for th in ts:
        th.join(40)
    return out, time.monotonic() - t


def enforced():
    srv = Supervised("adaptive,min=1,max=3,initial=3", [sys.executable, "-c", SERVER, "0.05"])
    try:
        check(srv.port is not None, "the supervised server is listening")
        if srv.port is None:
            return
        out, took = run_clients(srv.port, 12, 8)
    finally:
        srv.stop()
    answered = [n for what, n in out if what == "ok"]
    most = max(answered) if answered else 0
    floor = 96 * 0.05 / 3
    if len(answered) != 96:
        print("not answered: %s; the server's stderr: %s"
              % ([n for what, n in out if what != "ok"], srv.lines[-20:]))
    print("measured: delay, max=3: %d of 96 answered, at most %d in progress, %.3f s (floor "
          "%.3f s), limits %s" % (len(answered), most, took, floor,
                                  [n for _, n in srv.limits()]))
    check(len(answered) == 96, "delay: every request answered (%d of 96)" % len(answered))
    check(most <= 3, "delay: at most 3 requests in progress (%d)" % most)
    check(most >= 2, "delay: the limit is used, 2 or more in progress (%d)" % most)
    check(took >= floor - 0.001, "delay: %.3f s >= %.3f s (96 x 50 ms, 3 at a time)"
          % (took, floor))
    check(took <= 20, "delay: %.3f s <= 20 s" % took)


def resets():
    srv = Supervised("adaptive,min=1,max=1,initial=1,action=reject",
                     [sys.executable, "-c", SERVER, "0.05"])
    try:
        check(srv.port is not None, "the supervised server is listening")
        if srv.port is None:
            return
        out, took = run_clients(srv.port, 4, 10)
    finally:
        srv.stop()
    answered = [n for what, n in out if what == "ok"]
    reset = sum(1 for what, _ in out if what == "reset")
    print("measured: reject, max=1: %d answered, %d reset, at most %d in progress, %.3f s"
          % (len(answered), reset, max(answered) if answered else 0, took))
    check(len(answered) + reset == 40, "reject: every request answered or reset (%d)"
          % (len(answered) + reset))
    check(len(answered) >= 4, "reject: requests answered (%d)" % len(answered))
    check(reset >= 1, "reject: keep-alive connections reset when no slot comes (%d)" % reset)
    check(all(n == 1 for n in answered), "reject: never 2 requests in progress (%s)"
          % sorted(set(answered)))
    check(took <= 20, "reject: %.3f s <= 20 s" % took)


def moves():
    phase_s = 5.0
    t0 = time.time() + 2.0
    # aimd: it grows while the latency is at most twice the no-load one.
    # gradient2 (the default) grows only while it is within about 1.3
    # times it, which a busy machine's stalls of the server's own threads
    # exceed: under make test-repeat it stayed at 2 through the 4-core
    # phase once in 8 runs, and once, from a probe that ended at 1, stayed
    # at 1 (its target from 1 is exactly 2, approached a fifth of the way
    # per window, never reached).
    srv = Supervised("adaptive,algo=aimd,initial=4,action=reject",
                     [sys.executable, ADAPTIVE_LIB, "serve", "--t0", repr(t0), "--phase-s",
                      str(phase_s), "--phases", "1,4,1"])
    try:
        check(srv.port is not None, "the supervised adaptive_lib server is listening")
        if srv.port is None:
            return
        ld = subprocess.run([sys.executable, ADAPTIVE_LIB, "load", "--port", str(srv.port),
                             "--t0", repr(t0), "--phase-s", str(phase_s), "--phases", "1,4,1",
                             "--skip", "2"], capture_output=True, text=True, timeout=40)
    finally:
        srv.stop()
    try:
        phases = json.loads(ld.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        check(False, "the load's report (%r %r)" % (ld.stdout[-500:], ld.stderr[-500:]))
        return
    lim = srv.limits()
    print("measured: limits (s from t0, limit): %s" % [(round(t - t0, 2), n) for t, n in lim])
    for k, ph in enumerate(phases):
        print("measured: phase %d (%d cores, capacity %g/s): goodput %.1f/s, %d late, %d "
              "refused, p99 %s" % (k + 1, ph["cores"], ph["capacity"], ph["goodput"], ph["late"],
                                   ph["refused"], ph["p99"]))

    def mean(a, b):  # the limit in force over [a, b), averaged over time
        n, t, area = 4, a, 0.0
        for when, v in lim:
            if when <= a:
                n = v
            elif when < b:
                area += n * (when - t)
                n, t = v, when
        return (area + n * (b - t)) / (b - a)

    # Each phase's second half: the limit has had time to settle.
    m1, m2, m3 = (mean(t0 + (k + 0.5) * phase_s, t0 + (k + 1) * phase_s) for k in range(3))
    print("measured: mean limit over each phase's second half: %.2f, %.2f, %.2f" % (m1, m2, m3))
    check(m2 >= m1 + 1.5, "4 cores: the limit goes up (%.2f from %.2f)" % (m2, m1))
    check(m3 <= m2 - 1.5, "1 core again: the limit comes down (%.2f from %.2f)" % (m3, m2))
    g1, g2, g3 = (ph["goodput"] for ph in phases)
    check(g1 >= 10, "1 core: goodput %.1f/s >= 10/s (capacity 25/s)" % g1)
    check(g2 >= 55, "4 cores: goodput %.1f/s >= 55/s (capacity 100/s; a limit of 2 gives "
          "at most 50/s)" % g2)
    check(g3 >= 10, "1 core again: goodput %.1f/s >= 10/s (capacity 25/s)" % g3)
    late = sum(ph["late"] for ph in phases)
    check(late <= 5, "answers in time: %d late of %d" % (late, sum(ph["answered"] + ph["late"]
                                                                  for ph in phases)))


def body():
    enforced()
    resets()
    moves()


if __name__ == "__main__":
    run_main(body)
