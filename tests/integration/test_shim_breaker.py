#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Circuit breaking on connect (SLUICE_BREAK) with real sockets on loopback.

A "closed" destination is a TCP socket the parent has bound to a port the
kernel chose but does not listen on: connects to it are refused (RST) and no
other process can take the port; listen() on it later opens it.

  - errors=5,window=1s,open=2s,errno=EHOSTUNREACH (per=peer): the first 5
    connects fail with ECONNREFUSED (real), the next ones with EHOSTUNREACH
    at once (median < 50 us), and none of those reaches the port (a listener started
    on it meanwhile accepts nothing until the probe); a second destination
    is unaffected; after listen(), connects succeed again after open (2 s)
    plus one probe, and the listener then has accepted exactly the probe and
    the connects after it. SLUICE_LOG=info logs the four transitions.
  - the same through non-blocking connects whose failure shows in
    getsockopt(SO_ERROR) after poll.
  - errors=50%,min=6,per=process: alternating a good and a closed
    destination, the breaker opens at the 6th attempt (3 of 6 failed) and
    then refuses the good destination too.
  - SLUICE_STATS has the breaker's counters; sluice stat shows the state.
  - slow=: non-blocking connects whose outcome is read late count as failed.
  - curl (an unmodified event-loop client) fetching a closed URL 7 times
    sees 5 refusals, then EHOSTUNREACH.
"""
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import check, child_env, finish  # noqa: E402

ECONNREFUSED, EHOSTUNREACH = 111, 113


class Closed:
    """A port that refuses connects until listen(); counts what it accepts."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.lock = threading.Lock()

    def listen(self):
        self.sock.listen(64)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
            c.close()

    def count(self):
        with self.lock:
            return self.accepted


class Open(Closed):
    def __init__(self):
        super().__init__()
        self.listen()


BLOCKING = r'''
import json, socket, sys, time
closed, good = int(sys.argv[1]), int(sys.argv[2])
def attempt(port):
    s = socket.socket()
    t = time.monotonic()
    try:
        s.connect(("127.0.0.1", port)); e = 0
    except OSError as x:
        e = x.errno
    d = time.monotonic() - t
    s.close()
    return e, d, t
first = [attempt(closed) for _ in range(10)]
trip = first[4][2] + first[4][1]
others = [attempt(good)[0] for _ in range(3)]
print(json.dumps({"first": first, "others": others}), flush=True)
sys.stdin.readline()
later = []
while time.monotonic() - trip < 6.0:
    e, d, t = attempt(closed)
    later.append((e, d, t - trip))
    if e == 0:
        break
    time.sleep(0.02)
after = [attempt(closed)[0] for _ in range(3)]
print(json.dumps({"later": later, "after": after}), flush=True)
'''


def test_count():
    closed, good = Closed(), Open()
    env = child_env({"SLUICE_BREAK": "errors=5,window=1s,open=2s,errno=EHOSTUNREACH",
                     "SLUICE_LOG": "info"})
    p = subprocess.Popen([sys.executable, "-c", BLOCKING, str(closed.port), str(good.port)],
                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    r1 = json.loads(line) if line.startswith("{") else None
    closed.listen()  # the destination comes back while the breaker is open
    p.stdin.write("go\n")
    p.stdin.flush()
    line = p.stdout.readline()
    r2 = json.loads(line) if line.startswith("{") else None
    p.stdin.close()
    err = p.stderr.read()
    p.wait(timeout=30)
    check(r1 is not None and r2 is not None, "breaker child ran: %s" % err[-400:])
    if not r1 or not r2:
        return
    errs = [e for e, _, _ in r1["first"]]
    fast = [d for e, d, _ in r1["first"][5:]]
    print("measured: errnos %s; fast failures %s us; other destination %s"
          % (errs, [round(d * 1e6, 1) for d in fast], r1["others"]))
    check(errs[:5] == [ECONNREFUSED] * 5, "the first 5 connects fail with ECONNREFUSED (real)")
    check(errs[5:] == [EHOSTUNREACH] * 5, "the next 5 fail with EHOSTUNREACH")
    # Fast means no round trip to anything: the median is a few microseconds;
    # one call preempted on this shared machine may take longer (CI: 167 us),
    # so the bound on each is generous and the median carries the claim.
    check(sorted(fast)[len(fast) // 2] < 50e-6 and max(fast) < 20e-3,
          "broken connects fail fast: median < 50 us, each < 20 ms (median %.1f us, max %.1f us)"
          % (sorted(fast)[len(fast) // 2] * 1e6, max(fast) * 1e6))
    check(r1["others"] == [0, 0, 0], "a second destination is unaffected (per=peer)")
    later = r2["later"]
    # The breaker trips inside the 5th connect and lets the probe through
    # inside the first successful one: from the 5th connect's start to the
    # success's end is at least the open time, whatever the child's clock
    # readings around the calls (times in `later` are from the 5th
    # connect's end, starts of attempts).
    fifth = r1["first"][4][1]
    ok_at = [t + d + fifth for e, d, t in later if e == 0]
    fails = [e for e, _, _ in later if e != 0]
    print("measured: after listen(): %d fast failures, first success ends %.4f s after the "
          "tripping connect began; listener accepted %d"
          % (len(fails), ok_at[0] if ok_at else -1, closed.count()))
    check(set(fails) <= {EHOSTUNREACH}, "until the probe every connect fails fast (%s)" % set(fails))
    check(bool(ok_at) and 2.0 <= ok_at[0] <= 2.0 + 0.02 + 0.5,
          "connects succeed again after open (2 s) + one probe (%.4f s)" % (ok_at[0] if ok_at else -1))
    check(r2["after"] == [0, 0, 0], "closed again: the next connects succeed")
    check(closed.count() == 4, "nothing reached the port while open: it accepted the probe and "
          "the 3 after it only (%d)" % closed.count())
    for what in ("closed -> open", "open -> half-open", "half-open -> closed"):
        check(what in err, "SLUICE_LOG=info logs '%s'" % what)
    check(("to 127.0.0.1:%d" % closed.port) in err, "the log names the destination")


NONBLOCK = r'''
import errno, json, select, socket, sys, time
port = int(sys.argv[1])
out = []
for _ in range(7):
    s = socket.socket(); s.setblocking(False)
    t = time.monotonic()
    e = s.connect_ex(("127.0.0.1", port))
    first = e
    if e == errno.EINPROGRESS:
        select.select([], [s], [], 5)
        e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    out.append((first, e, time.monotonic() - t))
    s.close()
print(json.dumps(out))
'''


def test_nonblocking():
    closed = Closed()
    env = child_env({"SLUICE_BREAK": "errors=5,window=2s,open=2s,errno=EHOSTUNREACH"})
    p = subprocess.run([sys.executable, "-c", NONBLOCK, str(closed.port)], env=env,
                       capture_output=True, text=True, timeout=30)
    out = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else None
    check(out is not None, "non-blocking child ran: %s" % p.stderr[-300:])
    if not out:
        return
    print("measured: non-blocking (connect, SO_ERROR): %s" % [(a, b) for a, b, _ in out])
    check(all(b == ECONNREFUSED for _, b, _ in out[:5]), "5 real failures (seen in SO_ERROR)")
    check(any(a == 115 for a, _, _ in out[:5]), "at least one went through EINPROGRESS + SO_ERROR")
    fast = sorted(d for _, _, d in out[5:])
    check(all(a == EHOSTUNREACH for a, _, _ in out[5:]) and fast[len(fast) // 2] < 50e-6
          and fast[-1] < 20e-3,
          "then connect fails at once with EHOSTUNREACH (median %.1f us, max %.1f us)"
          % (fast[len(fast) // 2] * 1e6, fast[-1] * 1e6))


RATIO = r'''
import json, socket, sys
closed, good = int(sys.argv[1]), int(sys.argv[2])
out = []
for i in range(10):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", good if i % 2 == 0 else closed)); out.append(0)
    except OSError as x:
        out.append(x.errno)
    s.close()
print(json.dumps(out))
'''


def test_ratio():
    closed, good = Closed(), Open()
    stats = tempfile.NamedTemporaryFile(prefix="sluice-brk-%d-" % os.getpid(), suffix=".json",
                                        delete=False)
    stats.close()
    env = child_env({"SLUICE_BREAK": "errors=50%,min=6,window=10s,open=5s,per=process",
                     "SLUICE_STATS": stats.name})
    p = subprocess.run([sys.executable, "-c", RATIO, str(closed.port), str(good.port)], env=env,
                       capture_output=True, text=True, timeout=30)
    out = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else None
    check(out is not None, "ratio child ran: %s" % p.stderr[-300:])
    time.sleep(0.2)
    if out:
        print("measured: errors=50%%,min=6,per=process, good/closed alternating: %s; the good "
              "one accepted %d" % (out, good.count()))
        check(out[:6] == [0, ECONNREFUSED] * 3, "6 real attempts, 3 failed")
        check(out[6:] == [ECONNREFUSED] * 4, "then open: even the good destination is refused")
        check(good.count() == 3, "the good destination saw only the 3 before it opened (%d)"
              % good.count())
    with open(stats.name) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    os.unlink(stats.name)
    brk = lines[-1].get("breakers", [{}])[0] if lines else {}
    print("measured: SLUICE_STATS breakers: %r" % brk)
    check(brk.get("breaker") == "break:errors=50%,min=6,per=process" and
          brk.get("attempts") == 6 and brk.get("failures") == 3 and brk.get("fast_fails") == 4 and
          brk.get("trips") == 1, "SLUICE_STATS has the breaker's counters")


STAT_CHILD = r'''
import socket, sys
port = int(sys.argv[1])
for _ in range(6):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        pass
    s.close()
print("tripped", flush=True)
sys.stdin.read()
'''


def test_stat():
    from shim_lib import BUILD, ROOT
    sluice = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "sluice")
    closed = Closed()
    env = child_env({"SLUICE_BREAK": "errors=5,window=1s,open=20s"})
    p = subprocess.Popen([sys.executable, "-c", STAT_CHILD, str(closed.port)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "tripped", "stat child tripped its breaker")
    pid = str(p.pid)
    js = subprocess.run([sluice, "stat", "--json", pid], capture_output=True, text=True, timeout=30)
    txt = subprocess.run([sluice, "stat", pid], capture_output=True, text=True, timeout=30)
    prom = subprocess.run([sluice, "stat", "--prometheus", pid], capture_output=True, text=True,
                          timeout=30)
    from shim_lib import seg_path
    path = seg_path("break-%d" % p.pid)
    existed = os.path.exists(path)
    p.stdin.close()
    p.wait(timeout=30)
    time.sleep(0.1)
    doc = json.loads(js.stdout) if js.returncode == 0 else {}
    brk = (doc.get("processes") or [{}])[0].get("breakers", [{}])
    b = brk[0] if brk else {}
    st = (b.get("states") or [{}])[0]
    print("measured: stat --json breaker: %r" % b)
    check(b.get("breaker") == "break:errors=5,window=1s,open=20s" and b.get("trips") == 1 and
          b.get("fast_fails") == 1 and b.get("failures") == 5, "stat --json: the breaker's counters")
    check(st.get("peer") == "127.0.0.1:%d" % closed.port and st.get("state") == "open" and
          st.get("failures") == 5 and 0 < st.get("probe_in_ns", 0) <= 20e9,
          "stat --json: destination, state open, 5 failures in the window, time to the probe")
    check("open  failures 5 of 5 in the window  next probe in" in txt.stdout,
          "stat text shows the state and the next probe: %r" % txt.stdout[-300:])
    check(('sluice_breaker_state{pid="%s"' % pid) in prom.stdout and
          "sluice_breaker_trips_total" in prom.stdout, "stat --prometheus has the breaker families")
    check(existed and not os.path.exists(path), "the breaker file exists while the process runs "
          "and is removed at exit")


SLOW = r'''
import errno, json, select, socket, sys, time
port = int(sys.argv[1])
out = []
for _ in range(4):
    s = socket.socket(); s.setblocking(False)
    t = time.monotonic()
    e = s.connect_ex(("127.0.0.1", port))
    if e == errno.EINPROGRESS:
        select.select([], [s], [], 5)
        time.sleep(0.03)  # the program looks at the outcome 30 ms later
        e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    out.append((e, time.monotonic() - t))
    s.close()
print(json.dumps(out))
'''


def test_slow():
    good = Open()
    env = child_env({"SLUICE_BREAK": "errors=2,slow=10ms,open=5s"})
    p = subprocess.run([sys.executable, "-c", SLOW, str(good.port)], env=env,
                       capture_output=True, text=True, timeout=30)
    out = json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else None
    check(out is not None, "slow child ran: %s" % p.stderr[-300:])
    if not out:
        return
    print("measured: slow=10ms, outcome seen 30 ms after the connect: %s; server accepted %d"
          % ([e for e, _ in out], good.count()))
    check([e for e, _ in out[:2]] == [0, 0], "the first two connect (slowly)")
    check([e for e, _ in out[2:]] == [ECONNREFUSED, ECONNREFUSED],
          "two slow connects open an errors=2,slow=10ms breaker: the next fail at once")
    check(good.count() == 2, "only the two slow ones reached the server (%d)" % good.count())


def test_curl():
    """An unmodified event-loop client: curl connects non-blocking, polls and
    reads SO_ERROR; one curl fetching the same closed URL 7 times."""
    from shim_lib import sanitizer_runtime
    if sanitizer_runtime():
        # Debian 12's curl deadlocks in setlocale() with libasan preloaded,
        # with or without sluice (tried: LD_PRELOAD=libasan.so.8 curl hangs):
        # the ASan run (make sanitize) leaves curl out; make test runs it.
        print("skipped under ASan: curl hangs with the ASan runtime preloaded")
        return
    closed = Closed()
    url = "http://127.0.0.1:%d/" % closed.port
    env = child_env({"SLUICE_BREAK": "errors=5,window=10s,open=5s,errno=EHOSTUNREACH"})
    p = subprocess.run(["curl", "-sv", "-m", "5"] + [url] * 7, env=env, capture_output=True,
                       text=True, timeout=60)
    refused = p.stderr.count("Connection refused")
    unreach = p.stderr.count("No route to host")
    print("measured: curl, 7 fetches of a closed port: %d refused, %d no route to host"
          % (refused, unreach))
    check(refused == 5 and unreach == 2, "curl: 5 real refusals, then the breaker's "
          "EHOSTUNREACH")


def main():
    test_count()
    test_curl()
    test_slow()
    test_stat()
    test_nonblocking()
    test_ratio()
    finish()


if __name__ == "__main__":
    main()
