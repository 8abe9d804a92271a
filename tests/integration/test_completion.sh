#!/bin/sh
# SPDX-License-Identifier: MIT
# test_completion.sh - the bash completion (cli/sluice.bash-completion), as
# bash runs it on <TAB>: the function `complete -p sluice` registers is
# called with COMP_LINE, COMP_POINT, COMP_WORDS and COMP_CWORD set as bash
# sets them, and COMPREPLY is compared with what must be offered: flags
# (sluice --se<TAB> -> --send), rule options after --send SPEC, option
# values, OP: in --rules, subcommands, and for stat and set the pid of a
# live preloaded process and its shared:NAME limiter.
set -eu
build=${SL_BUILD:-build}
command -v bash >/dev/null || { echo "FAIL: no bash"; exit 1; }
case $build in /*) lib=$build/libsluice.so ;; *) lib=$(pwd)/$build/libsluice.so ;; esac
name="compl$$"
fifo=$(mktemp -u /tmp/sluice-compl-XXXXXX)
mkfifo "$fifo"
env LD_PRELOAD="$lib" SLUICE_SEND="1MiB/s,shared=$name" python3 -c '
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
c = socket.create_connection(s.getsockname()); c.send(b"x")
print("ready", flush=True); sys.stdin.read()' < "$fifo" > "/tmp/sluice-compl-$$.out" &
child=$!
exec 8>"$fifo"
trap 'exec 8>&-; wait $child 2>/dev/null; rm -f "$fifo" "/tmp/sluice-compl-$$.out"; "$build/sluice" rm --force "shared:$name" >/dev/null 2>&1' EXIT
for _ in $(seq 50); do grep -q ready "/tmp/sluice-compl-$$.out" 2>/dev/null && break; sleep 0.1; done

bash -s "$child" "$name" <<'BASH'
set -u
child=$1 name=$2
. cli/sluice.bash-completion
fn=$(complete -p sluice | sed -n 's/.*-F \([^ ]*\) sluice$/\1/p')
[ -n "$fn" ] || { echo "FAIL: complete -p sluice registers no function"; exit 1; }
fails=0
# tab LINE EXPECTED: complete at the end of LINE; EXPECTED is COMPREPLY
# joined with '|' (bash's own word split of LINE gives COMP_WORDS).
tab() {
	local line=$1 want=$2 got
	COMP_LINE=$line COMP_POINT=${#line}
	local IFS=$' \t\n'
	read -r -a COMP_WORDS <<<"$line"
	[[ $line == *' ' ]] && COMP_WORDS+=("")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	"$fn" sluice "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
	got=$(IFS='|'; echo "${COMPREPLY[*]}")
	if [[ $got == $want ]]; then
		echo "ok   '$line<TAB>' -> $got"
	else
		echo "FAIL '$line<TAB>' -> '$got', want '$want'"
		fails=$((fails + 1))
	fi
}
tab "sluice --se" "--send"
tab "sluice --ch" "--check"
tab "sluice --co" "--connect|--conns"
tab "sluice --send 1MiB/s" "1MiB/s,burst=|1MiB/s,algo=|1MiB/s,action=|1MiB/s,max-delay=|1MiB/s,errno=|1MiB/s,per=|1MiB/s,to=|1MiB/s,port=|1MiB/s,family=|1MiB/s,type=|1MiB/s,nonblock=|1MiB/s,shared=|1MiB/s,redis=|1MiB/s,on-error=|1MiB/s,lease=|1MiB/s,warmup=|1MiB/s,cold="
tab "sluice --send 1MiB/s,bu" "1MiB/s,burst="
tab "sluice --recv 1MiB/s,burst=64KiB,pe" "64KiB,per="
# After '=' bash replaces only what follows it (COMP_WORDBREAKS).
tab "sluice --send 1MiB/s,per=" "process|thread|fd|peer"
tab "sluice --connect 10/s,action=re" "reject"
tab "sluice --connect 10/s,errno=ETIME" "ETIMEDOUT"
tab "sluice --conns " "4|16|adaptive"
tab "sluice --conns adaptive,m" "adaptive,max-delay=|adaptive,min=|adaptive,max="
tab "sluice --rules co" "connect:|conns:"
tab "sluice --rules 'send:1MiB/s,sh" "send:1MiB/s,shared="
tab "sluice st" "stat*"
tab "sluice stat --l" "--listen|--listen-any"
tab "sluice stat " "*$child*"
tab "sluice set " "*$child*"
tab "sluice set " "*shared:$name*"
tab "sluice set $child se" "send:"
tab "sluice --send 1MiB/s -- pytho" "*python3*"
[ "$fails" -eq 0 ] || { echo "$fails completion(s) wrong"; exit 1; }
echo "completion: ok"
BASH
