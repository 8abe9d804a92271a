#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A supervised inetd-style server: busybox httpd (static) forks a child per
request that dup2()s the accepted socket onto fds 0 and 1, below the fds
supervised mode traps. Without --trap-stdio the launcher says so once per
process, naming the fd, and the page passes unthrottled (it used to pass
silently); with --trap-stdio the sends on fd 1 are trapped too: a 2 MiB
page under --send 1MiB/s takes at least the 1 s past its burst, intact."""
import hashlib
import os
import shutil
import socket
import subprocess
import time
import urllib.request

from supervise_lib import SLUICE, TMP, check, env_clean, run_main

MiB = 1 << 20


def serve(www, flags):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    busybox = shutil.which("busybox")
    p = subprocess.Popen([SLUICE, "--supervise"] + flags + ["--", busybox, "httpd", "-f",
                         "-p", "127.0.0.1:%d" % port, "-h", www],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_clean())
    end = time.monotonic() + 10
    while time.monotonic() < end:  # until it listens
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    return p, port


def fetch(port):
    t0 = time.monotonic()
    body = urllib.request.urlopen("http://127.0.0.1:%d/big" % port, timeout=30).read()
    return body, time.monotonic() - t0


def stop(p):
    p.terminate()
    _, err = p.communicate(timeout=10)
    return err.decode(errors="replace")


def body():
    if shutil.which("busybox") is None:
        print("SKIP: busybox is not installed (Debian: busybox-static, which scripts/deps.sh test "
              "installs)")
        raise SystemExit(77)
    www = os.path.join(TMP, "www")
    os.makedirs(www)
    page = os.urandom(2 * MiB)
    with open(os.path.join(www, "big"), "wb") as f:
        f.write(page)
    want = hashlib.sha256(page).hexdigest()

    p, port = serve(www, ["--send", "1MiB/s"])
    try:
        got, secs = fetch(port)
        got2, _ = fetch(port)
    finally:
        err = stop(p)
    print("measured: without --trap-stdio: 2 MiB in %.3f s" % secs)
    check(hashlib.sha256(got).hexdigest() == want and got2 == got,
          "without --trap-stdio: the page arrives intact")
    moved = [ln for ln in err.splitlines() if "moves socket" in ln]
    print("measured: warnings: %r" % moved)
    check(len(moved) >= 1 and "dup2" in moved[0] and "fd 0" in moved[0]
          and "--trap-stdio" in moved[0],
          "without --trap-stdio: a warning names the dup2 onto fd 0 and --trap-stdio")
    check(len(moved) == 1, "one warning for the program, not one per child (%d)" % len(moved))

    p, port = serve(www, ["--trap-stdio", "--send", "1MiB/s"])
    try:
        got, secs = fetch(port)
    finally:
        err = stop(p)
    print("measured: --trap-stdio: 2 MiB in %.3f s" % secs)
    check(hashlib.sha256(got).hexdigest() == want, "--trap-stdio: the page arrives intact")
    # Burst 5 ms of the rate: 2 MiB need at least 2 s less the burst.
    check(secs >= 1.9, "--trap-stdio: 2 MiB at 1 MiB/s take >= 1.9 s (%.3f s)" % secs)
    check(secs <= 6.0, "--trap-stdio: ... and not much longer (<= 6 s: %.3f s)" % secs)
    check("moves socket" not in err, "--trap-stdio: no warning (%r)" % err[-300:])


if __name__ == "__main__":
    run_main(body)
