#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""conns:adaptive on the client side (shim/turn.c, supervise/client.c): the
requests of the connections a program opens are turns of the rule's client
limit, from a send with no request outstanding to the answer's first bytes.
The server is test_adaptive.py's (not under sluice), processor-shared on 1
then 4 cores; both modes:
  client         16 blocking threads, one request after the other each on
                 its own connection, under --conns adaptive,initial=4: the
                 client limit sluice stat shows is <= 4 on one core, > 4 on
                 four, and the answers per second >= 80 % of the capacity;
  client_streams two send-only streams (a turn never answered) hold the
                 limit about 1 s once (then found stale and followed no
                 more), after which a request does not wait.
"""
import json
import os
import subprocess
import sys
import time

from shim_lib import check, finish

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_adaptive import LIB, PHASE_S, SKIP, SLUICE, start_server, stop  # noqa: E402


CLIENT = r"""
import json, socket, sys, threading, time
port, n, secs, t0 = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
done = []
lock = threading.Lock()
def worker():
    s = socket.create_connection(("127.0.0.1", port))
    while time.time() < t0 + secs:
        s.sendall(b"GET\n")
        if s.recv(16) != b"OK\n":
            break
        with lock:
            done.append(time.time())
    s.close()
while time.time() < t0:
    time.sleep(0.01)
ts = [threading.Thread(target=worker) for _ in range(n)]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps(done))
"""


def client_side(launcher=()):
    """The client side: a program with 16 threads, each sending requests
    one after the other on its own connection (blocking sockets), under
    `--conns adaptive,initial=4`: its requests sent and not yet answered are
    turns of the rule's client limit, which finds the server's knee (the
    server, not under sluice, is processor-shared on 1 then 4 cores). (With
    the default initial=20 the 16 threads never fill the limit, so it never
    probes the no-load latency: it would measure 16 at once as normal.)
    Checked from 3 s
    into each phase: the answers per second >= 80 % of the capacity, and
    the client limit sluice stat shows: at most 4 on one core (16 at once
    without it), more than 4 on four."""
    t0 = time.time() + 1.5
    srv = subprocess.Popen([sys.executable, LIB, "serve", "--t0", repr(t0), "--phase-s",
                            str(PHASE_S), "--phases", "1,4"], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    port = int(srv.stdout.readline())
    cl = subprocess.Popen([SLUICE] + list(launcher) + ["--conns", "adaptive,initial=4", "--",
                          sys.executable, "-c", CLIENT, str(port), "16", str(2 * PHASE_S),
                          repr(t0)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    limits = []
    try:
        for ph in range(2):
            time.sleep(max(0.0, t0 + ph * PHASE_S + PHASE_S - 0.5 - time.time()))
            # The client's record (supervised, its pid is not the
            # launcher's): this user's process under this rule, beside any
            # other test's.
            r = subprocess.run([SLUICE, "stat", "--json"], capture_output=True, text=True,
                               timeout=30)
            procs = json.loads(r.stdout)["processes"] if r.returncode == 0 else []
            mine = [q for q in procs if q["rules"] and
                    q["rules"][0]["rule"] == "conns:adaptive,initial=4" and
                    q["rules"][0].get("adaptive_client")]
            cli = mine[0]["rules"][0]["adaptive_client"] if len(mine) == 1 else None
            limits.append(cli["limit"] if cli else None)
        out, _ = cl.communicate(timeout=2 * PHASE_S + 30)
        done = json.loads(out)
    finally:
        stop(cl)
        stop(srv)
    ok = True
    name = "client" + (" supervised" if launcher else "")
    for ph, cores in enumerate((1, 4)):
        lo, hi = t0 + ph * PHASE_S + SKIP, t0 + (ph + 1) * PHASE_S
        rate = sum(1 for t in done if lo <= t < hi) / (hi - lo)
        cap = cores / 0.04
        good = rate >= 0.8 * cap and limits[ph] is not None and \
            (limits[ph] <= 4 if cores == 1 else limits[ph] > 4)
        ok = ok and good
        print("     %s: %d core(s), 16 threads: %.1f answers/s of %.0f, client limit %s%s" %
              (name, cores, rate, cap, limits[ph], "" if good else "  (missed)"), flush=True)
    return ok


def client(launcher=()):
    ok = client_side(launcher)
    if not ok:
        print("     client: missed once; the second run judges it", flush=True)
        ok = client_side(launcher)
    check(ok, "client%s: the requests' limit finds the server's knee (<= 4 on one core, > 4 on "
          "four) at >= 80%% of its capacity" % (" supervised" if launcher else ""))


STREAMS = r"""
import socket, sys, threading, time
sink = socket.socket()
sink.bind(("127.0.0.1", 0))
sink.listen(8)
def drain():
    while True:
        c, _ = sink.accept()
        threading.Thread(target=lambda c=c: [c.recv(65536) for _ in iter(int, 1)],
                         daemon=True).start()
threading.Thread(target=drain, daemon=True).start()
streams = [socket.create_connection(sink.getsockname()) for _ in range(2)]
for s in streams:
    s.sendall(b"log line\n")
out = []
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for _ in range(2):
    t = time.time()
    c.sendall(b"GET\n")
    out.append((c.recv(16) == b"OK\n", time.time() - t))
    for s in streams:
        s.sendall(b"more\n")
print(out)
"""


def client_streams(launcher=()):
    """Connections that only send (log streams: a turn that is never
    answered) do not hold the client limit for ever: under initial=2,max=2
    two such streams fill it, the program's request waits until they are
    found stale (1 s, or 20 no-load latencies) and then goes on; the
    streams are followed no more, so the next request does not wait."""
    p, port, _ = start_server(None, phases="4")
    try:
        r = subprocess.run([SLUICE] + list(launcher) + ["--conns", "adaptive,initial=2,max=2",
                                                        "--", sys.executable, "-c", STREAMS,
                                                        str(port)],
                           capture_output=True, text=True, timeout=60)
    finally:
        stop(p)
    out = eval(r.stdout.strip() or "[]")
    name = "client" + (" supervised" if launcher else "")
    print("     %s streams: %s" % (name, out), flush=True)
    check(len(out) == 2 and all(a for a, _ in out) and 0.9 <= out[0][1] <= 5 and out[1][1] < 0.5,
          "%s: 2 send-only streams hold the limit about 1 s once, then not at all" % name)


def main():
    client()
    client(("--supervise",))
    client_streams()
    client_streams(("--supervise",))
    finish()


if __name__ == "__main__":
    main()
