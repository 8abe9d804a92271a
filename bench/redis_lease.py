#!/usr/bin/env python3
"""Redis round trips per second of throttled traffic, as a function of the
lease size of a redis=KEY rule.

  python3 bench/redis_lease.py [BUILD]     (default build; needs redis-server)

Starts a private redis-server on a unix socket, then for each lease size
runs 4 processes that connect as fast as they can for 4 s under
connect:1000/s,redis=K,lease=L, and prints the EVALSHA calls the server
counted (INFO commandstats) per second and per admitted connect, with the
admitted rate. Fewer round trips per unit is what a lease buys; the price is
the bound: any window of t seconds admits at most
1000 * t + max(burst, L) + 4 * L.
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("SLUICE_BUILD", sys.argv[1] if len(sys.argv) > 1 else "build")
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from test_redis import LOOP, Redis  # noqa: E402
from test_shim_lib import Server, child_env  # noqa: E402

RATE, PROCS, DUR = 1000, 4, 4.0


def main():
    redis = Redis()
    srv = Server("sink", backlog=4096)
    print("lease  evalsha/s  evalsha/connect  admitted/s")
    try:
        for lease in (5, 10, 20, 50, 100, 200):
            sl = {"SLUICE_CONNECT": "%d/s,redis=bench%d,lease=%d" % (RATE, lease, lease),
                  "SLUICE_REDIS": "unix://" + redis.sock}
            before = redis.stat("evalsha")
            ps = [subprocess.Popen([sys.executable, "-c", LOOP, "connect", str(srv.port),
                                    str(DUR), "0"], env=child_env(sl),
                                   stdout=subprocess.PIPE, text=True) for _ in range(PROCS)]
            outs = [p.communicate(timeout=60)[0] for p in ps]
            n = sum(len(json.loads(o.splitlines()[-1])["ok"]) for o in outs)
            rts = redis.stat("evalsha") - before
            print("%5d  %9.0f  %15.3f  %10.0f" % (lease, rts / DUR, rts / max(n, 1), n / DUR))
    finally:
        srv.stop()
        redis.stop()


if __name__ == "__main__":
    main()
