# SPDX-License-Identifier: MIT
"""report.py - CSV files, the Markdown summary and the gnuplot figures.

Everything in bench/results/latest/ is written here from the rows the
workloads return; nothing in that folder is edited by hand.
"""

import csv
import os
import subprocess

import metrics
from workloads import rate_spec

TOOL_ORDER = ["none", "sluice", "trickle", "pv", "tc"]
TOOL_COLOR = {"sluice": "#1f77b4", "trickle": "#d62728", "pv": "#2ca02c", "tc": "#9467bd",
              "none": "#7f7f7f"}


def write_csv(path, rows):
    keys = []
    for r in rows:
        keys.extend(k for k in r if k not in keys)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("%.6g" % v if isinstance(v, float) else v) for k, v in r.items()})


def fmt(stat, digits=3):
    """'median (min–max)' or '–'."""
    if stat is None:
        return "–"
    med, lo, hi = stat
    f = "%%.%df" % digits
    if lo == hi:
        return f % med
    return (f + " (" + f + "–" + f + ")") % (med, lo, hi)


def group(rows, **match):
    """Rows whose fields equal every match and that carry figures (not notes)."""
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def stat(rows, field, **match):
    return metrics.summarize([r.get(field) for r in group(rows, **match)])


def note_of(rows, **match):
    """The first note of the matching rows, made safe for one table cell."""
    for r in group(rows, **match):
        if r.get("note"):
            return " ".join(str(r["note"]).split()).replace("|", "/")
    return ""


def _rate_text(rate, unit="bytes"):
    if not rate:
        return "unlimited"
    return rate_spec(rate) if unit == "bytes" else "%d/s" % rate


def accuracy_table(rows, rates, tools, unit="bytes"):
    out = ["| rate | tool | mean rate / configured | largest 100 ms / (rate × 0.1 s) "
           "| time to first %s (ms) |" % ("byte" if unit == "bytes" else "connect"),
           "|---|---|---|---|---|"]
    base = group(rows, tool="none", rate=0)
    if base:
        mib = stat(rows, "steady_rate", tool="none", rate=0)
        scale = 1024 * 1024 if unit == "bytes" else 1
        speed = "%.0f %s" % (mib[0] / scale, "MiB/s" if unit == "bytes" else "connects/s") \
            if mib else "–"
        out.append("| unlimited | none | %s achieved | – | %s |" % (
            speed, fmt(stat(rows, "ttfb_ms", tool="none", rate=0), 2)))
    for rate in rates:
        for tool in tools:
            n = note_of(rows, tool=tool, rate=rate)
            if n and not any(r.get("mean_ratio") for r in group(rows, tool=tool, rate=rate)):
                out.append("| %s | %s | %s | | |" % (_rate_text(rate, unit), tool, n))
                continue
            out.append("| %s | %s | %s | %s | %s |" % (
                _rate_text(rate, unit), tool, fmt(stat(rows, "mean_ratio", tool=tool, rate=rate)),
                fmt(stat(rows, "burst_ratio", tool=tool, rate=rate), 2),
                fmt(stat(rows, "ttfb_ms", tool=tool, rate=rate), 2)))
    return out


def iperf3_table(rows, rates, tools):
    out = ["| rate | " + " | ".join(tools) + " |", "|---" * (len(tools) + 1) + "|"]
    for rate in rates:
        cells = []
        for tool in tools:
            s = stat(rows, "mean_ratio", tool=tool, rate=rate)
            cells.append(fmt(s) if s else note_of(rows, tool=tool, rate=rate) or "–")
        out.append("| %s | %s |" % (rate_spec(rate), " | ".join(cells)))
    return out


def overhead_table(rows, instr, tools, kinds, kind_text, instr_case):
    """One row per kind and tool that has rows; the last column is workload
    7's figure for the same call (instr_case: kind -> its case name)."""
    out = ["| call | tool | ns per call without | ns per call with | with / without "
           "| instructions per call added (callgrind) |", "|---|---|---|---|---|---|"]
    for kind in kinds:
        for tool in tools:
            if not group(rows, tool=tool, kind=kind):
                continue
            n = note_of(rows, tool=tool, kind=kind)
            ins = [r for r in instr if r["tool"] == tool and r.get("case") == instr_case[kind]]
            ins_txt = "%.0f" % ins[0]["added_instr_per_call"] if ins and \
                ins[0].get("added_instr_per_call") is not None else (
                    ins[0].get("note", "–") if ins else "–")
            if n and not stat(rows, "ratio", tool=tool, kind=kind):
                out.append("| %s | %s | %s | | | |" % (kind_text[kind], tool, n))
                continue
            out.append("| %s | %s | %s | %s | %s | %s |" % (
                kind_text[kind], tool, fmt(stat(rows, "none_ns", tool=tool, kind=kind), 1),
                fmt(stat(rows, "tool_ns", tool=tool, kind=kind), 1),
                fmt(stat(rows, "ratio", tool=tool, kind=kind)), ins_txt))
    return out


def threads_table(rows, rates):
    out = ["| rate | tool | threads | mean rate / configured | largest 100 ms / ideal "
           "| CPU ms per MiB | CPU per MiB vs 1 thread |", "|---|---|---|---|---|---|---|"]
    for rate in [0] + rates:
        for tool in TOOL_ORDER:
            for n in (1, 8):
                g = group(rows, tool=tool, rate=rate, threads=n)
                if not g:
                    continue
                if all(r.get("note") for r in g):
                    if n == 8:
                        out.append("| %s | %s | %d | %s | | | |" % (
                            _rate_text(rate), tool, n,
                            note_of(rows, tool=tool, rate=rate, threads=n)))
                    continue
                cpu = stat(rows, "cpu_ms_per_mib", tool=tool, rate=rate, threads=n)
                cpu1 = stat(rows, "cpu_ms_per_mib", tool=tool, rate=rate, threads=1)
                rel = "%.2f" % (cpu[0] / cpu1[0]) if cpu and cpu1 and cpu1[0] else "–"
                out.append("| %s | %s | %d | %s | %s | %s | %s |" % (
                    _rate_text(rate), tool, n,
                    fmt(stat(rows, "mean_ratio", tool=tool, rate=rate, threads=n)),
                    fmt(stat(rows, "burst_ratio", tool=tool, rate=rate, threads=n), 2),
                    fmt(cpu, 3), rel))
    return out


def gnuplot(script, outdir):
    """Run a gnuplot script; return '' or the error text (gnuplot missing
    too: the tables are written all the same)."""
    try:
        r = subprocess.run(["gnuplot"], input=script.encode(), cwd=outdir,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError:
        return "gnuplot is not installed (scripts/deps.sh bench): no plots"
    return r.stderr.decode(errors="replace").strip() if r.returncode else ""


def _dat(tmp, name, points):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        for p in points:
            f.write(" ".join("%.9g" % v for v in p) + "\n")
    return path


def plot_flows(plots, rates, tools, title, png, tmp, outdir, kind):
    """2x2 panels, one per rate: cumulative bytes ('cum') or the 100 ms rate ('rate')."""
    lines = ['set terminal pngcairo size 1400,1000 font "sans,11"',
             'set output "%s"' % png, 'set multiplot layout 2,2 title "%s" font ",14"' % title,
             "set grid", "set key below horizontal"]
    for rate in rates:
        series = []
        for tool in tools:
            if (tool, rate) not in plots:
                continue
            t0, recs = plots[(tool, rate)]
            if kind == "cum":
                pts = [(t, b / 1048576.0) for t, b in metrics.cumulative_series(t0, recs)]
            else:
                pts = [(t, r / rate) for t, r in metrics.binned_rate_series(t0, recs)]
                if pts:  # close the last step at the end of its bin
                    pts.append((pts[-1][0] + metrics.WINDOW_NS / 1e9, pts[-1][1]))
            path = _dat(tmp, "%s-%s-%d.dat" % (kind, tool, rate), pts)
            series.append('"%s" using 1:2 with %s lw 2 lc rgb "%s" title "%s"' % (
                path, "steps", TOOL_COLOR[tool], tool))
        lines.append('set title "%s"' % rate_spec(rate))
        lines.append('set xlabel "time since the connection was set up (s)"')
        if kind == "cum":
            lines.append('set ylabel "bytes delivered (MiB)"')
            ideal = 'x * %.9g title "ideal (rate × t)" with lines dt 2 lw 3 lc rgb "black"' % (
                rate / 1048576.0)
        else:
            lines.append('set ylabel "rate in each 100 ms / configured"')
            lines.append("set yrange [0:*]")
            ideal = '1 title "configured" with lines dt 2 lw 3 lc rgb "black"'
        # The ideal first, so that a tool that follows it exactly is drawn on top.
        series.insert(0, ideal)
        lines.append("set xrange [0:*]")
        lines.append("plot " + ", \\\n  ".join(series) if series else
                     'set label 1 "no data" at graph 0.5,0.5; plot NaN notitle')
    lines.append("unset multiplot")
    return gnuplot("\n".join(lines) + "\n", outdir)


def plot_overhead(rows, tools, kinds, kind_text, png, tmp, outdir):
    """Bars: median ns per call without a tool and with each tool."""
    pts = []
    names = ["none"] + [t for t in tools if stat(rows, "tool_ns", tool=t, kind=kinds[0])]
    for kind in kinds:
        vals = []
        for t in names:
            if t == "none":
                s = metrics.summarize([r.get("none_ns") for r in group(rows, kind=kind)])
            else:
                s = stat(rows, "tool_ns", tool=t, kind=kind)
            vals.append(s[0] if s else 0)
        pts.append(vals)
    path = os.path.join(tmp, "overhead.dat")
    with open(path, "w") as f:
        f.write("kind " + " ".join(names) + "\n")
        for kind, vals in zip(kinds, pts):
            f.write('"%s" %s\n' % (kind_text[kind], " ".join("%.3f" % v for v in vals)))
    cols = ", ".join('"%s" using %d:xtic(1) title columnheader lc rgb "%s"' % (
        path, i + 2, TOOL_COLOR[t]) for i, t in enumerate(names))
    script = "\n".join([
        'set terminal pngcairo size 1000,600 font "sans,11"', 'set output "%s"' % png,
        'set title "Cost per call (median of A/B pairs; lower is better)"',
        'set ylabel "ns per call"', "set style data histograms",
        "set style histogram clustered gap 1", "set style fill solid 0.8 border -1",
        "set boxwidth 0.9", "set grid ytics", "set yrange [0:*]", "set key top left",
        "set xrange [-0.5:%g]" % (len(kinds) - 0.5),
        "plot " + cols]) + "\n"
    return gnuplot(script, outdir)
