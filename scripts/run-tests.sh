#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run-tests.sh BUILD_DIR - run every unit test binary in BUILD_DIR/tests and
# every integration test in tests/integration (given SL_BUILD=BUILD_DIR),
# then print one closing line
# "N passed, N failed, N skipped" and exit non-zero if anything failed. A test
# that exits 77 cannot run on this machine (it prints why): skipped, which
# is not a pass.
#   SL_TEST_UNIT_ONLY=1   skip integration tests
#   SL_TEST_INTEGRATION_ONLY=1   skip unit tests
#   SL_TEST_FILTER=WORD   only tests whose name contains WORD (several
#                         words, space-separated: any of them)
#   SL_TEST_JOBS=N        run up to N tests at once (default: 2 per CPU, at
#                         least 4: most integration tests sleep in throttled
#                         transfers). Each test's output is printed in one
#                         block, "=== name" to "--- PASS name (Ns)", when it
#                         ends; the tests listed in $busy and $light below
#                         run after the others, one of each at a time, then
#                         those in $alone, one at a time. SL_TEST_JOBS=1:
#                         every test in order, one after another, output as
#                         it comes (for a test being debugged).
#   SL_TEST_ALONE=1       print the names in $busy, $light and $alone below
#                         and exit (scripts/repeat-tests.sh runs those alone)
#   SL_TEST_TIMEOUT=S     a test still running after S seconds (default
#                         900; the longest take about 2 minutes under the
#                         sanitizers) is ended, TERM then KILL 10 s later,
#                         and fails: a hang costs minutes, not the whole
#                         of CI's time (a fork child once waited for ever
#                         for a lock its parent's thread held)
set -u
build=${1:-build}
filter=${SL_TEST_FILTER:-}
ncpu=$(nproc 2>/dev/null || echo 2)
jobs=${SL_TEST_JOBS:-$((ncpu * 2 > 4 ? ncpu * 2 : 4))}
case "$jobs" in '' | *[!0-9]* | 0) echo "run-tests.sh: SL_TEST_JOBS=$jobs: want a count of 1 or more" >&2; exit 2 ;; esac
limit=${SL_TEST_TIMEOUT:-900}
case "$limit" in '' | *[!0-9]* | 0) echo "run-tests.sh: SL_TEST_TIMEOUT=$limit: want seconds, 1 or more" >&2; exit 2 ;; esac

# Tests whose bounds a busy neighbour breaks (what they did beside others,
# seen on a 2-core machine at SL_TEST_JOBS=4, listed below) run after the
# others. Their own CPU, measured alone (/usr/bin/time, user + sys over the
# wall time), sorts them in three lists:
#   $busy   a third to two thirds of a CPU: one at a time, beside at most one
#           of $light;
#   $light  under a tenth of a CPU, timing checks that sleep: one at a time,
#           beside at most one of $busy (a CPU and more stays free for them);
#   $alone  nothing beside them: they share the build directory's install
#           files, run CPU-bound bursts, or broke a bound in the busy lane.
# The two lanes ($busy, $light) take about 155 s, where their 10 tests one
# after another took 290 s; then $alone about 80 s.
#   test_install.sh, test_cli.py  run make install on the shared build
#                     directory with their own PREFIX: one would install the
#                     other's sluice-core.pc (BUILD/pc.stamp)
#   test_shim_warmup.py  0.75 MiB in the first 2 s of a 1MiB/s warm-up
#                     (wants 0.9 to 1.1 MiB). Light: 1.5 s CPU in 27 s
#   test_supervise_static.py  60 connects at 20/s in 3.020 s (wants 2.950
#                     to 3.009 s: within 2 %). Light: 2.1 s CPU in 22 s
#   test_real_sshd.py scp at 0.972 MiB/s where it wants 1 MiB/s within 5 %
#                     (1.002 alone): too little margin. Busy: 12 s in 39 s
#   test_stat_listen.py  4 of its 80 concurrent scrapes reset by the server
#                     once (never alone, nor beside busy loops). Light: 0.7
#                     s CPU in 6 s
#   test_redis_sentinel.py  82 connects in 0.05 s at its listener during the
#                     failover (wants at most 31): counted where they are
#                     accepted, a listener kept off the CPU sees them
#                     bunched. Busy: 10 s CPU in 36 s
#   test_shim_accept.py  a gap of 0.2285 s between accepts at 4/s (wants at
#                     least 0.24 s) where the ones beside it were 0.268 s:
#                     the client's clock read late, not an early accept.
#                     Light: 0.9 s CPU in 6 s
#   test_vfork.py     CPython's test_subprocess: hundreds of short processes
#                     at full CPU; beside it (started first) the Redis fleets
#                     combined 480/s where they want 500/s within 2 %, and
#                     a 3 MiB asyncio upload at 1 MiB/s took 3.34 s. Alone:
#                     25 s CPU in 39 s, in bursts of both CPUs
#   test_redis.py     the fleets' combined rate wants 500/s (and 512 KiB/s)
#                     within 2 %: 480/s and 494 KB/s beside the first wave
#                     (lintian, the cluster and fairness tests), 2 of 5 runs.
#                     Busy: 20 s CPU in 48 s
#   test_supervise_go.py  8 MiB at 2 MiB/s in 4.20 s where it wants 4.11 s
#                     (within 3 %) beside the same, 2 of 5 runs. Busy: 9 s
#                     CPU in 16 s
#   test_redis_cluster.py  605 connects in one 1 s window during the cluster
#                     failover (wants at most 550) beside the first wave, 1
#                     of 5 CI runs; 510 and 511 alone. 18 s CPU in 37 s, and
#                     564 in the busy lane beside test_eventloop_fair or
#                     test_shim_warmup (1 of 3 CI runs): alone
#   test_modes_ab.py  the two modes must agree within 3 %: beside other
#                     suites a preloaded 2 MiB download at 1 MiB/s took
#                     2.27 s against 2.08 s supervised (quiet: 2.00 / 2.00).
#                     Light: 4.2 s CPU in 57 s
#   test_eventloop_fair.py  two asyncio uploads sharing 1 MiB/s must end
#                     within 10 % of each other: 3.668/4.138 s and
#                     3.716/4.230 s beside the first wave (lintian among
#                     it), 2 of 4 full runs; 3.969/3.997 s beside two busy
#                     loops. Light: 3.3 s CPU in 36 s
#   test_adaptive.py  p99 latency of a simulated server's answers <= 3x its
#                     unloaded latency (125 ms) in every phase; 84 ms alone.
#                     Light: 18 s CPU in 112 s
#   test_system.py    the same server under system protection: goodput and
#                     p99 bounds per phase (cpu= 84 ms against 208). Light
#   test_adaptive_client.py  the client limit read from sluice stat near each
#                     phase's end (2 and 6 against <= 4 and > 4). Light
busy=" test_redis.py test_real_sshd.py test_redis_sentinel.py test_supervise_go.py "
light=" test_modes_ab.py test_eventloop_fair.py test_shim_warmup.py test_supervise_static.py \
test_stat_listen.py test_shim_accept.py test_adaptive.py test_system.py test_adaptive_client.py "
alone=" test_install.sh test_cli.py test_vfork.py test_redis_cluster.py "
[ -z "${SL_TEST_ALONE:-}" ] || { echo $busy $light $alone; exit 0; }
# Started first (the longest of the others, 15 to 50 s each), so that
# none of them begins last and holds up the end: only the order changes.
first=" test_deb.sh test_redis_pool.py \
test_proxy_haproxy.py test_examples.py "

passed=0
failed=0
skipped=0
failures=""
skips=""
logs=$(mktemp -d "${TMPDIR:-/tmp}/sl-run-tests.XXXXXX") || exit 2
declare -A job_name=()
# On an early exit (a signal), end the running tests and the subshells that wait for them.
trap 'for p in $(jobs -p); do pkill -TERM -P "$p"; kill "$p"; done 2>/dev/null; rm -rf "$logs"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

tally() { # name rc seconds
	[ "$2" -ne 124 ] && [ "$2" -ne 137 ] || [ "$3" -lt "$limit" ] ||
		echo "run-tests.sh: $1 was still running after $limit s (SL_TEST_TIMEOUT): ended"
	if [ "$2" -eq 0 ]; then
		passed=$((passed + 1)); echo "--- PASS $1 ($3s)"
	elif [ "$2" -eq 77 ]; then # the test cannot run on this machine (it says why)
		skipped=$((skipped + 1)); skips="$skips $1"; echo "--- SKIP $1"
	else
		failed=$((failed + 1)); failures="$failures $1"; echo "--- FAIL $1"
	fi
}

reaped="" # the pid of the test reap printed last
reap() { # wait for one background test, print its block
	local pid name rc secs
	wait -n -p pid
	reaped=$pid
	name=${job_name[$pid]}
	unset "job_name[$pid]"
	read -r rc secs < "$logs/$name.rc" || { rc=1; secs=0; }
	echo "=== $name"
	cat "$logs/$name.log"
	tally "$name" "$rc" "$secs"
}

start_bg() { # name command...: run a test in the background (reap prints it)
	local name=$1; shift
	(
		start=$(date +%s)
		timeout -k 10 "$limit" "$@" > "$logs/$name.log" 2>&1 < /dev/null
		echo "$? $(( $(date +%s) - start ))" > "$logs/$name.rc"
	) &
	job_name[$!]=$name
}

# With SL_TEST_JOBS=1, one pass runs every test in order. Otherwise pass
# "first" starts the tests listed in $first, pass "rest" the others not in
# $busy, $light or $alone, SL_TEST_JOBS at a time; pass "lanes", once those
# have ended, queues the ones in $busy and $light, which run_lanes runs in
# two lanes (one of each at a time); pass "alone", once those have ended,
# the ones in $alone, one by one.
pass=first
declare -A lane_cmd=() # a queued test's command (printf %q)
busy_q=()
light_q=()
run_one() { # name command...
	local name=$1 start; shift
	if [ -n "$filter" ]; then
		local w hit=""
		for w in $filter; do case "$name" in *"$w"*) hit=1 ;; esac; done
		[ -n "$hit" ] || return 0
	fi
	if [ "$jobs" -gt 1 ]; then
		local want=rest
		if [[ $alone == *" $name "* ]]; then
			want=alone
		elif [[ "$busy$light" == *" $name "* ]]; then
			want=lanes
		elif [[ $first == *" $name "* ]]; then
			want=first
		fi
		[ "$want" = "$pass" ] || return 0
	fi
	if [ "$pass" = lanes ]; then
		lane_cmd[$name]=$(printf '%q ' "$@")
		if [[ $busy == *" $name "* ]]; then busy_q+=("$name"); else light_q+=("$name"); fi
		return 0
	fi
	if [ "$jobs" -eq 1 ] || [ "$pass" = alone ]; then
		echo "=== $name"
		start=$(date +%s)
		timeout -k 10 "$limit" "$@"
		tally "$name" $? $(( $(date +%s) - start ))
		return 0
	fi
	while [ ${#job_name[@]} -ge "$jobs" ]; do reap; done
	start_bg "$name" "$@"
}

# The queued $busy and $light tests, each list in its order (as listed, the
# longest first), one of each running at a time.
run_lanes() {
	local bi=0 li=0 bpid="" lpid="" name
	while :; do
		if [ -z "$bpid" ] && [ "$bi" -lt ${#busy_q[@]} ]; then
			name=${busy_q[$bi]}; bi=$((bi + 1))
			eval "start_bg $(printf '%q' "$name") ${lane_cmd[$name]}"
			bpid=$!
		fi
		if [ -z "$lpid" ] && [ "$li" -lt ${#light_q[@]} ]; then
			name=${light_q[$li]}; li=$((li + 1))
			eval "start_bg $(printf '%q' "$name") ${lane_cmd[$name]}"
			lpid=$!
		fi
		[ -n "$bpid$lpid" ] || break
		reap
		[ "$reaped" != "$bpid" ] || bpid=""
		[ "$reaped" != "$lpid" ] || lpid=""
	done
}

run_all() {
	# Unit tests that link the shim archive run its constructor, which refuses
	# unknown SLUICE_* names: give them an environment without any.
	for t in "$build"/tests/test_*; do
		[ -x "$t" ] && [ -z "${SL_TEST_INTEGRATION_ONLY:-}" ] || continue
		run_one "$(basename "$t")" env $(env | sed -n 's/^\(SLUICE_[A-Za-z0-9_]*\)=.*/-u \1/p') "$t"
	done
	[ -z "${SL_TEST_UNIT_ONLY:-}" ] || return 0
	for t in tests/integration/test_*; do
		[ -f "$t" ] || continue
		case "$t" in
		*.py) run_one "$(basename "$t")" env SL_BUILD="$build" python3 "$t" ;;
		*.sh) run_one "$(basename "$t")" env SL_BUILD="$build" sh "$t" ;;
		esac
	done
}

run_all
if [ "$jobs" -gt 1 ]; then
	pass=rest
	run_all
	while [ ${#job_name[@]} -gt 0 ]; do reap; done
	pass=lanes
	run_all
	# In the lists' order, not the files'.
	order() { local n q=(); for n in $1; do [[ " $2 " == *" $n "* ]] && q+=("$n"); done; echo "${q[@]}"; }
	read -r -a busy_q <<< "$(order "$busy" "${busy_q[*]}")"
	read -r -a light_q <<< "$(order "$light" "${light_q[*]}")"
	run_lanes
	pass=alone
	run_all
fi

[ -n "$skips" ] && echo "skipped (not passed):$skips"
[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
