#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Byte rates under the shim, byte-exact: send and recv at 200 KB/s (sha256
of what was sent and received), with SIGALRM every 20 ms during the waits,
with partial writes on a non-blocking socket, and with os.write/os.read
(write/read on a socket fd). A throttled blocking receiver does not spin:
each read waits for 2 ms of the rate (at most half the burst)."""
import sys

from shim_lib import PAYLOAD_SRC, Server, check, finish, payload, run_child
import hashlib

RATE = 200000
SIZE = 200000

SENDER = PAYLOAD_SRC + r'''
import json, os, select, signal, socket, sys, time
port, size, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
data = payload(size)
alarms = [0]
if "signal" in mode:
    signal.signal(signal.SIGALRM, lambda *a: alarms.__setitem__(0, alarms[0] + 1))
    signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
s = socket.create_connection(("127.0.0.1", port))
t0 = time.monotonic()
calls = partial = 0
if "nonblock" in mode:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    s.setblocking(False)
    off = 0
    while off < size:
        select.select([], [s], [], 5)
        try:
            n = s.send(data[off:off + 65536])
        except BlockingIOError:
            continue
        calls += 1
        partial += n < min(65536, size - off)
        off += n
elif "write" in mode:
    off = 0
    while off < size:
        off += os.write(s.fileno(), data[off:off + 100000]); calls += 1
else:
    s.sendall(data); calls = 1
el = time.monotonic() - t0
signal.setitimer(signal.ITIMER_REAL, 0)
s.close()
print(json.dumps({"elapsed": el, "alarms": alarms[0], "calls": calls, "partial": partial}))
'''

RECEIVER = r'''
import hashlib, json, os, signal, socket, sys, time
port, size, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
alarms = [0]
if "signal" in mode:
    signal.signal(signal.SIGALRM, lambda *a: alarms.__setitem__(0, alarms[0] + 1))
    signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
s = socket.create_connection(("127.0.0.1", port))
h, n, t0, biggest, reads = hashlib.sha256(), 0, None, 0, 0
while True:
    b = os.read(s.fileno(), 65536) if "read" in mode else s.recv(65536)
    if t0 is None: t0, cpu0 = time.monotonic(), time.process_time()
    if not b: break
    h.update(b); n += len(b); biggest = max(biggest, len(b)); reads += 1
el = time.monotonic() - t0
signal.setitimer(signal.ITIMER_REAL, 0)
cpu = time.process_time() - cpu0
print(json.dumps({"elapsed": el, "n": n, "sha": h.hexdigest(), "alarms": alarms[0],
                  "biggest": biggest, "cpu": cpu, "reads": reads}))
'''

EXPECT = hashlib.sha256(payload(SIZE)).hexdigest()
BURST = RATE // 200  # the policy's default burst: 5 ms of the rate


def test_send(mode):
    srv = Server("sink", slow=(2048, 0.015) if "nonblock" in mode else None)
    # With signals, waits of 100 ms (a burst of 20 KB) rather than 5 ms:
    # a signal that comes while the sender waits for the CPU after a sleep
    # interrupts nothing (its handler runs when sendall returns), and on a
    # loaded machine most 5 ms sleeps end in such a wait (CI: 1 handler in
    # 0.995 s once, under the ASan build beside 3 other tests).
    burst = 20000 if "signal" in mode else BURST
    spec = "%dB/s" % RATE + (",burst=%dB" % burst if burst != BURST else "")
    try:
        rc, r, _ = run_child(None, {"SLUICE_SEND": spec},
                             argv=[sys.executable, "-c", SENDER, str(srv.port), str(SIZE), mode])
        got = srv.wait_results(1)
    finally:
        srv.stop()
    check(rc == 0 and r is not None and len(got) == 1, "send %s: child ran" % mode)
    if not r or not got:
        return
    el = r["elapsed"]
    print("measured: send %s: %d bytes at %d B/s in %.3f s, %d calls, %d partial, %d alarms"
          % (mode, SIZE, RATE, el, r["calls"], r["partial"], r["alarms"]))
    check(got[0] == (SIZE, EXPECT), "send %s: receiver got the exact bytes" % mode)
    check(SIZE <= RATE * el + burst, "send %s: %d bytes <= %d B/s * %.3f s + %d"
          % (mode, SIZE, RATE, el, burst))
    check(el < 3 * (SIZE - burst) / RATE, "send %s: elapsed %.3f s < 3x the minimum" % (mode, el))
    if "nonblock" in mode:
        check(r["partial"] > 0, "send %s: the kernel took part of some sends (%d)"
              % (mode, r["partial"]))
    if "signal" in mode:
        check(r["alarms"] >= 10, "send %s: %d signals arrived during the waits"
              % (mode, r["alarms"]))


def test_recv(mode):
    srv = Server("source", payload(SIZE))
    try:
        rc, r, _ = run_child(None, {"SLUICE_RECV": "%dB/s" % RATE},
                             argv=[sys.executable, "-c", RECEIVER, str(srv.port), str(SIZE),
                                   mode])
    finally:
        srv.stop()
    check(rc == 0 and r is not None, "recv %s: child ran" % mode)
    if not r:
        return
    el = r["elapsed"]
    print("measured: recv %s: %d bytes at %d B/s in %.3f s, largest read %d, %d reads, "
          "%.3f s CPU, %d alarms" % (mode, r["n"], RATE, el, r["biggest"], r["reads"], r["cpu"],
                                     r["alarms"]))
    check(r["n"] == SIZE and r["sha"] == EXPECT, "recv %s: exact bytes" % mode)
    # The first read's bytes arrive before the clock starts: at most a burst.
    check(r["n"] - r["biggest"] <= RATE * el + BURST, "recv %s: %d bytes after the first "
          "read <= %d B/s * %.3f s + %d" % (mode, r["n"] - r["biggest"], RATE, el, BURST))
    check(r["biggest"] <= BURST, "recv %s: no read larger than the burst (%d)"
          % (mode, r["biggest"]))
    check(el < 3 * SIZE / RATE, "recv %s: elapsed %.3f s < 3x the minimum" % (mode, el))
    # A blocking receive waits for 2 ms of the rate (at most half the
    # burst), not for one byte, which made the receiver spin (22,000 reads
    # of ~9 bytes here, 0.3 s of CPU; a C receiver at full CPU).
    least = min(RATE // 500, BURST // 2)
    check(r["reads"] <= 1.2 * SIZE / least + 10, "recv %s: %d reads <= 1.2 x %d / %d + 10"
          % (mode, r["reads"], SIZE, least))
    # The reads above are the strict check; this one is generous, for a
    # slow machine (the loop's own CPU only, interpreter start excluded).
    check(r["cpu"] < 0.5 * el, "recv %s: the receive loop used %.3f s of CPU in %.3f s (< 1/2)"
          % (mode, r["cpu"], el))
    if "signal" in mode:
        check(r["alarms"] >= 10, "recv %s: %d signals arrived" % (mode, r["alarms"]))


def main():
    test_send("sendall")
    test_send("sendall+signal")
    test_send("nonblock")
    test_send("write")
    test_recv("recv")
    test_recv("read+signal")
    finish()


if __name__ == "__main__":
    main()
