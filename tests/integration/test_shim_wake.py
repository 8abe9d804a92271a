#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A wait in progress in another thread is woken when a hold ends
(shim/wake.c): the wait wrapper caps its timeout when it starts, and a hold
made afterwards by another thread (its send got EAGAIN) used to be seen only
at the waiter's own timeout.

  poller   one thread waits in epoll_wait (5 s timeout) on a socket
           registered EPOLLOUT|EPOLLET (and again in poll); another sends 100 KiB and, on
           EAGAIN, waits for the poller's word (gRPC's shape) under
           SLUICE_SEND=512KiB/s: at least (100 KiB - burst) / 512 KiB/s,
           at most 1 s (it took 125 s: 25 stalls of 5 s);
  grpc     (python3-grpcio, a system python with grpc) a gRPC client:
           100 unary calls under --send 50/s in at most 6 s (25 s before);
           20 x 100 KiB requests under --send 512KiB/s in 3.7 to 5.5 s,
           every answer's digest right; a gRPC server under --send
           512KiB/s answers 10 x 100 KiB in 1.8 to 4 s (it never did).
"""
import json
import os
import subprocess
import sys

from shim_lib import Server, check, child_env, finish

POLLER = r"""
import json, select, socket, sys, threading, time
port, total, how = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
s = socket.create_connection(("127.0.0.1", port))
s.setblocking(False)
writable = threading.Event()
stop = False
if how == "epoll":
    ep = select.epoll()
    ep.register(s.fileno(), select.EPOLLOUT | select.EPOLLET)
    wait = lambda: ep.poll(5.0)
else:
    p = select.poll()
    p.register(s.fileno(), select.POLLOUT)
    wait = lambda: p.poll(5000)
def poller():
    while not stop:
        for fd, ev in wait():
            if ev & select.POLLOUT:
                writable.set()
                if how == "poll":
                    time.sleep(0.001)  # level-triggered: do not spin while writable
threading.Thread(target=poller, daemon=True).start()
time.sleep(0.2)  # the poller is in its wait
chunk = b"p" * 16384
sent, stalls, worst = 0, 0, 0.0
t0 = time.monotonic()
while sent < total:
    writable.clear()
    try:
        sent += s.send(chunk[:min(len(chunk), total - sent)])
        continue
    except BlockingIOError:
        stalls += 1
    w0 = time.monotonic()
    if not writable.wait(2):  # past 2 s the poller missed its wake-up
        break
    worst = max(worst, time.monotonic() - w0)
print(json.dumps({"sent": sent, "elapsed": time.monotonic() - t0, "stalls": stalls,
                  "worst_wait": worst}))
"""

GRPC = r"""
import hashlib, json, sys, time
from concurrent import futures
import grpc
mode = sys.argv[1]
def handler(req, ctx):
    if req[:4] == b"big:":
        return hashlib.sha256(b"s").digest() * (int(req[4:]) // 32)
    return hashlib.sha256(req).digest()
if mode == "server":
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    srv.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "t.S", {"E": grpc.unary_unary_rpc_method_handler(handler)}),))
    print(srv.add_insecure_port("127.0.0.1:0"), flush=True)
    srv.start()
    sys.stdin.readline()
    srv.stop(0)
else:
    port, n, size = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    call = grpc.insecure_channel("127.0.0.1:%d" % port).unary_unary("/t.S/E")
    call(b"warm", timeout=10)
    ok = 0
    t0 = time.monotonic()
    try:
        for i in range(n):
            if mode == "up":
                body = bytes([i % 256]) * size
                ok += call(body, timeout=20) == hashlib.sha256(body).digest()
            else:
                ok += call(b"big:%d" % size, timeout=20) == hashlib.sha256(b"s").digest() * (size // 32)
    except grpc.RpcError as e:
        print("rpc error: %s" % e, file=sys.stderr)
    print(json.dumps({"ok": ok, "elapsed": time.monotonic() - t0}))
"""
KiB = 1024


def test_poller(how):
    srv = Server("sink")
    total, rate = 100 * KiB, 512 * KiB
    p = subprocess.run([sys.executable, "-c", POLLER, str(srv.port), str(total), how],
                       env=child_env({"SLUICE_SEND": "512KiB/s"}), capture_output=True,
                       text=True, timeout=120)
    srv.stop()
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    check(bool(lines), "%s poller: the child ran (%s)" % (how, p.stderr[-300:]))
    if not lines:
        return
    r = json.loads(lines[-1])
    low = (total - rate * 5 // 1000) / rate
    print("measured: %s poller thread: %d bytes in %.3f s, %d stalls, longest wait %.3f s"
          % (how, r["sent"], r["elapsed"], r["stalls"], r["worst_wait"]))
    check(r["sent"] == total, "%s poller: all %d bytes sent, no wake-up missed (%d)"
          % (how, total, r["sent"]))
    check(r["elapsed"] >= low - 0.001, "%s poller: at least %.3f s at 512 KiB/s: %.3f s"
          % (how, low, r["elapsed"]))
    check(r["elapsed"] <= 1.0, "%s poller: at most 1 s: %.3f s" % (how, r["elapsed"]))


def grpc_python():
    for py in ("/usr/bin/python3", sys.executable):
        if os.path.exists(py) and subprocess.run([py, "-c", "import grpc"],
                                                 capture_output=True).returncode == 0:
            return py
    return None


def grpc_client(py, port, sluice, mode, n, size):
    p = subprocess.run([py, "-c", GRPC, mode, str(port), str(n), str(size)],
                       env=child_env(sluice), capture_output=True, text=True, timeout=120)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        print("grpc client: %r" % p.stderr[-500:])
        return {"ok": 0, "elapsed": 0}
    return json.loads(lines[-1])


def grpc_server(py, sluice):
    p = subprocess.Popen([py, "-c", GRPC, "server"], env=child_env(sluice) if sluice else None,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return p, int(p.stdout.readline())


def test_grpc():
    py = grpc_python()
    if py is None:
        print("not run: gRPC (Debian: python3-grpcio, which scripts/deps.sh test installs)")
        return
    # (what, whose rule: client or server, rule, mode, calls, bytes, seconds: low, high)
    cases = [("100 unary calls from a client under --send 50/s", "client", "50/s", "up", 100, 10,
              0, 6),
             ("20 x 100 KiB requests from a client under --send 512KiB/s", "client", "512KiB/s",
              "up", 20, 100 * KiB, 3.7, 5.5),
             ("10 x 100 KiB answers from a server under --send 512KiB/s", "server", "512KiB/s",
              "down", 10, 100 * KiB, 1.8, 4)]
    for what, whose, rule, mode, n, size, low, high in cases:
        rules = {"SLUICE_SEND": rule}
        srv, port = grpc_server(py, rules if whose == "server" else None)
        r = grpc_client(py, port, rules if whose == "client" else {}, mode, n, size)
        srv.stdin.close()
        srv.wait(20)
        print("measured: grpc: %s: %d right in %.3f s" % (what, r["ok"], r["elapsed"]))
        check(r["ok"] == n, "grpc: %s: every answer right (%d of %d)" % (what, r["ok"], n))
        check(low <= r["elapsed"] <= high, "grpc: %s: in %.1f to %.1f s: %.3f s"
              % (what, low, high, r["elapsed"]))


def main():
    test_poller("epoll")
    test_poller("poll")
    test_grpc()
    finish()


if __name__ == "__main__":
    main()
