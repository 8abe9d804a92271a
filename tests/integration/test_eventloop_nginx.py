#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""nginx (one process, epoll, edge-triggered, sendfile) serving files under
`sluice --send 256KiB/s,per=fd --accept 10/s,burst=2`.

  per=fd     three 512 KiB downloads at once each take at least
             (512 KiB - burst) / 256 KiB/s (strict), and all three finish in
             about that time, not three times it: each connection keeps its
             own pace on the one loop;
  not slowed a 1000-byte file fetched while they run comes back quickly;
  --accept   twelve sequential requests take at least (12 - 2) / 10 s;
  CPU        nginx's CPU time per wall second stays low (no spin).
"""
import os
import shutil
import tempfile
import threading
import time

import eventloop_lib as el
from eventloop_lib import check, finish

RATE = 256 * el.KiB
BURST = 1311  # the default: 5 ms of 256 KiB/s, rounded up
BIG = 512 * el.KiB

def main():
    if not el.have("nginx"):
        finish()
    d = tempfile.mkdtemp(prefix="sluice-nginx-")
    big = os.urandom(BIG)
    port = el.free_port()
    argv = el.nginx_setup(d, port, {"big": big, "small": b"s" * 1000})
    ng = el.Proc(["--send", "%dB/s,per=fd" % RATE, "--accept", "10/s,burst=2"], argv)
    try:
        check(el.wait_port(port), "nginx listens on 127.0.0.1:%d" % port)
        time.sleep(0.3)  # the accept bucket refills after the probe
        results, errors = {}, []

        def get(i):
            try:
                results[i] = el.http_get(port, "/big")
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        t0 = time.monotonic()
        threads = [threading.Thread(target=get, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        small, small_s = el.http_get(port, "/small", timeout=10)
        for t in threads:
            t.join(60)
        together = time.monotonic() - t0
        ideal = (BIG - BURST) / RATE
        check(not errors and len(results) == 3, "three downloads completed %s" % errors)
        for i, (body, s) in sorted(results.items()):
            print("measured: download %d: %d bytes in %.3f s (ideal %.3f s)"
                  % (i, len(body), s, ideal))
            check(body == big, "download %d intact" % i)
            check(s >= ideal, "download %d: %.3f s >= (size - burst) / rate = %.3f s"
                  % (i, s, ideal))
            check(s < 2.0 * ideal, "download %d: %.3f s < 2x ideal" % (i, s))
        print("measured: three downloads together took %.3f s; a 1000-byte file "
              "fetched meanwhile took %.3f s" % (together, small_s))
        check(together < 1.6 * ideal + 0.5,
              "the three share the loop at their own pace: %.3f s, not ~%.1f s"
              % (together, 3 * ideal))
        check(small == b"s" * 1000 and small_s < 0.5,
              "a small file is not held up by the throttled ones (%.3f s)" % small_s)

        time.sleep(0.3)  # refill the accept burst
        t1 = time.monotonic()
        for _ in range(12):
            el.http_get(port, "/small", timeout=10)
        seq = time.monotonic() - t1
        print("measured: 12 sequential requests under --accept 10/s,burst=2: %.3f s" % seq)
        check(seq >= (12 - 2) / 10, "12 accepts took %.3f s >= 1.0 s" % seq)
        check(seq < 4.0, "12 accepts took %.3f s < 4 s" % seq)
    finally:
        out, err = ng.stop()
        shutil.rmtree(d, ignore_errors=True)
    if err.strip():
        print("nginx stderr: %s" % err[-1000:])
    ng.check_cpu("nginx")
    finish()


if __name__ == "__main__":
    main()
