#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Supervised mode passes signals on: the launcher is the program as far as
a signal sender can tell. USR1 and USR2 sent to the launcher reach a static
program's handlers during a throttled download, which completes intact;
INT, QUIT and HUP sent to the launcher of `busybox sleep 8` end it at once
with 130, 131 and 129, as they would end the program itself; a SIGKILLed
program's launcher exits 137. (A terminal's Ctrl-C reaches the program's
process group itself and is not passed on a second time.) A held read of an
idle connection is interrupted by the program's own caught signal (its 20 ms
SIGALRM timer, no SA_RESTART): EINTR, as natively, where it used to wait for
data that never came."""
import hashlib
import socket
import threading
import json
import os
import shutil
import signal
import subprocess
import time

from supervise_lib import SLUICE, Server, build_c, check, env_clean, run_main, sha256_file, TMP

MiB = 1 << 20


def result(out):
    lines = [l for l in out.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def default_signals():
    """A test started in the background by a shell has SIGINT and SIGQUIT
    ignored, and so would the launcher and its program (natively too):
    start them with the default dispositions."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM, signal.SIGUSR1,
                signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)


def launch(args):
    return subprocess.Popen([SLUICE, "--supervise"] + args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env_clean(),
                            preexec_fn=default_signals)


def wait_end(p):
    """Wait (at most 5 s) for the launcher; its seconds from now."""
    t0 = time.monotonic()
    try:
        p.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
    return time.monotonic() - t0


def usr_during_download(prog):
    data = os.urandom(3 * MiB)
    src = Server("source", data)
    path = os.path.join(TMP, "download")
    p = launch(["--recv", "1MiB/s", "--", prog, "download", str(src.port), path])
    time.sleep(0.6)  # the program's handlers are installed by then
    sent = {"usr1": 0, "usr2": 0}
    for k in range(5):
        sig = signal.SIGUSR1 if k % 2 == 0 else signal.SIGUSR2
        if p.poll() is None:
            os.kill(p.pid, sig)
            sent["usr1" if sig == signal.SIGUSR1 else "usr2"] += 1
        time.sleep(0.3)
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
    r = result(out)
    check(p.returncode == 0, "USR1/USR2 during a download: exit 0 (rc=%s, %r)"
          % (p.returncode, err[-300:]))
    check(sent == {"usr1": 3, "usr2": 2}, "3 USR1 and 2 USR2 sent during the download (%r)" % sent)
    check(r.get("usr1") == 3 and r.get("usr2") == 2,
          "the program's handlers saw 3 USR1 and 2 USR2 (%r)" % {k: r.get(k) for k in sent})
    check(os.path.exists(path) and sha256_file(path) == hashlib.sha256(data).hexdigest(),
          "the 3 MiB download is intact (sha256)")
    check(r.get("elapsed", 0) >= (len(data) - 5243) / MiB - 0.001,
          "and throttled: %.3f s at 1 MiB/s" % r.get("elapsed", 0))
    src.close()


def ends_with(sig, want, busybox):
    p = launch(["--send", "1MiB/s", "--", busybox, "sleep", "8"])
    time.sleep(0.5)
    os.kill(p.pid, sig)
    took = wait_end(p)
    name = signal.Signals(sig).name
    # The launcher re-raises the program's signal: Popen reports -SIG, a
    # shell $? of 128 + SIG.
    check(p.returncode in (-sig, want), "%s to the launcher of busybox sleep 8: status %s (wants "
          "%d, as the program's own)" % (name, p.returncode, want))
    check(took < 2, "%s: ended in %.2f s (< 2 s)" % (name, took))


def killed(busybox):
    p = launch(["--send", "1MiB/s", "--", busybox, "sleep", "8"])
    time.sleep(0.5)
    kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    check(len(kids) == 1, "the program is the launcher's child (%r)" % kids)
    for k in kids:
        os.kill(int(k), signal.SIGKILL)
    took = wait_end(p)
    check(p.returncode in (-signal.SIGKILL, 137), "program SIGKILLed: the launcher's status %s "
          "(wants 137)" % p.returncode)
    check(took < 2, "program SIGKILLed: the launcher ended in %.2f s" % took)


def idle_read(prog):
    lis = socket.socket()
    lis.bind(("127.0.0.1", 0))
    lis.listen(4)
    held = []

    def serve():  # accept, send nothing, close after 5 s
        c, _ = lis.accept()
        held.append(c)
        time.sleep(5)
        c.close()

    threading.Thread(target=serve, daemon=True).start()
    t0 = time.monotonic()
    p = launch(["--recv", "1MiB/s", "--", prog, "idle", str(lis.getsockname()[1]), "-"])
    out, err = p.communicate(timeout=30)
    took = time.monotonic() - t0
    r = result(out)
    print("measured: idle read under --recv: %r in %.3f s" % (r, took))
    check(p.returncode == 0 and r.get("eintr") == 1 and r.get("bytes") == 0,
          "a held read of an idle connection ends with EINTR on the program's SIGALRM (%r, %r)"
          % (r, err[-300:]))
    check(took < 3, "... within 3 s (%.2f s; the server sends nothing for 5 s)" % took)
    lis.close()


def body():
    prog = build_c()
    usr_during_download(prog)
    idle_read(prog)
    busybox = shutil.which("busybox")
    if busybox is None:
        print("not run: the busybox cases (Debian: busybox, which scripts/deps.sh test installs)")
        return
    for sig, want in ((signal.SIGINT, 130), (signal.SIGQUIT, 131), (signal.SIGHUP, 129),
                      (signal.SIGTERM, 143)):
        ends_with(sig, want, busybox)
    killed(busybox)


if __name__ == "__main__":
    run_main(body)
