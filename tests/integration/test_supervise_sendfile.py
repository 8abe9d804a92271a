#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""sendfile and splice into a throttled socket in supervised mode, done by
the supervisor as a send from the file or the pipe (supervise/source.c),
where they failed with EINVAL (nginx answered 200 with 0 bytes; Go lost
what it had spliced into its pipe): socket.sendfile (an offset), sendfile
on the file's own offset, splice from a pipe, each 2 MiB under
--send 1MiB/s: at least the 2 s less the burst, byte-exact, the offsets
moved as the kernel's call moves them; nginx serves 2 MiB the same way
with `sendfile on` (its worker dropped to nobody), and, run as root, with
`user www-data; sendfile off;` (plain writes) and `user root; sendfile on;`
(a worker that keeps root)."""
import ast
import hashlib
import os
import pwd
import shutil
import socket
import subprocess
import time

from supervise_lib import SLUICE, TMP, check, env_clean, run_main

MiB = 1 << 20

CLIENT = r'''
import hashlib, os, socket, sys, threading, time
mode, path = sys.argv[1], sys.argv[2]
lis = socket.socket(); lis.bind(("127.0.0.1", 0)); lis.listen(1)
got = []
def sink():
    c, _ = lis.accept(); h = hashlib.sha256(); n = 0
    while True:
        b = c.recv(65536)
        if not b: break
        h.update(b); n += len(b)
    got.append([n, h.hexdigest()])
t = threading.Thread(target=sink); t.start()
s = socket.create_connection(lis.getsockname())
data = open(path, "rb").read()
t0 = time.monotonic()
if mode == "sendfile":
    with open(path, "rb") as f:
        sent = s.sendfile(f)
        pos = f.tell()
elif mode == "sendfile-own-offset":
    fd = os.open(path, os.O_RDONLY); sent = 0
    while True:
        k = os.sendfile(s.fileno(), fd, None, 1 << 20)
        if k == 0: break
        sent += k
    pos = os.lseek(fd, 0, os.SEEK_CUR)
else:
    r, w = os.pipe(); sent = 0
    for off in range(0, len(data), 65536):
        os.write(w, data[off:off + 65536])
        left = 65536
        while left:
            k = os.splice(r, s.fileno(), left); sent += k; left -= k
    pos = len(data)
el = time.monotonic() - t0
s.close(); t.join()
print(repr({"sent": sent, "pos": pos, "elapsed": el, "got": got,
            "want": [len(data), hashlib.sha256(data).hexdigest()]}))
'''


def body():
    data = os.urandom(2 * MiB)
    path = os.path.join(TMP, "data")
    with open(path, "wb") as f:
        f.write(data)
    client = os.path.join(TMP, "client.py")
    with open(client, "w") as f:
        f.write(CLIENT)
    floor = (2 * MiB - 5243) / MiB  # burst: 5 ms of the rate
    for mode in ("sendfile", "sendfile-own-offset", "splice"):
        r = subprocess.run([SLUICE, "--supervise", "--send", "1MiB/s", "--", "python3", client,
                            mode, path], capture_output=True, text=True, env=env_clean(),
                           timeout=60)
        res = ast.literal_eval(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else {}
        print("measured: %s: %r" % (mode, {k: res.get(k) for k in ("sent", "pos", "elapsed")}))
        check(r.returncode == 0 and res.get("got") == [res.get("want")],
              "%s: the peer got the 2 MiB exactly (%r)" % (mode, r.stderr[-300:]))
        check(res.get("sent") == 2 * MiB and res.get("pos") == 2 * MiB,
              "%s: the count and the offset are the kernel's (%r, %r)" % (mode, res.get("sent"),
                                                                        res.get("pos")))
        el = res.get("elapsed", 0)
        check(floor <= el <= 6, "%s: %.3f s at 1 MiB/s (>= %.3f s, <= 6 s)" % (mode, el, floor))

    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                      else None)
    if nginx is None:
        print("not run: nginx is not installed")
        return
    os.chmod(TMP, 0o755)
    nginx_case(nginx, data, path, floor, None, "on")
    # A named worker user needs a root master (nginx ignores `user` otherwise).
    if os.geteuid() != 0:
        print("not run: nginx with user www-data and user root (the master must run as root)")
        return
    try:
        pwd.getpwnam("www-data")
        nginx_case(nginx, data, path, floor, "www-data", "off")
    except KeyError:
        print("not run: nginx with user www-data (no such user)")
    nginx_case(nginx, data, path, floor, "root", "on")


def nginx_case(nginx, data, path, floor, user, sendfile):
    """nginx (its worker as USER, or nginx's default nobody when None) with
    `sendfile SENDFILE` under --send 1MiB/s serves the 2 MiB file at PATH:
    byte-exact, no faster than FLOOR s."""
    what = "nginx user %s, sendfile %s" % (user or "(default)", sendfile)
    root = os.path.join(TMP, "ngx-%s-%s" % (user or "default", sendfile))
    os.makedirs(os.path.join(root, "www"))
    os.makedirs(os.path.join(root, "tmp"))
    os.chmod(root, 0o755)
    os.chmod(os.path.join(root, "www"), 0o755)
    shutil.copy(path, os.path.join(root, "www", "big"))
    os.chmod(os.path.join(root, "www", "big"), 0o644)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    conf = os.path.join(root, "nginx.conf")
    with open(conf, "w") as f:
        f.write("%sdaemon off; worker_processes 1; error_log %s/error.log; pid %s/nginx.pid;\n"
                "events { worker_connections 64; }\n"
                "http { access_log off; sendfile %s; client_body_temp_path %s/tmp; "
                "proxy_temp_path %s/tmp; fastcgi_temp_path %s/tmp; uwsgi_temp_path %s/tmp; "
                "scgi_temp_path %s/tmp; server { listen 127.0.0.1:%d; root %s/www; } }\n"
                % (("user %s; " % user if user else "", root, root, sendfile) + (root,) * 5
                   + (port, root)))
    p = subprocess.Popen([SLUICE, "--supervise", "--send", "1MiB/s", "--", nginx, "-c", conf,
                          "-p", root], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env_clean())
    resp, el = b"", 0.0
    try:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        # The master listens before it forks the worker, which is root until
        # it drops to its user: wait for that (5 s at most).
        want = pwd.getpwnam(user).pw_uid if user is not None else None
        uids = worker_uids(p.pid)
        for _ in range(100):
            if uids and (want is None or uids == [want]):
                break
            time.sleep(0.05)
            uids = worker_uids(p.pid)
        t0 = time.monotonic()
        c = socket.create_connection(("127.0.0.1", port), timeout=30)
        c.sendall(b"GET /big HTTP/1.0\r\nHost: x\r\n\r\n")
        for _ in range(100000):  # 2 MiB in 64 KiB reads and less: bounded
            b = c.recv(65536)
            if not b:
                break
            resp += b
        el = time.monotonic() - t0
        c.close()
    finally:
        p.terminate()
        _, err = p.communicate(timeout=10)
    body_ = resp.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in resp else b""
    print("measured: %s: %d bytes in %.3f s (worker uids %r)" % (what, len(body_), el, uids))
    if user is not None:
        check(uids == [want], "%s: the worker runs as uid %d (%r)" % (what, want, uids))
    check(hashlib.sha256(body_).hexdigest() == hashlib.sha256(data).hexdigest(),
          "%s: the 2 MiB arrive intact (%d bytes, sha256; %r)"
          % (what, len(body_), err.decode(errors="replace")[-300:]))
    check(floor <= el <= 6, "%s: %.3f s at 1 MiB/s (>= %.3f s, <= 6 s)" % (what, el, floor))
    with open(os.path.join(root, "error.log")) as f:
        log = f.read()
    check("sendfile() failed" not in log and "[alert]" not in log and "[crit]" not in log,
          "%s: nginx logged no failure (%r)" % (what, log[-300:]))


def worker_uids(launcher):
    """The real uids of the nginx workers under the launcher's pid (the
    master is its child, the workers the master's)."""
    def field(pid, name):
        try:
            with open("/proc/%s/status" % pid) as f:
                return next((l.split()[1] for l in f if l.startswith(name + ":")), None)
        except OSError:
            return None
    pids = [d for d in os.listdir("/proc") if d.isdigit()]
    masters = {d for d in pids if field(d, "PPid") == str(launcher)}
    return sorted(int(field(d, "Uid")) for d in pids if field(d, "PPid") in masters)


if __name__ == "__main__":
    run_main(body)
