#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""sluice stat --listen: the live page at / and its data at /api/stat.

A python program runs under `sluice --send 200KiB/s`, sending to a loopback
sink for 30 s. Against the server (127.0.0.1, a port the kernel chooses):
  - GET / is 200 text/html with a Content-Security-Policy that lets the
    script talk to this server only; the page names no http(s) address of
    another host and loads nothing from elsewhere; without a script its
    table already has the program's pid, its rule and counters.
  - GET /api/stat is JSON: the program's record, its rule "send:200KiB/s",
    counters that add up (the wait bands sum to delayed), the server's time.
  - A request whose Host names another site (a DNS-rebinding page) gets
    403; HEAD / the headers only.
  - Headless chromium (--dump-dom, 5 s of virtual time), twice 2 s apart:
    each page shows the pid, the rule, charts (<svg class="chart"> with
    drawn lines), a rate and the time of its last reading; the two
    differ. Skipped (77) if chromium is
    not installed, after the other checks.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import SLUICE, Server, check, failures, finish  # noqa: E402
RULE = "send:200KiB/s"

SENDER = r'''
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("up", flush=True)
end = time.monotonic() + 30
while time.monotonic() < end:
    s.sendall(b"x" * 1000)
'''


def http(port, path, method="GET", host=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    if host is not None:
        req.add_header("Host", host)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def proc_section(dom, pid):
    """The page's section of process pid (every process of the user has
    one: beside the parallel suite, others' throttled programs too)."""
    m = re.search(r'<section class="proc" data-pid="%d">(.*?)</section>' % pid, dom, re.S)
    return m.group(1) if m else ""


def loopback_host(h):
    h = h.split("@")[-1]
    name = h[1:h.index("]")] if h.startswith("[") else h.split(":")[0]
    return name == "localhost" or name == "::1" or re.fullmatch(r"127(\.\d+){3}", name)


def chromium_dom(exe, url, profile):
    argv = [exe, "--headless", "--disable-gpu", "--no-first-run", "--user-data-dir=" + profile,
            "--virtual-time-budget=5000", "--dump-dom", url]
    if os.geteuid() == 0:
        argv.insert(1, "--no-sandbox")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("SLUICE_")}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=90, env=env)
    return r.returncode, r.stdout


def main():
    sink = Server("sink")
    prog = subprocess.Popen([SLUICE, "--send", "200KiB/s", "--", sys.executable, "-c", SENDER,
                             str(sink.port)], stdout=subprocess.PIPE, text=True)
    check(prog.stdout.readline().strip() == "up", "the throttled program is sending")
    srv = subprocess.Popen([SLUICE, "stat", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    m = re.fullmatch(r"sluice stat: serving http://127\.0\.0\.1:(\d+)/metrics",
                     srv.stdout.readline().strip())
    page_line = srv.stdout.readline().strip()
    port = int(m.group(1)) if m else 0
    check(m is not None and page_line == "sluice stat: the live page: http://127.0.0.1:%d/" % port,
          "the server says where the page is: %r" % page_line)
    pid = None
    chrome = None
    try:
        # The program's record is there once it has waited once.
        deadline = time.monotonic() + 10
        doc = None
        while time.monotonic() < deadline:
            st, hd, body = http(port, "/api/stat")
            doc = json.loads(body) if st == 200 else None
            procs = [p for p in (doc or {}).get("processes", [])
                     if any(r["rule"] == RULE for r in p["rules"])]
            if procs and procs[0]["rules"][0]["delayed"] > 0:
                pid = procs[0]["pid"]
                break
            time.sleep(0.2)
        check(pid is not None and hd.get("Content-Type") == "application/json",
              "GET /api/stat: JSON with the program's record (pid %s)" % pid)
        if pid is None:
            return
        r = [p for p in doc["processes"] if p["pid"] == pid][0]["rules"][0]
        check(sum(r["waits_by_ms"].values()) == r["delayed"] and r["admitted"] <= r["calls"]
              and r["bytes"] == 1000 * r["admitted"] and r["op"] == "send",
              "its counters add up: %d delayed in the wait bands %s, %d bytes"
              % (r["delayed"], r["waits_by_ms"], r["bytes"]))
        check(abs(doc["time_ms"] / 1000 - time.time()) < 5 and isinstance(doc["shared"], list),
              "the document has the server's time and the shared limiters")

        st, hd, body = http(port, "/")
        check(st == 200 and hd.get("Content-Type") == "text/html; charset=utf-8",
              "GET /: 200 text/html (%s %s)" % (st, hd.get("Content-Type")))
        csp = hd.get("Content-Security-Policy", "")
        check("default-src 'none'" in csp and "connect-src 'self'" in csp
              and "frame-ancestors 'none'" in csp, "a policy keeps the page to this server")
        hosts = re.findall(r"https?://([^/\s\"'<>]+)", body)
        check(all(loopback_host(h) for h in hosts),
              "the page names no address of another host: %r" % hosts)
        check(not re.search(r"""(src|href|action)\s*=\s*["']?(//|https?:)""", body)
              and "@import" not in body and "url(" not in body,
              "the page loads nothing from elsewhere (no src, href, @import or url())")
        check(("pid %d " % pid) in body and RULE in body and "<table>" in body,
              "without a script the page already shows pid %d, its rule and a table" % pid)

        st, hd, body = http(port, "/", method="HEAD")
        check(st == 200 and body == "" and int(hd.get("Content-Length", "0")) > 1000,
              "HEAD /: the headers only (%s, %s bytes announced)" % (st, hd.get("Content-Length")))
        for path in ("/", "/api/stat", "/metrics"):
            st, _, _ = http(port, path, host="evil.example:%d" % port)
            check(st == 403, "GET %s with Host: evil.example (DNS rebinding): 403, got %s"
                  % (path, st))
        st, _, _ = http(port, "/api/stat", host="localhost:%d" % port)
        check(st == 200, "GET /api/stat with Host: localhost: 200")

        chrome = shutil.which("chromium") or shutil.which("chromium-browser")
        if chrome is None:
            print("skip: chromium is not installed (scripts/deps.sh test installs it)")
            return
        with tempfile.TemporaryDirectory() as profile:
            url = "http://127.0.0.1:%d/" % port
            rc1, dom1 = chromium_dom(chrome, url, profile)
            time.sleep(2)
            rc2, dom2 = chromium_dom(chrome, url, profile)
        for n, (rc, dom) in enumerate(((rc1, dom1), (rc2, dom2)), 1):
            # Its own section: the first rate of the page was once another
            # test's program's (CI: 1013 KiB/s, a 1MiB/s rule beside it).
            mine = proc_section(dom, pid)
            lines = re.findall(r'<polyline points="([^"]+)"', mine)
            drawn = [l for l in lines if len(l.split()) >= 2]
            rate = re.search(r'class="byt"><b>([\d.]+) (B|KiB)/s</b>', mine)
            kib = float(rate.group(1)) / (1024 if rate.group(2) == "B" else 1) if rate else None
            check(rc == 0 and ("pid %d " % pid) in mine and RULE in mine,
                  "chromium dump %d: the page shows pid %d and %s" % (n, pid, RULE))
            check('<svg class="chart"' in dom and drawn,
                  "chromium dump %d: charts with drawn lines (%d of %d lines)"
                  % (n, len(drawn), len(lines)))
            # Over a window of 1 s or more (the page divides by 1 s at
            # least: in virtual time its samples may be ms apart), at most
            # a burst plus a second's rate, so under twice the rate; 1000
            # bytes a call, so more than 0 in any window of 5 ms or more.
            check(kib is not None and 0 < kib < 2 * 200,
                  "chromium dump %d: a bytes rate, under burst + 1 s of the rate: %s KiB/s"
                  % (n, "%.2f" % kib if rate else None))
            status = re.search(r'<span id="status"[^>]*>([^<]*)</span>', dom)
            check(status is not None and re.search(r"\d+ process", status.group(1))
                  and "updated" in status.group(1),
                  "chromium dump %d: the script read api/stat: %r"
                  % (n, status.group(1) if status else None))
        check(dom1 != dom2, "two dumps 2 s apart differ")
    finally:
        srv.terminate()
        prog.terminate()
        srv.wait(timeout=10)
        prog.wait(timeout=10)
        sink.stop()
    if chrome is None and not failures:
        sys.exit(77)


if __name__ == "__main__":
    main()
    finish()
