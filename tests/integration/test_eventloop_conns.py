#!/usr/bin/env python3
"""A single-threaded client under `SLUICE_RULES=conns:2` with non-blocking
connects (what an event loop does). The third connect must not wait in
place: its slot frees only when this same thread closes a connection, so
waiting would hang it for good. It returns EINPROGRESS at once, the socket
is not writable and SO_ERROR reads 0 while both slots are held, and within
a few backoffs (10 ms) of a close the real connect starts: the server sees
the third connection only then, and a byte sent on it arrives.

The client runs in a preloaded python; this process is the server (not
preloaded) and records when each connection arrives.
"""
import json
import socket
import subprocess
import sys
import threading
import time

from test_shim_lib import check, child_env, finish

CLIENT = r'''
import errno, json, select, socket, sys, time
port = int(sys.argv[1])
out = {"connect_s": [], "rc": []}
socks = []
for i in range(3):
    s = socket.socket()
    s.setblocking(False)
    t0 = time.monotonic()
    out["rc"].append(errno.errorcode.get(s.connect_ex(("127.0.0.1", port)), "0"))
    out["connect_s"].append(time.monotonic() - t0)
    socks.append(s)
_, w, _ = select.select([], socks, [], 0.5)
out["writable"] = [socks.index(s) for s in w]
out["soerror_held"] = socks[2].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
time.sleep(0.3)  # the server counts what arrived while both slots are held
print("HELD", flush=True)
sys.stdin.readline()
socks[0].close()
t0 = time.monotonic()
_, w, _ = select.select([], [socks[2]], [], 3.0)
out["after_close_s"] = time.monotonic() - t0
out["writable_after"] = bool(w)
out["soerror_after"] = socks[2].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
socks[2].setblocking(True)
socks[2].sendall(b"x")
socks[2].settimeout(3)
out["echo"] = socks[2].recv(1).decode()
print(json.dumps(out), flush=True)
'''


def main():
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(8)
    lst.settimeout(10)
    port = lst.getsockname()[1]
    arrived, conns = [], []

    def serve():
        while len(conns) < 3:
            try:
                c, _ = lst.accept()
            except OSError:
                return
            arrived.append(time.monotonic())
            conns.append(c)
        conns[2].settimeout(5)
        try:
            if conns[2].recv(1) == b"x":
                conns[2].sendall(b"y")
        except OSError:
            pass

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    p = subprocess.Popen([sys.executable, "-c", CLIENT, str(port)],
                         env=child_env({"SLUICE_RULES": "conns:2"}),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    # A client stuck in its third connect (waiting in place for a slot only
    # it can free) is killed after 15 s: the checks below then fail.
    watchdog = threading.Timer(15, p.kill)
    watchdog.start()
    line = p.stdout.readline()
    check(line.strip() == "HELD", "the client holds its two slots (%r)" % line.strip())
    held = len(arrived)
    released = time.monotonic()
    try:
        p.stdin.write("go\n")
        p.stdin.flush()
        out = p.stdout.readline()
        p.wait(timeout=15)
    except (subprocess.TimeoutExpired, BrokenPipeError):
        p.kill()
        out = ""
    watchdog.cancel()
    th.join(timeout=5)
    lst.close()
    res = json.loads(out) if out.startswith("{") else None
    check(res is not None and p.returncode == 0, "client ran (rc %s)" % p.returncode)
    if res is None:
        finish()
    print("measured: connects took %s s, %s; writable while held %s; %.3f s from close to "
          "writable" % (["%.4f" % t for t in res["connect_s"]], res["rc"], res["writable"],
                        res["after_close_s"]))
    check(max(res["connect_s"]) < 0.05, "no connect waited in place (longest %.4f s)"
          % max(res["connect_s"]))
    check(res["rc"][2] == "EINPROGRESS", "the third connect: EINPROGRESS (%s)" % res["rc"][2])
    check(res["writable"] == [0, 1], "only the two with slots became writable (%s)"
          % res["writable"])
    check(res["soerror_held"] == 0, "SO_ERROR of the held connect: 0 (in progress)")
    check(held == 2, "the server saw 2 connections while both slots were held (%d)" % held)
    check(len(arrived) == 3 and arrived[2] >= released,
          "the third arrived after the close (%d connections)" % len(arrived))
    check(res["writable_after"] and res["after_close_s"] < 1.0,
          "writable %.3f s after the close (< 1 s)" % res["after_close_s"])
    check(res["soerror_after"] == 0, "SO_ERROR then: 0")
    check(res["echo"] == "y", "a byte went through the third connection")
    finish()


if __name__ == "__main__":
    main()
