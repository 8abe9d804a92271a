#!/bin/sh
# SPDX-License-Identifier: MIT
# throttle-download.sh - download a 1 MiB file from a loopback HTTP server with
# curl, first as it is, then under `sluice --recv 256KiB/s`, and print both
# rates. The throttled download takes about 4 s (less the bucket's burst).
. "$(dirname "$0")/common.sh"

make_file "$work/file" 1024
http_server "$work" 127.0.0.1
url="http://127.0.0.1:$port/file"
fmt='%{size_download} bytes in %{time_total} s = %{speed_download} B/s\n'

printf 'curl alone:                    '
curl -sS -o /dev/null -w "$fmt" "$url"
printf 'sluice --recv 256KiB/s curl:   '
"$SLUICE" --recv 256KiB/s -- curl -sS -o "$work/copy" -w "$fmt" "$url"
cmp -s "$work/file" "$work/copy" && echo "the throttled copy is intact (262144 B/s configured)"
