#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_compare.sh - sluice against no limit, trickle, pv and tc tbf, plus the
# shim's own overhead and accuracy figures. Run by scripts/run-bench.sh (make
# bench) with SL_BUILD set; writes bench/results/latest/ (CSV per
# workload, summary.md, PNG plots). BENCH_QUICK=1 for the short run the
# README shows; see bench/README.md for the other knobs.
set -eu
cd "$(dirname "$0")/.."
exec python3 bench/compare/run.py "${SL_BUILD:-build}"
