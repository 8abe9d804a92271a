#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""conns:adaptive under the preload (shim/turn.c, engine/adaptive.c): a
server whose capacity is known and changes finds its knee by itself.

The server is tests/integration/adaptive_lib.py's: 40 ms of simulated CPU
per request, processor-shared on 1, then 4, then 1 cores (capacity 25, 100,
25 requests/s), phases of PHASE_S seconds; the client (not preloaded) opens
requests at Poisson instants at 3x, 1.5x, 3x the capacity, each with a 1 s
deadline. Without sluice every answer is late in every phase (goodput 0).
Checked, from 3 s into each phase, under `sluice --conns
adaptive,action=reject`:
  thread     a thread per connection, a new connection per request;
  keepalive  the same server, the client reusing 50 connections (a turn on
             an idle connection waits before its receive; a reset one is
             opened again);
  supervised the thread case under `sluice --supervise` (one engine);
  prefork    16 processes forked after listen, each accepting;
  shared     the same under shared=NAME (one limit and one controller in
             the host's segment);
goodput >= 80 % of the capacity and p99 latency of the answers <= 3x the
unloaded latency (measured first, one request at a time), the issue's
figures. A scenario that misses is run once more (a stall of this shared
machine): the second run judges it; both are printed.
  fork       a child per connection (the parent closes its copy at once),
             at a lower rate (Python's fork is the parent's bottleneck):
             the limit is one for the family (phase 1's p99 <= 5x the
             unloaded latency: never more than a few turns at once) and
             no slot is lost (afterwards 20 requests one at a time are all
             answered);
  inetd      the child dup2()s the connection onto 0 and 1 and execs a
             program that serves it: its turn's slot comes back when the
             socket is gone (a sweep), so 12 such requests one at a time
             under initial=2,max=2 are all answered;
  never      a rule that never limits (max=100000, a server of 16 cores and
             10 ms of work at a tenth of its capacity, 160 requests/s): no
             refusal, and the median latency within 5 ms of the run without
             sluice;
  stat       sluice stat (text, JSON, Prometheus) shows the limit, the
             turns in flight, the no-load and last latency; sluice set
             refuses to change the limit;
  dry        a dry-run rule at max=1 resets no keep-alive connection;
  bad        bad input is refused with exit 2 and the typed text named.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

from shim_lib import BUILD, ROOT, check, finish

SLUICE = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "sluice")
LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "adaptive_lib.py")
PHASE_S = 6.0
SKIP = 3.0


def start_server(rule, mode="thread", phases="1,4,1", work=0.04, t0=None, extra_env=None,
                 launcher=()):
    env = dict(os.environ)
    env.update(extra_env or {})
    t0 = t0 if t0 is not None else time.time() + 1.5
    argv = [sys.executable, LIB, "serve", "--mode", mode, "--t0", repr(t0), "--phase-s",
            str(PHASE_S), "--phases", phases, "--work", str(work)]
    if rule is not None:
        argv = [SLUICE] + list(launcher) + ["--conns", rule, "--"] + argv
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, text=True,
                         start_new_session=True)
    port = int(p.stdout.readline())
    return p, port, t0


def stop(p):
    """The server and its children (prefork workers, fork children): its
    process group."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def unloaded(port, work=0.04):
    out = subprocess.run([sys.executable, LIB, "unloaded", "--port", str(port)],
                         capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)["median"]


def load(port, t0, keepalive=0, phases="1,4,1", loads="3,1.5,3", work=0.04):
    argv = [sys.executable, LIB, "load", "--port", str(port), "--t0", repr(t0), "--phase-s",
            str(PHASE_S), "--skip", str(SKIP), "--phases", phases, "--loads", loads, "--work",
            str(work)]
    if keepalive:
        argv += ["--keepalive", str(keepalive)]
    out = subprocess.run(argv, capture_output=True, text=True,
                         timeout=PHASE_S * len(phases.split(",")) + 30)
    return json.loads(out.stdout)


def fmt(ms):
    return "-" if ms is None else "%.0f ms" % (ms * 1000)


def scenario(name, mode="thread", keepalive=0, rule="adaptive,action=reject", launcher=()):
    """One run: the per-phase figures and whether each meets both bounds."""
    p, port, t0 = start_server(rule, mode, launcher=launcher)
    try:
        base = unloaded(port)
        res = load(port, t0, keepalive)
    finally:
        stop(p)
    ok = True
    lines = []
    for ph in res:
        good = ph["goodput"] >= 0.8 * ph["capacity"] and ph["p99"] is not None and \
            ph["p99"] <= 3 * base
        ok = ok and good
        lines.append("%s: %d core(s) at %.1fx: goodput %.1f/s of %.0f, p50 %s, p99 %s "
                     "(3x unloaded: %s), refused %d, late %d%s" %
                     (name, ph["cores"], ph["load"], ph["goodput"], ph["capacity"],
                      fmt(ph["p50"]), fmt(ph["p99"]), fmt(3 * base), ph["refused"], ph["late"],
                      "" if good else "  (missed)"))
    return ok, lines


def knee(name, mode="thread", keepalive=0, rule="adaptive,action=reject", launcher=()):
    ok, lines = scenario(name, mode, keepalive, rule, launcher)
    for l in lines:
        print("     " + l, flush=True)
    if not ok:
        print("     %s: missed once; the second run judges it" % name, flush=True)
        ok, lines = scenario(name, mode, keepalive, rule, launcher)
        for l in lines:
            print("     " + l, flush=True)
    check(ok, "%s: goodput >= 80%% of the capacity and p99 <= 3x unloaded in every phase" % name)


def one_at_a_time(port, n):
    answered = 0
    for _ in range(n):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"GET\n")
                if s.recv(16) == b"OK\n":
                    answered += 1
        except OSError:
            pass
    return answered


def fork_family():
    p, port, t0 = start_server("adaptive,action=reject", "fork", phases="1,1", work=0.1)
    try:
        base = unloaded(port, 0.1)
        res = load(port, t0, phases="1,1", loads="2,2", work=0.1)
        # Children still answering requests the client gave up on hold
        # their slots for a few times the work: a slot lost never comes
        # back, one held does within a second.
        time.sleep(1.0)
        after = one_at_a_time(port, 20)
    finally:
        stop(p)
    ph = res[1]
    print("     fork: 1 core at 2x: goodput %.1f/s of %.0f, p99 %s (unloaded %s), refused %d, "
          "late %d; then %d of 20 answered one at a time" %
          (ph["goodput"], ph["capacity"], fmt(ph["p99"]), fmt(base), ph["refused"], ph["late"],
           after), flush=True)
    check(ph["refused"] > 0, "fork: a fork-per-connection server's family is limited (refusals)")
    check(ph["p99"] is not None and ph["p99"] <= 5 * base,
          "fork: p99 <= 5x unloaded: a few turns at once across the children")
    check(after == 20, "fork: no slot lost: 20 of 20 answered afterwards")


INETD = r"""
import os, socket, sys
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", 0))
ls.listen(16)
print(ls.getsockname()[1], flush=True)
while True:
    try:
        c, _ = ls.accept()
    except ConnectionAbortedError:
        continue
    if os.fork() == 0:
        os.dup2(c.fileno(), 0)
        os.dup2(c.fileno(), 1)
        os.execv(sys.executable, [sys.executable, "-c",
                 "import os, time; os.read(0, 16); time.sleep(0.05); os.write(1, b'OK\\n')"])
    c.close()
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
"""


def inetd():
    p = subprocess.Popen([SLUICE, "--conns", "adaptive,initial=2,max=2,action=reject", "--",
                          sys.executable, "-c", INETD], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        port = int(p.stdout.readline())
        answered = 0
        for _ in range(12):
            for _ in range(50):  # a refused one (its slot not back yet) again
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                        s.sendall(b"GET\n")
                        if s.recv(16) == b"OK\n":
                            answered += 1
                            break
                except OSError:
                    pass
                time.sleep(0.05)
    finally:
        stop(p)
    check(answered == 12, "inetd: an exec'd child's slot comes back (%d of 12 answered)" % answered)


def never():
    figures = {}
    for rule in (None, "adaptive,max=100000,action=reject"):
        p, port, t0 = start_server(rule, phases="16", work=0.01)
        try:
            res = load(port, t0, phases="16", loads="0.1", work=0.01)[0]
        finally:
            stop(p)
        figures[rule] = res
        print("     never (%s): %d answered, refused %d, late %d, p50 %s, p99 %s" %
              (rule or "no sluice", res["answered"], res["refused"], res["late"],
               fmt(res["p50"]), fmt(res["p99"])), flush=True)
    r = figures["adaptive,max=100000,action=reject"]
    check(r["refused"] == 0 and r["late"] == 0 and r["answered"] > 300,
          "never: a rule that never limits refuses nothing (%d answered)" % r["answered"])
    check(r["p50"] <= figures[None]["p50"] + 0.005,
          "never: median latency %s, without sluice %s (+5 ms at most)" %
          (fmt(r["p50"]), fmt(figures[None]["p50"])))


def bad():
    for spec, want in (("adaptive,min=5,max=2", '"adaptive,min=5,max=2": at column 20: min=5 is '
                        'larger than max=2'),
                       ("adaptive,algo=vegaz", "'vegaz'"),
                       ("adaptive,max-delay=1", "max-delay")):
        r = subprocess.run([SLUICE, "--conns", spec, "--", "true"], capture_output=True,
                           text=True, timeout=30)
        check(r.returncode == 2 and want in r.stderr,
              "bad: --conns %s: exit %d, %s" % (spec, r.returncode, r.stderr.strip()[:160]))


def stat_view():
    """sluice stat shows the rule's limit, turns in flight, no-load and last
    latency (text, JSON, Prometheus); sluice set refuses to change it."""
    p, port, t0 = start_server("adaptive,action=reject", phases="1")
    try:
        load(port, t0, phases="1", loads="3")
        pid = str(p.pid)
        js = json.loads(subprocess.run([SLUICE, "stat", "--json", pid], capture_output=True,
                                       text=True, timeout=30).stdout)
        rule = [q for q in js["processes"] if q["pid"] == p.pid][0]["rules"][0]
        a = rule.get("adaptive") or {}
        print("     stat: %s" % json.dumps(a), flush=True)
        check(1 <= a.get("limit", 0) <= 3 and 0.03 <= a.get("noload_seconds", 0) <= 0.06 and
              a.get("latency_seconds", 0) >= a.get("noload_seconds", 1),
              "stat: one core's limit (1 to 3), no-load about 40 ms, latency not below it")
        text = subprocess.run([SLUICE, "stat", pid], capture_output=True, text=True,
                              timeout=30).stdout
        check("adaptive: limit %d" % a.get("limit", -1) in text, "stat: the text shows it")
        prom = subprocess.run([SLUICE, "stat", "--prometheus"], capture_output=True,
                              text=True, timeout=30).stdout
        check(any(l.startswith("sluice_adaptive_noload_seconds{pid=\"%s\"" % pid)
                  for l in prom.splitlines()), "stat: Prometheus has its no-load latency")
        r = subprocess.run([SLUICE, "set", pid, "conns:5"], capture_output=True, text=True,
                           timeout=30)
        check(r.returncode != 0 and "adaptive" in r.stderr,
              "set: refused for an adaptive rule (%s)" % r.stderr.strip())
    finally:
        stop(p)


def dry():
    """A dry-run rule refuses nothing, keep-alive requests included (both
    modes ask the engine: sl_adapt_refuses)."""
    p, port, t0 = start_server("adaptive,initial=1,max=1,action=dry-run", phases="1")
    try:
        res = load(port, t0, keepalive=8, phases="1", loads="0.8")[0]
    finally:
        stop(p)
    print("     dry-run: %d answered, refused %d, late %d" % (res["answered"], res["refused"],
                                                       res["late"]), flush=True)
    check(res["refused"] == 0 and res["answered"] > 20,
          "dry-run: max=1 refuses nothing (%d answered)" % res["answered"])


def main():
    bad()
    dry()
    stat_view()
    knee("thread")
    knee("keepalive", keepalive=50)
    knee("supervised", launcher=("--supervise",))
    knee("prefork", mode="prefork")
    name = "adapt-test-%d" % os.getpid()
    try:
        knee("shared", mode="prefork", rule="adaptive,action=reject,shared=" + name)
    finally:
        subprocess.run([SLUICE, "rm", "--force", "shared:" + name], capture_output=True)
    fork_family()
    inetd()
    never()
    finish()


if __name__ == "__main__":
    main()
