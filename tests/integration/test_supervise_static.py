#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Supervised mode on a static C program (gcc -static, built here), which no
preloaded library can reach: connect rate, byte-exact upload and download
rates with SIGALRM every 20 ms meeting the held calls, sockets placed at
fd >= 512, io_uring_setup answered ENOSYS, i386 system calls refused, the
whole tree of `sh -c` supervised, a non-dumpable program named once as
running unthrottled, and --preload forcing the old behaviour."""
import json
import os
import http.server
import subprocess
import threading
import time

from supervise_lib import (SLUICE, Server, build_c, check, pattern, run_main, sha256_file,
                           sluice, within, TMP)
import hashlib
from shim_lib import seg_path  # noqa: E402

MiB = 1 << 20
NETPROG_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "supervised", "netprog.c")


def result(out):
    lines = [l for l in out.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def body():
    prog = build_c()

    # The launcher picks supervised mode by itself and says so under -v.
    srv = Server("count")
    rc, out, err = sluice(["-v", "--connect", "20/s", "--", prog, "connect", str(srv.port), "60"])
    r = result(out)
    check(rc == 0, "connects: exit 0 (rc=%d, stderr=%r)" % (rc, err[-300:]))
    check("statically linked: supervised mode" in err, "-v says supervised mode was chosen")
    # 60 connects, burst 1: the 60th at 59/20 s.
    within("60 connects at 20/s", r.get("elapsed", 0), 59 / 20, 0.02)
    srv.close()

    # 4 MiB upload with write(), 1 MiB/s, burst 64 KiB.
    sink = Server("sink")
    size = 4 * MiB
    rc, out, err = sluice(["--send", "1MiB/s,burst=64KiB", "--", prog, "upload", str(sink.port),
                           str(size)])
    r = result(out)
    check(rc == 0, "upload: exit 0 (rc=%d, stderr=%r)" % (rc, err[-300:]))
    within("4 MiB write() upload at 1 MiB/s", r.get("elapsed", 0), (size - 64 * 1024) / MiB, 0.02)
    want = hashlib.sha256(pattern(size)).hexdigest()
    check(sink.wait_digests(1) == [want], "upload: the server got exactly the 4 MiB sent (sha256)")
    check(r.get("fd", 0) >= 512, "the socket was placed at fd %s >= 512" % r.get("fd"))
    # A held call's signals wait for its answer (WAIT_KILLABLE_RECV), so
    # the 20 ms timer's signals merge: at least one per write call.
    check(r.get("alarms", 0) >= r.get("calls", 1), "SIGALRM fired %s times during %s held "
          "writes" % (r.get("alarms"), r.get("calls")))
    check(r.get("short", 1) == 0, "blocking writes completed in full (WAIT_KILLABLE_RECV)")

    # writev upload, 512 KiB at 1 MiB/s.
    size = 512 * 1024
    rc, out, err = sluice(["--send", "1MiB/s,burst=64KiB", "--", prog, "writev", str(sink.port),
                           str(size)])
    r = result(out)
    within("512 KiB writev() upload at 1 MiB/s", r.get("elapsed", 0), (size - 64 * 1024) / MiB,
           0.05)
    check(sink.wait_digests(1)[-1:] == [hashlib.sha256(pattern(size)).hexdigest()],
          "writev: sha256 equal")
    sink.close()

    # Download with read(), 4 MiB at 1 MiB/s (default burst: 5 ms of the rate).
    data = os.urandom(4 * MiB)
    src = Server("source", data)
    path = os.path.join(TMP, "download")
    rc, out, err = sluice(["--recv", "1MiB/s", "--", prog, "download", str(src.port), path])
    r = result(out)
    check(rc == 0, "download: exit 0 (rc=%d, stderr=%r)" % (rc, err[-300:]))
    within("4 MiB read() download at 1 MiB/s", r.get("elapsed", 0), (len(data) - 5243) / MiB, 0.02)
    check(sha256_file(path) == hashlib.sha256(data).hexdigest(), "download: sha256 equal")
    check(r.get("alarms", 0) > 50, "SIGALRM fired %s times during the download" % r.get("alarms"))

    # recvmsg(), 512 KiB.
    small = Server("source", data[:512 * 1024])
    rc, out, err = sluice(["--recv", "1MiB/s", "--", prog, "recvmsg", str(small.port), path])
    r = result(out)
    within("512 KiB recvmsg() download at 1 MiB/s", r.get("elapsed", 0),
           (512 * 1024 - 5243) / MiB, 0.05)
    check(sha256_file(path) == hashlib.sha256(data[:512 * 1024]).hexdigest(),
          "recvmsg: sha256 equal")

    # sluice stat shows a supervised process, sluice set retunes it: 1 MiB
    # at 256 KiB/s would take 4 s; set to 1 MiB/s after 0.5 s, under 1.5 s.
    sink = Server("sink")
    p = subprocess.Popen([SLUICE, "--send", "256KiB/s", "--", prog, "upload", str(sink.port),
                          str(MiB)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    pid = None
    for _ in range(50):
        pids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout
        if pids.split():
            pid = int(pids.split()[0])
            break
        time.sleep(0.05)
    st = subprocess.run([SLUICE, "stat", "--json", str(pid)], capture_output=True, text=True)
    check(st.returncode == 0 and "send:256KiB/s" in st.stdout and "netprog" in st.stdout,
          "sluice stat shows the supervised process (%r)" % (st.stdout[:200] + st.stderr[:200]))
    sset = subprocess.run([SLUICE, "set", str(pid), "send:1MiB/s"], capture_output=True, text=True)
    check(sset.returncode == 0, "sluice set retunes it (%r)" % (sset.stdout + sset.stderr))
    out, err = p.communicate(timeout=30)
    r = result(out)
    check(1.0 < r.get("elapsed", 0) < 1.5, "after sluice set: 1 MiB in %.3f s (4 s at 256 KiB/s)"
          % r.get("elapsed", 0))
    check(not os.path.exists(seg_path("stat-%d" % pid)),
          "the record is removed when the process exits")
    check(sink.wait_digests(1)[-1:] == [hashlib.sha256(pattern(MiB)).hexdigest()],
          "retuned upload: sha256 equal")

    # The supervisor killed: the program's held and later trapped calls fail
    # with ENOSYS; it does not hang (1 MiB at 64 KiB/s would take 16 s).
    errpath = os.path.join(TMP, "killed.err")
    with open(errpath, "w") as ef:
        p = subprocess.Popen([SLUICE, "--send", "64KiB/s", "--", prog, "upload", str(sink.port),
                              str(MiB)], stdout=subprocess.DEVNULL, stderr=ef)
    child = None
    for _ in range(100):
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout
        if kids.split():
            child = int(kids.split()[0])
            break
        time.sleep(0.02)
    time.sleep(0.5)
    p.kill()
    p.wait()
    t0 = time.monotonic()
    while child is not None and os.path.exists("/proc/%d/stat" % child) and \
            time.monotonic() - t0 < 10:
        with open("/proc/%d/stat" % child) as f:
            if f.read().split(") ")[-1].startswith("Z"):
                break  # a zombie: exited, waiting for init
        time.sleep(0.05)
    gone = time.monotonic() - t0
    with open(errpath) as f:
        msg = f.read()
    check(child is not None and gone < 3, "supervisor killed: the program ended in %.2f s" % gone)
    check("Function not implemented" in msg, "supervisor killed: the program saw ENOSYS (%r)"
          % msg[-200:])

    # SLUICE_SKIP leaves the program out (256 KiB at 64 KiB/s would take 4 s).
    env = dict(os.environ, SLUICE_SKIP="netprog")
    rc, out, err = sluice(["--send", "64KiB/s", "--", prog, "upload", str(sink.port),
                           str(256 * 1024)], env=env)
    r = result(out)
    check(rc == 0 and r.get("elapsed", 9) < 1, "SLUICE_SKIP=netprog: unthrottled (%.3f s)"
          % r.get("elapsed", 9))

    # shared=NAME: a supervised static client and a preloaded dynamic one
    # draw from one limiter: 2 x 1 MiB at 1 MiB/s together take 2 s.
    dyn = os.path.join(TMP, "netprog-dyn")
    subprocess.run(["gcc", "-O2", "-o", dyn, NETPROG_SRC], check=True)
    name = "suptest%d" % os.getpid()
    spec = "1MiB/s,burst=64KiB,shared=" + name
    sink = Server("sink")
    t0 = time.monotonic()
    procs = [subprocess.Popen([SLUICE] + mode + ["--send", spec, "--", exe, "upload",
                                                 str(sink.port), str(MiB)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for mode, exe in ((["--supervise"], prog), (["--preload"], dyn))]
    outs = [p.communicate(timeout=60) for p in procs]
    both = time.monotonic() - t0
    try:
        os.unlink(seg_path("shared-" + name))
    except OSError:
        pass
    rs = [result(o) for o, e in outs]
    check(all(p.returncode == 0 for p in procs), "shared: both exit 0 (%r)" % [e[-200:] for o, e in outs])
    # The window both uploads share: the first's start to the last's end
    # (each one's elapsed alone is shorter when their starts differ).
    window = (max(r.get("start", 0) + r.get("elapsed", 0) for r in rs)
              - min(r.get("start", 0) for r in rs))
    check(window >= (2 * MiB - 64 * 1024) / MiB - 0.001,
          "shared: supervised + preloaded together at 1 MiB/s (2 MiB in %.3f s)" % window)
    check(both < 2.5, "shared: both done in %.3f s" % both)
    check(sorted(sink.wait_digests(2)) == [hashlib.sha256(pattern(MiB)).hexdigest()] * 2,
          "shared: both uploads byte-exact (%d received)" % len(sink.digests))

    # The whole tree: sh (dynamic) runs the static program.
    srv = Server("count")
    rc, out, err = sluice(["--supervise", "--connect", "20/s", "--", "sh", "-c",
                           "%s connect %d 20" % (prog, srv.port)])
    r = result(out)
    within("sh -c 'netprog': 20 connects at 20/s", r.get("elapsed", 0), 19 / 20, 0.05)

    # io_uring_setup is answered ENOSYS; an i386 system call is refused
    # (a kernel without IA32 emulation kills the caller with SIGSEGV
    # there, with or without sluice: then there is nothing to refuse).
    rc, out, err = sluice(["--send", "1MiB/s", "--", prog, "syscalls", "-", "-"])
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    r = lines[0] if lines else {}
    check(r.get("io_uring_setup") == -1 and r.get("io_uring_errno") == 38,
          "io_uring_setup fails with ENOSYS (%r)" % r)
    native = subprocess.run([prog, "syscalls", "-", "-"], capture_output=True, text=True,
                            timeout=30)
    if native.returncode == -11 and "i386_getpid" not in native.stdout:
        print("note: this kernel has no i386 system calls (int $0x80 is SIGSEGV natively); "
              "supervised: rc %d" % rc)
    else:
        r32 = lines[1] if len(lines) > 1 else {}
        check(r32.get("i386_getpid") == -38,
              "an i386 getpid (int $0x80) gets -ENOSYS (%r)" % r32)

    # Unprivileged (as uid 65534 when run as root): supervision needs no
    # privilege. A program that makes itself non-dumpable cannot be
    # reached: said once, and it runs unthrottled (256 KiB at 64 KiB/s
    # would take 4 s).
    os.chmod(TMP, 0o755)
    as_user = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"] \
        if os.geteuid() == 0 else []
    sink = Server("sink")
    rc, out, err = sluice(as_user + [SLUICE, "--send", "256KiB/s", "--", prog, "upload",
                                     str(sink.port), str(256 * 1024)], raw=True)
    r = result(out)
    within("unprivileged: 256 KiB upload at 256 KiB/s", r.get("elapsed", 0),
           (256 * 1024 - 1311) / (256 * 1024), 0.05)
    rc, out, err = sluice(as_user + [SLUICE, "--send", "64KiB/s", "--", prog, "nodump",
                                     str(sink.port), str(256 * 1024)], raw=True)
    r = result(out)
    check(err.count("cannot be throttled:") == 1 and "run unthrottled" in err,
          "non-dumpable: one warning naming what runs unthrottled (%r)" % err[-300:])
    check(r.get("elapsed", 9) < 2, "non-dumpable: unthrottled (%.3f s)" % r.get("elapsed", 9))
    check(sink.sizes[-1:] == [256 * 1024], "non-dumpable: every byte arrived")

    # busybox (Debian's busybox-static) wget, 2 MiB at 1 MiB/s.
    www = os.path.join(TMP, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "f"), "wb") as f:
        f.write(data[:2 * MiB])



    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass
    hs = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                         lambda *a, **k: Quiet(*a, directory=www, **k))
    threading.Thread(target=hs.serve_forever, daemon=True).start()
    got = os.path.join(TMP, "wget.out")

    t0 = time.monotonic()
    rc, out, err = sluice(["-v", "--recv", "1MiB/s", "--", "busybox", "wget", "-q", "-O", got,
                           "http://127.0.0.1:%d/f" % hs.server_address[1]])
    el = time.monotonic() - t0
    check(rc == 0 and "supervised mode" in err, "busybox wget: supervised, exit 0 (rc=%d)" % rc)
    within("busybox wget of 2 MiB at 1 MiB/s (launcher's wall time)", el,
           (2 * MiB - 5243) / MiB, 0.05)
    check(sha256_file(got) == hashlib.sha256(data[:2 * MiB]).hexdigest(), "busybox wget: sha256 equal")
    hs.shutdown()

    # --preload forces the library (and its warning).
    rc, out, err = sluice(["-v", "--preload", "--send", "1MiB/s", "--", prog, "syscalls", "-",
                           "-"])
    check("preload mode (--preload)" in err and "statically linked" in err,
          "--preload: preload mode and the static warning (%r)" % err[-300:])


run_main(body)
