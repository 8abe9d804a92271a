#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Downloads that share one receive limit (`sluice --recv 1MiB/s`, per
process) in one event loop get equal shares while they are all backlogged
(fair.c), from a python http.server on loopback:

  curl 2x2    curl --parallel, two 2 MiB files: both end at about 4.0 s,
              within 10 % of each other (they used to end at 2.0 and 4.0 s);
  curl 1223   four files of 1, 2, 2 and 3 MiB: each gets 1/4 until the
              smallest ends (at about 4 s), then 1/3: about 4, 7, 7, 8 s;
  curl one    a single 3 MiB download still gets the whole rate (3.0 s);
  node 2x2    node, two http.get downloads of 2 MiB at once: the same as
              curl 2x2;
  uploads     the same three cases for sends: python asyncio uploads under
              `--send 1MiB/s` to a sink here.

Lower bounds are strict (no download can beat what the limit allows of the
bytes before it), upper bounds generous.
"""
import functools
import hashlib
import http.server
import os
import shutil
import tempfile
import threading
import time

import eventloop_lib as el
from eventloop_lib import check, finish

MIB = 1 << 20
RATE = MIB  # --recv 1MiB/s; the default burst is 5 ms of it
BURST = RATE // 200

NODE = r'''
const http = require("http");
const port = +process.argv[process.argv.length - 1], t0 = process.hrtime.bigint();
let left = 2;
for (const name of ["a", "b"]) {
  http.get({host: "127.0.0.1", port, path: "/" + name}, (res) => {
    let n = 0;
    res.on("data", (d) => { n += d.length; });
    res.on("end", () => {
      console.log(`/${name} ${n} ${Number(process.hrtime.bigint() - t0) / 1e9}`);
      if (--left === 0) process.exit(0);
    });
  });
}
'''


UPLOAD = r'''
import asyncio, sys, time
port, sizes = int(sys.argv[1]), [int(x) for x in sys.argv[2:]]
async def up(n):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    print("start %.6f" % time.monotonic(), flush=True)  # before its first byte
    w.write(b"x" * n)
    await w.drain()
    w.close()
    await w.wait_closed()
async def main():
    await asyncio.gather(*(up(n) for n in sizes))
asyncio.run(main())
'''


def uploads(sizes):
    """asyncio uploads of `sizes` bytes at once under --send 1MiB/s to a
    sink here: {size: [seconds from the first upload's start to its EOF]}.
    The start is the client's own clock reading before its first write
    (CLOCK_MONOTONIC, as here): the sink's accept thread may run late under
    load, and a start taken there would make the upload look faster than
    the limit admits."""
    import socket
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(16)
    lst.settimeout(10)
    done, t0 = {}, []

    def sink(c):
        n = 0
        c.settimeout(30)
        try:
            while True:
                b = c.recv(65536)
                if not b:
                    break
                n += len(b)
        except OSError:
            pass
        done.setdefault(n, []).append(time.monotonic())
        c.close()

    def accept():
        ths = []
        for _ in sizes:
            try:
                c, _ = lst.accept()
            except OSError:
                break
            if not t0:
                t0.append(time.monotonic())
            th = threading.Thread(target=sink, args=(c,))
            th.start()
            ths.append(th)
        for th in ths:
            th.join(40)

    acc = threading.Thread(target=accept)
    acc.start()
    import sys
    up = el.Proc(["--send", "1MiB/s"], [sys.executable, "-c", UPLOAD,
                                        str(lst.getsockname()[1])] + [str(n) for n in sizes])
    out, _ = up.wait(60)
    acc.join(40)
    lst.close()
    check(up.rc == 0, "asyncio uploads %s exited 0 (rc %s)" % (sizes, up.rc))
    starts = [float(ln.split()[1]) for ln in out.splitlines() if ln.startswith("start ")]
    start = min(starts + t0)
    return {k: sorted(x - start for x in v) for k, v in done.items()}


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def times_of(out):
    """{path: (bytes, seconds)} from lines 'URL-or-path bytes seconds'."""
    res = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            res.setdefault("/" + parts[0].rsplit("/", 1)[1], []).append(
                (int(parts[1]), float(parts[2])))
    return res


def curl(port, d, names):
    args = ["curl", "-sS", "--no-progress-meter", "--parallel", "--parallel-immediate",
            "--parallel-max", "8", "-w", "%{url_effective} %{size_download} %{time_total}\\n"]
    for k, name in enumerate(names):
        args += ["-o", os.path.join(d, "%s.%d.out" % (name, k)),
                 "http://127.0.0.1:%d/%s" % (port, name)]
    cu = el.Proc(["--recv", "1MiB/s"], args)
    out, err = cu.wait(60)
    check(cu.rc == 0, "curl %s exited 0 (rc %s)" % (" ".join(names), cu.rc))
    if cu.rc != 0:
        print("curl stderr: %s" % err[-500:])
    return times_of(out), cu


def main():
    if not el.have("curl"):
        finish()
    d = tempfile.mkdtemp(prefix="sluice-fair-")
    os.makedirs(os.path.join(d, "www"))
    files = {"a": 2 * MIB, "b": 2 * MIB, "one": MIB, "three": 3 * MIB}
    data = {}
    for name, size in files.items():
        data[name] = os.urandom(size)
        with open(os.path.join(d, "www", name), "wb") as f:
            f.write(data[name])
    srv = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=os.path.join(d, "www")))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    try:
        # Two 2 MiB downloads at once: 4 MiB in all, each about 4.0 s.
        t, cu = curl(port, d, ["a", "b"])
        ta, tb = t.get("/a", [(0, 0)])[0], t.get("/b", [(0, 0)])[0]
        print("measured: curl 2x2 MiB: %.3f s and %.3f s" % (ta[1], tb[1]))
        lo, hi = min(ta[1], tb[1]), max(ta[1], tb[1])
        check(ta[0] == tb[0] == 2 * MIB, "curl 2x2: both downloads complete")
        check(hi >= (4 * MIB - BURST) / RATE, "curl 2x2: the last ends no sooner than the "
              "limit allows (%.3f s >= %.3f s)" % (hi, (4 * MIB - BURST) / RATE))
        check(lo > 0 and hi / lo <= 1.10,
              "curl 2x2: both end within 10 %% of each other (%.3f s, %.3f s)" % (lo, hi))
        check(hi < 5.5, "curl 2x2: the same total time (%.3f s, about 4.0 s)" % hi)
        for k, name in enumerate(["a", "b"]):
            with open(os.path.join(d, "%s.%d.out" % (name, k)), "rb") as f:
                check(hashlib.sha256(f.read()).digest() == hashlib.sha256(data[name]).digest(),
                      "curl 2x2: %s arrived intact" % name)

        # 1, 2, 2 and 3 MiB: 1/4 each until 4 s (the 1 MiB one ends), then
        # 1/3 each until 7 s (the 2 MiB ones end), then the rest: 8 s.
        t, cu = curl(port, d, ["one", "a", "b", "three"])
        t1 = t.get("/one", [(0, 0)])[0][1]
        t2 = sorted(x[1] for x in t.get("/a", []) + t.get("/b", []))
        t3 = t.get("/three", [(0, 0)])[0][1]
        print("measured: curl 1,2,2,3 MiB: %.3f, %s, %.3f s" % (
            t1, ", ".join("%.3f" % x for x in t2), t3))
        check(3.5 <= t1 < 4.6,
              "curl 1223: the 1 MiB file ends at about 4 s: it got 1/4 (%.3f s)" % t1)
        check(len(t2) == 2 and all(6.5 <= x < 7.9 for x in t2),
              "curl 1223: the 2 MiB files end at about 7 s: 1/4, then 1/3 (%s)"
              % ", ".join("%.3f" % x for x in t2))
        check((8 * MIB - BURST) / RATE <= t3 < 9.5,
              "curl 1223: the 3 MiB file ends at about 8 s (%.3f s)" % t3)
        cu.check_cpu("curl 1223")

        # One download alone still gets the whole rate.
        t, cu = curl(port, d, ["three"])
        t3 = t.get("/three", [(0, 0)])[0][1]
        print("measured: curl one 3 MiB download: %.3f s" % t3)
        check((3 * MIB - BURST) / RATE <= t3 < 3.3,
              "curl one: a single connection gets the whole rate (%.3f s, ideal 3.0 s)" % t3)

        if el.have("node"):
            nd = el.Proc(["--recv", "1MiB/s"], ["node", "-e", NODE, str(port)])
            out, err = nd.wait(60)
            check(nd.rc == 0, "node exited 0 (rc %s)" % nd.rc)
            t = times_of(out)
            ta, tb = t.get("/a", [(0, 0)])[0], t.get("/b", [(0, 0)])[0]
            print("measured: node 2x2 MiB: %.3f s and %.3f s" % (ta[1], tb[1]))
            lo, hi = min(ta[1], tb[1]), max(ta[1], tb[1])
            check(ta[0] == tb[0] == 2 * MIB, "node 2x2: both downloads complete")
            check(lo > 0 and hi / lo <= 1.10 and (4 * MIB - BURST) / RATE <= hi < 5.5,
                  "node 2x2: both end at about 4 s, within 10 %% (%.3f s, %.3f s)" % (lo, hi))
    finally:
        srv.shutdown()
        srv.server_close()
        shutil.rmtree(d, ignore_errors=True)

    # The same for sends: asyncio uploads sharing --send 1MiB/s.
    t = uploads([2 * MIB, 2 * MIB])
    ts = t.get(2 * MIB, [])
    print("measured: asyncio uploads 2x2 MiB: %s s" % ", ".join("%.3f" % x for x in ts))
    check(len(ts) == 2 and ts[0] > 0 and ts[1] / ts[0] <= 1.10 and
          (4 * MIB - BURST) / RATE <= ts[1] < 5.5,
          "uploads 2x2: both end at about 4 s, within 10 %")
    t = uploads([MIB, 2 * MIB, 2 * MIB, 3 * MIB])
    print("measured: asyncio uploads 1,2,2,3 MiB: %s" % t)
    t1, t2, t3 = t.get(MIB, [0]), t.get(2 * MIB, []), t.get(3 * MIB, [0])
    check(3.5 <= t1[0] < 4.6 and len(t2) == 2 and all(6.5 <= x < 7.9 for x in t2) and
          (8 * MIB - BURST) / RATE <= t3[0] < 9.5,
          "uploads 1223: about 4, 7, 7 and 8 s (1/4 each, then 1/3)")
    t = uploads([3 * MIB])
    t3 = t.get(3 * MIB, [0])[0]
    print("measured: one asyncio upload of 3 MiB: %.3f s" % t3)
    check((3 * MIB - BURST) / RATE <= t3 < 3.3, "one upload gets the whole rate (%.3f s)" % t3)
    finish()


if __name__ == "__main__":
    main()
