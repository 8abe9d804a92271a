#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# repeat-tests.sh BUILD_DIR [TEST...] - run integration tests (names in
# tests/integration, e.g. test_security.py) again and again under load, to
# find a flaky check before a user's first `make test` does: make test runs
# each test once, beside 3 others on 2 cores (scripts/run-tests.sh), and a
# check that passes alone may lose a race there only now and then.
#
# Each round runs every TEST. A test that run-tests.sh runs after the
# others (its $busy, $light and $alone lists: timing checks that want no
# busy neighbour) runs once, alone.
# Any other runs as a pair, two copies at once (names, ports or files that
# two runs would share collide there) beside SL_REPEAT_LOAD busy loops: about
# the load of make test's parallel pass. A failed run's output is printed;
# the closing line counts the runs; the exit status is non-zero if any
# failed. A skip (exit 77) is neither.
#   SL_REPEAT=N          rounds (default 3)
#   SL_REPEAT_SECONDS=S  start no run (or pair) that would end after S
#                        seconds from the start, by the test's run before
#                        here or else its time in SL_REPEAT_LOG (the first
#                        run without either always starts); 0 (the
#                        default): no bound
#   SL_REPEAT_LOAD=K     busy loops beside a pair (default: one per CPU)
#   SL_REPEAT_LOG=FILE   run-tests.sh's output of a run before (make test's,
#                        in CI): the tests' times ("--- PASS NAME (Ns)")
# Without TEST: the integration tests changed against origin/main (on a
# branch), or else since the commit before HEAD, including the work tree's
# changes and new files; none changed, nothing runs.
set -u
build=${1:-build}
shift
rounds=${SL_REPEAT:-3}
budget=${SL_REPEAT_SECONDS:-0}
load=${SL_REPEAT_LOAD:-$(nproc 2>/dev/null || echo 2)}
for v in "$rounds" "$budget" "$load"; do
	case "$v" in '' | *[!0-9]*) echo "repeat-tests.sh: SL_REPEAT=$rounds SL_REPEAT_SECONDS=$budget SL_REPEAT_LOAD=$load: want counts" >&2; exit 2 ;; esac
done
cd "$(dirname "$0")/.." || exit 2

changed() { # the integration tests changed by this branch, or by the last commit, and in the work tree
	local base=""
	if git rev-parse -q --verify origin/main >/dev/null &&
		[ "$(git rev-parse HEAD)" != "$(git rev-parse origin/main)" ]; then
		base=$(git merge-base origin/main HEAD)
	elif git rev-parse -q --verify HEAD~1 >/dev/null; then
		base=HEAD~1
	fi
	{
		[ -z "$base" ] || git diff --name-only --diff-filter=d "$base" -- 'tests/integration/test_*'
		git ls-files --others --exclude-standard -- 'tests/integration/test_*'
	} | sed 's#^tests/integration/##' | sort -u
}

tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
	mapfile -t tests < <(changed)
	if [ ${#tests[@]} -eq 0 ]; then
		echo "repeat: no integration test changed; name some: make test-repeat TESTS=\"test_a.py ...\""
		exit 0
	fi
	echo "repeat: the changed integration tests: ${tests[*]}"
fi
declare -A secs=() # a test's seconds: its last run here, else its time in SL_REPEAT_LOG
for i in "${!tests[@]}"; do
	t=${tests[$i]#tests/integration/}
	tests[i]=$t
	case "$t" in
	test_*.py | test_*.sh) [ -f "tests/integration/$t" ] || t="" ;;
	*) t="" ;;
	esac
	if [ -z "$t" ]; then
		echo "repeat-tests.sh: ${tests[$i]}: not an integration test (tests/integration/test_*.py or .sh)" >&2
		exit 2
	fi
	if [ -n "${SL_REPEAT_LOG:-}" ] && [ -f "$SL_REPEAT_LOG" ]; then
		secs[$t]=$(sed -n "s/^--- PASS $t (\\([0-9]*\\)s)\$/\\1/p" "$SL_REPEAT_LOG" | tail -n 1)
	fi
done
alone=" $(SL_TEST_ALONE=1 scripts/run-tests.sh) "

logs=$(mktemp -d "${TMPDIR:-/tmp}/sl-repeat-tests.XXXXXX") || exit 2
busy=()
stop_busy() {
	local p
	for p in "${busy[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${busy[@]}"; do wait "$p" 2>/dev/null; done
	busy=()
}
# On an early exit (a signal), end the running tests and the busy loops.
trap 'stop_busy; for p in $(jobs -p); do pkill -TERM -P "$p"; kill "$p"; done 2>/dev/null; rm -rf "$logs"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

runs=0
failed=0
skipped=0
left=0
failures=""
start1() { # name log: one run in the background
	case "$1" in
	*.py) env SL_BUILD="$build" python3 "tests/integration/$1" > "$2" 2>&1 < /dev/null & ;;
	*.sh) env SL_BUILD="$build" sh "tests/integration/$1" > "$2" 2>&1 < /dev/null & ;;
	esac
}
tally() { # name how rc seconds log
	runs=$((runs + 1))
	if [ "$3" -eq 0 ]; then
		echo "--- PASS $1 ($2, $4s)"
	elif [ "$3" -eq 77 ]; then
		skipped=$((skipped + 1)); echo "--- SKIP $1 ($2)"
	else
		echo "=== $1 ($2)"
		cat "$5"
		failed=$((failed + 1)); failures="$failures $1"; echo "--- FAIL $1 ($2, $4s)"
	fi
}

t0=$(date +%s)
for round in $(seq "$rounds"); do
	for t in "${tests[@]}"; do
		s=$(date +%s)
		if [ "$budget" -gt 0 ] && { [ "$runs" -gt 0 ] || [ -n "${secs[$t]:-}" ]; } &&
			[ $((s - t0 + ${secs[$t]:-0})) -gt "$budget" ]; then
			left=$((left + 1))
			continue
		fi
		if [[ $alone == *" $t "* ]]; then
			start1 "$t" "$logs/a.log"
			wait $!
			rc=$?
			secs[$t]=$(( $(date +%s) - s ))
			tally "$t" "round $round, alone" "$rc" "${secs[$t]}" "$logs/a.log"
			continue
		fi
		for _ in $(seq "$load"); do
			sh -c 'while :; do :; done' &
			busy+=($!)
		done
		start1 "$t" "$logs/1.log"
		p1=$!
		start1 "$t" "$logs/2.log"
		p2=$!
		wait "$p1"
		rc1=$?
		e1=$(( $(date +%s) - s ))
		wait "$p2"
		rc2=$?
		secs[$t]=$(( $(date +%s) - s ))
		stop_busy
		tally "$t" "round $round, copy 1 of a pair, $load busy" "$rc1" "$e1" "$logs/1.log"
		tally "$t" "round $round, copy 2 of a pair, $load busy" "$rc2" "${secs[$t]}" "$logs/2.log"
	done
done

[ "$left" -eq 0 ] || echo "repeat: $left runs or pairs not started: they would have ended after SL_REPEAT_SECONDS=$budget"
[ -n "$failures" ] && echo "repeat: failed:$failures"
echo "repeat: $runs runs of ${#tests[@]} tests in $(( $(date +%s) - t0 )) s: $((runs - failed - skipped)) passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
