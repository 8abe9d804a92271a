#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Node.js (libuv) under sluice: libuv closes fds with syscall(SYS_close),
which only the shim's syscall() wrapper sees (issue 19, part 1).

  conns    `sluice --conns 2 -- node server.js`, an http server answering
           each request after 1 s: 5 concurrent curl clients are served in
           waves (2, 2, 1: the last done by about 3 s, never before 3 s:
           strict, at most 2 at once) and the server keeps serving after
           (each raw close gave its slot back);
  files    node connects, closes the socket (a raw close) and writes 4 MiB
           with fs.writeSync to a file that gets the socket's fd number,
           then reads it back with fs.readSync on that fd, under --send
           1MiB/s --recv 1MiB/s: both run at disk speed (< 1 s; throttled
           as the socket they take 4 s each), bytes intact.
Skips (exit 77) only if node or curl is not installed.
"""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import eventloop_lib as el
from eventloop_lib import check, finish

SERVER_JS = r"""
const http = require('http');
const srv = http.createServer((req, res) => {
  setTimeout(() => { res.end('ok\n'); }, 1000);
});
srv.keepAliveTimeout = 0;
srv.listen(0, '127.0.0.1', () => { console.log('PORT ' + srv.address().port); });
"""

FILES_JS = r"""
const net = require('net'); const fs = require('fs'); const path = require('path');
const [port, dir] = [Number(process.argv[2]), process.argv[3]];
const sock = net.connect(port, '127.0.0.1', () => {
  sock.write('x');
  const sfd = sock._handle.fd;
  sock.destroy();
  setTimeout(() => {
    const f = path.join(dir, 'out.bin');
    const fd = fs.openSync(f, 'w+');
    const buf = Buffer.alloc(4 << 20);
    for (let i = 0; i < buf.length; i++) buf[i] = (i * 7 + (i >> 12)) & 255;
    const t0 = process.hrtime.bigint();
    fs.writeSync(fd, buf);
    const t1 = process.hrtime.bigint();
    const b = Buffer.alloc(4 << 20);
    const t2 = process.hrtime.bigint();
    const n = fs.readSync(fd, b, 0, b.length, 0);
    const t3 = process.hrtime.bigint();
    fs.closeSync(fd);
    console.log(JSON.stringify({sock_fd: sfd, file_fd: fd, read: n,
      same: b.equals(buf), write_s: Number(t1 - t0) / 1e9, read_s: Number(t3 - t2) / 1e9}));
  }, 50);
});
"""


def curl_wave(port, n):
    """n concurrent curl clients; returns [(rc, seconds from the common
    start)] in the order they finished, and the start instant."""
    t0 = time.monotonic()
    done, lock = [], threading.Lock()

    def one():
        p = subprocess.run(["curl", "-s", "-m", "20", "-o", "/dev/null", "-w", "%{http_code}",
                            "http://127.0.0.1:%d/" % port], capture_output=True, text=True)
        with lock:
            done.append((p.returncode, p.stdout, time.monotonic() - t0))

    th = [threading.Thread(target=one) for _ in range(n)]
    for t in th:
        t.start()
    for t in th:
        t.join(30)
    return sorted(done, key=lambda x: x[2])


def test_conns(d):
    js = os.path.join(d, "server.js")
    with open(js, "w") as f:
        f.write(SERVER_JS)
    srv = el.Proc(["--conns", "2"], ["node", js])
    try:
        line = srv.p.stdout.readline().decode()
        check(line.startswith("PORT "), "node server started (%r)" % line.strip())
        if not line.startswith("PORT "):
            return
        port = int(line.split()[1])
        done = curl_wave(port, 5)
        times = [round(t, 2) for _, _, t in done]
        print("measured: 5 clients under --conns 2 finished at %s s" % times)
        check(len(done) == 5 and all(rc == 0 and out == "200" for rc, out, _ in done),
              "all 5 clients served (%s)" % [(rc, out) for rc, out, _ in done])
        if len(done) == 5:
            # At most 2 at once, each reply 1 s after its accept: the 5th
            # cannot end before 3 s (strict); ~3 s plus loopback time.
            check(done[4][2] >= 2.95, "the last client ended at >= 3 s (%.2f s): at most 2 at once"
                  % done[4][2])
            check(done[1][2] < 1.9, "the first wave (2) ended by ~1 s (%.2f s)" % done[1][2])
            check(done[4][2] < 4.5, "all 5 ended by ~3 s (%.2f s < 4.5)" % done[4][2])
        again = curl_wave(port, 2)
        check(len(again) == 2 and all(rc == 0 and out == "200" for rc, out, _ in again)
              and again[-1][2] < 2.5,
              "still serving afterwards: 2 more clients in %.2f s"
              % (again[-1][2] if again else -1))
    finally:
        srv.stop()


def test_files(d):
    js = os.path.join(d, "files.js")
    with open(js, "w") as f:
        f.write(FILES_JS)
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(4)
    held = []
    stop = False

    def acceptor():
        lst.settimeout(0.2)
        while not stop:
            try:
                held.append(lst.accept()[0])
            except socket.timeout:
                continue
            except OSError:
                return

    th = threading.Thread(target=acceptor, daemon=True)
    th.start()
    try:
        p = el.Proc(["--send", "1MiB/s", "--recv", "1MiB/s"],
                    ["node", js, str(lst.getsockname()[1]), d])
        out, err = p.wait(30)
    finally:
        stop = True
        th.join()
        lst.close()
        for c in held:
            c.close()
    lines = [l for l in out.splitlines() if l.startswith("{")]
    check(p.rc == 0 and lines, "node exited 0 with a result (rc=%s, stderr %r)" % (p.rc, err[-300:]))
    if not lines:
        return
    r = json.loads(lines[-1])
    print("measured: socket fd %d, file fd %d: fs.writeSync 4 MiB in %.3f s, fs.readSync in %.3f s"
          % (r["sock_fd"], r["file_fd"], r["write_s"], r["read_s"]))
    check(r["file_fd"] == r["sock_fd"], "the file got the raw-closed socket's fd number (%d, %d)"
          % (r["file_fd"], r["sock_fd"]))
    check(r["write_s"] < 1.0, "4 MiB fs.writeSync at disk speed (%.3f s < 1 s; throttled: 4 s)"
          % r["write_s"])
    check(r["read_s"] < 1.0, "4 MiB fs.readSync at disk speed (%.3f s < 1 s)" % r["read_s"])
    check(r["read"] == 4 << 20 and r["same"], "the file's 4 MiB read back intact")


def main():
    if not el.have("node", "curl"):
        sys.exit(77)
    d = tempfile.mkdtemp(prefix="sluice-node-%d-" % os.getpid())
    try:
        test_conns(d)
        test_files(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
