#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A vfork child leaves its parent's tables alone (shim/vfork.h).

CPython's subprocess forks with vfork; the child closes every fd from 3 up
(close_range) and dup2()s its pipes onto 0-2 before exec. It runs on its
parent's memory, so sluice's close_range wrapper used to clear the parent's
epoll mirror: asyncio's self-pipe and child-watcher events were then
dropped, and `asyncio.create_subprocess_exec('echo') + communicate()` hung
(18 of 20 runs under --connect 100/s). Checked here, with real programs:

  echo     20 runs of that program under SLUICE_CONNECT=100/s, each given
           15 s: none hangs, each prints what echo said;
  stdin    the same with input through stdin (dup2 of a pipe in the child)
           and a socket of the parent's open in an epoll set meanwhile;
  suite    CPython's own test.test_asyncio.test_subprocess under rules that
           match every socket and never limit: exit 0 with the same number
           of tests run and skipped as without sluice, in at most 3x its
           time (+5 s). Not run (said so) when no python here has the
           test package (Debian: libpython3.11-testsuite).
"""
import os
import re
import subprocess
import sys
import time

from shim_lib import check, child_env, finish

ECHO = r"""
import asyncio, sys
async def main():
    p = await asyncio.create_subprocess_exec('echo', 'hi', stdout=asyncio.subprocess.PIPE)
    out, _ = await p.communicate()
    sys.stdout.write(out.decode())
asyncio.run(main())
"""

STDIN = r"""
import asyncio, socket, sys
async def main():
    srv = await asyncio.start_server(lambda r, w: w.close(), '127.0.0.1', 0)
    port = srv.sockets[0].getsockname()[1]
    r, w = await asyncio.open_connection('127.0.0.1', port)
    p = await asyncio.create_subprocess_exec('cat', stdin=asyncio.subprocess.PIPE,
                                             stdout=asyncio.subprocess.PIPE)
    out, _ = await p.communicate(b'through stdin\n')
    await r.read()  # the server closed it: the socket's events still arrive
    w.close()
    srv.close()
    sys.stdout.write(out.decode())
asyncio.run(main())
"""


def runs(code, want, n, label):
    hung, wrong = 0, 0
    worst = 0.0
    for _ in range(n):
        t0 = time.monotonic()
        try:
            p = subprocess.run([sys.executable, "-c", code],
                               env=child_env({"SLUICE_CONNECT": "100/s"}),
                               capture_output=True, text=True, timeout=15)
            if p.returncode != 0 or p.stdout != want:
                wrong += 1
                print("rc=%d stdout=%r stderr=%r" % (p.returncode, p.stdout, p.stderr[-500:]))
        except subprocess.TimeoutExpired:
            hung += 1
        worst = max(worst, time.monotonic() - t0)
    print("measured: %s: %d runs, %d hung, %d wrong, slowest %.2f s" % (label, n, hung, wrong,
                                                                      worst))
    check(hung == 0, "%s: none of %d runs hangs (hung: %d)" % (label, n, hung))
    check(wrong == 0, "%s: every run exits 0 with the child's output (wrong: %d)" % (label, wrong))


def suite_python():
    """A python whose standard test package has test_asyncio.test_subprocess."""
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run(
                [py, "-c", "import test.test_asyncio.test_subprocess"],
                capture_output=True).returncode == 0:
            return py
    return None


def suite(py):
    cmd = [py, "-m", "unittest", "test.test_asyncio.test_subprocess"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.pop("LD_PRELOAD", None)
    res = {}
    for label, e in (("without sluice", env),
                     ("under sluice", child_env({"SLUICE_SEND": "10GB/s", "SLUICE_RECV": "10GB/s",
                                                 "SLUICE_CONNECT": "1000000/s"}))):
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=180, cwd="/tmp")
            out, rc = p.stderr, p.returncode
        except subprocess.TimeoutExpired as ex:
            out, rc = (ex.stderr or b"").decode(errors="replace"), None
        took = time.monotonic() - t0
        ran = re.search(r"Ran (\d+) tests?", out)
        skipped = re.search(r"skipped=(\d+)", out)
        res[label] = (rc, int(ran.group(1)) if ran else None,
                      int(skipped.group(1)) if skipped else 0, took)
        print("measured: test_subprocess %s: exit %s, %s tests, %s skipped, %.1f s"
              % (label, rc, res[label][1], res[label][2], took))
        if rc != 0:
            print(out[-3000:])
    base, under = res["without sluice"], res["under sluice"]
    check(base[0] == 0, "test_subprocess passes without sluice (exit %s)" % base[0])
    check(under[0] == 0, "test_subprocess passes under never-limiting rules (exit %s)" % under[0])
    check(under[1] == base[1] and under[2] == base[2],
          "the same tests run and skipped: %s/%s without, %s/%s under sluice"
          % (base[1], base[2], under[1], under[2]))
    check(under[3] <= 3 * base[3] + 5, "within 3x its time (+5 s): %.1f s against %.1f s"
          % (under[3], base[3]))


def main():
    runs(ECHO, "hi\n", 20, "asyncio subprocess echo")
    runs(STDIN, "through stdin\n", 10, "asyncio subprocess through stdin, a socket open")
    py = suite_python()
    if py is None:
        print("not run: CPython's test_subprocess (no python here has test.test_asyncio; "
              "Debian: libpython3.11-testsuite, which scripts/deps.sh test installs)")
    else:
        suite(py)
    finish()


if __name__ == "__main__":
    main()
