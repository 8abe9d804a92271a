#!/bin/sh
# SPDX-License-Identifier: MIT
# slow-accept.sh - test a client's patience and retry logic against a server
# that sluice slows down or makes refuse connections, without touching the
# server's code.
#   1. `sluice --accept 4/s`: the server accepts at most four connections a
#      second; six clients connecting at once are answered over about 1.25 s.
#   2. `sluice --accept 2/s,action=reject`: connections beyond two a second
#      are accepted and reset at once; a client that retries after 200 ms
#      still gets through, and prints how many attempts it needed.
. "$(dirname "$0")/common.sh"

cat > "$work/clients.py" <<'PY'
import socket, sys, threading, time
port, n, retry = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "retry"
start = time.monotonic()
lock = threading.Lock()
def client(i):
    for attempt in range(1, 30):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                if s.recv(16) == b"hello\n":
                    break
        except OSError:
            pass
        if not retry:
            attempt = "failed"
            break
        time.sleep(0.2)  # the retry logic under test
    with lock:
        print(f"  client {i}: answered after {time.monotonic() - start:.2f} s, attempts: {attempt}")
threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
for t in threads: t.start()
for t in threads: t.join()
print(f"  all {n} clients answered within {time.monotonic() - start:.2f} s")
PY

echo "server under sluice --accept 4/s, 6 clients at once:"
banner_server "$SLUICE" --accept 4/s --
python3 "$work/clients.py" "$port" 6 once

echo "server under sluice --accept 2/s,action=reject, 4 clients that retry:"
banner_server "$SLUICE" --accept 2/s,action=reject --
python3 "$work/clients.py" "$port" 4 retry
