#!/bin/sh
# SPDX-License-Identifier: MIT
# connect-rate.sh - a small load generator opens 20 connections to a loopback
# server as fast as it can; under `sluice --connect 10/s` the same generator is
# held to ten connections a second, so the 20 take about 2 s (less the burst).
. "$(dirname "$0")/common.sh"

banner_server
cat > "$work/loadgen.py" <<'PY'
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
start = time.monotonic()
for _ in range(n):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.recv(16)
took = time.monotonic() - start
print(f"{n} connections in {took:.3f} s = {n / took:.1f} connections/s")
PY
printf 'load generator alone:                 '
python3 "$work/loadgen.py" "$port" 20
printf 'sluice --connect 10/s load generator: '
"$SLUICE" --connect 10/s -- python3 "$work/loadgen.py" "$port" 20
