#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""sluice stat and sluice set against running preloaded programs.

  - stat: a child makes a known number of calls and stops; `sluice stat PID`
    (text, --json, --prometheus) shows exactly those counters. The
    Prometheus output is parsed with the real parser of prometheus_client
    (Debian python3-prometheus-client), as a scraper would.
  - set: a transfer at 4 MiB/s is lowered to 1 MiB/s and raised to 8 MiB/s
    with `sluice set PID`; each phase's rate, measured by the sender's own
    clock after a 150 ms settling time, is within 2% of its limit; stat
    shows the new rule; another user's target or a changed option is refused.
  - records of dead processes are removed by stat.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import BUILD, ROOT, Server, check, child_env, finish, seg_path  # noqa: E402

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # the Debian package, under another python3
    sys.path.append("/usr/lib/python3/dist-packages")
    from prometheus_client.parser import text_string_to_metric_families

SLUICE = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "sluice")
MIB = 1048576


def sluice(*args):
    p = subprocess.run([SLUICE] + list(args), capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


KNOWN = r'''
import socket, sys
port = int(sys.argv[1])
s = socket.create_connection(("127.0.0.1", port))
for _ in range(20):
    s.send(b"y" * 1000)
print("ready", flush=True)
sys.stdin.read()
'''


def test_stat_known_run():
    srv = Server("sink")
    env = child_env({"SLUICE_RULES": "send:1MiB/s;connect:100/s,action=reject"})
    p = subprocess.Popen([sys.executable, "-c", KNOWN, str(srv.port)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "child made its 20 sends")
    pid = str(p.pid)
    rc, out, err = sluice("stat", "--json", pid)
    check(rc == 0, "stat --json ran: %r" % err)
    doc = json.loads(out) if rc == 0 else {"processes": [{}]}
    proc = doc["processes"][0]
    rules = proc.get("rules", [{}, {}])
    send, conn = rules[0], rules[1]
    check(proc.get("pid") == p.pid and proc.get("program") == "python3" or
          proc.get("program", "").startswith("python"), "pid and program: %r" % proc.get("program"))
    want = {"rule": "send:1MiB/s", "calls": 20, "admitted": 20, "refused": 0, "bytes": 20000,
            "scope": "process", "shared": None}
    check(all(send.get(k) == v for k, v in want.items()), "send counters: %r" % send)
    check(conn.get("rule") == "connect:100/s,action=reject" and conn.get("calls") == 1 and
          conn.get("admitted") == 1, "connect counters: %r" % conn)
    check(0 <= send.get("available", -1) <= 5243, "available tokens within the burst: %r"
          % send.get("available"))
    rc, out, err = sluice("stat", pid)
    check(rc == 0 and "pid %s" % pid in out and "send:1MiB/s" in out and
          "calls 20  admitted 20  delayed" in out and "bytes 20000" in out, "text output:\n" + out)
    rc, out, err = sluice("stat", "--prometheus")
    fams = {}
    try:
        for fam in text_string_to_metric_families(out):
            fams[fam.name] = fam
        parsed = True
    except Exception as e:  # the parser's verdict is the check
        parsed = False
        print("parser error:", e)
    check(rc == 0 and parsed, "prometheus output parses (prometheus_client)")
    got = {}
    for fam in fams.values():
        for s in fam.samples:
            if s.labels.get("pid") == pid and s.labels.get("rule") == "1":
                got[s.name] = s.value
    check(got.get("sluice_calls_total") == 20 and got.get("sluice_bytes_total") == 20000 and
          got.get("sluice_refused_total") == 0, "prometheus samples of rule 1: %r" % got)
    check(fams.get("sluice_bytes") is not None and fams["sluice_bytes"].type == "counter",
          "sluice_bytes_total is a counter family")
    p.stdin.close()
    p.wait(timeout=10)
    srv.stop()
    path = seg_path("stat-%s" % pid)
    check(not os.path.exists(path), "record removed at exit")
    # A record left by a killed process is removed by stat.
    p = subprocess.Popen([sys.executable, "-c", KNOWN, str(Server("sink").port)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    path = seg_path("stat-%d" % p.pid)
    existed = os.path.exists(path)
    p.kill()
    p.wait()
    rc, out, err = sluice("stat")
    check(existed and not os.path.exists(path), "stat removed the record of a killed process")


# Sends 4 KiB pieces until stdin says stop; prints (t, bytes) samples.
STREAM = r'''
import json, os, socket, sys, threading, time
port = int(sys.argv[1])
s = socket.create_connection(("127.0.0.1", port))
stop = []
threading.Thread(target=lambda: (sys.stdin.read(), stop.append(1)), daemon=True).start()
print("ready", flush=True)
buf, sent, samples, last = b"z" * 4096, 0, [], 0.0
end = time.monotonic() + 20
while not stop and time.monotonic() < end:
    sent += s.send(buf)
    t = time.monotonic()
    if t - last >= 0.005:
        samples.append((t, sent))
        last = t
print(json.dumps({"samples": samples}))
'''


def rate_between(samples, t0, t1):
    inside = [x for x in samples if t0 <= x[0] <= t1]
    if len(inside) < 2:
        return 0.0
    (a, ba), (b, bb) = inside[0], inside[-1]
    return (bb - ba) / (b - a)


THREADS = r'''
import os, socket, sys, threading
port = int(sys.argv[1])
def work(n):
    s = socket.create_connection(("127.0.0.1", port))
    for _ in range(n):
        s.sendall(b"t" * 100)
    s.close()
ts = [threading.Thread(target=work, args=(50,)) for _ in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
work(10)
r, w = os.pipe()
child = os.fork()
if child == 0:
    work(7)
    os.write(w, b"x")
    sys.stdin.read()
    os._exit(0)
os.read(r, 1)
print("ready", child, flush=True)
sys.stdin.read()
os.waitpid(child, 0)
'''


def test_stat_threads_fork():
    """Calls that threads' credit paid for count in their own slots
    (shm_format.h), which stat sums: 4 threads of 50 sends, then the main
    thread's 10, all counted; a fork child counts its own 7 from zero."""
    srv = Server("sink")
    env = child_env({"SLUICE_SEND": "1MiB/s"})
    p = subprocess.Popen([sys.executable, "-c", THREADS, str(srv.port)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    check(len(line) == 2 and line[0] == "ready", "threads and the fork child sent: %r" % line)
    counts = {}
    for pid in (str(p.pid), line[1] if len(line) == 2 else "0"):
        rc, out, err = sluice("stat", "--json", pid)
        doc = json.loads(out) if rc == 0 else {"processes": [{"rules": [{}]}]}
        counts[pid] = doc["processes"][0].get("rules", [{}])[0]
    parent, child = counts[str(p.pid)], counts[line[1] if len(line) == 2 else "0"]
    check(parent.get("calls") == 210 and parent.get("admitted") == 210 and
          parent.get("bytes") == 21000, "parent: 4 x 50 + 10 sends of 100 B: %r" % parent)
    check(child.get("calls") == 7 and child.get("admitted") == 7 and child.get("bytes") == 700,
          "fork child: its own 7 sends of 100 B: %r" % child)
    p.stdin.close()
    p.wait(timeout=10)
    srv.stop()


def test_set_phases():
    srv = Server("sink")
    p = subprocess.Popen([sys.executable, "-c", STREAM, str(srv.port)],
                         env=child_env({"SLUICE_SEND": "4MiB/s"}),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", "streaming child started")
    pid = str(p.pid)
    t_start = time.monotonic()
    time.sleep(1.5)
    t_low = time.monotonic()
    rc1, out1, err1 = sluice("set", pid, "send:1MiB/s")
    t_low_set = time.monotonic()  # the new limit holds from here on
    time.sleep(1.5)
    t_high = time.monotonic()
    rc2, out2, err2 = sluice("set", pid, "send:8MiB/s")
    t_high_set = time.monotonic()
    time.sleep(1.5)
    rc, out, err = sluice("stat", "--json", pid)
    t_end = time.monotonic()
    p.stdin.close()
    o = p.stdout.read()
    p.wait(timeout=20)
    srv.stop()
    check(rc1 == 0 and out1.strip() == "process %s rule 1: send:4MiB/s -> send:1MiB/s" % pid,
          "set lowers: %r %r" % (out1.strip(), err1.strip()))
    check(rc2 == 0 and out2.strip() == "process %s rule 1: send:1MiB/s -> send:8MiB/s" % pid,
          "set raises: %r %r" % (out2.strip(), err2.strip()))
    rule = json.loads(out)["processes"][0]["rules"][0] if rc == 0 else {}
    check(rule.get("rule") == "send:8MiB/s" and rule.get("configured") == "send:4MiB/s",
          "stat shows the new rule: %r" % {k: rule.get(k) for k in ("rule", "configured")})
    samples = json.loads([l for l in o.splitlines() if l.startswith("{")][-1])["samples"]
    settle = 0.15
    # Each phase is measured from when its `sluice set` had returned (a
    # loaded machine may take a while to run it), to when the next began.
    for name, t0, t1, want in (("4 MiB/s", t_start + settle, t_low, 4 * MIB),
                               ("1 MiB/s", t_low_set + settle, t_high, 1 * MIB),
                               ("8 MiB/s", t_high_set + settle, t_end, 8 * MIB)):
        got = rate_between(samples, t0, t1)
        # Strict above (never more than the limit admits), generous below:
        # a loaded machine may send less, never more.
        check(0.8 * want <= got <= 1.02 * want,
              "phase %s: measured %.4f MiB/s over %.2f s" % (name, got / MIB, t1 - t0))


def test_set_refusals():
    srv = Server("sink")
    p = subprocess.Popen([sys.executable, "-c", KNOWN, str(srv.port)],
                         env=child_env({"SLUICE_SEND": "1MiB/s,per=thread"}),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    rc, out, err = sluice("set", str(p.pid), "send:2MiB/s,per=thread")
    check(rc == 2 and "is per=thread: only per=process and shared limits can change" in err,
          "per=thread refused: %r" % err.strip())
    rc, out, err = sluice("set", str(p.pid), "recv:2MiB/s")
    check(rc == 2 and "has no recv rule" in err, "no such rule: %r" % err.strip())
    p.stdin.close()
    p.wait(timeout=10)
    p = subprocess.Popen([sys.executable, "-c", KNOWN, str(srv.port)],
                         env=child_env({"SLUICE_SEND": "1MiB/s"}),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    p.stdout.readline()
    rc, out, err = sluice("set", str(p.pid), "send:2MiB/s,action=reject")
    check(rc == 2 and "only the limit and the burst can change" in err,
          "changed option refused: %r" % err.strip())
    if os.getuid() == 0:
        path = seg_path("stat-%d" % p.pid)
        os.chown(path, 65534, 65534)
        rc, out, err = sluice("set", str(p.pid), "send:2MiB/s")
        check(rc == 1 and "owned by another user" in err, "foreign record refused: %r" % err.strip())
        os.chown(path, 0, 0)
    p.stdin.close()
    p.wait(timeout=10)
    srv.stop()


if __name__ == "__main__":
    test_stat_known_run()
    test_stat_threads_fork()
    test_set_refusals()
    test_set_phases()
    finish()
