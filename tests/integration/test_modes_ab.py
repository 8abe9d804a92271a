#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An A/B test of the two modes: one program, modes/abprog.c, built dynamic
(`gcc -O2`: sluice runs it in preload mode, through libsluice.so) and static
(`gcc -static -O2`: supervised mode, through the seccomp supervisor), run
under the same rule in both; each case checks both modes against bounds
from the rate math, the modes against each other, and the bytes the
loopback server received (sha256).

Each run is `$SL_BUILD/sluice -v RULE -- abprog ...`: -v must name the mode
the launcher chose (preload for the dynamic build, supervised for the static
one). The elapsed time is the program's own (CLOCK_MONOTONIC, from before its
first socket to after its last close, in its JSON line). Lower bounds are
strict (what a limiter admitted can never exceed what the rule allows; 1 ms
for the clock reads), upper bounds generous (5 % for byte rates, more for
call rates); the modes must agree within 3 % for byte and message rates and
within 10 % or 0.1 s for connect rates. A case whose only misses are
marginal misses of upper bounds or of the agreement (within 10 % of the
bound) runs once more and is judged by its second run (run-tests.sh runs
other tests beside this one); both runs' figures are printed. A lower
bound, the data or a gross miss gets no second chance.

Rule facts the bounds use (README "Rules"): the default burst is
max(1, ceil(5 ms of the rate)): 5243 B at 1 MiB/s, 1 call at 5/s and 50/s.
family= is the socket's family (AF_INET / AF_INET6), while an IPv4-mapped
IPv6 address ([::ffff:127.0.0.1]) counts as IPv4 for to= (engine/addr.c).

A table of the figures (case, preload s, supervised s, ratio) is printed at
the end for the reviewer. Ports are chosen by the kernel; loopback only;
every run is bounded (the program's alarm at 60 s, a 30 s timeout here).
Exit 0 pass, 1 fail, 77 skipped (no gcc, or `gcc -static` cannot link).
"""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

from supervise_lib import SLUICE, TMP, check, cleanup, drain_sha256, env_clean, finish, run_main
from shim_lib import failures

MiB = 1 << 20
RATE = MiB                              # 1 MiB/s, the byte rate of most cases
BURST_1MIB = 5243                       # its default burst: ceil(0.005 * 1048576)
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "modes", "abprog.c")
MODES = ("preload", "supervised")
EPS = 0.001                             # two clock reads

rows = []     # the table: (case, rule, preload s, supervised s, bounds)
notes = []    # the cases where the modes disagree
retried = []  # the cases run twice, with both runs' figures


def pattern(n):
    """abprog's stream bytes: the 8-byte little-endian word at offset 8k is
    (k + 1) * 0x9E3779B97F4A7C15 mod 2^64. A prefix of a longer pattern is
    the shorter one."""
    m, mask = 0x9E3779B97F4A7C15, (1 << 64) - 1
    return b"".join((((k + 1) * m) & mask).to_bytes(8, "little")
                    for k in range((n + 7) // 8))[:n]


PAT = pattern(4 * MiB)  # every size used is at most 4 MiB


def sha(n):
    return hashlib.sha256(PAT[:n]).hexdigest()


def skip(why):
    print("SKIP: " + why)
    cleanup()
    sys.exit(77)


def build():
    """The two binaries in TMP: {mode: path}. Skips (77) without gcc or
    when `gcc -static` cannot link (no libc.a: Debian's libc6-dev)."""
    if shutil.which("gcc") is None:
        skip("gcc is not installed (Debian: gcc)")
    dyn, static = os.path.join(TMP, "abprog-dyn"), os.path.join(TMP, "abprog-static")
    p = subprocess.run(["gcc", "-O2", "-o", dyn, SRC], capture_output=True, text=True)
    check(p.returncode == 0, "gcc -O2 builds abprog-dyn%s" % (p.returncode and " (%s)"
                                                               % p.stderr[-500:] or ""))
    if p.returncode != 0:
        cleanup()
        finish()
    p = subprocess.run(["gcc", "-static", "-O2", "-o", static, SRC], capture_output=True,
                       text=True)
    if p.returncode != 0:
        skip("gcc -static cannot link abprog.c (a static libc, libc.a, is needed: Debian's "
             "libc6-dev): %s" % p.stderr.strip()[-300:])
    return {"preload": dyn, "supervised": static}


class Listener:
    """TCP on 127.0.0.1 (and on the same port of each address in `also`),
    kernel-chosen port. mode "count" accepts and closes; "sink" reads each
    connection to EOF and keeps (bytes, sha256); "source" sends PAT[:size]
    and closes."""

    def __init__(self, mode, size=0, also=()):
        self.mode, self.size = mode, size
        self.lock = threading.Lock()
        self.accepted, self.results, self.busy = 0, [], 0
        self.stopping = False
        self.socks = [self._listen("127.0.0.1", 0)]
        self.port = self.socks[0].getsockname()[1]
        for host in also:
            self.socks.append(self._listen(host, self.port))
        for s in self.socks:
            threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    @staticmethod
    def _listen(host, port):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(256)
        s.settimeout(0.2)
        return s

    def _accept(self, s):
        while not self.stopping:
            try:
                c, _ = s.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(30)
            with self.lock:
                self.accepted += 1
                self.busy += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        try:
            if self.mode == "source":
                c.sendall(PAT[:self.size])
            elif self.mode == "sink":
                result = drain_sha256(c)
                with self.lock:
                    self.results.append(result)
        except OSError:
            pass
        finally:
            c.close()
            with self.lock:
                self.busy -= 1

    def take(self, count, timeout=10):
        """Wait (bounded) until `count` connections were accepted and every
        one is served; return (accepted, results) since the last take."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if self.accepted >= count and self.busy == 0:
                    break
            time.sleep(0.01)
        with self.lock:
            out = (self.accepted, list(self.results))
            self.accepted, self.results = 0, []
        return out

    def stop(self):
        self.stopping = True
        for s in self.socks:
            s.close()


class UdpSink:
    """UDP on 127.0.0.1, kernel-chosen port: keeps the datagrams in order."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.got, self.stopping = [], False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self.stopping:
            try:
                d = self.sock.recv(70000)
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                self.got.append(d)

    def take(self, count, timeout=5):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if len(self.got) >= count:
                    break
            time.sleep(0.01)
        time.sleep(0.05)  # a datagram too many would show
        with self.lock:
            out, self.got = self.got, []
        return out

    def stop(self):
        self.stopping = True
        self.sock.close()


def run(exe, mode, rule, args):
    """sluice -v RULE -- exe ARGS: the program's JSON (None on failure)."""
    cmd = [SLUICE, "-v"] + rule + ["--", exe] + [str(a) for a in args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=env_clean())
    except subprocess.TimeoutExpired:
        check(False, "%s: %s finished within 30 s" % (mode, " ".join(cmd[1:])))
        return None
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    res = json.loads(lines[-1]) if lines else None
    want = "supervised mode" if mode == "supervised" else "preload mode"
    chosen = want in p.stderr and (mode == "supervised" or "supervised mode" not in p.stderr)
    check(p.returncode == 0 and res is not None and chosen,
          "%s: ran in %s (rc=%d%s)" % (mode, want, p.returncode,
                                       "" if res is not None and chosen
                                       else ", stderr=%r" % p.stderr[-400:]))
    return res


# A busy machine's stall: a miss by less than this (beyond 10 %) is still
# marginal. Seen in CI (system calls at about 1 us that day, make test's
# other tests beside): a supervised 1 MiB upload at 1 MiB/s in 1.0993 s
# against 0.9981 s preloaded (x1.1015: not marginal at 10 % alone, so no
# second run); 0.9974 s alone.
STALL_S = 0.15


def attempt(name, rule, args, server, expect, verify, tol):
    """One run of a case in each mode. Checks of what ran (exit, mode, data,
    lower bounds) are made at once; the upper bounds and the agreement are
    returned as (ok, text, marginal) for case() to judge: marginal, a miss
    within 10 % of the bound (twice the tolerance for connect rates), plus
    STALL_S.
    Returns (elapsed by mode, timing checks, whether an immediate check
    failed)."""
    el, timing, before = {}, [], len(failures)
    for mode in MODES:
        res = run(EXES[mode], mode, rule, args)
        if res is None:
            el[mode] = None
            server.take(0, timeout=1)
            continue
        el[mode] = res["elapsed"]
        check(res.get("errors") == 0, "%s %s: no failed call (%s)" % (name, mode, res))
        verify(mode, res, server)
        what = "%s %s [%s]: %.4f s" % (name, mode, " ".join(rule), res["elapsed"])
        if expect[0] == "rate":
            check(res["elapsed"] >= expect[1] - EPS, "%s >= floor %.4f s" % (what, expect[1]))
            timing.append((res["elapsed"] <= expect[2], "%s <= %.3f s" % (what, expect[2]),
                           res["elapsed"] <= expect[2] * 1.1 + STALL_S))
        elif expect[0] == "free":
            timing.append((res["elapsed"] <= expect[1],
                           "%s <= %.2f s (the rule must not throttle it)" % (what, expect[1]),
                           False))
    a, b = el["preload"], el["supervised"]
    # For "free" cases both under the ceiling is the agreement: a ratio of
    # two calls that never waited means nothing.
    if a is not None and b is not None and expect[0] != "free":
        if tol == "bytes":
            timing.append((b <= a * 1.03 and a <= b * 1.03,
                           "%s: modes agree within 3 %%: preload %.4f s, supervised %.4f s (x%.4f)"
                           % (name, a, b, b / a if a else float("inf")),
                           b <= a * 1.1 + STALL_S and a <= b * 1.1 + STALL_S))
        else:
            lim = max(0.1, 0.1 * max(a, b))
            timing.append((abs(a - b) <= lim,
                           "%s: modes agree within 10 %% or 0.1 s: preload %.4f s, supervised "
                           "%.4f s (differ by %.4f s)" % (name, a, b, abs(a - b)),
                           abs(a - b) <= 2 * lim + STALL_S))
    return el, timing, len(failures) > before


def case(name, rule, args, server, expect, verify, tol="bytes", bounds=None):
    """Run one case in both modes. expect: ("rate", floor, upper) or
    ("free", ceiling) (a rule that must not throttle) or ("agree",);
    verify(mode, res, server) checks the data. tol: "bytes" (3 %),
    "calls" (10 % or 0.1 s). A case whose only misses are marginal misses
    of upper bounds or of the agreement (what a busy machine, e.g. the
    other tests of run-tests.sh, can cause) runs once more and is judged by
    that second run; a lower bound, the data, a rule that throttled what it
    must not, or a gross miss gets no second chance."""
    el, timing, hard = attempt(name, rule, args, server, expect, verify, tol)
    if not hard and not all(ok for ok, _, _ in timing) and \
            all(ok or marginal for ok, _, marginal in timing):
        first = (el["preload"], el["supervised"])
        print("retry %s (first run: %s)" % (name, "; ".join(t for ok, t, _ in timing if not ok)),
              flush=True)
        el, timing, hard = attempt(name, rule, args, server, expect, verify, tol)
        retried.append("%s: first run preload %s s, supervised %s s; second %s s, %s s"
                       % (name, fmt(first[0]), fmt(first[1]), fmt(el["preload"]),
                          fmt(el["supervised"])))
    for ok, text, _ in timing:
        check(ok, text)
    a, b = el["preload"], el["supervised"]
    if expect[0] == "rate":
        btxt = bounds or "%.3f..%.3f" % (expect[1], expect[2])
    elif expect[0] == "free":
        btxt = bounds or "unthrottled, <= %.2f" % expect[1]
    else:
        btxt = bounds or "modes agree"
    rows.append((name, " ".join(rule), a, b, btxt))
    agree = [ok for ok, text, _ in timing if "modes agree" in text]
    if expect[0] == "free" and a is not None and b is not None:
        agree = [(a <= expect[1]) == (b <= expect[1])]
    if a is None or b is None or (agree and not agree[0]):
        notes.append("%s [%s]: preload %s s, supervised %s s" % (name, " ".join(rule), fmt(a),
                                                                  fmt(b)))


def fmt(x):
    return "%.4f" % x if x is not None else "-"


def connects(n):
    """verify(): n connects made and n accepted."""
    def v(mode, res, srv):
        acc, _ = srv.take(n, timeout=5)
        check(res.get("calls") == n and acc == n,
              "%s: %d connects made, %d accepted (want %d)" % (mode, res.get("calls", -1), acc, n))
    return v


def uploads(sizes):
    """verify(): connections carrying exactly these sizes of the pattern."""
    want = sorted((s, sha(s)) for s in sizes)

    def v(mode, res, srv):
        _, got = srv.take(len(sizes))
        check(res.get("bytes") == sum(sizes) and sorted(got) == want,
              "%s: the server got exactly %s bytes of the pattern (sha256) on %d connection(s) "
              "(program wrote %s; got %s)" % (mode, "+".join(str(s) for s in sizes), len(sizes),
                                              res.get("bytes"), [g[0] for g in got]))
    return v


def body():
    global EXES
    t_start = time.monotonic()
    EXES = build()
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other_port = other.getsockname()[1]  # a port nothing listens on, for port= filters
    other.close()

    # Connect rates. 5/s: burst 1, so N blocking connects take at least
    # (N - 1) / 5 s; the filter cases at 10/s, (N - 1) / 10 s. connect6 connects an AF_INET6 socket to
    # [::ffff:127.0.0.1], which to=127.0.0.0/8 must match (mapped counts as
    # IPv4).
    srv = Listener("count")
    case("connect6 10, mapped address", ["--connect", "5/s,to=127.0.0.0/8"],
         ["connect6", srv.port, 10], srv, ("rate", 9 / 5, 4.0), connects(10), tol="calls")
    case("connect4 6, to= (control)", ["--connect", "10/s,to=127.0.0.0/8"],
         ["connect4", srv.port, 6], srv, ("rate", 5 / 10, 2.0), connects(6), tol="calls")
    # family= is the socket's: inet6 takes connect6 (even to a mapped
    # address), not connect4; inet the other way round.
    case("family=inet6, connect4", ["--connect", "10/s,family=inet6"],
         ["connect4", srv.port, 6], srv, ("free", 0.5), connects(6), tol="calls")
    case("family=inet6, connect6", ["--connect", "10/s,family=inet6"],
         ["connect6", srv.port, 6], srv, ("rate", 5 / 10, 2.0), connects(6), tol="calls")
    case("family=inet, connect4", ["--connect", "10/s,family=inet"],
         ["connect4", srv.port, 6], srv, ("rate", 5 / 10, 2.0), connects(6), tol="calls")
    case("family=inet, connect6", ["--connect", "10/s,family=inet"],
         ["connect6", srv.port, 6], srv, ("free", 0.5), connects(6), tol="calls")
    case("port=PORT, connect4", ["--connect", "10/s,port=%d" % srv.port],
         ["connect4", srv.port, 6], srv, ("rate", 5 / 10, 2.0), connects(6), tol="calls")
    case("port=OTHER, connect4", ["--connect", "10/s,port=%d" % other_port],
         ["connect4", srv.port, 6], srv, ("free", 0.5), connects(6), tol="calls")
    # A rule written with a mapped address is the IPv4 one (README, to=):
    # it fits connect6 to [::ffff:127.0.0.1] and connect4 to 127.0.0.1.
    case("to=::ffff:127.0.0.1, connect6", ["--connect", "10/s,to=::ffff:127.0.0.1"],
         ["connect6", srv.port, 6], srv, ("rate", 5 / 10, 2.0), connects(6), tol="calls")
    case("to=::ffff:127.0.0.1, connect4", ["--connect", "10/s,to=::ffff:127.0.0.1"],
         ["connect4", srv.port, 6], srv, ("rate", 5 / 10, 2.0), connects(6), tol="calls")
    # An IPv4 to= with family=inet6: the mapped peers of AF_INET6 sockets.
    case("family=inet6,to=127/8, connect6", ["--connect", "10/s,family=inet6,to=127.0.0.0/8"],
         ["connect6", srv.port, 6], srv, ("rate", 5 / 10, 2.0), connects(6), tol="calls")
    srv.stop()

    # Byte rates: 1 MiB/s, 1 MiB write()s unless said.
    sink = Listener("sink", also=("127.0.0.2",))
    # sliding: the weighted two-window estimate admits c_k <= N -
    # c_(k-1) * (1 - e) in window k at position e, so 4 N are through only
    # at the end of the 4th window (e = 1 with c0..c3 = N each): 4 W from
    # the limiter's start, which is before the first write by at most the
    # program's start (< 50 ms). Upper 4.2 s: pieces of 10 ms of the rate
    # keep the steady rate within 1 %.
    case("sliding 4 MiB", ["--send", "1MiB/s,algo=sliding"],
         ["upload", sink.port, 4 * MiB, MiB], sink, ("rate", 4.0 - 0.05, 4.2),
         uploads([4 * MiB]))
    # leaky: a request leaves at once on a drained bucket and the next waits
    # for its cost: the last piece (at most 10 ms of the rate, 10486 B)
    # leaves after (SIZE - piece) / rate.
    case("leaky 4 MiB", ["--send", "1MiB/s,algo=leaky"],
         ["upload", sink.port, 4 * MiB, MiB], sink, ("rate", (4 * MiB - 10486) / RATE, 4.2),
         uploads([4 * MiB]))
    # token: the burst (5243 B) at once, the rest at the rate.
    floor = (MiB - BURST_1MIB) / RATE
    case("token 1 MiB", ["--send", "1MiB/s"], ["upload", sink.port, MiB, 256 * 1024], sink,
         ("rate", floor, floor * 1.05), uploads([MiB]))
    # fixed: at most N per aligned window from the limiter's start: 2 N
    # need the 2nd window, 1 W after it (less the program's start, < 50 ms).
    case("fixed 2 MiB", ["--send", "1MiB/s,algo=fixed"], ["upload", sink.port, 2 * MiB, MiB],
         sink, ("rate", 1.0 - 0.05, 1.1), uploads([2 * MiB]))
    # Scopes, 64 KiB writes. per=process: two threads share one limiter.
    # The threaded cases move 2 s worth: supervised mode spends 10-20 ms
    # more on two threads (the held calls' wake-ups), 0.5-1 % of 2 s.
    floor2 = (2 * MiB - BURST_1MIB) / RATE
    case("2 threads, per=process", ["--send", "1MiB/s"], ["threads", sink.port, 2 * MiB, 2],
         sink, ("rate", floor2, floor2 * 1.05), uploads([MiB, MiB]))
    # per=thread: 2 MiB each at 1 MiB/s each (3.995 s if shared).
    case("2 threads, per=thread", ["--send", "1MiB/s,per=thread"],
         ["threads", sink.port, 4 * MiB, 2], sink, ("rate", floor2, floor2 * 1.05),
         uploads([2 * MiB, 2 * MiB]))
    # per=fd, one thread writing to two sockets in turn: with burst=64KiB
    # each socket's bucket refills while the other's write goes, so each
    # fd's 1 MiB takes (1 MiB - 64 KiB) / rate = 0.9375 s (1.9375 s if shared).
    f = (MiB - 64 * 1024) / RATE
    case("2 fds in 1 thread, per=fd", ["--send", "1MiB/s,burst=64KiB,per=fd"],
         ["fds", sink.port, 2 * MiB, 2], sink, ("rate", f, f * 1.05), uploads([MiB, MiB]))
    # per=peer: threads to 127.0.0.1 and 127.0.0.2 (2 MiB each) have a
    # limiter each; to one address (the port left out) they share it.
    case("2 peers, per=peer", ["--send", "1MiB/s,per=peer"],
         ["threads", sink.port, 4 * MiB, 2, 2], sink, ("rate", floor2, floor2 * 1.05),
         uploads([2 * MiB, 2 * MiB]))
    case("1 peer 2 threads, per=peer", ["--send", "1MiB/s,per=peer"],
         ["threads", sink.port, 2 * MiB, 2, 1], sink, ("rate", floor2, floor2 * 1.05),
         uploads([MiB, MiB]))
    # port= on another port: 256 KiB at 64 KiB/s would take 4 s.
    case("send port=OTHER", ["--send", "64KiB/s,port=%d" % other_port],
         ["upload", sink.port, 256 * 1024, 64 * 1024], sink, ("free", 0.5),
         uploads([256 * 1024]))
    # to= on a send over an AF_INET6 socket to the mapped address: its peer
    # counts as 127.0.0.1.
    f = (MiB - BURST_1MIB) / RATE
    case("upload6 1 MiB, mapped peer", ["--send", "1MiB/s,to=127.0.0.0/8"],
         ["upload6", sink.port, MiB, 64 * 1024], sink, ("rate", f, f * 1.05), uploads([MiB]))
    sink.stop()

    # --recv on a download: the program compares every byte with the pattern.
    src = Listener("source", size=MiB)

    def downloaded(mode, res, s):
        acc, _ = s.take(1)
        check(res.get("bytes") == MiB and res.get("bad") == 0 and acc == 1,
              "%s: the program read exactly the 1 MiB sent (%s bytes, %s differing)"
              % (mode, res.get("bytes"), res.get("bad")))
    case("recv 1 MiB download", ["--recv", "1MiB/s"], ["download", src.port, MiB], src,
         ("rate", floor, floor * 1.05), downloaded)
    src.stop()

    # A message rate: 100/s counts datagrams (burst 1): 100 take 99 / 100 s.
    udp = UdpSink()

    def datagrams(mode, res, u):
        got = u.take(100)
        check(res.get("calls") == 100 and len(got) == 100 and all(len(d) == 100 for d in got)
              and hashlib.sha256(b"".join(got)).hexdigest() == sha(100 * 100),
              "%s: the server got the 100 datagrams of 100 B in order (sha256; %d got)"
              % (mode, len(got)))
    case("udp 100 x 100 B", ["--send", "100/s"], ["udp", udp.port, 100, 100], udp,
         ("rate", 99 / 100, 99 / 100 * 1.05), datagrams)
    udp.stop()

    print()
    wn = max(len(r[0]) for r in rows)
    wr = max(len(r[1]) for r in rows)
    line = "%%-%ds  %%-%ds  %%10s  %%12s  %%8s  %%s" % (wn, wr)
    print(line % ("case", "rule", "preload s", "supervised s", "sup/pre", "bounds (s)"))
    for name, rule, a, b, btxt in rows:
        # A ratio of two runs that never waited (unthrottled) means nothing.
        ratio = "%.4f" % (b / a) if a and b is not None and "unthrottled" not in btxt else "-"
        print(line % (name, rule, fmt(a), fmt(b), ratio, btxt))
    if notes:
        print("\nthe modes disagree:")
        for n in notes:
            print("  " + n)
    if retried:
        print("\nrun twice (a timing miss in the first run):")
        for n in retried:
            print("  " + n)
    print("\nwall time %.1f s" % (time.monotonic() - t_start))


EXES = {}


if __name__ == "__main__":
    run_main(body)
