# SPDX-License-Identifier: MIT
"""workloads.py - the six workloads of the comparison benchmark.

Each workload runs the same program (bench/flow.c, or iperf3) under every
tool that applies and returns rows: one dict per run with the tool, the
configured rate and the figures of metrics.py. A tool that cannot do a
workload still gets a row whose note says why, so the table never hides a
gap. Runs are interleaved (run 1 of every tool, then run 2, ...) so that a
noisy moment of the shared machine spreads over all tools instead of
spoiling one.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import metrics
import proc

CHUNK = 16 * 1024
MIN_CHUNKS = 6  # a run is never shorter than this many chunks (1.5 s at 64 KiB/s)
KIB = 1024
MIB = 1024 * 1024
LOOP = "127.0.0.1"


class Env:
    """Paths, run counts and durations shared by every workload."""

    def __init__(self, build, quick):
        self.flow = os.path.abspath(os.path.join(build, "bench", "flow"))
        self.build = build
        # BENCH_LIB: measure another build of the library with this tree's programs
        self.shim = os.path.abspath(os.environ.get("BENCH_LIB") or
                                    os.path.join(build, "libsluice.so"))
        self.quick = quick
        self.runs = 3 if quick else 5
        self.seconds = float(os.environ.get("BENCH_SECONDS", "0.75" if quick else "2"))
        self.tmp = tempfile.mkdtemp(prefix="sluice-bench-")
        self.netns = proc.Netns()
        self.sluice_why = "" if os.path.exists(self.shim) else "not built (%s missing)" % self.shim
        self.trickle_why = "" if _which("trickle") else "trickle not installed"
        self.pv_why = "" if _which("pv") else "pv not installed"

    def log(self, name):
        return os.path.join(self.tmp, name)


def _which(prog):
    return any(os.access(os.path.join(d, prog), os.X_OK)
               for d in os.environ.get("PATH", "").split(":"))


def rate_spec(rate):
    """64KiB/s style text for SLUICE_* and for tables."""
    for unit, size in (("MiB", MIB), ("KiB", KIB)):
        if rate % size == 0:
            return "%d%s/s" % (rate // size, unit)
    return "%dB/s" % rate


def tool_unavailable(env, tool):
    """Why a tool cannot run at all here ('' when it can)."""
    return {"sluice": env.sluice_why, "trickle": env.trickle_why, "pv": env.pv_why,
            "tc": "" if env.netns.ok else env.netns.why}.get(tool, "")


def wrap(env, tool, op, rate, cmd):
    """(cmd, env_extra) that runs cmd under tool limiting op ('send'/'recv'/'connect')."""
    if tool == "sluice":
        spec = rate_spec(rate) if op != "connect" else "%d/s" % rate
        return cmd, {"LD_PRELOAD": env.shim, "SLUICE_" + op.upper(): spec}
    if tool == "trickle":
        return ["trickle", "-s", "-u" if op == "send" else "-d", str(rate // KIB)] + cmd, {}
    if tool == "tc":
        return proc.in_ns(proc.NS_A, cmd), {}
    return cmd, {}


def endpoints(tool):
    """(peer namespace, peer bind address, address the measured program dials)."""
    if tool == "tc":
        return proc.NS_B, proc.ADDR_B, proc.ADDR_B
    return None, LOOP, LOOP


def _flow_bytes(env, rate):
    return max(int(rate * env.seconds), MIN_CHUNKS * CHUNK) if rate else 64 * MIB


def _pv_stdin(rate, nbytes):
    return subprocess.Popen(["pv", "-q", "-L", str(rate), "-S", "-s", str(nbytes), "/dev/zero"],
                            stdout=subprocess.PIPE)


def flow_run(env, direction, tool, rate, run):
    """One upload ('send') or download ('recv') run; returns (figures, log)."""
    nbytes = _flow_bytes(env, rate)
    log = env.log("%s-%s-%d-%d.log" % (direction, tool, rate, run))
    ns, bind, dial = endpoints(tool)
    if tool == "tc":
        env.netns.shape(rate)
    if direction == "send":
        peer, port = proc.start_peer(proc.in_ns(ns, [env.flow, "sink", bind, "1", log]))
        cmd = [env.flow, "send", dial, str(port), str(nbytes), str(CHUNK)]
    else:
        peer, port = proc.start_peer(proc.in_ns(ns, [env.flow, "source", bind, str(nbytes),
                                                     str(CHUNK)]))
        cmd = [env.flow, "recv", dial, str(port), str(CHUNK), log]
    timeout = 30 + 4 * nbytes / (rate or MIB * 100)
    if tool == "pv":
        pv = _pv_stdin(rate, nbytes)
        try:
            proc.run_with_peer(peer, cmd + ["-"], None, timeout, stdin=pv.stdout)
        finally:
            pv.stdout.close()
            pv.wait(timeout=15)
    else:
        mcmd, extra = wrap(env, tool, direction, rate, cmd)
        proc.run_with_peer(peer, mcmd, extra, timeout)
    t0, recs = metrics.read_log(log)
    return metrics.flow_figures(t0, recs, rate), (t0, recs)


def accuracy(env, direction, rates, tools):
    """Workloads 1 and 2: returns (rows, {(tool, rate): (t0, recs) of the median run})."""
    rows, logs = [], {}
    for tool in ["none"] + tools:
        why = tool_unavailable(env, tool)
        if tool == "pv" and direction == "recv":
            why = "n/a: pv shapes a pipe, not a socket read (the pipe case is the upload row)"
        if why:
            rows.extend({"tool": tool, "rate": r, "run": 0, "note": why} for r in rates)
    for run in range(1, env.runs + 1):
        for rate in rates:
            for tool in (["none"] if rate == rates[0] else []) + tools:
                if any(r["tool"] == tool and r.get("note") for r in rows):
                    continue
                r = 0 if tool == "none" else rate
                row = {"tool": tool, "rate": r, "run": run}
                try:
                    fig, log = flow_run(env, direction, tool, r, run)
                    row.update(fig)
                    logs.setdefault((tool, r), []).append((fig.get("mean_ratio"), log))
                except proc.RunError as e:
                    row["note"] = "failed: %s" % e
                rows.append(row)
    plots = {}
    for key, runs in logs.items():
        i = metrics.median_index([m if m is not None else 0 for m, _ in runs])
        plots[key] = runs[i][1]
    return rows, plots


def attempt(row, fn, *args):
    """row with fn(*args)'s figures added, or with a note saying why the run failed."""
    try:
        row.update(fn(*args))
    except proc.RunError as e:
        row["note"] = "failed: %s" % e
    return row


def _free_port():
    with socket.socket() as s:
        s.bind((LOOP, 0))
        return s.getsockname()[1]


def iperf3_run(env, tool, rate):
    """iperf3 upload of the same bytes as flow_run in 16 KiB writes; returns its
    receiver bitrate in bytes/s. (-n, not -t: under sluice at 64 KiB/s,
    `iperf3 -t 1` with its default 128 KiB writes went on for 20 s.)"""
    ns, bind, dial = endpoints(tool)
    port = 5201 if tool == "tc" else _free_port()
    if tool == "tc":
        env.netns.shape(rate)
    server = subprocess.Popen(proc.in_ns(ns, ["iperf3", "-s", "-1", "-B", bind, "-p", str(port)]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        nbytes = _flow_bytes(env, rate)
        secs = nbytes / rate
        cmd = ["iperf3", "-c", dial, "-p", str(port), "-l", str(CHUNK), "-n", str(nbytes), "-J"]
        mcmd, extra = wrap(env, tool, "send", rate, cmd)
        for _ in range(100):  # the server needs a moment before it listens
            try:
                _, _, out = proc.run_measured(mcmd, extra, secs + 30)
            except proc.RunError as e:
                out = str(e)
            try:
                res = json.loads(out)
            except ValueError:
                res = {"error": out}
            err = res.get("error", "")
            if "unable to connect" in err or "refused" in err:
                time.sleep(0.02)
                continue
            if err:
                raise proc.RunError("iperf3: %s" % err)
            return res["end"]["sum_received"]["bits_per_second"] / 8
        raise proc.RunError("iperf3: the server never listened")
    finally:
        # A client that got its result leaves the one-off server to exit by
        # itself; one that failed leaves it waiting, so it is killed at once.
        try:
            server.wait(timeout=10 if sys.exc_info()[0] is None else 0.1)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def iperf3(env, rates, tools):
    """Workload 3: iperf3 as a third-party client."""
    rows = []
    for tool in tools:
        why = tool_unavailable(env, tool)
        if why:
            rows.extend({"tool": tool, "rate": r, "run": 0, "note": why} for r in rates)
    for run in range(1, (2 if env.quick else 3) + 1):
        for rate in rates:
            for tool in tools:
                if tool_unavailable(env, tool):
                    continue
                row = {"tool": tool, "rate": rate, "run": run}
                try:
                    got = iperf3_run(env, tool, rate)
                    row.update({"steady_rate": got, "mean_ratio": got / rate})
                except (proc.RunError, ValueError, KeyError) as e:
                    row["note"] = "failed: %s" % e
                rows.append(row)
    return rows


def connect_run(env, tool, rate, n, run):
    log = env.log("connect-%s-%d-%d.log" % (tool, rate, run))
    peer, port = proc.start_peer([env.flow, "accepter", LOOP, str(n)])
    cmd = [env.flow, "connects", LOOP, str(port), str(n), log]
    mcmd, extra = wrap(env, tool, "connect", rate, cmd)
    proc.run_with_peer(peer, mcmd, extra, 30 + 4 * n / (rate or 1000))
    t0, recs = metrics.read_log(log)
    return metrics.flow_figures(t0, recs, rate)


CONNECT_NOTES = {
    "trickle": "n/a: trickle cannot limit connect rates (it shapes bytes only)",
    "tc": "n/a: tc tbf shapes bytes on a link, not connect() calls",
    "pv": "n/a: pv shapes a pipe",
}


def connects(env, rates, tools, n=1000):
    """Workload 4: n connects at each rate; tools that cannot do it get a note row."""
    rows = []
    for tool in tools:
        why = CONNECT_NOTES.get(tool) or tool_unavailable(env, tool)
        if why:
            rows.extend({"tool": tool, "rate": r, "run": 0, "note": why} for r in rates)
    for run in range(1, min(env.runs, 3) + 1):
        for rate in [0] + rates:
            for tool in (["none"] if rate == 0 else [t for t in tools if t == "sluice"]):
                if tool_unavailable(env, tool):
                    continue
                rows.append(attempt({"tool": tool, "rate": rate, "run": run},
                                    connect_run, env, tool, rate, n, run))
    return rows
