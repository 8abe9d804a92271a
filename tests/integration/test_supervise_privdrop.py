#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Supervised mode and the limits a program lives under:
- the program keeps the soft RLIMIT_NOFILE it was started with (the launcher
  raised it to the hard limit for everyone before);
- a program that drops to another user (setpriv --reuid, as a server's
  worker does) is still throttled when the supervisor lacks
  CAP_SYS_RESOURCE (as in a default container): its fd limit is read from
  /proc/PID/limits, where prlimit() on another user's process fails and
  the worker used to pass unthrottled with a warning;
- a set-user-ID program is run without its privileges (no_new_privs), and
  the launcher says so instead of nothing."""
import os
import shutil
import stat
import subprocess
import tempfile

from supervise_lib import (SLUICE, TMP, Server, build_c, check, env_clean, pattern, run_main,
                           within)
import hashlib
import json

MiB = 1 << 20


def body():
    busybox = shutil.which("busybox")
    if busybox is None:
        print("SKIP: busybox is not installed (Debian: busybox-static)")
        raise SystemExit(77)
    # The soft limit is the program's (the hard one stays as it was).
    soft = 1000
    r = subprocess.run(["sh", "-c", "ulimit -Sn %d && exec %s --supervise --send 1MiB/s -- "
                        "%s sh -c 'ulimit -Sn'" % (soft, SLUICE, busybox)],
                       capture_output=True, text=True, env=env_clean(), timeout=30)
    print("measured: the supervised program's soft RLIMIT_NOFILE: %r" % r.stdout.strip())
    check(r.returncode == 0 and r.stdout.strip() == str(soft),
          "the program keeps its soft RLIMIT_NOFILE (%d): %r" % (soft, r.stdout.strip()))

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        print("SKIP: the privilege drop needs root and setpriv")
        return
    d = tempfile.mkdtemp(prefix="sl-privdrop.")
    os.chmod(d, 0o755)
    # A set-user-ID program (of another user): warned of.
    suid = os.path.join(d, "true")
    shutil.copy(busybox, suid)
    os.chown(suid, 65534, 65534)
    os.chmod(suid, 0o4755)
    r = subprocess.run([SLUICE, "--supervise", "--send", "1MiB/s", "--", suid],
                       capture_output=True, text=True, env=env_clean(), timeout=30)
    check(r.returncode == 0 and "is set-user-ID" in r.stderr and "no_new_privs" in r.stderr,
          "a set-user-ID program: warned that it runs without its privileges (%r)"
          % r.stderr[-300:])
    os.unlink(suid)
    # A static client the dropped user can run.
    prog = os.path.join(d, "netprog")
    shutil.copy(build_c(), prog)
    os.chmod(prog, 0o755)
    sink = Server("sink")
    size = MiB
    try:
        r = subprocess.run(["setpriv", "--bounding-set=-sys_resource", SLUICE, "--supervise",
                            "--send", "1MiB/s,burst=64KiB", "--", "setpriv", "--reuid=65534",
                            "--regid=65534", "--clear-groups", prog, "upload", str(sink.port),
                            str(size)],
                           capture_output=True, text=True, env=env_clean(), timeout=60)
    finally:
        shutil.rmtree(d)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    res = json.loads(lines[-1]) if lines else {}
    check(r.returncode == 0, "dropped to uid 65534: exit 0 (rc=%d, %r)" % (r.returncode,
                                                                          r.stderr[-300:]))
    check("no free fd" not in r.stderr, "no 'no free fd' warning (%r)" % r.stderr[-300:])
    check(res.get("fd", 0) >= 512, "its socket was placed at fd %s >= 512" % res.get("fd"))
    within("1 MiB upload at 1 MiB/s by uid 65534", res.get("elapsed", 0),
           (size - 64 * 1024) / MiB, 1.0)
    check(sink.wait_digests(1) == [hashlib.sha256(pattern(size)).hexdigest()],
          "the server got exactly the 1 MiB sent")
    sink.close()


if __name__ == "__main__":
    run_main(body)
