#!/bin/sh
# SPDX-License-Identifier: MIT
# per-peer.sh - one policy, different limits per peer. A server listens on
# both loopback addresses; one curl process downloads the same 512 KiB file
# from 127.0.0.1 and from ::1 under
#   recv:1MiB/s,to=127.0.0.1    (about 0.5 s)
#   recv:256KiB/s,to=::1        (about 2 s)
# so each peer gets its own rate.
. "$(dirname "$0")/common.sh"

make_file "$work/file" 512
http_server "$work" ::
fmt='%{url}: %{size_download} bytes in %{time_total} s = %{speed_download} B/s\n'
"$SLUICE" -v --rules 'recv:1MiB/s,to=127.0.0.1;recv:256KiB/s,to=::1' -- \
	curl -sS -w "$fmt" -o /dev/null "http://127.0.0.1:$port/file" \
	-o /dev/null "http://[::1]:$port/file"
