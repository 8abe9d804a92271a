# SPDX-License-Identifier: MIT
"""overhead.py - workloads 5 (per-call overhead) and 6 (threads).

Overhead is measured side by side: the same flow binary runs without the
tool, then with it, then without, then with (A B A B ...), and each figure
is the median of the per-pair ratios, so a slow moment of the shared
machine hits both halves of a pair. The matched send is measured under the
default rule (per=process) with every tool, and under per=fd, per=thread
and per=peer with sluice alone (trickle has no such scopes); sluice's
matched sends again in long-lived processes (pair_rows, abpair.py), on
which the with / without targets are judged. Instruction
counts are workload 7 (instructions.py); the overhead table shows its rows
for the same calls (INSTR_CASE).
"""

import random

import abpair
import metrics
import proc
from workloads import (CHUNK, LOOP, MIB, MIN_CHUNKS, attempt, endpoints, rate_spec,
                       tool_unavailable, wrap)

NEVER_LIMITED = 1 << 30  # 1 GiB/s: far above what 1-byte sends reach
BASE_KINDS = ("devnull", "send1")  # every tool; the rest: sluice only
SCOPE_OPTS = {"send1": "", "send1-fd": "per=fd", "send1-thread": "per=thread",
              "send1-peer": "per=peer"}
PLAIN_KINDS = BASE_KINDS + ("send1-fd", "send1-thread", "send1-peer")
KIND_TEXT = {"devnull": "unmatched 1-byte write to /dev/null",
             "send1": "matched, never-limited 1-byte TCP send",
             "send1-fd": "matched, never-limited 1-byte TCP send, per=fd",
             "send1-thread": "matched, never-limited 1-byte TCP send, per=thread",
             "send1-peer": "matched, never-limited 1-byte TCP send, per=peer"}
# The same sends in long-lived processes, one per scope and one without a
# tool, their batches interleaved round by round (abpair.py): the issue 25
# method, "interleaved runs in one process pair"; a side's start-up and
# layout are the same for all its batches, so the spread is the machine's.
PAIR_KINDS = {"pair-" + k: v for k, v in SCOPE_OPTS.items()}
KINDS = PLAIN_KINDS + tuple(PAIR_KINDS)
for _k in PAIR_KINDS:
    KIND_TEXT[_k] = KIND_TEXT[_k[len("pair-"):]] + " (process pair)"
# issues 13 and 25: the wall-clock A/B ratio of the matched 1-byte send,
# judged on the process-pair rows
AB_BUDGET = {"pair-send1": 1.03, "pair-send1-fd": 1.05, "pair-send1-thread": 1.05,
             "pair-send1-peer": 1.05}
# the row of workload 7 (instructions.py) that counts the same call
INSTR_CASE = {"devnull": "devnull", "send1": "send", "send1-fd": "send per=fd",
              "send1-thread": "send per=thread", "send1-peer": "send per=peer"}
INSTR_CASE.update({k: INSTR_CASE[k[len("pair-"):]] for k in PAIR_KINDS})


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
        if tool == "sluice" and not why:
            rows += pair_rows(env)
        for kind in PLAIN_KINDS if tool == "sluice" else BASE_KINDS:
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


def pair_rows(env):
    """Rows of the process-pair method: one side without a tool and one per
    scope, 4 sets (6 in the full run: as many address-space layouts, which
    move a side's time by a few per cent) of 61 rounds (101) of 2000 sends."""
    kinds = list(PAIR_KINDS)
    envs = [abpair.clean_env()]
    for k in kinds:
        opts = PAIR_KINDS[k]
        envs.append(abpair.clean_env({
            "LD_PRELOAD": env.shim,
            "SLUICE_SEND": rate_spec(NEVER_LIMITED) + ("," + opts if opts else "")}))
    rows, rng, n = [], random.Random(25), 0
    for _ in range(4 if env.quick else 6):
        try:
            got = abpair.rounds(env.build, envs, 61 if env.quick else 101, 2000, rng)
        except (OSError, RuntimeError, IndexError, ValueError) as e:
            return rows + [{"tool": "sluice", "kind": k, "run": 0, "note": "failed: %s" % e}
                           for k in kinds]
        for r in got:
            n += 1
            rows += [{"tool": "sluice", "kind": k, "run": n, "none_ns": r[0], "tool_ns": r[i],
                      "ratio": r[i] / r[0]} for i, k in enumerate(kinds, 1)]
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
