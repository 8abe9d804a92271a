#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A supervised server's counters in `sluice stat`, as the preload counts
them (engine/count.h): busybox httpd (static) under `--conns 2`, five
requests, then `sluice stat --json` shows the conns rule's five calls
admitted (it showed 0). Its sends, which each request's child makes on fds
0 and 1 (it dup2()s the socket there): test_supervise_stdio.py. And
`--stats FILE` for a supervised program: a static client's 1 MiB download
under --recv 4MiB/s writes the preload's line, its recv bytes counted (it
wrote nothing)."""
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

from supervise_lib import SLUICE, TMP, Server, build_c, check, env_clean, run_main, sluice


def body():
    busybox = shutil.which("busybox")
    if busybox is None:
        print("SKIP: busybox is not installed (Debian: busybox-static, which scripts/deps.sh test "
              "installs)")
        raise SystemExit(77)
    www = os.path.join(TMP, "www")
    os.makedirs(www)
    page = b"x" * 3000
    with open(os.path.join(www, "index.html"), "wb") as f:
        f.write(page)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = subprocess.Popen([SLUICE, "--supervise", "--conns", "2", "--", busybox,
                          "httpd", "-f", "-p", "127.0.0.1:%d" % port, "-h", www],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_clean())
    try:
        got = []
        end = time.monotonic() + 10
        while len(got) < 5 and time.monotonic() < end:
            try:
                got.append(urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=5).read())
            except OSError:
                time.sleep(0.05)  # not listening yet
        check(got == [page] * 5, "5 requests to a supervised busybox httpd answered whole (%d)"
              % len(got))
        st = subprocess.run([SLUICE, "stat", "--json"], capture_output=True, text=True,
                            env=env_clean(), timeout=30)
        rules = {}
        for proc in json.loads(st.stdout or "{}").get("processes", []):
            for r in proc["rules"]:
                e = rules.setdefault(r["rule"], {"calls": 0, "admitted": 0, "bytes": 0})
                for k in e:
                    e[k] += r[k]
        conns = rules.get("conns:2", {})
        print("measured: sluice stat: conns:2 %r" % conns)
        check(conns.get("calls", 0) >= 5 and conns.get("admitted", 0) >= 5,
              "the conns rule counted the 5 accepted connections (%r)" % conns)
    finally:
        p.terminate()
        p.communicate(timeout=10)

    # --stats: the line a preloaded process writes, for the supervised one.
    prog = build_c()
    data = os.urandom(1 << 20)
    src = Server("source", data)
    stats = os.path.join(TMP, "stats-%p.json")
    out = os.path.join(TMP, "download")
    rc, _, err = sluice(["--supervise", "--recv", "4MiB/s", "--stats", stats, "--", prog,
                         "download", str(src.port), out])
    src.close()
    check(rc == 0, "--stats: the supervised download exits 0 (rc=%d, %r)" % (rc, err[-300:]))
    files = [f for f in os.listdir(TMP) if f.startswith("stats-")]
    lines = []
    for f in files:
        path = os.path.join(TMP, f)
        check(os.stat(path).st_mode & 0o777 == 0o600, "--stats: %s is private (0600)" % f)
        with open(path) as fh:
            lines += [json.loads(ln) for ln in fh if ln.strip()]
    mine = [ln for ln in lines if ln.get("program") == "netprog"]
    print("measured: --stats lines: %r" % mine)
    check(len(mine) == 1 and files == ["stats-%d.json" % mine[0]["pid"]],
          "--stats: one line, in the file named by the client's pid (%r)" % files)
    rule = mine[0]["rules"][0] if mine and mine[0].get("rules") else {}
    check(rule.get("rule") == "recv:4MiB/s" and rule.get("op") == "recv"
          and rule.get("bytes", 0) >= len(data) and rule.get("calls", 0) >= 1
          and rule.get("admitted") == rule.get("calls"),
          "--stats: the recv rule counted the 1 MiB download (%r)" % rule)
    with open(out, "rb") as fh:
        check(fh.read() == data, "--stats: the download is intact")


if __name__ == "__main__":
    run_main(body)
