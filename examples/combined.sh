#!/bin/sh
# SPDX-License-Identifier: MIT
# combined.sh - a whole policy in one SLUICE_RULES line, as a deployment
# would set it in a unit file or a container's environment:
#   connect:4/s            at most four new connections a second
#   recv:1MiB/s,burst=64KiB  at most 1 MiB/s downloaded, 64 KiB at once
#   conns:2                at most two connections open at once
# `sluice --check` prints the rules in canonical form without running
# anything; then curl fetches four 256 KiB files (one connection each)
# under the policy: about 1 s for the bytes, and no more than 4 connects/s.
. "$(dirname "$0")/common.sh"

for i in 1 2 3 4; do make_file "$work/f$i" 256; done
http_server "$work" 127.0.0.1
export SLUICE_RULES='connect:4/s;recv:1MiB/s,burst=64KiB;conns:2'
echo "SLUICE_RULES='$SLUICE_RULES' sluice --check:"
"$SLUICE" --check
start=$(now)
"$SLUICE" -- curl -sS -w '%{url}: %{size_download} bytes, in %{time_total} s\n' \
	-o /dev/null "http://127.0.0.1:$port/f1" -o /dev/null "http://127.0.0.1:$port/f2" \
	-o /dev/null "http://127.0.0.1:$port/f3" -o /dev/null "http://127.0.0.1:$port/f4"
echo "4 x 256 KiB under the policy in $(elapsed "$start") s"
