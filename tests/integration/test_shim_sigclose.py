#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A signal handler that closes an fd whose deferred connect its own thread
is starting does not hang the thread (shim/connwait.c masks the thread's
signals while a record is STARTING).

progs/sigclose.c, under SLUICE_CONNS=1 (a second non-blocking connect waits
for the slot): 20000 rounds of "connect s1, connect s2 (deferred), arm a
1-40 us SIGALRM whose handler closes s2, close s1 (which starts s2's
connect)". It must finish within 60 s with every s2 deferred. Before the
fix, the handler's close waited for the STARTING record of the frame it had
interrupted: 3 of 3 runs hung (killed after 30 s).
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import check, child_env, finish  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = 20000


def main():
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "sigclose")
        subprocess.run(["cc", "-O1", "-o", exe, os.path.join(HERE, "progs", "sigclose.c")],
                       check=True)
        for run in range(2):
            try:
                p = subprocess.run([exe, str(ROUNDS)], env=child_env({"SLUICE_CONNS": "1"}),
                                   capture_output=True, text=True, timeout=60)
                out, rc = p.stdout.strip(), p.returncode
            except subprocess.TimeoutExpired:
                out, rc = "hung (killed after 60 s)", None
            m = re.fullmatch(r"(\d+) rounds, (\d+) deferred, (\d+) closed in the handler", out)
            check(rc == 0 and m is not None and int(m.group(2)) == ROUNDS and int(m.group(3)) > 0,
                  "run %d: %s" % (run + 1, out))


if __name__ == "__main__":
    main()
    finish()
