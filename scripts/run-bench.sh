#!/bin/sh
# SPDX-License-Identifier: MIT
# run-bench.sh BUILD_DIR - run every benchmark: each BUILD_DIR/bench/bench_*
# binary, then each bench/bench_*.sh script, in name order. Benchmarks print
# their own tables; a failing benchmark makes the run fail.
set -u
build=${1:-build}
status=0
for b in "$build"/bench/bench_*; do
	[ -x "$b" ] || continue
	echo "=== $(basename "$b")"
	SL_BUILD="$build" "$b" || status=1
done
for s in bench/bench_*.sh; do
	[ -f "$s" ] || continue
	echo "=== $(basename "$s")"
	SL_BUILD="$build" sh "$s" || status=1
done
exit $status
