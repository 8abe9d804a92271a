# SPDX-License-Identifier: MIT
"""overhead.py - workloads 5 (per-call overhead) and 6 (threads).

Overhead is measured side by side: the same flow binary runs without the
tool, then with it, then without, then with (A B A B ...), and each figure
is the median of the per-pair ratios, so a slow moment of the shared
machine hits both halves of a pair. The matched send is measured under the
default rule (per=process) with every tool, and under per=fd, per=thread
and per=peer with sluice alone (trickle has no such scopes). Instruction
counts are workload 7 (instructions.py); the overhead table shows its rows
for the same calls (INSTR_CASE).
"""

import metrics
import proc
from workloads import (CHUNK, LOOP, MIB, MIN_CHUNKS, attempt, endpoints, tool_unavailable,
                       wrap)

NEVER_LIMITED = 1 << 30  # 1 GiB/s: far above what 1-byte sends reach
BASE_KINDS = ("devnull", "send1")  # every tool; the rest: sluice only
SCOPE_OPTS = {"send1": "", "send1-fd": "per=fd", "send1-thread": "per=thread",
              "send1-peer": "per=peer"}
KINDS = BASE_KINDS + ("send1-fd", "send1-thread", "send1-peer")
KIND_TEXT = {"devnull": "unmatched 1-byte write to /dev/null",
             "send1": "matched, never-limited 1-byte TCP send",
             "send1-fd": "matched, never-limited 1-byte TCP send, per=fd",
             "send1-thread": "matched, never-limited 1-byte TCP send, per=thread",
             "send1-peer": "matched, never-limited 1-byte TCP send, per=peer"}
# issue 13: the wall-clock A/B ratio of the matched 1-byte send
AB_BUDGET = {"send1": 1.03, "send1-fd": 1.05, "send1-thread": 1.05, "send1-peer": 1.05}
# the row of workload 7 (instructions.py) that counts the same call
INSTR_CASE = {"devnull": "devnull", "send1": "send", "send1-fd": "send per=fd",
              "send1-thread": "send per=thread", "send1-peer": "send per=peer"}


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
    if SCOPE_OPTS.get(kind) and "SLUICE_SEND" in extra:
        extra["SLUICE_SEND"] += "," + SCOPE_OPTS[kind]
    _, _, out = proc.run_with_peer(peer, mcmd, extra, 60)
    return float(out.split()[1])


def overhead(env, tools):
    """Rows: per tool and kind, each A B pair's ns per call and their ratio."""
    rows = []
    pairs = 15 if env.quick else 21
    iters = {k: 42_000 if env.quick else 84_000 for k in SCOPE_OPTS}
    iters["devnull"] = 105_000 if env.quick else 210_000
    for tool in tools:
        why = tool_unavailable(env, tool)
        if tool in ("tc", "pv"):
            why = "n/a: no per-call user-space cost (%s)" % (
                "kernel qdisc" if tool == "tc" else "a separate process in a pipe")
        for kind in KINDS if tool == "sluice" else BASE_KINDS:
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
