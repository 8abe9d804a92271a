#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Configuration and reporting under the shim: a configuration error exits
with status 2 (SLUICE_CONFIG_ERROR=warn runs unthrottled), SLUICE_STATS
holds the known counts of a run, children started through `sh -c` are
throttled and report their own line, SLUICE_SKIP/SLUICE_ONLY select
programs, and dry-run never delays but counts."""
import json
import os
import sys
import tempfile

from shim_lib import Server, check, finish, run_child

# Connect `n` times to port, send `size` bytes on the first connection.
CLIENT = r'''
import json, socket, sys, time
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ok, errs, t0 = 0, [], time.monotonic()
for i in range(n):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port)); ok += 1
        if i == 0 and size: s.sendall(b"s" * size)
    except OSError as e:
        errs.append(e.errno)
    s.close()
print(json.dumps({"ok": ok, "errs": errs, "elapsed": time.monotonic() - t0}))
'''


def client(port, n, size, sluice, shell=False):
    argv = [sys.executable, "-c", CLIENT, str(port), str(n), str(size)]
    if shell:
        import shlex
        argv = ["sh", "-c", " ".join(shlex.quote(a) for a in argv)]
    return run_child(None, sluice, argv=argv)


def read_stats(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    srv = Server("sink")
    tmp = tempfile.mkdtemp()
    try:
        # A configuration error: exit 2 and the policy's message.
        rc, _, err = client(srv.port, 1, 0, {"SLUICE_SEND": "1Mib/s"})
        print("measured: SLUICE_SEND=1Mib/s: rc=%d, stderr %r" % (rc, err.strip()[:160]))
        check(rc == 2, "a configuration error exits with status 2")
        check("SLUICE_SEND" in err and "Mib" in err, "the message names the variable and text")
        rc, r, err = client(srv.port, 3, 0, {"SLUICE_SEND": "1Mib/s",
                                             "SLUICE_CONNECT": "1/h,action=reject",
                                             "SLUICE_CONFIG_ERROR": "warn"})
        check(rc == 0 and r is not None and r["ok"] == 3,
              "SLUICE_CONFIG_ERROR=warn runs, unthrottled (%s)" % (r,))
        check("warning" in err, "and says so on stderr")

        # SLUICE_STATS: 5 connects against 1/h reject, 1000 bytes sent.
        path = os.path.join(tmp, "stats.json")
        rc, r, _ = client(srv.port, 5, 1000, {"SLUICE_CONNECT": "1/h,action=reject",
                                              "SLUICE_SEND": "1MB/s",
                                              "SLUICE_STATS": path})
        lines = read_stats(path) if os.path.exists(path) else []
        print("measured: stats line %s" % (json.dumps(lines[0]) if lines else None))
        check(rc == 0 and len(lines) == 1, "one stats line for one process")
        if lines:
            rules = {x["op"]: x for x in lines[0]["rules"]}
            c, s = rules.get("connect", {}), rules.get("send", {})
            check((c.get("calls"), c.get("admitted"), c.get("refused")) == (5, 1, 4),
                  "connect: 5 calls, 1 admitted, 4 refused")
            check((s.get("calls"), s.get("admitted"), s.get("bytes")) == (1, 1, 1000),
                  "send: 1 call admitted, 1000 bytes")
            check(lines[0]["pid"] > 0 and c.get("action") == "reject", "pid and action given")

        # Children through sh -c: throttled, each with its own line (%p).
        path = os.path.join(tmp, "child-%p.json")
        rc, r, _ = client(srv.port, 11, 0, {"SLUICE_CONNECT": "20/s", "SLUICE_STATS": path},
                          shell=True)
        files = [f for f in os.listdir(tmp) if f.startswith("child-")]
        el = r["elapsed"] if r else 0
        print("measured: via sh -c: 11 connects at 20/s in %.3f s; stats files %s" % (el, files))
        check(rc == 0 and r is not None and r["ok"] == 11, "the child's connects succeeded")
        check(11 <= 20 * el + 1, "the child behind sh -c is throttled (11 <= 20/s * %.3f + 1)"
              % el)
        py = [read_stats(os.path.join(tmp, f))[0] for f in files]
        py = [x for x in py if x["rules"][0]["calls"] == 11]
        check(len(py) == 1, "the child wrote its own stats file with its 11 calls")

        # SLUICE_SKIP / SLUICE_ONLY by program name.
        exe = os.path.basename(os.path.realpath(sys.executable))
        rc, r, _ = client(srv.port, 3, 0, {"SLUICE_CONNECT": "1/h,action=reject",
                                           "SLUICE_SKIP": "nothing+" + exe})
        check(r is not None and r["ok"] == 3, "SLUICE_SKIP=%s: not throttled" % exe)
        rc, r, _ = client(srv.port, 3, 0, {"SLUICE_CONNECT": "1/h,action=reject",
                                           "SLUICE_ONLY": "curl"})
        check(r is not None and r["ok"] == 3, "SLUICE_ONLY=curl: python not throttled")
        rc, r, _ = client(srv.port, 3, 0, {"SLUICE_CONNECT": "1/h,action=reject",
                                           "SLUICE_ONLY": exe})
        check(r is not None and r["ok"] == 1, "SLUICE_ONLY=%s: throttled" % exe)

        # dry-run: no delay, but the stats count what would have waited.
        path = os.path.join(tmp, "dry.json")
        rc, r, err = client(srv.port, 20, 0, {"SLUICE_CONNECT": "1/s,action=dry-run",
                                              "SLUICE_STATS": path, "SLUICE_LOG": "info"})
        lines = read_stats(path) if os.path.exists(path) else []
        el = r["elapsed"] if r else 99
        print("measured: dry-run 20 connects at 1/s in %.3f s; %s" % (el, lines and lines[0]["rules"]))
        check(r is not None and r["ok"] == 20 and el < 5, "dry-run lets everything through")
        if lines:
            c = lines[0]["rules"][0]
            check(c["calls"] == 20 and c["admitted"] == 20 and c["delayed"] + c["refused"] >= 18,
                  "dry-run counts the would-be delays")
        check("dry-run" in err, "dry-run logs at info level")
    finally:
        srv.stop()
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    finish()


if __name__ == "__main__":
    main()
