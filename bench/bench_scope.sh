#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_scope.sh - end to end cost of a never-limited send under per=process
# and under shared=NAME scope, side by side with no shim: 5 rounds of
# none / process / shared (A B C A B C ...), each N one-byte UDP sends on
# loopback (build/bench/bench_scope send). Prints ns per call per round and
# the medians; the shared/process ratio is the figure of interest.
set -eu
build=${SL_BUILD:-build}
bin="$build/bench/bench_scope"
lib="$(cd "$build" && pwd)/libsluice.so"
[ -x "$bin" ] && [ -f "$lib" ] || { echo "bench_scope.sh: build first (make)"; exit 1; }
name="bench-scope-$$"
trap '"$build/sluice" rm --force "shared:$name" >/dev/null 2>&1' EXIT
n=200000
for round in 1 2 3 4 5; do
	a=$(env -u SL_BUILD "$bin" send $n | awk '{print $2}')
	b=$(env -u SL_BUILD LD_PRELOAD="$lib" SLUICE_SEND=1000000000/s "$bin" send $n | awk '{print $2}')
	c=$(env -u SL_BUILD LD_PRELOAD="$lib" SLUICE_SEND="1000000000/s,shared=$name" "$bin" send $n | awk '{print $2}')
	echo "round $round: none $a ns, process $b ns, shared $c ns"
done | awk '
	{ print; a[NR]=$4; b[NR]=$7; c[NR]=$10 }
	function med(x, n,  i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t } return x[int((n + 1) / 2)] }
	END { ma = med(a, NR); mb = med(b, NR); mc = med(c, NR);
	      printf "median ns/call: none %.1f, process %.1f, shared %.1f; shared/process %.3f (target <= 1.10)\n", ma, mb, mc, mc / mb }'
