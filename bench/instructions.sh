#!/bin/sh
# SPDX-License-Identifier: MIT
# instructions.sh [LIB] - workload 7 of make bench alone: instructions
# added per 1-byte call (callgrind), one row per rule and call, beside
# trickle's and issue 13's budget, printed as Markdown (about 20 s).
#   LIB       the libsluice.so to measure [$LIB, else $SL_BUILD/libsluice.so]
#   SL_BUILD  the build directory whose bench/calls runs [build]
#   BENCH_OUT where instructions.csv goes [a new directory under /tmp]
#   BENCH_JOBS callgrind runs at a time [2]
# The name has no bench_ prefix: make bench runs it inside bench_compare.sh.
set -eu
cd "$(dirname "$0")/.."
build=${SL_BUILD:-build}
lib=${1:-${LIB:-$build/libsluice.so}}
[ -x "$build/bench/calls" ] || make -s "$build/bench/calls" BUILD="$build"
command -v valgrind >/dev/null || scripts/deps.sh bench
SL_BUILD=$build exec nice python3 bench/compare/instructions.py "$lib"
