#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_supervise.sh - supervised mode's costs (bench/supervise.py says what
# is measured). Needs gcc's static libc and golang-go (scripts/deps.sh test).
set -eu
exec nice python3 "$(dirname "$0")/supervise.py"
