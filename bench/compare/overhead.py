# SPDX-License-Identifier: MIT
"""overhead.py - workloads 5 (per-call overhead) and 6 (threads).

Overhead is measured side by side: the same flow binary runs without the
tool, then with it, then without, then with (A B A B ...), and each figure
is the median of the per-pair ratios, so a slow moment of the shared
machine hits both halves of a pair. Instruction counts come from callgrind:
the total instructions of two runs with different call counts are
subtracted, so start-up (loading, parsing SLUICE_*) cancels out and what is
left is instructions per call.
"""

import os
import subprocess

import metrics
import proc
from workloads import (CHUNK, LOOP, MIB, MIN_CHUNKS, attempt, endpoints, tool_unavailable,
                       wrap)

NEVER_LIMITED = 1 << 30  # 1 GiB/s: far above what 1-byte sends reach
KINDS = ("devnull", "send1")
KIND_TEXT = {"devnull": "unmatched 1-byte write to /dev/null",
             "send1": "matched, never-limited 1-byte TCP send"}


def _overhead_cmd(env, kind, iters):
    """(command, drain peer or None) for one overhead run."""
    if kind == "devnull":
        return [env.flow, "overhead", "devnull", str(iters)], None
    peer, port = proc.start_peer([env.flow, "drain", LOOP])
    return [env.flow, "overhead", "send1", str(iters), LOOP, str(port)], peer


def overhead_once(env, kind, tool, iters):
    """ns per call of one run of `kind` under `tool`."""
    cmd, peer = _overhead_cmd(env, kind, iters)
    mcmd, extra = wrap(env, tool, "send", NEVER_LIMITED, cmd)
    _, _, out = proc.run_with_peer(peer, mcmd, extra, 60)
    return float(out.split()[1])


def overhead(env, tools):
    """Rows: per tool and kind, each A B pair's ns per call and their ratio."""
    rows = []
    pairs = 15 if env.quick else 21
    iters = {"devnull": 105_000 if env.quick else 210_000,
             "send1": 42_000 if env.quick else 84_000}
    for tool in tools:
        why = tool_unavailable(env, tool)
        if tool in ("tc", "pv"):
            why = "n/a: no per-call user-space cost (%s)" % (
                "kernel qdisc" if tool == "tc" else "a separate process in a pipe")
        for kind in KINDS:
            if why:
                rows.append({"tool": tool, "kind": kind, "run": 0, "note": why})
                continue
            for run in range(1, pairs + 1):
                row = {"tool": tool, "kind": kind, "run": run}
                try:
                    a = overhead_once(env, kind, "none", iters[kind])
                    b = overhead_once(env, kind, tool, iters[kind])
                    row.update({"none_ns": a, "tool_ns": b, "ratio": b / a})
                except (proc.RunError, ValueError, IndexError) as e:
                    row["note"] = "failed: %s" % e
                rows.append(row)
    return rows


def _callgrind_total(env, kind, tool, iters):
    out = env.log("callgrind-%s-%s-%d.out" % (tool, kind, iters))
    cmd, peer = _overhead_cmd(env, kind, iters)
    vg = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out] + cmd
    mcmd, extra = wrap(env, tool, "send", NEVER_LIMITED, vg)
    proc.run_with_peer(peer, mcmd, extra, 120)
    with open(out) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise proc.RunError("no totals in " + out)


def instructions(env, tools):
    """Rows: instructions per call for each tool and kind (callgrind)."""
    rows = []
    if not any(os.access(os.path.join(d, "valgrind"), os.X_OK)
               for d in os.environ.get("PATH", "").split(":")):
        return [{"tool": t, "kind": k, "note": "valgrind not installed"}
                for t in tools for k in KINDS]
    n1, n2 = 2_000, 22_000
    for tool in ["none"] + [t for t in tools if t in ("sluice", "trickle")]:
        why = tool_unavailable(env, tool)
        for kind in KINDS:
            row = {"tool": tool, "kind": kind}
            if why:
                row["note"] = why
            else:
                try:
                    i1 = _callgrind_total(env, kind, tool, n1)
                    i2 = _callgrind_total(env, kind, tool, n2)
                    row["instr_per_call"] = (i2 - i1) / (n2 - n1)
                except (proc.RunError, OSError, ValueError) as e:
                    row["note"] = "failed: %s" % e
            rows.append(row)
    base = {r["kind"]: r.get("instr_per_call") for r in rows if r["tool"] == "none"}
    for r in rows:
        if r.get("instr_per_call") is not None and base.get(r["kind"]) is not None:
            r["added_instr_per_call"] = r["instr_per_call"] - base[r["kind"]]
    return rows


def threads_run(env, tool, rate, nthreads, run):
    """One run of nthreads senders through one per-process limit."""
    total = max(int(rate * env.seconds), MIN_CHUNKS * CHUNK * nthreads) if rate else 256 * MIB
    each = total // nthreads
    log = env.log("threads-%s-%d-%d-%d.log" % (tool, rate, nthreads, run))
    _, bind, dial = endpoints(tool)
    peer, port = proc.start_peer([env.flow, "sink", bind, str(nthreads), log])
    cmd = [env.flow, "threads", dial, str(port), str(nthreads), str(each), str(CHUNK)]
    mcmd, extra = wrap(env, tool, "send", rate, cmd)
    _, cpu, _ = proc.run_with_peer(peer, mcmd, extra, 30 + 4 * total / (rate or 100 * MIB))
    t0, recs = metrics.read_log(log)
    fig = metrics.flow_figures(t0, recs, rate)
    fig["cpu_ms_per_mib"] = cpu * 1000 / (each * nthreads / MIB)
    return fig


def threads(env, rates, tools, counts=(1, 8)):
    """Workload 6: 1 and 8 threads at each rate under each tool (and unlimited)."""
    rows = []
    for tool in tools:
        why = tool_unavailable(env, tool)
        if tool in ("tc", "pv"):
            why = "n/a: %s has no per-process limit shared by threads" % tool
        if why:
            rows.extend({"tool": tool, "rate": r, "threads": 8, "run": 0, "note": why}
                        for r in rates)
    live = [t for t in tools if t in ("sluice", "trickle") and not tool_unavailable(env, t)]
    for run in range(1, min(env.runs, 3) + 1):
        for rate in [0] + rates:
            for tool in (["none"] if rate == 0 else live):
                for n in counts:
                    rows.append(attempt({"tool": tool, "rate": rate, "threads": n, "run": run},
                                        threads_run, env, tool, rate, n, run))
    return rows
