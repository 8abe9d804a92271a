#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A server whose capacity is known and changes, and an open-loop client,
for conns:adaptive (test_adaptive.py, bench/adaptive.py).

The server (`serve`) answers one-line requests ("GET\\n" -> "OK\\n") after
WORK seconds of simulated CPU each, processor-shared: with n requests in
progress on C cores each progresses at min(1, C/n), so a request alone takes
WORK and the capacity is C/WORK requests per second. C follows the phases
(`--phases 1,4,1` of `--phase-s` seconds each from `--t0`, a time.time()).
A scheduler thread hands out the CPU every millisecond; no real CPU is
burnt, so the figures do not depend on this machine's load. Modes: one
thread per connection (blocking sockets, keep-alive: requests one after the
other on a connection), `prefork` (N processes forked after listen, each
accepting and serving one connection at a time; the processes share the
CPU through a shared counter of requests in progress), `fork` (a child per
connection, the parent closes its copy at once).

The client (`load`) opens requests at Poisson instants at load x capacity,
each with a deadline of DEADLINE seconds from its instant: on a new
connection each, or on a pool of `--keepalive N` connections (a request
waits for a free one; a connection reset or closed is opened again).
It prints one JSON line: per phase, from `--skip` seconds into it, the
answered-in-time count (goodput), the answers' latency percentiles, the
refused and late counts.
"""
import argparse
import asyncio
import json
import mmap
import os
import random
import socket
import sys
import threading
import time

WORK = 0.040
DEADLINE = 1.0
TICK = 0.001
MONO0 = [0.0]
SLOTS = 1024  # processes that share one PS (prefork, fork)


def cores_at(t0, phase_s, phases, now):
    i = int((now - t0) // phase_s) if now >= t0 else 0
    return phases[min(max(i, 0), len(phases) - 1)]


class PS:
    """Processor sharing among the requests in progress of this process, or
    of a group of processes (shared: an mmap'd counter of requests in
    progress, each process stepping its own by the group's count)."""

    def __init__(self, t0, phase_s, phases, shared=None, slot=0):
        self.t0, self.phase_s, self.phases = t0, phase_s, phases
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.jobs = []  # [left, event]
        self.shared, self.slot = shared, slot
        threading.Thread(target=self._run, daemon=True).start()

    def _group(self, mine):
        # Each process writes its own byte of the shared map: the group's
        # requests in progress are their sum.
        if self.shared is None:
            return mine
        return max(mine, sum(self.shared[:SLOTS]))

    def _add(self, d):
        if self.shared is not None:
            self.shared[self.slot] = max(0, min(255, self.shared[self.slot] + d))

    def work(self, amount):
        ev = threading.Event()
        with self.lock:
            self.jobs.append([amount, ev])
            self._add(1)
            self.wake.notify()
        ev.wait()

    def _run(self):
        last = time.monotonic()
        while True:
            with self.lock:  # idle: no ticks until a request comes
                while not self.jobs:
                    self.wake.wait()
                    last = time.monotonic()
            time.sleep(TICK)
            now = time.monotonic()
            dt, last = now - last, now
            c = cores_at(self.t0, self.phase_s, self.phases, time.time())
            with self.lock:
                n = len(self.jobs)
                if n == 0:
                    continue
                share = dt * min(1.0, c / self._group(n))
                keep = []
                for j in self.jobs:
                    j[0] -= share
                    if j[0] <= 1e-9:
                        j[1].set()
                        self._add(-1)
                    else:
                        keep.append(j)
                self.jobs = keep


def serve_conn(ps, conn, work):
    buf = b""
    try:
        while True:
            data = conn.recv(4096)
            if not data:
                return
            buf += data
            while b"\n" in buf:
                _, buf = buf.split(b"\n", 1)
                ps.work(work)
                conn.sendall(b"OK\n")
    except OSError:
        return
    finally:
        conn.close()


def accept(ls):
    """The next connection; a refused one (ECONNABORTED, as a server
    retries it) is skipped."""
    while True:
        try:
            return ls.accept()[0]
        except (ConnectionAbortedError, InterruptedError):
            continue


def serve(args):
    phases = [int(c) for c in args.phases.split(",")]
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(512)
    port = ls.getsockname()[1]
    if args.mode == "prefork":
        shared = mmap.mmap(-1, SLOTS)
        for k in range(args.workers):
            if os.fork() == 0:
                ps = PS(args.t0, args.phase_s, phases, shared, k)
                while True:
                    conn = accept(ls)
                    serve_conn(ps, conn, args.work)
        print(port, flush=True)
        try:
            os.wait()
        finally:
            os._exit(0)
    ps = PS(args.t0, args.phase_s, phases, mmap.mmap(-1, SLOTS) if args.mode == "fork" else None)
    print(port, flush=True)
    while True:
        conn = accept(ls)
        if args.mode == "fork":
            pid = os.fork()
            if pid == 0:
                ls.close()
                ps2 = PS(args.t0, args.phase_s, phases, ps.shared, os.getpid() % SLOTS)
                serve_conn(ps2, conn, args.work)
                os._exit(0)
            conn.close()
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                pass
        else:
            threading.Thread(target=serve_conn, args=(ps, conn, args.work), daemon=True).start()


async def one_request(port, at, pool, results, ph, phase_end):
    """One request scheduled at `at` (time.monotonic()); its outcome into
    results[ph], if it is answered before phase_end (an answer after it
    ran partly under the next phase's capacity: it is that change's, and
    counts in neither phase)."""
    deadline = at + DEADLINE
    r = results[ph]
    conn = None
    try:
        if pool is not None:
            conn = await asyncio.wait_for(pool.get(), max(0.001, deadline - time.monotonic()))
            if conn[0] is None:
                conn[0] = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port),
                    max(0.001, deadline - time.monotonic()))
            reader, writer = conn[0]
        else:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port),
                max(0.001, deadline - time.monotonic()))
        sent = time.monotonic()
        writer.write(b"GET\n")
        line = await asyncio.wait_for(reader.readline(), max(0.001, deadline - time.monotonic()))
        done = time.monotonic()
        if line != b"OK\n":
            r["refused"] += 1
            if conn is not None:
                writer.close()
                conn[0] = None
        elif done > phase_end:
            pass
        else:
            if os.environ.get("ADAPT_DUMP") and done - at > 0.12:
                print("slow: phase %d at %.3f latency %.3f" % (ph, at - MONO0[0], done - at),
                      file=sys.stderr)
            r["answers"].append(done - at)
            r["service"].append(done - sent)
            if done <= deadline:
                r["good"] += 1
            else:
                r["late"] += 1
        if pool is None:
            writer.close()
    except asyncio.TimeoutError:
        r["late"] += 1
        if conn is not None and conn[0] is not None:
            conn[0][1].close()
            conn[0] = None
    except OSError:
        r["refused"] += 1
        if conn is not None:
            conn[0] = None
    finally:
        if conn is not None:
            pool.put_nowait(conn)


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(len(xs) * p / 100.0 + 0.999999) - 1))]


async def load_main(args):
    phases = [int(c) for c in args.phases.split(",")]
    loads = [float(x) for x in args.loads.split(",")]
    rng = random.Random(args.seed)
    results = [dict(good=0, late=0, refused=0, answers=[], service=[]) for _ in phases]
    ignored = [dict(good=0, late=0, refused=0, answers=[], service=[]) for _ in phases]
    pool = None
    if args.keepalive:
        pool = asyncio.Queue()
        for _ in range(args.keepalive):
            pool.put_nowait([None])
    # t0 is a time.time(): its monotonic twin.
    mono0 = time.monotonic() + (args.t0 - time.time())
    MONO0[0] = mono0
    end = mono0 + args.phase_s * len(phases)
    tasks = set()
    t = max(mono0, time.monotonic())
    while t < end:
        ph = min(int((t - mono0) // args.phase_s), len(phases) - 1)
        rate = loads[ph] * phases[ph] / args.work
        delay = t - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        counted = (t - mono0) - ph * args.phase_s >= args.skip
        task = asyncio.ensure_future(one_request(args.port, t, pool,
                                                 results if counted else ignored, ph,
                                                 mono0 + (ph + 1) * args.phase_s))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        t += rng.expovariate(rate)
    if tasks:
        await asyncio.wait(tasks, timeout=DEADLINE + 1)
    out = []
    span = args.phase_s - args.skip
    for ph, r in enumerate(results):
        out.append(dict(cores=phases[ph], load=loads[ph], capacity=phases[ph] / args.work,
                        goodput=r["good"] / span, good=r["good"], late=r["late"],
                        refused=r["refused"], answered=len(r["answers"]),
                        p50=pct(r["answers"], 50), p99=pct(r["answers"], 99),
                        service_p99=pct(r["service"], 99)))
    print(json.dumps(out), flush=True)


def unloaded(args):
    """The median latency of sequential requests, one at a time."""
    lat = []
    for _ in range(args.n):
        t = time.monotonic()
        with socket.create_connection(("127.0.0.1", args.port)) as s:
            s.sendall(b"GET\n")
            if s.recv(16) != b"OK\n":
                raise SystemExit("unexpected answer")
        lat.append(time.monotonic() - t)
        time.sleep(0.02)
    print(json.dumps(dict(median=sorted(lat)[len(lat) // 2], all=lat)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--mode", choices=["thread", "prefork", "fork"], default="thread")
    s.add_argument("--workers", type=int, default=16)
    for p in (s, sub.add_parser("load")):
        p.add_argument("--phases", default="1,4,1")
        p.add_argument("--phase-s", type=float, default=7.0)
        p.add_argument("--t0", type=float, default=0.0)
        p.add_argument("--work", type=float, default=WORK)
    ld = sub._name_parser_map["load"]
    ld.add_argument("--port", type=int, required=True)
    ld.add_argument("--loads", default="3,1.5,3")
    ld.add_argument("--skip", type=float, default=3.0)
    ld.add_argument("--keepalive", type=int, default=0)
    ld.add_argument("--seed", type=int, default=1)
    u = sub.add_parser("unloaded")
    u.add_argument("--port", type=int, required=True)
    u.add_argument("--n", type=int, default=9)
    args = ap.parse_args()
    if args.cmd == "serve":
        serve(args)
    elif args.cmd == "load":
        asyncio.run(load_main(args))
    else:
        unloaded(args)


if __name__ == "__main__":
    main()
