#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ab_pair.py - wall-clock A/B of matched 1-byte sends in long-lived processes.

Each SIDE is one `build/bench/ab_pair` process (bench/ab_pair.c), started
once with its own TCP connection to its own `flow drain` on 127.0.0.1:

    none            no preload
    LIB             LD_PRELOAD=LIB, SLUICE_SEND=RULE (--rule, default 10GB/s:
                    never limits a 1-byte send)
    LIB@RULE        the same with this SLUICE_SEND value
    LIB@@SPEC       the same with SLUICE_RULES=SPEC instead

Every round asks each side for one batch of CALLS sends, the sides in a
new random order each round, so a noisy moment of the shared machine hits
every side and no side is always first. For each side the figure is the
median over rounds of (its batch's ns per call) / (none's in the same
round), with the quartiles. With --sets K the processes are started K times
(K address-space layouts) and the rounds pooled. The first side must be
`none`.

    python3 bench/ab_pair.py none build/libsluice.so
    python3 bench/ab_pair.py --rounds 301 none /tmp/old/build/libsluice.so build/libsluice.so
    python3 bench/ab_pair.py none build/libsluice.so@10GB/s,per=fd

Loopback only; every process is bounded (ab_pair: 600 s; rounds x calls).
"""
import argparse
import os
import random
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "compare"))
import abpair  # noqa: E402

BUILD = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))


def side_env(side, rule):
    """The environment of one side."""
    if side == "none":
        return abpair.clean_env()
    lib, _, spec = side.partition("@")
    extra = {"LD_PRELOAD": os.path.abspath(lib)}
    if spec.startswith("@"):
        extra["SLUICE_RULES"] = spec[1:]
    else:
        extra["SLUICE_SEND"] = spec or rule
    return abpair.clean_env(extra)


def quartiles(xs):
    q = statistics.quantiles(xs, n=4)
    return q[0], statistics.median(xs), q[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sides", nargs="+")
    ap.add_argument("--rounds", type=int, default=201, help="rounds per set (201)")
    ap.add_argument("--calls", type=int, default=2000, help="sends per batch (2000)")
    ap.add_argument("--sets", type=int, default=3, help="process sets (3)")
    ap.add_argument("--warm", type=int, default=5, help="rounds dropped at each start (5)")
    ap.add_argument("--rule", default="10GB/s", help="SLUICE_SEND of a bare LIB side")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.sides[0] != "none":
        sys.exit("ab_pair.py: the first side must be none")
    rng = random.Random(a.seed)
    ns = [[] for _ in a.sides]
    ratio = [[] for _ in a.sides]
    envs = [side_env(s, a.rule) for s in a.sides]
    for _ in range(a.sets):
        for got in abpair.rounds(BUILD, envs, a.rounds, a.calls, rng, a.warm):
            for k, v in enumerate(got):
                ns[k].append(v)
                ratio[k].append(v / got[0])
    print("%d sets x %d rounds x %d calls; ns per call: median (quartiles); "
          "side / none: median of the per-round ratios (quartiles)" %
          (a.sets, a.rounds, a.calls))
    for k, s in enumerate(a.sides):
        q = quartiles(ns[k])
        line = "%-60s %8.1f (%.1f-%.1f)" % (s, q[1], q[0], q[2])
        if k:
            q = quartiles(ratio[k])
            line += "   %.3f (%.3f-%.3f)" % (q[1], q[0], q[2])
        print(line)


if __name__ == "__main__":
    main()
