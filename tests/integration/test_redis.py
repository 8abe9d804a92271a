#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fleet-wide limits (redis=KEY) against a real redis-server that this test
starts itself (loopback port chosen free, and a unix socket in a temp dir,
--save '' --appendonly no) and kills at the end.

  fleet connect  4 processes, connect:500/s,redis=k over TCP for 10 s: the
                 combined rate over the window all four share is within 2% of
                 500/s, and no window of any length t holds more than
                 500 * t + one server burst + one lease per process.
  fleet send     the same for bytes: send:512KiB/s,redis=b.
  faults         one process per on-error mode while the parent flushes the
                 script cache, kills and restarts Redis, or makes it sleep
                 (DEBUG SLEEP): the program keeps running, the mode is seen
                 (closed: ECONNREFUSED; open: far above the rate; local: the
                 fleet near the rate), the limit holds again after
                 recovery, and the process ends with the fds and threads it
                 had (read from /proc/self). local falls back to each
                 process's recent share: two processes stay near the
                 limit together, not at twice it.
  fork           a child forked after the parent leased gets its own lease
                 thread and stays within the fleet limit together with it.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import SLUICE, Server, check, child_env, finish  # noqa: E402

# Each child runs a loop for `dur` seconds, at most one attempt per `gap`
# seconds, and prints one JSON line: admission times (CLOCK_MONOTONIC, the
# same clock in every process), errors with their times, and its fd and
# thread counts after its first admission 0.5 s in and at the end.
LOOP = r'''
import json, os, socket, sys, time
mode, port, dur, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
chunk = int(sys.argv[5]) if len(sys.argv) > 5 else 0
def counts():
    return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))
ok, errs, first = [], [], None
t0 = time.monotonic()
if mode == "send":
    s = socket.create_connection(("127.0.0.1", port))
    data = b"x" * chunk
while time.monotonic() - t0 < dur:
    try:
        if mode == "send":
            s.sendall(data)
        else:
            c = socket.socket()
            try:
                c.connect(("127.0.0.1", port))
            finally:
                c.close()
        ok.append(time.monotonic())
        # Counted once the process is steady (0.5 s in): at its very first
        # admission a connection of the lease thread may still be opening.
        if first is None and ok[-1] - t0 >= 0.5:
            first = counts()
    except OSError as e:
        errs.append((time.monotonic(), e.errno))
    if gap:
        time.sleep(gap)
if mode == "fork" and os.fork() == 0:
    ok2 = []
    t1 = time.monotonic()
    while time.monotonic() - t1 < dur:
        c = socket.socket(); c.connect(("127.0.0.1", port)); c.close()
        ok2.append(time.monotonic())
    print(json.dumps({"ok": ok2, "errs": [], "first": counts(), "last": counts()}))
    sys.stdout.flush()
    os._exit(0)
if mode == "send":
    s.close()
if mode == "fork":
    ok3 = []
    t1 = time.monotonic()
    while time.monotonic() - t1 < dur:
        c = socket.socket(); c.connect(("127.0.0.1", port)); c.close()
        ok3.append(time.monotonic())
    os.wait()
    ok = ok3
print(json.dumps({"ok": ok, "errs": errs, "first": first, "last": counts(), "t0": t0}))
'''


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Redis:
    """A private redis-server on 127.0.0.1:port and tmp/redis.sock."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-redis-")
        self.sock = os.path.join(self.dir, "redis.sock")
        self.port = free_port()
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--unixsocket", self.sock, "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--enable-debug-command", "local"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                if self.cmd("PING") == "PONG":
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def cmd(self, *args, timeout=5):
        """One command over the unix socket (RESP); the first reply line."""
        c = socket.socket(socket.AF_UNIX)
        c.settimeout(timeout)
        c.connect(self.sock)
        out = "*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in args)
        c.sendall(out.encode())
        data = b""
        while not data.endswith(b"\r\n"):
            b = c.recv(65536)
            if not b:
                break
            data += b
        c.close()
        return data.decode().strip().lstrip("+:")

    def stat(self, name):
        """calls=N of a command in INFO commandstats."""
        c = socket.socket(socket.AF_UNIX)
        c.connect(self.sock)
        c.sendall(b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n")
        time.sleep(0.05)
        text = c.recv(1 << 20).decode()
        c.close()
        for line in text.splitlines():
            if line.startswith("cmdstat_%s:" % name):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def spawn(mode, port, dur, gap, sluice, extra=()):
    argv = [sys.executable, "-c", LOOP, mode, str(port), str(dur), str(gap)] + list(extra)
    return subprocess.Popen(argv, env=child_env(sluice), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def collect(p, timeout=60):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The fork mode's child too: it holds the pipes (a child once hung
        # for ever in its first lease, waiting for a lock its parent's
        # thread held at the fork).
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        print("child %d still running after %d s: killed" % (p.pid, timeout))
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        print("child rc=%s stderr=%r" % (p.returncode, err[-2000:]))
    return lines, err


def max_in_window(times, weights, t):
    """Largest total weight of events within any window of length t."""
    best = cur = 0
    j = 0
    for i in range(len(times)):
        cur += weights[i]
        while times[i] - times[j] > t:
            cur -= weights[j]
            j += 1
        best = max(best, cur)
    return best


def check_fleet(name, results, rate, unit, bound_slack, each=1, tol=0.02, over=1.0, under=None):
    """Combined rate within tol (2%) over the shared window (at most `under`
    below it, if given); no window above over * rate * t + bound_slack."""
    starts = [min(r["ok"]) for r in results]
    ends = [max(r["ok"]) for r in results]
    lo, hi = max(starts) + 0.5, min(ends)
    ev = sorted(t for r in results for t in r["ok"])
    n = sum(each for t in ev if lo <= t <= hi)
    measured = n / (hi - lo)
    print("measured: %s: %d processes, %.0f %s/s combined over the %.2f s they share "
          "(%.2f%% from %d)" % (name, len(results), measured, unit, hi - lo,
                                100 * (measured - rate) / rate, rate))
    low = under if under is not None else tol
    check(-low * rate <= measured - rate <= tol * rate,
          "%s: combined rate %.1f within +%g%%/-%g%% of %d" % (name, measured, 100 * tol,
                                                               100 * low, rate))
    for t in (0.05, 0.2, 1.0, ev[-1] - ev[0]):
        m = max_in_window(ev, [each] * len(ev), t)
        check(m <= over * rate * t + bound_slack, "%s: at most %d %s in any %.2f s window "
              "(%g * rate * t + %d): %d" % (name, over * rate * t + bound_slack, unit, t, over,
                                          bound_slack, m))


def test_fleet_connect(redis, srv):
    sl = {"SLUICE_CONNECT": "500/s,redis=k", "SLUICE_REDIS": "redis://127.0.0.1:%d" % redis.port}
    before = redis.stat("evalsha")
    ps = [spawn("connect", srv.port, 10, 0, sl) for _ in range(4)]
    results = [collect(p)[0] for p in ps]
    if not all(results):
        check(False, "fleet connect: children ran")
        return
    results = [r[-1] for r in results]
    rts = redis.stat("evalsha") - before
    print("measured: fleet connect: %d EVALSHA round trips for %d admissions (%.0f/s)"
          % (rts, sum(len(r["ok"]) for r in results), rts / 10))
    # burst 3, lease 5: server bucket max(3, 5) + 4 leases of 5.
    check_fleet("fleet connect", results, 500, "connects", 5 + 4 * 5)
    for r in results:
        check(r["first"] == r["last"], "fleet connect: fds and threads unchanged %s -> %s"
              % (r["first"], r["last"]))


def test_fleet_send(redis):
    sink = Server("sink")
    sl = {"SLUICE_SEND": "512KiB/s,redis=b", "SLUICE_REDIS": "unix://" + redis.sock}
    ps = [spawn("send", sink.port, 10, 0, sl, ["2048"]) for _ in range(4)]
    results = [collect(p)[0] for p in ps]
    sink.stop()
    if not all(results):
        check(False, "fleet send: children ran")
        return
    results = [r[-1] for r in results]
    # burst 2622B, lease 5243B; one 2 KiB send per process may be counted
    # late (its time is taken after it returns).
    check_fleet("fleet send", results, 512 * 1024, "bytes", 5243 + 4 * 5243 + 4 * 2048,
                each=2048)


def fault_run(redis, srv, mode, procs, script, rate=200, dur=8.0):
    """Run `procs` children at `rate` with on-error=mode while `script`
    (list of (time, action)) acts on Redis; returns their results."""
    log = os.path.join(redis.dir, "sluice-%s.log" % mode)
    sl = {"SLUICE_CONNECT": "%d/s,redis=f%s,on-error=%s" % (rate, mode, mode),
          "SLUICE_REDIS": "unix://" + redis.sock, "SLUICE_LOG": "info", "SLUICE_LOG_FILE": log}
    t0 = time.monotonic()
    ps = [spawn("connect", srv.port, dur, 0.001, sl) for _ in range(procs)]
    marks = {}
    for at, action in script:
        time.sleep(max(0, t0 + at - time.monotonic()))
        marks[action] = time.monotonic()
        if action == "flush":
            redis.cmd("SCRIPT", "FLUSH")
        elif action == "kill":
            redis.kill()
        elif action == "restart":
            redis.start()
        elif action == "sleep":
            threading.Thread(target=lambda: redis.cmd("DEBUG", "SLEEP", "1.5", timeout=10),
                             daemon=True).start()
        elif action.startswith("stat"):
            marks[action] = [redis_state(p.pid) for p in ps]
    results = [collect(p)[0] for p in ps]
    text = open(log).read() if os.path.exists(log) else ""
    return [r[-1] if r else None for r in results], marks, text


def redis_state(pid):
    """The "redis" object of `sluice stat --json PID`'s first rule, or None."""
    r = subprocess.run([SLUICE, "stat", "--json", str(pid)], capture_output=True, text=True,
                       timeout=20)
    try:
        return json.loads(r.stdout)["processes"][0]["rules"][0]["redis"]
    except (ValueError, KeyError, IndexError, TypeError):
        print("stat %d: rc=%d %r %r" % (pid, r.returncode, r.stdout[-500:], r.stderr[-500:]))
        return None


def count(ev, lo, hi):
    return sum(1 for t in ev if lo <= t < hi)


def test_fault_closed(redis, srv):
    res, m, log = fault_run(redis, srv, "closed", 1,
                            [(1.5, "flush"), (3.0, "kill"), (4.5, "restart")])
    r = res[0]
    if r is None:
        check(False, "closed: child ran")
        return
    ok, errs = r["ok"], r["errs"]
    refused = [t for t, e in errs if e == 111]
    print("measured: closed: %d admitted, %d refused (ECONNREFUSED) while Redis was down"
          % (len(ok), len(refused)))
    check(set(e for _, e in errs) <= {111}, "closed: refusals are ECONNREFUSED")
    check(len(refused) > 0 and all(m["kill"] <= t <= m["restart"] + 1.5 for t in refused),
          "closed: refusals only between the kill and shortly after the restart")
    check(count(ok, m["flush"], m["kill"]) > 0.5 * 200 * (m["kill"] - m["flush"]),
          "closed: runs on after SCRIPT FLUSH (%d in %.1f s)"
          % (count(ok, m["flush"], m["kill"]), m["kill"] - m["flush"]))
    late = m["restart"] + 1.5
    n, span = count(ok, late, max(ok)), max(ok) - late
    check(0.5 * 200 * span < n <= 200 * span + 10,
          "closed: limit back after the restart: %d in %.2f s at 200/s" % (n, span))
    check(log.count("script loaded") >= 3, "closed: script loaded at start, after FLUSH "
          "(NOSCRIPT) and after the restart (%d loads)" % log.count("script loaded"))
    check("password" not in log and "on-error=closed" in log, "closed: the fallback is logged")
    check(r["first"] == r["last"], "closed: fds and threads unchanged %s -> %s"
          % (r["first"], r["last"]))


def test_fault_open(redis, srv):
    res, m, log = fault_run(redis, srv, "open", 1, [(2.0, "sleep")], dur=6.0)
    r = res[0]
    if r is None:
        check(False, "open: child ran")
        return
    ok = r["ok"]
    during = count(ok, m["sleep"] + 0.4, m["sleep"] + 1.5)
    after = count(ok, m["sleep"] + 3.0, max(ok))
    span = max(ok) - m["sleep"] - 3.0
    print("measured: open: %d admitted in the 1.1 s of DEBUG SLEEP (limit 200/s), %d in "
          "the %.2f s after" % (during, after, span))
    check(during > 1.5 * 200 * 1.1, "open: far above the limit while Redis sleeps")
    check(r["errs"] == [], "open: nothing refused")
    check(0.5 * 200 * span < after <= 200 * span + 10, "open: limit back after the sleep")
    check(r["first"] == r["last"], "open: fds and threads unchanged %s -> %s"
          % (r["first"], r["last"]))


def test_fault_local(redis, srv):
    res, m, log = fault_run(redis, srv, "local", 2, [(1.5, "stat up"), (2.0, "kill"),
                                                     (4.0, "stat down"), (4.5, "restart"),
                                                     (7.0, "stat back")])
    if None in res:
        check(False, "local: children ran")
        return
    # What sluice stat says of each process's rule, Redis up, down, back.
    print("measured: local: sluice stat's redis state up %s, down %s, back %s"
          % (m["stat up"], m["stat down"], m["stat back"]))
    check(all(s == {"fallback": False, "fallbacks": 0} for s in m["stat up"]),
          "local: stat: leasing, no fallback yet, while Redis is up")
    check(all(s is not None and s["fallback"] and s["fallbacks"] >= 1 for s in m["stat down"]),
          "local: stat: on the fallback while Redis is down")
    check(all(s is not None and not s["fallback"] and s["fallbacks"] >= 1
              for s in m["stat back"]), "local: stat: leasing again after the restart, the "
          "fallback counted")
    ev = sorted(t for r in res for t in r["ok"])
    span = m["restart"] - m["kill"] - 0.5
    down = count(ev, m["kill"] + 0.5, m["restart"])
    up = count(ev, 1.0 + min(ev), m["kill"])
    print("measured: local: 2 processes, %.0f/s combined while Redis was down, %.0f/s "
          "before" % (down / span, up / (m["kill"] - 1.0 - min(ev))))
    # Each falls back to its recent share (about half of 200/s), not to
    # the whole rate: together they stay near the fleet limit.
    check(0.8 * 200 * span < down <= 1.05 * 200 * span + 2 * 5,
          "local: the two keep about 200/s together while Redis is down (%d in %.2f s)"
          % (down, span))
    check(log.count("at this process's share") >= 2, "local: the share fallback is logged")
    late = m["restart"] + 1.5
    n = count(ev, late, max(ev))
    check(n <= 200 * (max(ev) - late) + 15, "local: fleet limit back after the restart")
    for r in res:
        check(r["errs"] == [] and r["first"] == r["last"],
              "local: nothing refused, fds and threads unchanged %s -> %s"
              % (r["first"], r["last"]))


def test_fork(redis, srv):
    sl = {"SLUICE_CONNECT": "300/s,redis=fk", "SLUICE_REDIS": "unix://" + redis.sock}
    lines, _ = collect(spawn("fork", srv.port, 2.0, 0, sl))
    if len(lines) != 2:
        check(False, "fork: parent and child reported")
        return
    child, parent = lines
    ev = sorted(child["ok"] + parent["ok"])
    lo = max(min(child["ok"]), min(parent["ok"])) + 0.3
    hi = min(max(child["ok"]), max(parent["ok"]))
    n = count(ev, lo, hi)
    print("measured: fork: parent + child %.0f/s together (limit 300/s), child threads %d"
          % (n / (hi - lo), child["last"][1]))
    check(child["last"][1] == 2, "fork: the child runs its own lease thread (2 threads)")
    check(len(child["ok"]) > 100, "fork: the child is admitted (%d)" % len(child["ok"]))
    check(max_in_window(ev, [1] * len(ev), 1.0) <= 300 + 3 * 3,
          "fork: together within 300/s + 1 lease each + burst")


def main():
    if shutil.which("redis-server") is None:
        check(False, "redis-server is installed (scripts/deps.sh test)")
        finish()
    redis = Redis()
    srv = Server("sink", backlog=4096)
    try:
        test_fleet_connect(redis, srv)
        test_fleet_send(redis)
        test_fork(redis, srv)
        test_fault_closed(redis, srv)
        test_fault_open(redis, srv)
        test_fault_local(redis, srv)
    finally:
        srv.stop()
        redis.stop()
    finish()


if __name__ == "__main__":
    main()
