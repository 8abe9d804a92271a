#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A unix stream read through the supervisor is consumed exactly once: a
static program (supervised/netprog.c, its peer a path) reads 256 KiB from a python peer
with read(), recv() and recvmsg() under
`--supervise --recv 1MiB/s,family=unix`. It gets exactly the bytes sent
(count and sha256), no faster than the rule allows (256 KiB less the burst
at 1 MiB/s). Before the fix, 200,000 bytes were read as 10,002,432: the
supervisor peeked the data for the program and never consumed it, so the
same bytes came again and again."""
import hashlib
import json
import os
import socket
import subprocess
import threading

from supervise_lib import SLUICE, TMP, build_c, check, env_clean, run_main, sha256_file

MiB = 1 << 20
SIZE = 256 << 10


def serve(lis, data, done):
    """Accept one connection on lis, send data, close (bounded by the
    listener's and the connection's timeouts)."""
    try:
        c, _ = lis.accept()
        c.settimeout(30)
        with c:
            c.sendall(data)
    except OSError as e:
        done.append(repr(e))
    else:
        done.append("sent")


def body():
    prog = build_c()  # netprog: read, recv, recvmsg of a unix stream by its path
    data = os.urandom(SIZE)
    want = hashlib.sha256(data).hexdigest()
    burst = 5243  # 5 ms of 1 MiB/s (README "Rules": burst)
    floor = (SIZE - burst) / MiB
    env = dict(env_clean(), NETPROG_NOALARM="1", NETPROG_MAX_BYTES=str(4 * SIZE))
    for mode in ("download", "recv", "recvmsg"):
        path = os.path.join(TMP, "%s.sock" % mode)
        out = os.path.join(TMP, "%s.out" % mode)
        lis = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lis.bind(path)
        lis.listen(1)
        lis.settimeout(30)
        done = []
        t = threading.Thread(target=serve, args=(lis, data, done), daemon=True)
        t.start()
        r = subprocess.run([SLUICE, "--supervise", "--recv", "1MiB/s,family=unix", "--", prog,
                            mode, path, out], capture_output=True, text=True, env=env,
                           timeout=60)
        try:  # wakes the peer's accept if the program never connected
            lis.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        t.join(30)
        lis.close()
        lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
        res = json.loads(lines[-1]) if lines else {}
        print("measured: %s: %r" % (mode, res))
        n = res.get("bytes")
        check(r.returncode == 0 and done == ["sent"],
              "%s: the program and the peer finished (rc %d, peer %r, %r)"
              % (mode, r.returncode, done, r.stderr[-300:]))
        check(n == SIZE, "%s: %r bytes read, %d sent" % (mode, n, SIZE))
        got = sha256_file(out) if os.path.exists(out) else None
        check(got == want, "%s: the bytes read are the bytes sent (sha256 %s, want %s)"
              % (mode, (got or "-")[:16], want[:16]))
        el = res.get("elapsed", 0)
        check(floor <= el <= 3, "%s: %.3f s at 1 MiB/s (>= %.3f s, <= 3 s)" % (mode, el, floor))


if __name__ == "__main__":
    run_main(body)
