#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Supervised mode on a Go program (built here with Debian's golang-go, no
network): a net/http download under --recv, connects from goroutines under
--connect, a net/http server under --send per=fd serving two curl downloads
at once, and --conns 2 on the server serving five clients in waves. Go's
sockets are non-blocking under an edge-triggered epoll: held calls, never a
fabricated EAGAIN, keep it running (a 10 ms ticker goroutine stays on time)."""
import hashlib
import http.server
import json
import os
import socket
import subprocess
import threading
import time

from supervise_lib import (SLUICE, build_go, check, env_clean, run_main, sha256_file, sluice,
                           within, TMP)

MiB = 1 << 20


def result(out):
    lines = [l for l in out.splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


class Files(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def file_server(directory):
    srv = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: Files(*a, directory=directory, **k))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def go_server(args):
    """Start `sluice ARGS -- goprog serve ...`; (process, port)."""
    p = subprocess.Popen([SLUICE] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env_clean())
    port = int(p.stdout.readline())
    return p, port


def stop(p):
    p.terminate()  # passed on to the program by the supervisor
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def body():
    prog = build_go()
    www = os.path.join(TMP, "www")
    os.mkdir(www)
    data = os.urandom(8 * MiB)
    with open(os.path.join(www, "f"), "wb") as f:
        f.write(data)
    srv = file_server(www)
    url = "http://127.0.0.1:%d/f" % srv.server_address[1]

    # net/http download, 8 MiB at 2 MiB/s (default burst, 5 ms: 10486 B).
    out_path = os.path.join(TMP, "got")
    rc, out, err = sluice(["-v", "--recv", "2MiB/s", "--", prog, "get", url, out_path])
    r = result(out)
    check(rc == 0, "get: exit 0 (rc=%d, stderr=%r)" % (rc, err[-300:]))
    check("Go binary: supervised mode" in err, "-v says supervised mode was chosen for Go")
    within("8 MiB net/http download at 2 MiB/s", r.get("elapsed", 0), (len(data) - 10486) / (2 * MiB),
           0.03)
    check(sha256_file(out_path) == hashlib.sha256(data).hexdigest(), "get: sha256 equal")
    # A program held up by its supervisor (a fabricated EAGAIN's spin, a
    # call held for the whole download) is late by seconds; a busy machine
    # (make test's other tests beside it, system calls at 1 us) made it
    # 93 ms late once in CI: the bound allows such a stall.
    check(r.get("late_ms", 999) < 250, "a 10 ms ticker ran at most %.1f ms late (< 250)"
          % r.get("late_ms", 999))

    # 100 connects from 10 goroutines at 50/s: the 100th at 99/50 s.
    rc, out, err = sluice(["--connect", "50/s", "--", prog, "connect",
                           "127.0.0.1:%d" % srv.server_address[1], "100", "10"])
    r = result(out)
    check(rc == 0 and r.get("bytes") == 100, "connect: 100 connects made (rc=%d)" % rc)
    within("100 connects from 10 goroutines at 50/s", r.get("elapsed", 0), 99 / 50, 0.02)

    # A Go net/http server, 2 MiB/s per connection, two curl downloads at once.
    p, port = go_server(["--send", "2MiB/s,per=fd", "--", prog, "serve", str(4 * MiB)])
    want = hashlib.sha256(bytes((i * 7 + 3) & 255 for i in range(4 * MiB))).hexdigest()
    outs = []

    def curl(i):
        path = os.path.join(TMP, "curl%d" % i)
        # curl's own clock: the transfer, not the start of a process.
        r = subprocess.run(["curl", "-s", "-o", path, "-w", "%{time_total}",
                            "http://127.0.0.1:%d/" % port], check=True, timeout=60,
                           capture_output=True, text=True)
        outs.append((float(r.stdout), sha256_file(path)))
    ts = [threading.Thread(target=curl, args=(i,)) for i in range(2)]
    [t.start() for t in ts]
    [t.join(90) for t in ts]
    stop(p)
    check(len(outs) == 2, "server: both downloads finished")
    floor = (4 * MiB - 10486) / (2 * MiB)
    for el, digest in outs:
        within("server per=fd: one 4 MiB download at 2 MiB/s", el, floor, 0.05)
        check(digest == want, "server: sha256 equal")

    # http.FileServer sends files with sendfile(2): on a throttled socket it
    # fails with EINVAL and Go falls back to read and write, throttled.
    with open(os.path.join(www, "g"), "wb") as f:
        f.write(data[:2 * MiB])
    p, port = go_server(["--send", "2MiB/s", "--", prog, "files", www])
    path = os.path.join(TMP, "g.out")
    r = subprocess.run(["curl", "-s", "-o", path, "-w", "%{time_total}",
                        "http://127.0.0.1:%d/g" % port], check=True, timeout=60,
                       capture_output=True, text=True)
    el = float(r.stdout)
    stop(p)
    # Its sendfile is done by the supervisor (supervise/source.c) in short
    # counts on Go's non-blocking socket: one trapped call per piece, whose
    # round trips showed as 1.051 s once in CI (0.998 s alone): 10 % above.
    within("http.FileServer (sendfile through the supervisor), 2 MiB at 2 MiB/s", el,
           (2 * MiB - 10486) / (2 * MiB), 0.10)
    check(sha256_file(path) == hashlib.sha256(data[:2 * MiB]).hexdigest(), "FileServer: sha256 equal")

    # --conns 2: five clients, each answer 300 ms late, are served in waves
    # of two (0.3, 0.3, 0.6, 0.6, 0.9 s), and nothing hangs.
    p, port = go_server(["--conns", "2", "--", prog, "serve", "1000", "300"])
    done = []

    def client(i):
        t0 = time.monotonic()
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        n = 0
        while True:
            d = s.recv(65536)
            if not d:
                break
            n += len(d)
        s.close()
        done.append((time.monotonic() - t0, n))
    ts = [threading.Thread(target=client, args=(i,)) for i in range(5)]
    [t.start() for t in ts]
    [t.join(30) for t in ts]
    stop(p)
    times = sorted(t for t, n in done)
    check(len(done) == 5 and all(n > 1000 for t, n in done), "conns: all 5 clients served")
    if len(times) == 5:
        check(times[1] >= 0.3 and times[2] >= 0.6 and times[4] >= 0.9,
              "conns 2: served in waves (%s)" % ", ".join("%.3f" % t for t in times))
        check(times[4] < 3, "conns 2: no hang (last at %.3f s)" % times[4])


run_main(body)
