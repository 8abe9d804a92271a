#!/bin/sh
# SPDX-License-Identifier: MIT
# test_deb.sh - `make deb` builds a package lintian accepts without errors;
# `dpkg -i` installs it; /usr/bin/sluice prints its version, finds the
# installed library and throttles a real transfer (curl downloading 1 MiB
# from a loopback server under --recv 1MiB/s takes at least the floor the
# burst allows); a program builds against the installed core with
# pkg-config; `dpkg -r` then removes every file the package shipped.
#
# It installs into the real system, so it needs root and dpkg, runs only
# when no sluice package or /usr/bin/sluice is already there (it never
# replaces one it did not install), and holds a lock so that two runs on
# one machine take turns.
set -eu
build=${SL_BUILD:-build}
if [ "$(id -u)" != 0 ] || ! command -v dpkg >/dev/null 2>&1; then
	echo "SKIP: needs root and dpkg (installs the package into the system)"
	exit 0
fi
exec 9>/run/lock/sluice-test-deb.lock
flock -w 600 9
if dpkg-query -W -f='${Status}' sluice 2>/dev/null | grep -q installed || [ -e /usr/bin/sluice ]; then
	echo "SKIP: a sluice package or /usr/bin/sluice is already installed; not touching it"
	exit 0
fi
tmp=$(mktemp -d)
server=""
installed=""
cleanup() {
	[ -n "$server" ] && kill "$server" 2>/dev/null
	[ -n "$installed" ] && dpkg -r sluice >/dev/null 2>&1
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $*"; exit 1; }

out=$(make -s BUILD="$build" deb) || fail "make deb: $out"
echo "$out"
deb=$(echo "$out" | sed -n 's/^deb: \(.*\.deb\)$/\1/p')
[ -f "$deb" ] || fail "no .deb named in: $out"
echo "$out" | grep -q '^deb: lintian: 0 errors' || fail "lintian errors (or lintian missing)"
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|; /\/$/d' > "$tmp/files"

dpkg -i "$deb" >/dev/null || fail "dpkg -i"
installed=1
ver=$(/usr/bin/sluice --version) || fail "sluice --version"
echo "$ver" | grep -q "0\." || fail "version: $ver"
/usr/bin/sluice -v --check --recv 1MiB/s 2>&1 | grep -q "/usr/lib/sluice/libsluice.so" ||
	fail "the installed launcher does not use /usr/lib/sluice/libsluice.so: $(/usr/bin/sluice -v --check --recv 1MiB/s 2>&1)"
[ -f /usr/share/bash-completion/completions/sluice ] || fail "no bash completion"
bash -c '. /usr/share/bash-completion/completions/sluice && complete -p sluice' | grep -q _sluice ||
	fail "the installed completion does not register"

head -c 1048576 /dev/urandom > "$tmp/file"
python3 - "$tmp" > "$tmp/port" <<'PY' &
import functools, http.server, sys
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=sys.argv[1]))
print(srv.server_address[1], flush=True)
srv.serve_forever()
PY
server=$!
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
url="http://127.0.0.1:$(cat "$tmp/port")/file"
res=$(/usr/bin/sluice --recv 1MiB/s -- curl -s --max-time 30 -o "$tmp/got" -w '%{size_download} %{time_total}' "$url") ||
	fail "throttled curl"
cmp -s "$tmp/file" "$tmp/got" || fail "the throttled download differs from the file"
# Floor: (1 MiB - the 5 ms burst, 5243 bytes) / 1 MiB/s = 0.995 s.
echo "$res" | awk '{ exit !($1 == 1048576 && $2 >= 0.995 && $2 < 6) }' ||
	fail "throttled download: $res (want 1048576 bytes in 0.995 to 6 s)"
echo "measured: /usr/bin/sluice --recv 1MiB/s -- curl (1 MiB): $res s"

cat > "$tmp/use.c" <<'C'
#include <sluice_core.h>
#include <stdio.h>
int main(void)
{
	struct sl_limiter l;
	struct sl_params p = { .kind = SL_KIND_TOKEN, .amount = 2, .period_ns = 1000000000, .burst = 2 };
	if (sl_limiter_init(&l, &p, 1) != SL_OK)
		return 1;
	printf("%d\n", sl_limiter_acquire(&l, 3, 1, 0).verdict == SL_ADMIT);
	return 0;
}
C
cc -o "$tmp/use" "$tmp/use.c" $(pkg-config --cflags --libs sluice-core) || fail "build against the installed core"
[ "$("$tmp/use")" = 0 ] || fail "the installed core admitted 3 units from a burst of 2"

dpkg -r sluice >/dev/null || fail "dpkg -r"
installed=""
left=""
while read -r f; do
	[ -e "$f" ] || [ -L "$f" ] && left="$left $f"
done < "$tmp/files"
[ -z "$left" ] || fail "left after dpkg -r:$left"
dpkg-query -W -f='${Status}' sluice 2>/dev/null | grep -q "ok installed" && fail "dpkg still lists sluice installed"
[ -d /usr/lib/sluice ] && fail "/usr/lib/sluice left behind"
echo "deb: installed, ran, removed; $(wc -l < "$tmp/files") files gone"
