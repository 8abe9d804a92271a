# SPDX-License-Identifier: MIT
# common.sh - sourced by every example: finds sluice, makes a private
# temporary directory, starts loopback helpers and cleans everything up on
# exit. Not meant to be run by itself.
#
# Cleanup runs however the example ends: normally, on an error (set -e), on
# INT, TERM, HUP, and on PIPE (`sh example.sh | head -1`: the next write
# after head exits). Helpers also watch the example's shell (its pid is their
# last argument) and exit within 0.2 s once it is gone, even if it was
# SIGKILLed (only the temporary directory stays then: nothing runs after a
# SIGKILL).
#
#   SLUICE=/path/to/sluice   the launcher to use (default: ../build/sluice
#                            beside this directory, else sluice in PATH)
#
# Helpers write the port they got (the kernel picks a free one) to a file, so
# two examples can never collide on a port.

set -eu

here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${SLUICE:-}" ]; then
	if [ -x "$here/../build/sluice" ]; then SLUICE="$here/../build/sluice"; else SLUICE=sluice; fi
fi
command -v "$SLUICE" >/dev/null || { echo "example: cannot find sluice (build it with make, or set SLUICE)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/sluice-example.XXXXXX")
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

# now: seconds since the epoch with nanoseconds, for timing.
now() { date +%s.%N; }
# elapsed START: seconds since START, three decimals.
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }

# wait_port FILE: wait up to 10 s for a helper to write its port to FILE.
wait_port() {
	i=0
	while [ ! -s "$1" ]; do
		i=$((i + 1))
		[ "$i" -le 100 ] || { echo "example: helper did not start" >&2; exit 1; }
		sleep 0.1
	done
	cat "$1"
}

# watchdog: a Python module whose start(PID) ends the helper within 0.2 s
# once process PID (the example's shell) is gone or the helper was
# reparented, so that no helper outlives its example.
watchdog() {
	cat <<'PY'
import os, threading, time
def start(pid):
    parent = os.getppid()
    def watch():
        while True:
            time.sleep(0.2)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except PermissionError:
                pass
            if os.getppid() != parent:
                os._exit(0)
    threading.Thread(target=watch, daemon=True).start()
PY
}

# http_server DIR BIND [LAUNCHER...]: serve DIR over HTTP on BIND ("127.0.0.1"
# or "::" for both loopbacks), optionally under a launcher such as
# `"$SLUICE" --accept 2/s --`; sets $port.
http_server() {
	dir=$1 bind=$2
	shift 2
	watchdog > "$work/watchdog.py"
	cat > "$work/http_server.py" <<'PY'
import functools, http.server, os, socket, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import watchdog
watchdog.start(int(sys.argv[3]))
class Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6 if ":" in sys.argv[2] else socket.AF_INET
    def server_bind(self):
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
handler = functools.partial(Quiet, directory=sys.argv[1])
srv = Server((sys.argv[2], 0), handler)
print(srv.server_address[1], flush=True)
srv.serve_forever()
PY
	rm -f "$work/http.port"
	"$@" python3 "$work/http_server.py" "$dir" "$bind" $$ > "$work/http.port" &
	pids="$pids $!"
	port=$(wait_port "$work/http.port")
}

# banner_server [LAUNCHER...]: a TCP server on 127.0.0.1 that answers each
# connection with "hello\n" and closes it, and survives refused accepts;
# sets $port.
banner_server() {
	watchdog > "$work/watchdog.py"
	cat > "$work/banner_server.py" <<'PY'
import os, socket, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import watchdog
watchdog.start(int(sys.argv[1]))
srv = socket.create_server(("127.0.0.1", 0), backlog=64)
print(srv.getsockname()[1], flush=True)
while True:
    try:
        conn, _ = srv.accept()
    except OSError:
        continue  # a refused accept: the client sees its connection reset
    with conn:
        conn.sendall(b"hello\n")
PY
	rm -f "$work/banner.port"
	"$@" python3 "$work/banner_server.py" $$ > "$work/banner.port" &
	pids="$pids $!"
	port=$(wait_port "$work/banner.port")
}

# make_file PATH SIZE_KIB: a file of random bytes.
make_file() { head -c "$(($2 * 1024))" /dev/urandom > "$1"; }
