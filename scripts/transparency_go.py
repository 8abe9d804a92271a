#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""transparency_go.py BUILD [TEST-FLAG...] - a never-limiting rule must be
invisible to a supervised Go program.

Builds Go's own net tests as a static binary (CGO_ENABLED=0 go test -c in
GOROOT/src/net, into a temporary directory) and runs it with -test.short
-test.v from its package directory (it reads testdata) three times: without
sluice, and under BUILD/sluice --supervise with rules that never limit, once
for the default families (inet+inet6) and once for every family
(family=inet+inet6+unix). Each supervised run is compared with the bare one
test by test (the --- PASS/FAIL/SKIP lines, subtests too; a test that
started and never ended is "unfinished"): a test whose outcome differs is
listed with a few lines of its output under sluice. Exit 0 when every run
agrees, 1 when one differs, 77 when there is no go here. -test.short keeps
the tests on loopback (their external tests are skipped); extra arguments
go to the test binary (e.g. -test.run 'UDP|Splice').
  SL_TRANSPARENCY_TIMEOUT        seconds per run [900]
  SL_TRANSPARENCY_BUILD_TIMEOUT  seconds for go test -c [1200]
  SL_TRANSPARENCY_ADAPTIVE=1     a third set: also conns:adaptive held at
                                 100000 with rt=10s (never limits)
  GO                             the go command [go on PATH, /usr/bin/go]
Here (2 cores, Go 1.19): 389 tests, about 5 s without sluice, 11-13 s
under each set of rules; the build takes seconds with a warm Go build cache
(GOCACHE; a temporary one when that is not writable).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

NEVER = ["--send", "10GB/s", "--recv", "10GB/s", "--connect", "1000000/s",
         "--accept", "1000000/s"]
FAMILY = ",family=inet+inet6+unix"
CONFIGS = [
    ("inet", NEVER),  # the rules' default families: inet+inet6
    ("every-family", [a + FAMILY if a[0].isdigit() else a for a in NEVER]),
]
if os.environ.get("SL_TRANSPARENCY_ADAPTIVE") == "1":
    # transparency.py's: every connection's turns followed, never limited.
    CONFIGS.append(("adaptive", NEVER + ["--conns", "adaptive,min=100000,max=100000,rt=10s"]))
TEST_FLAGS = ["-test.short", "-test.v", "-test.timeout", "10m"]
RESULT = re.compile(r"^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)")
HEADER = re.compile(r"^=== (RUN|CONT|PAUSE|NAME)\s+(\S+)")


def find_go():
    for go in (os.environ.get("GO"), shutil.which("go"), "/usr/bin/go"):
        if go and os.access(go, os.X_OK):
            return go
    return None


def go_env(go, name):
    p = subprocess.run([go, "env", name], capture_output=True, text=True, timeout=60)
    return p.stdout.strip() if p.returncode == 0 else ""


def build(go, pkg, tmp):
    """net.test built static in tmp; None (and why, printed) if it fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.pop("LD_PRELOAD", None)
    env["CGO_ENABLED"] = "0"
    cache = go_env(go, "GOCACHE")
    if not cache or cache == "off" or not writable(cache):
        env["GOCACHE"] = os.path.join(tmp, "gocache")
    out = os.path.join(tmp, "net.test")
    t0 = time.monotonic()
    try:
        p = subprocess.run(["nice", "-n", "10", go, "test", "-c", "-o", out], cwd=pkg, env=env,
                           capture_output=True, text=True,
                           timeout=int(os.environ.get("SL_TRANSPARENCY_BUILD_TIMEOUT", "1200")))
    except subprocess.TimeoutExpired:
        print("transparency-go: go test -c timed out")
        return None
    if p.returncode != 0 or not os.path.exists(out):
        print("transparency-go: go test -c failed (exit %d):\n%s" % (p.returncode,
                                                                     (p.stdout + p.stderr)[-1500:]))
        return None
    print("measured: build: %s, %.0f s" % (out, time.monotonic() - t0))
    return out


def writable(d):
    while d and not os.path.exists(d):
        d = os.path.dirname(d)
    return bool(d) and os.access(d, os.W_OK)


def outcomes(log):
    """{test: outcome}, {test: its output lines} from go test -v's output."""
    res, lines, cur = {}, {}, None
    started = []
    with open(log, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = RESULT.match(line)
            if m:
                res[m.group(2)] = m.group(1).lower()
                cur = m.group(2)
                continue
            m = HEADER.match(line)
            if m:
                cur = m.group(2)
                if m.group(1) == "RUN":
                    started.append(cur)
                continue
            if cur is not None and line.startswith("    "):
                lines.setdefault(cur, []).append(line.strip())
    for t in started:
        res.setdefault(t, "unfinished")
    return res, lines


def run(cmd, pkg, env, label, tmp):
    out = os.path.join(tmp, label + ".log")
    err = os.path.join(tmp, label + ".err")
    t0 = time.monotonic()
    limit = int(os.environ.get("SL_TRANSPARENCY_TIMEOUT", "900"))
    with open(out, "w") as fo, open(err, "w") as fe:
        # Its own session: on the timeout the launcher and every supervised
        # process go, none is left holding the terminal or a port.
        p = subprocess.Popen(cmd, cwd=pkg, env=env, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timed out after %d s" % limit
    took = time.monotonic() - t0
    res, lines = outcomes(out)
    counts = {}
    for v in res.values():
        counts[v] = counts.get(v, 0) + 1
    print("measured: %s: exit %s, %d tests %s, %.1f s" % (label, rc, len(res),
                                                          dict(sorted(counts.items())), took))
    if rc != 0 and label == "without":
        with open(err, errors="replace") as f:
            print(f.read()[-1500:])
    return res, lines, took


def main():
    if len(sys.argv) < 2:
        print("usage: transparency_go.py BUILD [TEST-FLAG...]", file=sys.stderr)
        return 2
    build_dir = os.path.abspath(sys.argv[1])
    sluice = os.path.join(build_dir, "sluice")
    if not os.access(sluice, os.X_OK):
        print("transparency-go: no launcher at %s (make all)" % sluice, file=sys.stderr)
        return 2
    go = find_go()
    if go is None:
        print("skip: no go here (Debian: golang-go)")
        return 77
    pkg = os.path.join(go_env(go, "GOROOT"), "src", "net")
    if not os.path.isdir(pkg):
        print("skip: no Go sources at %s" % pkg)
        return 77
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    base.pop("LD_PRELOAD", None)
    with tempfile.TemporaryDirectory(prefix="sl-transparency-go-") as tmp:
        base["TMPDIR"] = tmp  # the tests' unix sockets and temporary files
        binary = build(go, pkg, tmp)
        if binary is None:
            return 1
        test = [binary] + TEST_FLAGS + sys.argv[2:]
        a, _, ta = run(test, pkg, base, "without", tmp)
        failed = []
        for label, rules in CONFIGS:
            b, lines, tb = run([sluice, "--supervise"] + rules + ["--"] + test, pkg, base,
                               label, tmp)
            differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            for k in differ:
                print("differs: %s: %s: %s without sluice, %s under it" % (
                    label, k, a.get(k, "absent"), b.get(k, "absent")))
                for line in lines.get(k, [])[:6]:
                    print("    " + line[:200])
            print("transparency-go: %s: %d tests, %d differ; %.1f s without, %.1f s under sluice"
                  " (%.2fx)" % (label, len(set(a) | set(b)), len(differ), ta, tb,
                                tb / ta if ta else 0))
            if differ or not b:
                failed.append(label)
    print("%d passed, %d failed" % (len(CONFIGS) - len(failed), len(failed)))
    return 0 if a and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
