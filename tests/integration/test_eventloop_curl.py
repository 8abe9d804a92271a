#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""curl --parallel (libcurl's multi interface, poll) under
`sluice --recv 100KB/s,per=fd`, downloading from a python http.server.

  per=fd      three 200 KB files fetched at once each take at least
              (200 KB - burst) / 100 KB/s (strict, curl's own time_total),
              and all together about that long, not three times it;
  not slowed  a 400-byte file in the same run comes in at once;
  no hang     every transfer completes, with the right bytes;
  CPU         curl's CPU time per wall second stays low;
  stats       the --stats file counts the calls cut short or refused as
              delayed, and the time the fds were held back as delay.
"""
import functools
import hashlib
import http.server
import json
import os
import shutil
import tempfile
import threading

import eventloop_lib as el
from eventloop_lib import check, finish

RATE, BURST, BIG, SMALL = 100000, 500, 200000, 400


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def main():
    if not el.have("curl"):
        finish()
    d = tempfile.mkdtemp(prefix="sluice-curl-")
    files = {"a": os.urandom(BIG), "b": os.urandom(BIG), "c": os.urandom(BIG),
             "s": os.urandom(SMALL)}
    os.makedirs(os.path.join(d, "www"))
    for name, data in files.items():
        with open(os.path.join(d, "www", name), "wb") as f:
            f.write(data)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                          functools.partial(Quiet, directory=os.path.join(d, "www")))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    args = ["curl", "-sS", "--no-progress-meter", "--parallel", "--parallel-immediate", "--parallel-max", "4",
            "-w", "%{url_effective} %{size_download} %{time_total}\\n"]
    for name in files:
        args += ["-o", os.path.join(d, name + ".out"), "http://127.0.0.1:%d/%s" % (port, name)]
    try:
        stats = os.path.join(d, "stats.json")
        cu = el.Proc(["--stats", stats, "--recv", "%dB/s,per=fd" % RATE], args)
        out, err = cu.wait(60)
    finally:
        srv.shutdown()
        srv.server_close()
    check(cu.rc == 0, "curl --parallel exited 0 (rc=%s)" % cu.rc)
    if cu.rc != 0:
        print("curl stderr: %s" % err[-500:])
    times = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            times[parts[0].rsplit("/", 1)[1]] = (int(parts[1]), float(parts[2]))
    for name, data in files.items():
        try:
            with open(os.path.join(d, name + ".out"), "rb") as f:
                got = f.read()
        except OSError:
            got = b""
        check(hashlib.sha256(got).digest() == hashlib.sha256(data).digest(),
              "%s: %d bytes intact" % (name, len(data)))
    try:
        with open(stats) as f:
            rule = json.loads(f.read().splitlines()[-1])["rules"][0]
    except (OSError, ValueError, IndexError, KeyError):
        rule = {}
    print("measured: curl: stats: %d calls, %d delayed, %.3f s held back" % (
        rule.get("calls", 0), rule.get("delayed", 0), rule.get("delay_ns_total", 0) / 1e9))
    # Each 200 KB file takes about 2 s at 100 KB/s, nearly all of it held
    # back: at least 1 s held in all, and most calls cut short.
    check(rule.get("delayed", 0) * 2 > rule.get("calls", 0) > 0,
          "stats: event-loop throttling counts as delayed (%d of %d calls)"
          % (rule.get("delayed", 0), rule.get("calls", 0)))
    check(rule.get("delay_ns_total", 0) >= 1e9,
          "stats: delay_ns_total is the time held back (%.3f s)" % (rule.get("delay_ns_total", 0) / 1e9))
    shutil.rmtree(d, ignore_errors=True)
    ideal = (BIG - BURST) / RATE
    for name in "abc":
        size, t = times.get(name, (0, 0.0))
        print("measured: curl: %s: %d bytes in %.3f s (ideal %.3f s)" % (name, size, t, ideal))
        check(t >= ideal, "%s: %.3f s >= (size - burst) / rate = %.3f s" % (name, t, ideal))
    print("measured: curl: all four transfers in %.3f s wall; the %d-byte one took %.3f s"
          % (cu.wall, SMALL, times.get("s", (0, -1))[1]))
    check(cu.wall < 1.6 * ideal + 1.0, "the three share the loop at their own pace "
          "(%.3f s in all, not ~%.1f s)" % (cu.wall, 3 * ideal))
    check(0 <= times.get("s", (0, -1))[1] < 0.5, "the small file is not held up")
    cu.check_cpu("curl --parallel")
    finish()


if __name__ == "__main__":
    main()
