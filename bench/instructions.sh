#!/bin/sh
# SPDX-License-Identifier: MIT
# instructions.sh [--explain CASE] [LIB] - workload 7 of make bench alone:
# instructions added per 1-byte call (callgrind), one row per rule and call,
# beside trickle's and the project's target, printed as Markdown (20-45 s).
# --explain CASE (a row's case, e.g. send, "send per=fd", recv, writev,
# "recv two-rules"; see instructions.csv) prints instead where that row's
# instructions go, function by function.
#   LIB        the libsluice.so to measure [$LIB, else $SL_BUILD/libsluice.so]
#   SL_BUILD   the build directory whose bench/calls runs [build]
#   BENCH_OUT  where instructions.csv goes [a new directory under /tmp]
#   BENCH_JOBS callgrind runs at a time [2]
#   BENCH_BEFORE_LIB  another libsluice.so measured in the same run: a
#              "before" column and the change (before and after, one run)
# The name has no bench_ prefix: make bench runs it inside bench_compare.sh.
set -eu
if [ "${1:-}" = --explain ]; then
	[ $# -ge 2 ] || { echo "usage: $0 [--explain CASE] [LIB]" >&2; exit 2; }
	what=$2
	shift 2
fi
lib=${1:-${LIB:-}}
case $lib in
"" | /*) ;;
*) lib=$(pwd)/$lib ;; # relative to where it was typed, not to the tree
esac
case ${BENCH_BEFORE_LIB:-/} in
/*) ;;
*) export BENCH_BEFORE_LIB="$(pwd)/$BENCH_BEFORE_LIB" ;;
esac
cd "$(dirname "$0")/.."
build=${SL_BUILD:-build}
lib=${lib:-$build/libsluice.so}
[ -x "$build/bench/calls" ] || make -s "$build/bench/calls" BUILD="$build"
command -v valgrind >/dev/null || scripts/deps.sh bench
export SL_BUILD="$build"
if [ -n "${what+set}" ]; then
	exec nice python3 bench/compare/instructions.py --explain "$what" "$lib"
fi
exec nice python3 bench/compare/instructions.py "$lib"
