# SPDX-License-Identifier: MIT
"""run.py - sluice against no limit, trickle, pv and tc tbf (make bench).

Usage: python3 bench/compare/run.py [BUILD_DIR]
Environment:
  BENCH_QUICK=1      3 runs of about 1 s each (the figures the README shows)
  BENCH_SECONDS=S    seconds of traffic per accuracy run (default 2, quick 1)
  BENCH_ONLY=a,b     only these workloads: upload download iperf3 connect
                     overhead threads instructions
  BENCH_OUT=DIR      where to write (default bench/results/latest)
  BENCH_LIB=PATH     the libsluice.so to measure (default BUILD_DIR/libsluice.so)
  BENCH_JOBS=N       callgrind runs at a time in workload 7 (default 2)
  BENCH_BEFORE_LIB=PATH  another libsluice.so measured beside it in workload 7
                     (a "before" column: before and after in one run)
Writes DIR/*.csv (one per workload), DIR/summary.md and DIR/*.png, and
prints the summary. Exit status 1 if a workload could not run sluice at all.
"""

import os
import platform
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import instructions  # noqa: E402
import metrics  # noqa: E402
import overhead  # noqa: E402
import proc  # noqa: E402
import report  # noqa: E402
import workloads  # noqa: E402
from workloads import KIB, MIB  # noqa: E402

RATES = [64 * KIB, MIB, 8 * MIB, 64 * MIB]
CONNECT_RATES = [200, 1000, 2000]
TOOLS = ["sluice", "trickle", "pv", "tc"]
THREADS_CPU_BUDGET = 1.15  # issue 13: sluice's CPU per MiB, 8 threads over 1
ALL = ["upload", "download", "iperf3", "connect", "overhead", "threads", "instructions"]


def _version(cmd):
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
        return r.stdout.decode(errors="replace").strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "not installed"


def _median(rows, field, **match):
    s = report.stat(rows, field, **match)
    return s[0] if s else None


def _verdict(ok):
    return "–" if ok is None else ("met" if ok else "**missed**")


def sluice_burst(env, op, rate):
    """The burst sluice's policy gives SLUICE_<OP>=rate by default, or None."""
    spec = "%d/s" % rate if op == "connect" else workloads.rate_spec(rate)
    try:
        r = subprocess.run([env.flow, "burst", op, spec], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=10)
        return int(r.stdout.split()[1]) if r.returncode == 0 else None
    except (OSError, IndexError, ValueError, subprocess.TimeoutExpired):
        return None


def _window_bound(env, rows, wl, op, rate, one, one_text):
    """The shim issue's bound: any 100 ms holds at most rate*0.1 s + burst + one call."""
    burst = sluice_burst(env, op, rate)
    worst = [r["max_100ms"] for r in report.group(rows, tool="sluice", rate=rate)
             if r.get("max_100ms") is not None]
    label = "%s %s: every 100 ms window <= rate × 0.1 s + burst + %s (worst run / bound)" % (
        wl, workloads.rate_spec(rate) if op != "connect" else "%d/s" % rate, one_text)
    if burst is None or not worst:
        return (label, "–", "n/a", "–")
    bound = rate * metrics.WINDOW_NS / 1e9 + burst + one
    return (label, "%d / %d" % (max(worst), bound), "n/a", _verdict(max(worst) <= bound))


def targets(env, res):
    """Rows (target, sluice figure, trickle figure, verdict) of the issue's targets."""
    out = []
    for wl in ("upload", "download"):
        rows = res.get(wl)
        if not rows:
            continue
        for rate in RATES:
            s = _median(rows, "mean_ratio", tool="sluice", rate=rate)
            t = _median(rows, "mean_ratio", tool="trickle", rate=rate)
            ok = None
            if s is not None:
                ok = abs(s - 1) <= 0.01
                if t is not None and abs(t - 1) > 0.01:
                    ok = ok and abs(s - 1) <= abs(t - 1) / 5
            out.append(("%s %s: mean-rate error <= 1%% (and <= 1/5 of trickle's)" % (
                wl, workloads.rate_spec(rate)), _f(s), _f(t), _verdict(ok)))
            s = _median(rows, "burst_ratio", tool="sluice", rate=rate)
            t = _median(rows, "burst_ratio", tool="trickle", rate=rate)
            so = _median(rows, "burst_own_ratio", tool="sluice", rate=rate)
            to = _median(rows, "burst_own_ratio", tool="trickle", rate=rate)
            ok = None
            if s is not None:
                ok = (s <= 1.2 or rate < MIB) and (t is None or s < t)
            out.append(("%s %s: largest 100 ms / ideal %sbelow trickle's "
                        "(in brackets: against the rate each really held)" % (
                            wl, workloads.rate_spec(rate), "<= 1.2 and " if rate >= MIB else ""),
                        "%s (%s)" % (_f(s, 2), _f(so, 2)), "%s (%s)" % (_f(t, 2), _f(to, 2)),
                        _verdict(ok)))
            out.append(_window_bound(env, rows, wl, "send" if wl == "upload" else "recv", rate,
                                     workloads.CHUNK, "one 16 KiB send"))
    rows = res.get("overhead")
    if rows:
        for kind, limit in (("devnull", 1.02), ("send1", 1.05)):
            s = _median(rows, "ratio", tool="sluice", kind=kind)
            t = _median(rows, "ratio", tool="trickle", kind=kind)
            ok = None if s is None else s < limit and (t is None or s < t)
            out.append(("%s: overhead < %d%% and below trickle's" % (
                overhead.KIND_TEXT[kind], round((limit - 1) * 100)), _f(s), _f(t), _verdict(ok)))
        for kind, limit in overhead.AB_BUDGET.items():
            s = _median(rows, "ratio", tool="sluice", kind=kind)
            t = _median(rows, "ratio", tool="trickle", kind=kind)
            out.append(("%s: with / without <= %.2f (target)" % (overhead.KIND_TEXT[kind], limit),
                        _f(s), _f(t) if t is not None else "n/a",
                        _ab_verdict(s, limit)))
    rows = res.get("threads")
    if rows:
        for rate in sorted({r["rate"] for r in rows if r.get("rate")}):
            for tool_fig in (("mean_ratio", "aggregate mean rate, 8 threads vs 1", 0.01),):
                field, text, tol = tool_fig
                s8 = _median(rows, field, tool="sluice", rate=rate, threads=8)
                s1 = _median(rows, field, tool="sluice", rate=rate, threads=1)
                t8 = _median(rows, field, tool="trickle", rate=rate, threads=8)
                ok = None if s8 is None or s1 is None else abs(s8 - s1) <= tol
                out.append(("%s %s (within 1%%)" % (text, workloads.rate_spec(rate)),
                            "%s vs %s" % (_f(s8), _f(s1)), _f(t8), _verdict(ok)))
            c8 = _median(rows, "cpu_ms_per_mib", tool="sluice", rate=rate, threads=8)
            c1 = _median(rows, "cpu_ms_per_mib", tool="sluice", rate=rate, threads=1)
            t8 = _median(rows, "cpu_ms_per_mib", tool="trickle", rate=rate, threads=8)
            t1 = _median(rows, "cpu_ms_per_mib", tool="trickle", rate=rate, threads=1)
            out.append(("CPU per MiB, 8 threads vs 1 <= %.2f at %s (target)" % (
                THREADS_CPU_BUDGET, workloads.rate_spec(rate)),
                _f(c8 / c1 if c8 and c1 else None, 2),
                _f(t8 / t1 if t8 and t1 else None, 2),
                _ab_verdict(c8 / c1 if c8 and c1 else None, THREADS_CPU_BUDGET)))
    rows = res.get("connect")
    if rows:
        for rate in CONNECT_RATES:
            s = _median(rows, "mean_ratio", tool="sluice", rate=rate)
            ok = None if s is None else abs(s - 1) <= 0.01
            out.append(("connect %d/s: mean rate within 1%%" % rate, _f(s), "n/a", _verdict(ok)))
            out.append(_window_bound(env, rows, "connect", "connect", rate, 1, "one connect"))
    return out


def _ab_verdict(ratio, limit):
    """met, or by how much the ratio missed its limit."""
    if ratio is None:
        return "–"
    return "met" if ratio <= limit else "**missed** by %.3f" % (ratio - limit)


def _f(v, digits=3):
    return "–" if v is None else ("%%.%df" % digits) % v


def summary(env, res, wall):
    mode = "BENCH_QUICK=1: " if env.quick else ""
    L = ["<!-- generated by make bench (bench/compare/run.py); do not edit by hand -->",
         "## Benchmarks: sluice against trickle, pv and tc tbf", "",
         "%s%d runs per figure (connect and threads: 3, iperf3: %d), %.2g s of traffic per "
         "accuracy run, 16 KiB blocking send()/recv() calls over loopback; every cell is "
         "*median (min–max)*. Machine: %d cores, Linux %s; trickle %s; %s; %s. "
         "Whole run: %.0f s." % (
             mode, env.runs, 2 if env.quick else 3, env.seconds, os.cpu_count(), platform.release(),
             _version(["trickle", "-V"]).replace("trickle: version ", ""),
             _version(["pv", "--version"]), _version(["iperf3", "--version"]), wall), "",
         "How to read: *mean rate / configured* is the steady rate (bytes after the first "
         "20 % of the run over the time they took); *largest 100 ms / (rate × 0.1 s)* is the "
         "worst burst a receiver saw (a tool that passes whole 16 KiB chunks cannot do "
         "better than 2.5 at 64 KiB/s); tc tbf "
         "counts Ethernet+IP+TCP headers, so its payload rate sits near 0.96; pv limits a "
         "pipe feeding the sender. trickle's KB is 1024 bytes.", ""]
    if env.netns.why:
        L += ["**tc tbf skipped:** %s." % env.netns.why, ""]
    if "upload" in res:
        L += ["### 1. Upload accuracy (blocking sender, receiver timestamps every read)", ""]
        L += report.accuracy_table(res["upload"], RATES, TOOLS) + [""]
        L += ["![cumulative bytes, upload](upload_cumulative.png)", "",
              "Per-100 ms rate: [upload_rate100ms.png](upload_rate100ms.png)", ""]
    if "download" in res:
        L += ["### 2. Download accuracy (recv shaping, the receiver timestamps its reads)", ""]
        L += report.accuracy_table(res["download"], RATES, [t for t in TOOLS]) + [""]
        L += ["Plots: [download_cumulative.png](download_cumulative.png), "
              "[download_rate100ms.png](download_rate100ms.png)", ""]
    if "iperf3" in res:
        L += ["### 3. iperf3 as a third-party client: its reported bitrate / configured", ""]
        L += report.iperf3_table(res["iperf3"], RATES, ["sluice", "trickle", "tc"]) + [""]
        L += ["pv does not apply (iperf3 writes to its own socket).", ""]
    if "connect" in res:
        L += ["### 4. Connection rate: 1000 connects at each rate", ""]
        L += report.accuracy_table(res["connect"], CONNECT_RATES, TOOLS, unit="calls") + [""]
    if "overhead" in res:
        L += ["### 5. Overhead per call, A B A B against the same program without the tool", ""]
        L += report.overhead_table(res["overhead"], res.get("instructions", []), TOOLS,
                                   overhead.KINDS, overhead.KIND_TEXT,
                                   overhead.INSTR_CASE) + [""]
        L += ["![overhead](overhead.png)", ""]
    if "threads" in res:
        L += ["### 6. Threads: 8 senders through one per-process limit", ""]
        L += report.threads_table(res["threads"], THREAD_RATES(env)) + [""]
        L += [threads_line(res["threads"], THREAD_RATES(env)), ""]
    if "instructions" in res:
        L += ["### 7. Instructions per call added, every scope and both directions "
              "(callgrind; against the project's targets)", ""]
        L += instructions.table(res["instructions"], "",
                                os.environ.get("BENCH_BEFORE_LIB", "")) + [""]
    t = targets(env, res)
    if t:
        L += ["### Targets (sluice, same run)", "", "| target | sluice | trickle | verdict |",
              "|---|---|---|---|"]
        L += ["| %s | %s | %s | %s |" % row for row in t] + [""]
    return "\n".join(L)


def update_readme(text, readme="bench/README.md", prefix="results/latest/"):
    """Replace the results section of a README (between the markers) with
    the summary, image links made relative to that README."""
    begin, end = "<!-- results:begin -->", "<!-- results:end -->"
    try:
        with open(readme) as f:
            old = f.read()
    except OSError:
        return
    if begin not in old or end not in old:
        return
    body = re.sub(r"\]\((?!http)([^)]+\.png)\)", lambda m: "](%s%s)" % (prefix, m.group(1)), text)
    new = old[:old.index(begin) + len(begin)] + "\n" + body + "\n" + old[old.index(end):]
    with open(readme, "w") as f:
        f.write(new)


def threads_line(rows, rates):
    """The issue-13 figure of section 6: sluice's CPU per MiB, 8 threads vs 1."""
    parts = []
    for rate in rates:
        c8 = _median(rows, "cpu_ms_per_mib", tool="sluice", rate=rate, threads=8)
        c1 = _median(rows, "cpu_ms_per_mib", tool="sluice", rate=rate, threads=1)
        r = c8 / c1 if c8 and c1 else None
        parts.append("%s: %s, %s" % (workloads.rate_spec(rate), _f(r, 2),
                                     _ab_verdict(r, THREADS_CPU_BUDGET)))
    return "CPU per MiB, 8 threads vs 1 (sluice; budget <= %.2f): %s." % (
        THREADS_CPU_BUDGET, "; ".join(parts))


def instructions_rows(env):
    """Workload 7 (bench/compare/instructions.py), or one row saying why not."""
    if env.sluice_why or not workloads._which("valgrind"):
        return [{"tool": "sluice", "case": "devnull",
                 "note": env.sluice_why or "valgrind not installed"}]
    try:
        return instructions.measure(env.build, env.shim, env.tmp,
                                    int(os.environ.get("BENCH_JOBS", "2")), not env.trickle_why,
                                    os.environ.get("BENCH_BEFORE_LIB") or None)
    except proc.RunError as e:
        return [{"tool": "sluice", "case": "devnull", "note": "failed: %s" % e}]


def THREAD_RATES(env):
    # issue 13's contention figure is at 8 MiB/s, so the quick run has it too
    return [8 * MIB, 64 * MIB]


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SL_BUILD", "build")
    env = workloads.Env(build, os.environ.get("BENCH_QUICK") == "1")
    default_out = "bench/results/latest"
    outdir = os.environ.get("BENCH_OUT", default_out)
    only = [w for w in os.environ.get("BENCH_ONLY", ",".join(ALL)).split(",") if w]
    os.makedirs(outdir, exist_ok=True)
    if not os.access(env.flow, os.X_OK):
        print("bench: %s missing: run make first" % env.flow, file=sys.stderr)
        return 1
    if "tc" in TOOLS and any(w in only for w in ("upload", "download", "iperf3")):
        if not env.netns.setup():
            print("bench: tc tbf skipped: %s" % env.netns.why)
    if env.sluice_why:
        print("bench: sluice %s" % env.sluice_why)
    start = time.monotonic()
    res = {}
    plots = {}
    for wl in only:
        t = time.monotonic()
        print("bench: %s ..." % wl, flush=True)
        if wl in ("upload", "download"):
            res[wl], plots[wl] = workloads.accuracy(env, "send" if wl == "upload" else "recv",
                                                    RATES, TOOLS)
        elif wl == "iperf3":
            res[wl] = workloads.iperf3(env, RATES, ["sluice", "trickle", "tc"])
        elif wl == "connect":
            res[wl] = workloads.connects(env, CONNECT_RATES, TOOLS)
        elif wl == "overhead":
            res[wl] = overhead.overhead(env, TOOLS)
        elif wl == "instructions":
            res[wl] = instructions_rows(env)
        elif wl == "threads":
            res[wl] = overhead.threads(env, THREAD_RATES(env), TOOLS)
        else:
            print("bench: unknown workload %s (known: %s)" % (wl, " ".join(ALL)), file=sys.stderr)
            return 2
        print("bench: %s done in %.0f s" % (wl, time.monotonic() - t), flush=True)
    env.netns.teardown()
    for name, rows in res.items():
        report.write_csv(os.path.join(outdir, name + ".csv"), rows)
    errors = []
    for wl, p in plots.items():
        for kind, what in (("cum", "cumulative"), ("rate", "rate100ms")):
            title = "%s: %s (median run of each tool)" % (
                wl.capitalize(), "bytes delivered over time against the ideal line"
                if kind == "cum" else "rate in each 100 ms window")
            errors.append(report.plot_flows(p, RATES, [t for t in TOOLS], title,
                                            "%s_%s.png" % (wl, what), env.tmp, outdir, kind))
    if "overhead" in res:
        errors.append(report.plot_overhead(res["overhead"], TOOLS, overhead.BASE_KINDS,
                                           overhead.KIND_TEXT, "overhead.png", env.tmp, outdir))
    for e in filter(None, errors):
        print("bench: gnuplot: %s" % e, file=sys.stderr)
    text = summary(env, res, time.monotonic() - start)
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write(text + "\n")
    if os.path.abspath(outdir) == os.path.abspath(default_out):
        update_readme(text)
        update_readme(text, readme="README.md", prefix="bench/results/latest/")
    print(text)
    failed = [wl for wl, rows in res.items()
              if any(r.get("tool") == "sluice" and str(r.get("note", "")).startswith("failed")
                     for r in rows)]
    if failed:
        print("bench: sluice failed in: %s" % " ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
