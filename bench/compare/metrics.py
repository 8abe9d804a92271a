# SPDX-License-Identifier: MIT
"""metrics.py - figures computed from the timestamp logs that bench/flow.c writes.

A log is the time origin t0 (accept or connect, CLOCK_MONOTONIC ns) and one
(t_ns, bytes) record per read or per connect. Every figure here is a pure
function of such a log, so the same code judges every tool.
"""

import statistics

WINDOW_NS = 100_000_000  # the "any 100 ms window" of the issue
STEADY_SKIP = 0.2        # fraction of the run ignored by the steady rate


def read_log(path):
    """Return (t0_ns, [(t_ns, units), ...]) from a flow log file."""
    with open(path) as f:
        first = f.readline().split()
        if len(first) != 2 or first[0] != "t0":
            raise ValueError("%s: not a flow log" % path)
        t0 = int(first[1])
        recs = []
        for line in f:
            t, n = line.split()
            recs.append((int(t), int(n)))
    return t0, recs


def steady_rate(recs):
    """Units per second after the first STEADY_SKIP of the run.

    The reference point is the last record at or before t_first + skip; the
    rate is the units that arrived after it divided by the time from it to
    the last record, so chunk boundaries do not bias the figure. Start-up
    (connection set-up, slow start, a bucket's initial burst) is left to the
    time-to-first-byte and largest-window figures."""
    if len(recs) < 3:
        return None
    t_first, t_last = recs[0][0], recs[-1][0]
    cut = t_first + STEADY_SKIP * (t_last - t_first)
    ref = 0
    for i, (t, _) in enumerate(recs):
        if t <= cut:
            ref = i
        else:
            break
    if ref >= len(recs) - 1:
        ref = 0
    span = recs[-1][0] - recs[ref][0]
    if span <= 0:
        return None
    units = sum(n for _, n in recs[ref + 1:])
    return units * 1e9 / span


def whole_rate(t0, recs):
    """Units per second from t0 to the last record, start-up included."""
    if not recs or recs[-1][0] <= t0:
        return None
    return sum(n for _, n in recs) * 1e9 / (recs[-1][0] - t0)


def max_window(recs, window_ns=WINDOW_NS):
    """Largest number of units whose records fall in any window_ns interval."""
    best = 0
    acc = 0
    lo = 0
    for t, n in recs:
        acc += n
        while recs[lo][0] <= t - window_ns:
            acc -= recs[lo][1]
            lo += 1
        best = max(best, acc)
    return best


def ttfb_ms(t0, recs):
    """Milliseconds from t0 to the first record."""
    return (recs[0][0] - t0) / 1e6 if recs else None


def flow_figures(t0, recs, rate):
    """The per-run figures of an accuracy workload (rate in units/s or None)."""
    fig = {
        "units": sum(n for _, n in recs),
        "steady_rate": steady_rate(recs),
        "whole_rate": whole_rate(t0, recs),
        "max_100ms": max_window(recs),
        "ttfb_ms": ttfb_ms(t0, recs),
    }
    if rate:
        fig["mean_ratio"] = fig["steady_rate"] / rate if fig["steady_rate"] else None
        fig["burst_ratio"] = fig["max_100ms"] / (rate * WINDOW_NS / 1e9)
        if fig["steady_rate"]:
            # The same against the rate the tool really held: a tool that
            # undershoots looks smoother than it is in burst_ratio.
            fig["burst_own_ratio"] = fig["max_100ms"] / (fig["steady_rate"] * WINDOW_NS / 1e9)
    return fig


def cumulative_series(t0, recs):
    """[(seconds since t0, cumulative units)] starting at (0, 0)."""
    out = [(0.0, 0)]
    acc = 0
    for t, n in recs:
        acc += n
        out.append(((t - t0) / 1e9, acc))
    return out


def binned_rate_series(t0, recs, bin_ns=WINDOW_NS):
    """[(bin start in seconds since t0, units/s in that bin)] for every bin
    that ends before the last record (a last, partial bin would look slow)."""
    if not recs:
        return []
    nbins = max(1, (recs[-1][0] - t0) // bin_ns)
    bins = [0] * nbins
    for t, n in recs:
        i = (t - t0) // bin_ns
        if i < nbins:
            bins[i] += n
    return [(i * bin_ns / 1e9, b * 1e9 / bin_ns) for i, b in enumerate(bins)]


def summarize(values):
    """(median, min, max) of the non-None values, or None if there are none."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return statistics.median(vals), min(vals), max(vals)


def median_index(values):
    """Index of the run whose value is the (lower) median: the run to plot."""
    idx = [i for i, v in enumerate(values) if v is not None]
    if not idx:
        return None
    idx.sort(key=lambda i: values[i])
    return idx[(len(idx) - 1) // 2]
