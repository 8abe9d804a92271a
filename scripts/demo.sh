#!/bin/sh
# SPDX-License-Identifier: MIT
# demo.sh BUILD_DIR - sluice at work in ten seconds: download the same 4 MiB
# file from a loopback HTTP server with curl, once as it is and once under
# `sluice --recv 1MiB/s`, and print both rates. Loopback only; stops itself.
set -eu
build=${1:-build}
command -v curl >/dev/null || { echo "demo: needs curl (apt-get install curl)" >&2; exit 1; }
dir=$(mktemp -d)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT INT TERM
head -c 4194304 /dev/urandom > "$dir/file"
# Port 0 lets the kernel choose; the server prints the port it got.
python3 - "$dir" > "$dir/port" <<'PY' &
import functools, http.server, sys
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
handler = functools.partial(Quiet, directory=sys.argv[1])
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
srv.timeout = 30
print(srv.server_address[1], flush=True)
srv.serve_forever()
PY
server=$!
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$dir/port" ] && break; sleep 0.2; done
url="http://127.0.0.1:$(cat "$dir/port")/file"
fmt='%{size_download} bytes in %{time_total} s = %{speed_download} B/s\n'
printf 'unthrottled:                   '
curl -s --max-time 30 -o /dev/null -w "$fmt" "$url"
printf 'sluice --recv 1MiB/s (1048576): '
"$build/sluice" --recv 1MiB/s -- curl -s --max-time 30 -o /dev/null -w "$fmt" "$url"
