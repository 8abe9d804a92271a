#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""connect under the shim: a 100/s rate over 300 attempts, refusals with the
configured errno, and conns=4 with reject and with delay."""
from shim_lib import Server, check, finish, run_child

CONNECT_LOOP = r'''
import json, socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
ok, errs = 0, {}
t0 = time.monotonic()
for i in range(n):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        ok += 1
    except OSError as e:
        errs[e.errno] = errs.get(e.errno, 0) + 1
    s.close()
print(json.dumps({"ok": ok, "errs": errs, "elapsed": time.monotonic() - t0}))
'''


def connect_loop(port, n, sluice):
    import sys
    return run_child(None, sluice, argv=[sys.executable, "-c", CONNECT_LOOP, str(port), str(n)])


def test_rate(srv):
    rc, r, _ = connect_loop(srv.port, 300, {"SLUICE_CONNECT": "100/s"})
    check(rc == 0 and r is not None, "connect 100/s: child ran")
    if not r:
        return
    el = r["elapsed"]
    print("measured: 300 connects at 100/s (burst 1) in %.3f s" % el)
    check(r["ok"] == 300, "all 300 connects succeeded (%d)" % r["ok"])
    check(r["ok"] <= 100 * el + 1, "admitted %d <= 100/s * %.3f s + 1" % (r["ok"], el))
    check(el < 3 * 2.99, "elapsed %.3f s < 3x the 2.99 s minimum" % el)


def test_reject(srv):
    rc, r, _ = connect_loop(srv.port, 50,
                            {"SLUICE_CONNECT": "20/s,action=reject,errno=ENETUNREACH"})
    check(rc == 0 and r is not None, "connect reject: child ran")
    if not r:
        return
    el = r["elapsed"]
    print("measured: 50 connects, 20/s reject: %d ok, errors %s, %.3f s" % (r["ok"], r["errs"], el))
    check(r["ok"] >= 1, "the first connect is admitted")
    check(r["ok"] <= 20 * el + 1, "admitted %d <= 20/s * %.3f s + 1" % (r["ok"], el))
    check(set(r["errs"]) <= {"101"}, "every refusal is ENETUNREACH (101): %s" % r["errs"])
    check(r["ok"] + sum(r["errs"].values()) == 50, "50 attempts accounted for")


CONNS = r'''
import json, socket, sys, threading, time
port = int(sys.argv[1])
def conn():
    s = socket.socket(); s.connect(("127.0.0.1", port)); return s
held, errs = [], []
for i in range(6):
    try:
        held.append(conn())
    except OSError as e:
        errs.append(e.errno)
out = {"held": len(held), "errs": errs}
if sys.argv[2] == "reject":
    held.pop().close()
    try:
        held.append(conn()); out["after_close"] = "ok"
    except OSError as e:
        out["after_close"] = e.errno
else:
    # Delay: a fifth connect waits until another thread closes one at 0.4 s.
    t0 = time.monotonic()
    threading.Timer(0.4, lambda: held.pop(0).close()).start()
    held.append(conn())
    out["waited"] = time.monotonic() - t0
    d = held[-1].dup()  # a dup'd fd keeps the slot until both are closed
    held.pop().close()
    t1 = time.monotonic()
    threading.Timer(0.3, d.close).start()
    held.append(conn())
    out["waited_dup"] = time.monotonic() - t1
print(json.dumps(out))
'''


def test_conns(srv):
    import sys
    rc, r, _ = run_child(None, {"SLUICE_CONNS": "4,action=reject"},
                         argv=[sys.executable, "-c", CONNS, str(srv.port), "reject"])
    check(rc == 0 and r is not None, "conns reject: child ran")
    if r:
        print("measured: conns=4 reject: held %d, errors %s, after a close: %s"
              % (r["held"], r["errs"], r["after_close"]))
        check(r["held"] == 4 and r["errs"] == [111, 111], "4 held, 2 refused with ECONNREFUSED")
        check(r["after_close"] == "ok", "a close frees a slot")
    rc, r, _ = run_child(None, {"SLUICE_CONNS": "4,max-delay=5s"},
                         argv=[sys.executable, "-c", CONNS.replace("range(6)", "range(4)"),
                               str(srv.port), "delay"])
    check(rc == 0 and r is not None, "conns delay: child ran")
    if r:
        print("measured: conns=4 delay: 5th connect waited %.3f s for a close at 0.4 s; "
              "after a dup %.3f s for a close at 0.3 s" % (r["waited"], r["waited_dup"]))
        check(r["held"] == 4, "4 connections held")
        check(0.4 <= r["waited"] < 3 * 0.4 + 0.1, "the 5th connect waited for the close")
        check(0.3 <= r["waited_dup"] < 3 * 0.3 + 0.1, "the slot followed the dup'd fd")


def main():
    srv = Server("hold")
    try:
        test_rate(srv)
        test_reject(srv)
        test_conns(srv)
    finally:
        srv.stop()
    finish()


if __name__ == "__main__":
    main()
