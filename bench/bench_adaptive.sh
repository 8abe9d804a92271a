#!/bin/sh
# SPDX-License-Identifier: MIT
# bench_adaptive.sh - conns:adaptive against no limit and fixed conns limits
# on a server whose capacity changes (bench/adaptive.py says what is
# measured). About 3 minutes.
set -eu
exec python3 "$(dirname "$0")/adaptive.py"
