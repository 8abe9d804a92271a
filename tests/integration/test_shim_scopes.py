#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Scopes under the shim: per=fd gives each connection its own bucket,
per=peer one bucket per remote address (127.0.0.1 and 127.0.0.2 are two
peers; two connections to one peer share), per=process one for all."""
import sys

from shim_lib import Server, check, finish, run_child

RATE = 100000
EACH = 100000

# Send EACH bytes on one connection per port given, all at once (threads).
SENDERS = r'''
import json, socket, sys, threading, time
each = int(sys.argv[1])
targets = [(h, int(p)) for h, p in (a.split(":") for a in sys.argv[2:])]
socks = [socket.create_connection(t) for t in targets]
done = [0.0] * len(socks)
t0 = time.monotonic()
def run(i):
    socks[i].sendall(b"z" * each)
    done[i] = time.monotonic() - t0
ths = [threading.Thread(target=run, args=(i,)) for i in range(len(socks))]
for t in ths: t.start()
for t in ths: t.join()
for s in socks: s.close()
print(json.dumps({"done": done, "elapsed": time.monotonic() - t0}))
'''


def senders(spec, targets):
    return run_child(None, {"SLUICE_SEND": spec},
                     argv=[sys.executable, "-c", SENDERS, str(EACH)] +
                     ["%s:%d" % t for t in targets])


def main():
    a = Server("sink")
    b = Server("sink", host="127.0.0.2")
    burst = RATE // 200
    try:
        # per=fd: three connections, each at the full rate.
        rc, r, _ = senders("%dB/s,per=fd" % RATE, [("127.0.0.1", a.port)] * 3)
        check(rc == 0 and r is not None, "per=fd: child ran")
        if r:
            print("measured: per=fd, 3 x %d bytes at %d B/s each: done at %s s"
                  % (EACH, RATE, ["%.3f" % d for d in r["done"]]))
            for d in r["done"]:
                check(EACH <= RATE * d + burst, "per=fd: %d bytes <= %d B/s * %.3f s + %d"
                      % (EACH, RATE, d, burst))
            # One shared bucket would need 3 s for all three.
            check(r["elapsed"] < 2.5, "per=fd: buckets are separate (%.3f s < 2.5 s; "
                  "shared: >= 3 s)" % r["elapsed"])
        # per=process: the same three share one bucket.
        rc, r, _ = senders("%dB/s" % RATE, [("127.0.0.1", a.port)] * 3)
        check(rc == 0 and r is not None, "per=process: child ran")
        if r:
            print("measured: per=process, 3 x %d bytes at %d B/s shared: %.3f s"
                  % (EACH, RATE, r["elapsed"]))
            check(3 * EACH <= RATE * r["elapsed"] + burst, "per=process: %d bytes <= %d B/s"
                  " * %.3f s + %d" % (3 * EACH, RATE, r["elapsed"], burst))
        # per=peer: two connections to 127.0.0.1 share its bucket, the one
        # to 127.0.0.2 has its own.
        rc, r, _ = senders("%dB/s,per=peer" % RATE,
                           [("127.0.0.1", a.port), ("127.0.0.1", a.port), ("127.0.0.2", b.port)])
        check(rc == 0 and r is not None, "per=peer: child ran")
        if r:
            d1 = max(r["done"][0], r["done"][1])
            d2 = r["done"][2]
            print("measured: per=peer: 2 x %d bytes to 127.0.0.1 done at %.3f s, %d bytes to "
                  "127.0.0.2 at %.3f s" % (EACH, d1, EACH, d2))
            check(2 * EACH <= RATE * d1 + burst, "per=peer: 127.0.0.1 got %d bytes <= %d B/s "
                  "* %.3f s + %d" % (2 * EACH, RATE, d1, burst))
            check(EACH <= RATE * d2 + burst, "per=peer: 127.0.0.2 within its own rate")
            check(d2 < d1 * 0.8, "per=peer: 127.0.0.2 did not share 127.0.0.1's bucket")
        got = a.wait_results(8) + b.wait_results(1)
        check(all(n == EACH for n, _ in got) and len(got) == 9,
              "every connection delivered %d bytes (%d connections)" % (EACH, len(got)))
    finally:
        a.stop()
        b.stop()
    finish()


if __name__ == "__main__":
    main()
