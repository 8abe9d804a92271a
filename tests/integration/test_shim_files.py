#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fds that are not sockets (a file, a pipe) pass through untouched under
rules that would take half an hour to move their bytes (shim/fd.c: the fd
byte says "pass" for anything but a socket)."""
import os

from shim_lib import LIB, check, finish, run_child


def main():
    if not os.path.exists(LIB):
        check(False, "library %s exists" % LIB)
        finish()
    code = r'''
import json, os, tempfile, time, hashlib
data = os.urandom(2 * 1024 * 1024)
t0 = time.monotonic()
d = tempfile.mkdtemp()
path = os.path.join(d, "f")
fd = os.open(path, os.O_WRONLY | os.O_CREAT)
n = os.write(fd, data)
os.close(fd)
fd = os.open(path, os.O_RDONLY)
back = b""
while True:
    b = os.read(fd, 1 << 20)
    if not b: break
    back += b
os.close(fd)
os.unlink(path); os.rmdir(d)
r, w = os.pipe()
piped = 0
for i in range(64):
    os.write(w, data[:4096])
    piped += len(os.read(r, 4096))
el = time.monotonic() - t0
print(json.dumps({"written": n, "same": back == data, "piped": piped, "elapsed": el}))
'''
    rc, res, _ = run_child(code, {"SLUICE_SEND": "1KB/s", "SLUICE_RECV": "1KB/s"})
    check(rc == 0 and res is not None, "child under SLUICE_SEND/RECV=1KB/s ran (rc=%d)" % rc)
    if res:
        print("measured: 2 MiB file write+read and 64 pipe round trips in %.3f s"
              % res["elapsed"])
        check(res["written"] == 2 * 1024 * 1024 and res["same"], "file bytes intact")
        check(res["piped"] == 64 * 4096, "pipe bytes intact")
        check(res["elapsed"] < 10, "files and pipes not throttled (%.3f s; throttled: ~4000 s)"
              % res["elapsed"])
    finish()



if __name__ == "__main__":
    main()
