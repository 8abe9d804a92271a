#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""clone() children under the preload (shim/vfork.c), as Chromium's sandbox
makes them.

  - progs/cloneprog.c under SLUICE_SEND=128KiB/s,burst=32KiB: a CLONE_VM |
    CLONE_VFORK | CLONE_SETTLS child on a zeroed TLS (Chromium's chroot
    helper) that calls syscall() and _exit exits 0; before, the shim's
    syscall() read errno there and it died of SIGSEGV (status 11), and
    Chromium's sandboxed zygote with it. A fork-like clone child's 256 KiB
    upload is throttled (>= (256 - 32) KiB / 128 KiB/s) and the file it then
    opens on the same number is not.
  - Chromium itself, as a user other than root (its namespace sandbox on),
    under `sluice --recv 256KiB/s,burst=64KiB --stats FILE`: a 2 MiB page
    from a loopback server is dumped whole, the zygote does not die, and the
    process that read it waited at least 90 % of (bytes - burst) / rate
    (not with --enable-features=NetworkServiceSandbox: that process is
    not throttled, README). Skipped unless run as root with chromium
    installed and unprivileged user namespaces allowed.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import SLUICE, Server, check, child_env, finish, sanitizer_runtime  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = 2 << 20


def clone_prog(tmp):
    exe = os.path.join(tmp, "cloneprog")
    subprocess.run(["cc", "-O1", "-o", exe, os.path.join(HERE, "progs", "cloneprog.c")],
                   check=True)
    sink = Server("sink")
    p = subprocess.run([exe, str(sink.port)],
                       env=child_env({"SLUICE_SEND": "128KiB/s,burst=32KiB"}),
                       capture_output=True, text=True, timeout=60)
    sink.stop()
    vm = re.search(r"^vm_child (-?\d+)$", p.stdout, re.M)
    fk = re.search(r"^fork_child (-?\d+) ([\d.]+)$", p.stdout, re.M)
    check(p.returncode == 0 and vm is not None and vm.group(1) == "0",
          "a CLONE_VM child on a zeroed TLS exits 0 through syscall() and _exit (status %s)"
          % (vm.group(1) if vm else p.stdout + p.stderr[-200:]))
    floor = (256 - 32) / 128
    check(fk is not None and fk.group(1) == "0" and float(fk.group(2)) >= floor,
          "a fork-like clone child's upload is throttled, its file is not: status %s in %s s "
          "(>= %.2f)" % (fk.group(1) if fk else None, fk.group(2) if fk else None, floor))


def chromium(tmp):
    exe = shutil.which("chromium")
    if exe is None or os.geteuid() != 0 or sanitizer_runtime():
        print("skip: chromium part (needs root, to run it as nobody, chromium installed, and "
              "a build without sanitizers: their runtime preloaded into chromium is not ours "
              "to test)")
        return False
    www = os.path.join(tmp, "www")
    os.mkdir(www)
    with open(os.path.join(www, "big.html"), "w") as f:
        f.write("<html><body><pre>" + ("x" * 99 + "\n") * (PAGE // 100) + "</pre></body></html>")

    class Quiet(SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=www, **k)

        def log_message(self, *a):
            pass
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    home = os.path.join(tmp, "home")
    os.mkdir(home)
    os.chown(home, 65534, 65534)
    os.chmod(tmp, 0o755)
    url = "http://127.0.0.1:%d/big.html" % httpd.server_address[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_") and k != "LD_PRELOAD"}
    env["HOME"] = home

    def run(prefix, n):
        argv = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] + prefix + [
            exe, "--headless", "--disable-gpu", "--no-first-run",
            "--user-data-dir=%s/p%d" % (home, n), "--dump-dom", url]
        t0 = time.monotonic()
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        return p, time.monotonic() - t0
    try:
        base, t_base = run([], 0)
        if len(base.stdout) < PAGE * 0.99 or "zygote" in base.stderr.lower():
            print("skip: chromium does not run here as nobody with its sandbox: %s"
                  % base.stderr.strip()[-200:])
            return False
        stats = os.path.join(home, "stats.json")
        p, t = run([SLUICE, "--recv", "256KiB/s,burst=64KiB", "--stats", stats], 1)
        check(len(p.stdout) == len(base.stdout) and "ygote" not in p.stderr,
              "chromium under sluice (sandbox on): the page whole (%d bytes), no zygote death %s"
              % (len(p.stdout), re.findall(r"[^\n]*ygote[^\n]*", p.stderr)[:1]))
        # The process that read the page (its --stats line): its bytes, and
        # the time its calls waited, at least 90 % of (bytes - burst) / rate
        # (wall time says little: chromium's start varies by seconds here).
        got = []
        with open(stats) as f:
            for line in f:
                d = json.loads(line)
                r = d["rules"][0]
                if r["bytes"] >= PAGE * 0.99:
                    got.append((d["program"], r["bytes"], r["delay_ns_total"] / 1e9))
        need = lambda b: (b - 64 * 1024) / (256 * 1024) * 0.9  # noqa: E731
        check(len(got) == 1 and got[0][2] >= need(got[0][1]),
              "chromium throttled: %s (program, bytes, seconds waited; in %.1f s against %.1f s "
              "without)" % (got, t, t_base))
    finally:
        httpd.shutdown()
    return True


def main():
    with tempfile.TemporaryDirectory() as tmp:
        clone_prog(tmp)
        chromium(tmp)


if __name__ == "__main__":
    main()
    finish()
