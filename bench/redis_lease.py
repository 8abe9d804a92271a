#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Redis round trips per second of throttled traffic, as a function of the
lease size of a redis=KEY rule, the same on a Redis Cluster, and the hot
path's cost with a live lease (build/bench/lease_hot) on both.

  python3 bench/redis_lease.py [BUILD]     (default build; needs redis-server
                                            and redis-cli; make bench runs it)

Starts a private redis-server on a unix socket, then for each lease size
runs 4 processes that connect as fast as they can for 4 s under
connect:1000/s,redis=K,lease=L, and prints the EVALSHA calls the server
counted (INFO commandstats) per second and per admitted connect, with the
admitted rate. Fewer round trips per unit is what a lease buys; the price is
the bound: any window of t seconds admits at most
1000 * t + max(burst, L) + 4 * L. The cluster row is the default lease
(10) on three masters (tests/integration/test_redis_cluster.py's Cluster),
seeded with a node that does not own the key, EVALSHA summed over the
nodes. The host pool row is the default lease with the 4 processes sharing
one pool (shared=NAME,redis=KEY): one of them leases for all. Every server
is private (temp dir, loopback) and killed at the end.
"""
import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("SL_BUILD", sys.argv[1] if len(sys.argv) > 1 else "build")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from test_redis import LOOP, Redis  # noqa: E402
from test_redis_cluster import Cluster, key_for_slot  # noqa: E402
from shim_lib import BUILD, Server, child_env, seg_path  # noqa: E402

RATE, PROCS, DUR = 1000, 4, 4.0


def run(srv, sl, rts):
    """PROCS processes for DUR s under sl; (admitted, round trips)."""
    before = rts()
    ps = [subprocess.Popen([sys.executable, "-c", LOOP, "connect", str(srv.port),
                            str(DUR), "0"], env=child_env(sl),
                           stdout=subprocess.PIPE, text=True) for _ in range(PROCS)]
    outs = [p.communicate(timeout=60)[0] for p in ps]
    n = sum(len(json.loads(o.splitlines()[-1])["ok"]) for o in outs)
    return n, rts() - before


def row(name, n, rts):
    print("%-13s  %9.0f  %15.3f  %10.0f" % (name, rts / DUR, rts / max(n, 1), n / DUR))


def hot(url):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    out = subprocess.run([os.path.join(ROOT, BUILD, "bench", "lease_hot"), url], env=env,
                         capture_output=True, text=True, timeout=120)
    return (out.stdout + out.stderr).strip()


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    redis, cl = Redis(), None
    srv = Server("sink", backlog=4096)
    try:
        print("lease          evalsha/s  evalsha/connect  admitted/s")
        for lease in (5, 10, 20, 50, 100, 200):
            sl = {"SLUICE_CONNECT": "%d/s,redis=bench%d,lease=%d" % (RATE, lease, lease),
                  "SLUICE_REDIS": "unix://" + redis.sock}
            n, rts = run(srv, sl, lambda: redis.stat("evalsha"))
            row("%d" % lease, n, rts)
        pool = "benchpool%d" % os.getpid()
        sl = {"SLUICE_CONNECT": "%d/s,shared=%s,redis=%s" % (RATE, pool, pool),
              "SLUICE_REDIS": "unix://" + redis.sock}
        try:
            n, rts = run(srv, sl, lambda: redis.stat("evalsha"))
        finally:
            try:
                os.unlink(seg_path("shared-" + pool))
            except OSError:
                pass
        row("10, host pool", n, rts)
        cl = Cluster()
        key = key_for_slot(100, "bc")
        other = [p for i, p in enumerate(cl.ports) if i != cl.owner(100)][0]
        url = "redis+cluster://127.0.0.1:%d" % other
        sl = {"SLUICE_CONNECT": "%d/s,redis=%s" % (RATE, key), "SLUICE_REDIS": url}
        n, rts = run(srv, sl, lambda: sum(cl.evalsha(i) for i in range(len(cl.ports))))
        row("10, cluster", n, rts)
        print("hot path, one server (unix socket):")
        print(hot("unix://" + redis.sock))
        print("hot path, cluster (TCP, seeded with a non-owner):")
        print(hot(url))
    finally:
        srv.stop()
        redis.stop()
        if cl is not None:
            cl.stop()


if __name__ == "__main__":
    main()
