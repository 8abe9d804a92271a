#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Supervised mode: a send or receive with a bad pointer answers as the
kernel does.

badptr (supervised/badptr.c) makes 14 socket calls with NULL, tiny or
half-unmapped buffers, iovec arrays and address pointers, natively and
under --supervise with never-limiting send and receive rules, against a
peer on 127.0.0.1 that counts what each sending connection delivered and
sends 16384 bytes to each receiving one. Each call's result, errno, and
what the stream still delivered afterwards (what the call consumed) must be
the same in both runs, and so must the bytes the peer received. Before:
a write whose buffer ends in an unmapped page sent the readable part and
returned its count (native: EFAULT, nothing sent), and a recvfrom with a
bad address or length pointer returned 100 (native: EFAULT, the 100 bytes
consumed)."""
import subprocess

from supervise_lib import SLUICE, Server, build_c, check, env_clean, run_main

PAYLOAD = bytes(i & 255 for i in range(16384))


def body():
    prog = build_c("badptr")
    got = []
    for cmd in ([], [SLUICE, "--supervise", "--send", "10GB/s", "--recv", "10GB/s", "--"]):
        peer = Server("ask", PAYLOAD)
        try:
            got.append(subprocess.run(cmd + [prog, str(peer.port)], capture_output=True,
                                      text=True, timeout=60, env=env_clean()))
            peer.wait_digests(6)
            got[-1].sent = sorted(peer.sizes)
        finally:
            peer.close()
    native, sup = got
    native_got, sup_got = native.sent, sup.sent
    check(native.returncode == 0 and sup.returncode == 0,
          "badptr ran natively and supervised (rc %d, %d: %r)"
          % (native.returncode, sup.returncode, sup.stderr[-300:]))
    a, b = native.stdout.splitlines(), sup.stdout.splitlines()
    print("measured: native:\n  " + "\n  ".join(a))
    check(len(a) == 14 and len(b) == 14, "14 cases each (%d, %d)" % (len(a), len(b)))
    for n, s in zip(a, b):
        check(n.split() == s.split(), "as natively: %s | supervised: %s"
              % (" ".join(n.split()), " ".join(s.split())))
    check(native_got == sup_got == [0] * 6,
          "the peer received nothing from the failed sends (native %s, supervised %s)"
          % (native_got, sup_got))


if __name__ == "__main__":
    run_main(body)
