#!/bin/sh
# SPDX-License-Identifier: MIT
# run-tests.sh BUILD_DIR - run every unit test binary in BUILD_DIR/tests and
# every integration test in tests/integration (given SL_BUILD=BUILD_DIR),
# then print one closing line
# "N passed, N failed, N skipped" and exit non-zero if anything failed. A test
# that exits 77 cannot run on this machine (it prints why): skipped, which
# is not a pass.
#   SL_TEST_UNIT_ONLY=1   skip integration tests
#   SL_TEST_INTEGRATION_ONLY=1   skip unit tests
#   SL_TEST_FILTER=WORD   only tests whose name contains WORD
set -u
build=${1:-build}
filter=${SL_TEST_FILTER:-}
passed=0
failed=0
skipped=0
failures=""
skips=""

run_one() { # name command...
	name=$1; shift
	case "$name" in *"$filter"*) ;; *) return 0 ;; esac
	echo "=== $name"
	start=$(date +%s)
	"$@"
	rc=$?
	if [ "$rc" -eq 0 ]; then
		passed=$((passed + 1)); echo "--- PASS $name ($(( $(date +%s) - start ))s)"
	elif [ "$rc" -eq 77 ]; then # the test cannot run on this machine (it says why)
		skipped=$((skipped + 1)); skips="$skips $name"; echo "--- SKIP $name"
	else
		failed=$((failed + 1)); failures="$failures $name"; echo "--- FAIL $name"
	fi
}

# Unit tests that link the shim archive run its constructor, which refuses
# unknown SLUICE_* names: give them an environment without any.
for t in "$build"/tests/test_*; do
	[ -x "$t" ] && [ -z "${SL_TEST_INTEGRATION_ONLY:-}" ] || continue
	run_one "$(basename "$t")" env $(env | sed -n 's/^\(SLUICE_[A-Za-z0-9_]*\)=.*/-u \1/p') "$t"
done

if [ -z "${SL_TEST_UNIT_ONLY:-}" ]; then
	for t in tests/integration/test_*; do
		[ -f "$t" ] || continue
		case "$t" in
		*.py) run_one "$(basename "$t")" env SL_BUILD="$build" python3 "$t" ;;
		*.sh) run_one "$(basename "$t")" env SL_BUILD="$build" sh "$t" ;;
		esac
	done
fi

[ -n "$skips" ] && echo "skipped (not passed):$skips"
[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
