#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Non-blocking connects under a full conns limit are deferred, not waited
for in place (a single-threaded event loop would wait for a close only it
can make). Each case runs a preloaded child python against a server in this
process (not preloaded) that counts the connections it sees.

The cases the reverted first attempt (358b66b) got wrong come first:
  dup      a dup of a pending fd shares its connection: the slot taken when
           the connect starts is held until the last fd closes;
  dupfirst the original fd of a pending connect is closed before it starts:
           the dup still gets its connect;
  duporder ... and keeps its place: a connect that waited later does not
           get the freed slot first (it did, 10 of 10);
  maxdelay max-delay ends a deferred connect: SO_ERROR is the rule's errno;
  sndtimeo SO_SNDTIMEO ends it too: SO_ERROR is ETIMEDOUT;
  sleep    a nonblock=sleep rate rule still sleeps when a conns rule matches;
  reuse    a pending fd closed, its number reused by a new socket, then the
           slot frees: the new socket is not connected, the slot not lost;
  race     the same with the close in one thread and the freeing close in
           another, many times;
then the plain behaviour:
  asyncio  5 tasks making 20 requests at SLUICE_CONNS=2 (no max-delay)
           take about 10 server replies, never more than 2 connections;
  basic    EINPROGRESS at once, not writable, SO_ERROR 0 and EALREADY while
           both slots are held; started within 100 ms of a close; data flows.
"""
import json
import select
import socket
import subprocess
import sys
import threading
import time

from shim_lib import check, finish, run_child

PRELUDE = r'''
import errno, json, os, select, socket, sys, threading, time
port = int(sys.argv[1])
ADDR = ("127.0.0.1", port)
out = {}
def nbconnect():
    s = socket.socket()
    s.setblocking(False)
    t0 = time.monotonic()
    rc = s.connect_ex(ADDR)
    return s, errno.errorcode.get(rc, str(rc)), time.monotonic() - t0
def writable(s, timeout):
    t0 = time.monotonic()
    _, w, _ = select.select([], [s], [], timeout)
    return bool(w), time.monotonic() - t0
def soerr(s):
    e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    return errno.errorcode.get(e, str(e))
def done():
    print(json.dumps(out), flush=True)
'''

CASES = {
    "basic": ("conns:2", r'''
a, _, _ = nbconnect(); b, _, _ = nbconnect()
writable(a, 2); writable(b, 2)
c, out["rc"], out["connect_s"] = nbconnect()
out["held_writable"], _ = writable(c, 0.3)
out["held_soerror"] = soerr(c)
out["again"] = errno.errorcode.get(c.connect_ex(ADDR), "0")
a.close()
out["after_close"], out["after_close_s"] = writable(c, 3)
out["soerror"] = soerr(c)
c.setblocking(True); c.settimeout(3); c.sendall(b"x"); out["echo"] = c.recv(1).decode()
c.connect_ex(ADDR)  # the kernel: 0 for the call that sees the connect done
out["again_after"] = errno.errorcode.get(c.connect_ex(ADDR), "0")
done()
'''),
    "dup": ("conns:1", r'''
a, _, _ = nbconnect(); writable(a, 2)
b, out["rc"], _ = nbconnect()
b2 = b.dup()
a.close()
out["b_started"], _ = writable(b2, 3)
b.close()                    # b2 still holds the connection and its slot
c, _, _ = nbconnect()
out["c_held"], _ = writable(c, 0.4)
b2.close()
out["c_started"], out["c_s"] = writable(c, 3)
done()
'''),
    "dupfirst": ("conns:1", r'''
a, _, _ = nbconnect(); writable(a, 2)
b, out["rc"], _ = nbconnect()
b2 = b.dup()
b.close()
a.close()
out["b2_started"], _ = writable(b2, 3)
out["soerror"] = soerr(b2)
b2.setblocking(True); b2.settimeout(3); b2.sendall(b"x"); out["echo"] = b2.recv(1).decode()
c, _, _ = nbconnect()
out["c_held"], _ = writable(c, 0.4)
b2.close()
out["c_started"], _ = writable(c, 3)
done()
'''),
    "duporder": ("conns:1", r'''
first = []
for i in range(10):
    a, _, _ = nbconnect(); writable(a, 2)
    b, _, _ = nbconnect()
    b2 = b.dup(); b.close()      # b waited first; its dup keeps its turn
    c, _, _ = nbconnect()        # c waits after it
    a.close()                    # the slot frees: the first waiter's
    t0 = time.monotonic()
    got = None
    while got is None and time.monotonic() - t0 < 3:
        _, w, _ = select.select([], [b2, c], [], 3)
        if w:
            got = "dup" if b2 in w else "later"
    first.append(got)
    b2.close(); c.close()
    time.sleep(0.05)
out["first"] = first
done()
'''),
    "maxdelay": ("conns:1,max-delay=300ms", r'''
a, _, _ = nbconnect(); writable(a, 2)
b, out["rc"], out["connect_s"] = nbconnect()
out["ended"], out["ended_s"] = writable(b, 3)
out["soerror"] = soerr(b)
done()
'''),
    "sndtimeo": ("conns:1", r'''
import struct
a, _, _ = nbconnect(); writable(a, 2)
b = socket.socket()
b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 0, 300000))
b.setblocking(False)
out["rc"] = errno.errorcode.get(b.connect_ex(ADDR), "0")
out["ended"], out["ended_s"] = writable(b, 3)
out["soerror"] = soerr(b)
done()
'''),
    "sleep": ("connect:5/s,burst=1,nonblock=sleep;conns:4", r'''
a, _, _ = nbconnect()
b, out["rc"], out["connect_s"] = nbconnect()
done()
'''),
    "reuse": ("conns:1", r'''
a, _, _ = nbconnect(); writable(a, 2)
b, out["rc"], _ = nbconnect()
bfd = b.fileno()
b.close()
x = socket.socket(); x.setblocking(False)
out["same_number"] = x.fileno() == bfd
a.close()
time.sleep(0.2)
select.select([x], [x], [], 0.1)   # runs the shim's timer
try:
    x.getpeername(); out["x_connected"] = True
except OSError:
    out["x_connected"] = False
c, _, _ = nbconnect()
out["c_started"], out["c_s"] = writable(c, 1)
done()
'''),
    "race": ("conns:1", r'''
bad = 0; stuck = 0
for i in range(40):
    a, _, _ = nbconnect(); writable(a, 2)
    b, _, _ = nbconnect()
    t = threading.Thread(target=a.close); t.start()
    b.close()
    x = socket.socket(); x.setblocking(False)
    t.join()
    select.select([x], [x], [], 0.02)
    try:
        x.getpeername(); bad += 1
    except OSError:
        pass
    x.close()
    c, rc, _ = nbconnect()
    # A lost slot never frees: 3 s tells it from a slow machine (a SYN the
    # kernel retransmits after 1 s).
    ok, _ = writable(c, 3)
    if not ok:
        stuck += 1
        out.setdefault("stuck_rc", []).append(rc)
    c.close()
out["bad"] = bad; out["stuck"] = stuck
done()
'''),
}


def serve(lst, count, stop):
    """Accept and echo one byte per connection until stop is set."""
    conns = []

    def echo(c):
        c.settimeout(5)
        try:
            d = c.recv(1)
            if d:
                c.sendall(d)
        except OSError:
            pass

    while not stop.is_set():
        try:
            c, _ = lst.accept()
        except OSError:
            continue
        count.append(time.monotonic())
        conns.append(c)
        threading.Thread(target=echo, args=(c,), daemon=True).start()
    for c in conns:
        c.close()


def run(name):
    rules, body = CASES[name]
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(64)
    lst.settimeout(0.1)
    count, stop = [], threading.Event()
    th = threading.Thread(target=serve, args=(lst, count, stop), daemon=True)
    th.start()
    try:  # a connect that waits in place for a slot only it can free hangs
        rc, res, _ = run_child(None, {"SLUICE_RULES": rules}, timeout=20,
                               argv=[sys.executable, "-c", PRELUDE + body,
                                     str(lst.getsockname()[1])])
    except subprocess.TimeoutExpired:
        rc, res = -1, None
    stop.set()
    th.join(timeout=5)
    lst.close()
    check(rc == 0 and res is not None, "%s: the child ran (rc %d)" % (name, rc))
    return res or {}, len(count)


ASYNCIO = r'''
import asyncio, json, sys, time
port = int(sys.argv[1])
async def worker(q, done):
    while not q.empty():
        q.get_nowait()
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"x")
        await w.drain()
        done.append(await r.readexactly(1))
        w.close()
        await w.wait_closed()
async def main():
    q = asyncio.Queue()
    for i in range(20):
        q.put_nowait(i)
    done = []
    t0 = time.monotonic()
    await asyncio.gather(*(worker(q, done) for _ in range(5)))
    print(json.dumps({"elapsed": time.monotonic() - t0, "answers": len(done)}), flush=True)
asyncio.run(main())
'''
REPLY_S = 0.2


def run_asyncio():
    """5 asyncio tasks, 20 requests, conns:2, a server that answers each
    after REPLY_S: (elapsed, answers, the most connections open at once)."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(64)
    lst.settimeout(0.1)
    stop, lock = threading.Event(), threading.Lock()
    opened, most = set(), [0]

    def still_open(c):
        """True unless the client's FIN has arrived (its close)."""
        try:  # (a socket with a timeout would wait in recv: select first)
            r, _, _ = select.select([c], [], [], 0)
            return not r or c.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            return False

    def handle(c):
        # Counted at each accept: the connections whose client has not
        # closed yet (a handler may not have seen an EOF already there).
        with lock:
            most[0] = max(most[0], 1 + sum(1 for o in opened if still_open(o)))
            opened.add(c)
        c.settimeout(10)
        try:
            if c.recv(1):
                time.sleep(REPLY_S)
                c.sendall(b"y")
                c.recv(1)  # until the client closes
        except OSError:
            pass
        with lock:
            opened.discard(c)
        c.close()

    def serve():
        while not stop.is_set():
            try:
                c, _ = lst.accept()
            except OSError:
                continue
            threading.Thread(target=handle, args=(c,), daemon=True).start()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        rc, res, _ = run_child(None, {"SLUICE_CONNS": "2"}, timeout=30,
                               argv=[sys.executable, "-c", ASYNCIO, str(lst.getsockname()[1])])
    except subprocess.TimeoutExpired:
        rc, res = -1, None
    stop.set()
    th.join(timeout=5)
    lst.close()
    check(rc == 0 and res is not None, "asyncio: the client ran (rc %d)" % rc)
    res = res or {}
    return res.get("elapsed", -1), res.get("answers", 0), most[0]


def main():
    elapsed, answers, most = run_asyncio()
    check(answers == 20, "asyncio: 20 answers (%d)" % answers)
    # 20 requests, 2 at a time, each at least REPLY_S: at least 10 x REPLY_S.
    check(10 * REPLY_S * 0.98 <= elapsed < 10 * REPLY_S * 1.5,
          "asyncio: 5 tasks, 20 requests at conns:2 take about 10 replies (%.3f s, "
          "reply %.1f s)" % (elapsed, REPLY_S))
    check(most <= 2, "asyncio: never more than 2 connections open (%d)" % most)

    r, n = run("dup")
    check(r.get("rc") == "EINPROGRESS", "dup: the connect is deferred (%s)" % r.get("rc"))
    check(r.get("b_started") is True, "dup: it starts on its dup when the slot frees")
    check(r.get("c_held") is False,
          "dup: the dup still holds the slot after the original's close (c not writable)")
    check(r.get("c_started") is True, "dup: the slot frees when the dup closes")

    r, n = run("dupfirst")
    check(r.get("b2_started") is True and r.get("soerror") == "0",
          "dupfirst: the dup of a closed pending fd connects (%s)" % r.get("soerror"))
    check(r.get("echo") == "x", "dupfirst: data flows on it")
    check(r.get("c_held") is False and r.get("c_started") is True,
          "dupfirst: it holds the slot until it closes")

    r, n = run("duporder")
    print("measured: duporder: which got the freed slot first: %s" % r.get("first"))
    check(r.get("first") == ["dup"] * 10,
          "duporder: a waiting connect whose first fd was closed keeps its turn on its dup "
          "(10 of 10 before a later waiter): %s" % r.get("first"))

    r, n = run("maxdelay")
    check(r.get("rc") == "EINPROGRESS" and r.get("connect_s", 1) < 0.05,
          "maxdelay: EINPROGRESS at once (%.3f s)" % r.get("connect_s", -1))
    check(r.get("ended") is True and 0.28 <= r.get("ended_s", 0) < 1.5,
          "maxdelay: ends after max-delay (%.3f s)" % r.get("ended_s", -1))
    check(r.get("soerror") == "ECONNREFUSED",
          "maxdelay: SO_ERROR is the rule's errno (%s)" % r.get("soerror"))
    check(n == 1, "maxdelay: the server saw only the first connection (%d)" % n)

    r, n = run("sndtimeo")
    check(r.get("ended") is True and 0.28 <= r.get("ended_s", 0) < 1.5,
          "sndtimeo: ends after SO_SNDTIMEO (%.3f s)" % r.get("ended_s", -1))
    check(r.get("soerror") == "ETIMEDOUT", "sndtimeo: SO_ERROR ETIMEDOUT (%s)" % r.get("soerror"))
    check(n == 1, "sndtimeo: the server saw only the first connection (%d)" % n)

    r, n = run("sleep")
    check(r.get("connect_s", 0) >= 0.18,
          "sleep: a nonblock=sleep rate rule sleeps in connect with a conns rule (%.3f s)"
          % r.get("connect_s", -1))

    r, n = run("reuse")
    check(r.get("x_connected") is False,
          "reuse: a new socket on a closed pending fd's number is not connected (same "
          "number: %s)" % r.get("same_number"))
    check(r.get("c_started") is True and r.get("c_s", 1) < 0.5,
          "reuse: the abandoned connect took no slot (%.3f s)" % r.get("c_s", -1))

    r, n = run("race")
    check(r.get("bad") == 0, "race: no new socket was connected by a racing start (%s of 40)"
          % r.get("bad"))
    check(r.get("stuck") == 0, "race: no slot was lost (%s of 40 stuck)" % r.get("stuck"))

    r, n = run("basic")
    check(r.get("rc") == "EINPROGRESS" and r.get("connect_s", 1) < 0.05,
          "basic: EINPROGRESS at once (%.3f s)" % r.get("connect_s", -1))
    check(r.get("held_writable") is False and r.get("held_soerror") == "0",
          "basic: not writable, SO_ERROR 0 while the slots are held")
    check(r.get("again") == "EALREADY", "basic: a second connect: EALREADY (%s)" % r.get("again"))
    check(r.get("after_close") is True and r.get("after_close_s", 9) < 0.1,
          "basic: started within 100 ms of a close (%.3f s)" % r.get("after_close_s", -1))
    check(r.get("soerror") == "0" and r.get("echo") == "x", "basic: connected, data flows")
    check(r.get("again_after") == "EISCONN", "basic: then EISCONN (%s)" % r.get("again_after"))
    check(n == 3, "basic: the server saw 3 connections (%d)" % n)
    finish()


if __name__ == "__main__":
    main()
