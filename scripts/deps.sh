#!/bin/sh
# SPDX-License-Identifier: MIT
# deps.sh GROUP... - make sure the Debian 12 packages a make target needs are
# installed. As root it runs apt-get itself; otherwise it prints the exact
# command to run and fails. Groups: test, demo, fuzz, bench, format.
set -eu

pkgs_for() {
	case "$1" in
	test) echo "libcmocka-dev python3 curl iperf3 pkg-config nginx-light redis-server redis-tools wrk python3-prometheus-client libhiredis-dev lintian passwd golang-go busybox-static haproxy nodejs openssh-server openssh-client libpython3.11-testsuite bind9-dnsutils wget2 memcached python3-grpcio chromium prometheus python3-yaml" ;;
	demo) echo "python3 curl" ;;
	fuzz) echo "clang libclang-rt-14-dev" ;;
	format) echo "clang-format" ;;
	bench) echo "valgrind iperf3 python3 curl trickle pv gnuplot-nox iproute2 nginx-light" ;;
	*) echo "deps.sh: unknown group '$1' (expected test, demo, fuzz, bench, format)" >&2; exit 2 ;;
	esac
}

missing=""
for group in "$@"; do
	for p in $(pkgs_for "$group"); do
		# dpkg-query prints "install ok installed" only for installed packages.
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
			case " $missing " in *" $p "*) ;; *) missing="$missing $p" ;; esac
		fi
	done
done
[ -z "$missing" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
	echo "deps.sh: missing packages:$missing (no apt-get here: install them by hand)" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "deps.sh: missing packages:$missing" >&2
	echo "deps.sh: run: sudo apt-get update && sudo apt-get install -y$missing" >&2
	exit 1
fi
echo "deps.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
