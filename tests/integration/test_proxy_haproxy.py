#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""haproxy (HTTP mode, epoll) in front of `python3 -m http.server`, under
sluice, with and without `option splice-auto`:

  --recv 1MiB/s             (the default burst) and burst=64KiB,
  --send 1MiB/s,per=fd

An 8 MiB file fetched through haproxy must arrive whole (sha256) and at the
limit: no faster than (size - burst) / rate (strict, 2 % for the clock and
the HTTP head), no slower than 1/0.8 of it (generous: a shared machine).

What this guards: haproxy learns of the server's FIN from EPOLLRDHUP and
then takes a short read as the end of the stream; a read cut short by the
limit while RDHUP was visible made it drop what was still queued (curl
exit 18). With splice-auto haproxy moves the body with splice(), which the
shim throttles as the receive or send it is.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import eventloop_lib as el
from eventloop_lib import check, finish

MiB = 1024 * 1024
RATE = MiB
SIZE = 8 * MiB
CASES = [("--recv", "1MiB/s", 5243),  # default burst: 5 ms of the rate
         ("--recv", "1MiB/s,burst=64KiB", 64 * 1024),
         ("--send", "1MiB/s,per=fd", 5243)]

CONF = """global
    maxconn 100
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend f
    bind 127.0.0.1:{port}
    default_backend b
backend b
{splice}
    server s1 127.0.0.1:{backend}
"""


def fetch(port, out):
    """curl the file through haproxy; returns (curl exit code, seconds)."""
    t0 = time.monotonic()
    r = subprocess.run(["curl", "-s", "--max-time", "60", "-o", out,
                        "http://127.0.0.1:%d/big.bin" % port], env=el.clean_env())
    return r.returncode, time.monotonic() - t0


def one(d, backend, splice, case, results):
    flag, value, burst = case
    port = el.free_port()
    tag = "%s %s%s" % (flag, value, " splice-auto" if splice else "")
    conf = os.path.join(d, "haproxy-%d.cfg" % port)
    with open(conf, "w") as f:
        f.write(CONF.format(port=port, backend=backend,
                            splice="    option splice-auto" if splice else ""))
    hp = el.Proc([flag, value], ["haproxy", "-db", "-f", conf])
    try:
        if not el.wait_port(port):
            results[tag] = ("haproxy did not listen", None, None, burst)
            return
        time.sleep(0.2)  # the probe's connection is gone
        out = os.path.join(d, "out-%d" % port)
        rc, secs = fetch(port, out)
        with open(out, "rb") as f:
            got = f.read()
        results[tag] = (rc, got, secs, burst)
    finally:
        hp.stop()


def main():
    if not el.have("haproxy", "curl"):
        finish()
    d = tempfile.mkdtemp(prefix="sluice-haproxy-%d-" % os.getpid())
    big = os.urandom(SIZE)
    want = hashlib.sha256(big).hexdigest()
    www = os.path.join(d, "www")
    os.makedirs(www)
    with open(os.path.join(www, "big.bin"), "wb") as f:
        f.write(big)
    backend = el.free_port()
    srv = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                            str(backend)], cwd=www, env=el.clean_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        check(el.wait_port(backend), "http.server listens on %d" % backend)
        results = {}
        # Three at a time (each haproxy has its own limiter): two rounds of
        # about size / rate each.
        for splice in (False, True):
            threads = [threading.Thread(target=one, args=(d, backend, splice, c, results))
                       for c in CASES]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        check(len(results) == 2 * len(CASES), "every case ran (%d)" % len(results))
        for tag, (rc, got, secs, burst) in sorted(results.items()):
            if got is None:
                check(False, "%s: %s" % (tag, rc))
                continue
            ideal = (SIZE - burst) / RATE
            print("measured: %s: curl exit %s, %d bytes in %.3f s (%.3f MiB/s; "
                  "ideal %.3f s)" % (tag, rc, len(got), secs, len(got) / secs / MiB, ideal))
            check(rc == 0 and len(got) == SIZE, "%s: the whole file arrived (curl exit %s, "
                  "%d of %d bytes)" % (tag, rc, len(got), SIZE))
            check(hashlib.sha256(got).hexdigest() == want, "%s: sha256 equal" % tag)
            check(secs >= ideal / 1.02, "%s: %.3f s >= (size - burst) / rate / 1.02 = "
                  "%.3f s (the limit holds)" % (tag, secs, ideal / 1.02))
            check(secs < ideal / 0.8, "%s: %.3f s < ideal / 0.8 = %.3f s"
                  % (tag, secs, ideal / 0.8))
    finally:
        srv.terminate()
        srv.wait(10)
        shutil.rmtree(d, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
