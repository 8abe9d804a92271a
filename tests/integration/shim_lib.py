#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Helpers for the shim's integration tests (test_shim_*.py and most others
import this file; its own test is test_shim_files.py). Each runs a scenario in a
child python (sys.executable, the real interpreter) under
LD_PRELOAD=$SL_BUILD/libsluice.so with SLUICE_* variables, while the
parent, not preloaded, plays the unthrottled peer on 127.0.0.1 with ports
chosen by the kernel. The child prints one JSON line of measurements; the
parent checks it: lower bounds strictly (what was admitted can never exceed
rate * elapsed + burst, elapsed measured by the child's own clock), upper
bounds generously (3x, the VM is shared and noisy).
"""
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("SL_BUILD", "build")
LIB = os.path.join(ROOT, BUILD, "libsluice.so") if not os.path.isabs(BUILD) \
    else os.path.join(BUILD, "libsluice.so")
SLUICE = os.path.join(BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD), "sluice")


def debian_module(name):
    """Import module `name`, also from Debian's python3 packages when this
    python3 is another one (pyenv's, say); None if neither has it."""
    import importlib
    try:
        return importlib.import_module(name)
    except ImportError:
        if "/usr/lib/python3/dist-packages" not in sys.path:
            sys.path.append("/usr/lib/python3/dist-packages")
        try:
            return importlib.import_module(name)
        except ImportError:
            return None

failures = []


def check(cond, what):
    """Record and print one checked fact."""
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def read_all(s):
    """Everything a socket sends until EOF."""
    chunks = []
    while True:
        b = s.recv(65536)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def finish():
    """Exit 0 if every check passed."""
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
    print("all checks passed")
    sys.exit(0)


def sanitizer_runtime():
    """An ASan-built library needs the ASan runtime first in the initial
    library list of an uninstrumented program: find it with ldd."""
    try:
        out = subprocess.run(["ldd", LIB], capture_output=True, text=True).stdout
    except OSError:
        return []
    return [l.split("=>")[1].split()[0] for l in out.splitlines()
            if "libasan.so" in l and "=>" in l]


def seg_dir(uid=None, xdg=None):
    """The private directory of a user's segments, as common/segment.c chooses
    it (root: /run/sluice; else a private $XDG_RUNTIME_DIR or /run/user/UID,
    then /dev/shm/sluice-UID)."""
    import stat as st_mod
    uid = os.geteuid() if uid is None else uid
    if uid == 0:
        return "/run/sluice"
    xdg = os.environ.get("XDG_RUNTIME_DIR") if xdg is None else xdg
    for d in (xdg, "/run/user/%d" % uid):
        try:
            st = os.lstat(d) if d and d.startswith("/") else None
        except OSError:
            st = None
        if st and st_mod.S_ISDIR(st.st_mode) and st.st_uid == uid and st.st_mode & 0o77 == 0:
            return d + "/sluice"
    return "/dev/shm/sluice-%d" % uid


def seg_path(name, uid=None):
    """The path of segment name ("shared-NAME", "stat-PID")."""
    return seg_dir(uid) + "/" + name


def child_env(sluice):
    """The environment of a preloaded child: ours without SLUICE_*, plus
    LD_PRELOAD and the given SLUICE_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env["LD_PRELOAD"] = " ".join(sanitizer_runtime() + [LIB])
    if env["LD_PRELOAD"] != LIB:  # python's own allocations are not ours to check
        env["ASAN_OPTIONS"] = "detect_leaks=0:verify_asan_link_order=0"
    env.update(sluice)
    return env


def run_child(code, sluice, timeout=60, argv=None):
    """Run `code` in a preloaded python; return (rc, result, stderr) where
    result is the JSON of the last stdout line (None if there is none)."""
    cmd = argv if argv is not None else [sys.executable, "-c", code]
    p = subprocess.run(cmd, env=child_env(sluice), capture_output=True, text=True,
                       timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    result = json.loads(lines[-1]) if lines else None
    if p.returncode != 0 or result is None:
        print("child rc=%d stdout=%r stderr=%r" % (p.returncode, p.stdout[-2000:],
                                                   p.stderr[-2000:]))
    return p.returncode, result, p.stderr


class Server:
    """A loopback TCP server in a thread of the parent. mode "sink" reads
    every connection to EOF and keeps its sha256 and length; mode "source"
    sends `payload` on each connection and closes it; mode "hold" accepts
    and keeps connections open until stop(). slow=(size, seconds) makes a
    sink read `size` bytes at a time and pause between reads, with a small
    receive buffer, so that the sender's buffer fills up."""

    def __init__(self, mode, payload=b"", host="127.0.0.1", backlog=512, slow=None):
        self.mode, self.payload, self.slow = mode, payload, slow
        self.sock = socket.socket()
        if slow:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.bind((host, 0))
        self.sock.listen(backlog)
        self.port = self.sock.getsockname()[1]
        self.results, self.held = [], []
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.sock.settimeout(0.2)
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(None)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        if self.mode == "hold":
            with self.lock:
                self.held.append(c)
            return
        if self.mode == "source":
            try:
                c.sendall(self.payload)
            finally:
                c.close()
            return
        h, n = hashlib.sha256(), 0
        while True:
            try:
                b = c.recv(self.slow[0] if self.slow else 65536)
            except OSError:
                break
            if self.slow:
                time.sleep(self.slow[1])
            if not b:
                break
            h.update(b)
            n += len(b)
        c.close()
        with self.lock:
            self.results.append((n, h.hexdigest()))

    def wait_results(self, count, timeout=30):
        """Wait until `count` connections were read to EOF."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if len(self.results) >= count:
                    return list(self.results)
            time.sleep(0.01)
        return list(self.results)

    def stop(self):
        self.stopping = True
        self.thread.join()
        self.sock.close()
        for c in self.held:
            c.close()


# A child snippet that defines payload(n): deterministic bytes, the same in
# parent and child.
PAYLOAD_SRC = '''
import hashlib
def payload(n):
    out, i = bytearray(), 0
    while len(out) < n:
        out += hashlib.sha256(i.to_bytes(8, "little")).digest()
        i += 1
    return bytes(out[:n])
'''
exec(PAYLOAD_SRC)


DNS_RESPONDER = r"""
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1], flush=True)
s.settimeout(10)
while True:
    try:
        q, a = s.recvfrom(2048)
    except socket.timeout:
        break
    end = 12 + q[12:].index(b"\0") + 5
    s.sendto(q[:2] + b"\x81\x80" + struct.pack(">HHHH", 1, 1, 0, 0) + q[12:end] + b"\xc0\x0c"
             + struct.pack(">HHIH", 1, 1, 60, 4) + bytes([127, 0, 0, 1]), a)
"""


def run_dig(sluice, n):
    """dig -f, preloaded with the SLUICE_* variables `sluice`, with n A queries to a loopback responder (a
    python in the parent's care, answering 127.0.0.1 to each). Returns
    (answers, "communications error" lines, seconds, stderr), or None if
    dig is not installed."""
    import shutil
    if shutil.which("dig") is None:
        return None
    srv = subprocess.Popen([sys.executable, "-c", DNS_RESPONDER], stdout=subprocess.PIPE,
                           text=True)
    try:
        port = srv.stdout.readline().strip()
        qs = "".join("h%d.test A\n" % i for i in range(n))
        t0 = time.monotonic()
        p = subprocess.run(["dig", "@127.0.0.1", "-p", port, "+tries=1", "+time=5", "-f",
                            "/dev/stdin"], input=qs, env=child_env(sluice),
                           capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t0
    finally:
        srv.kill()
        srv.wait()
    return (p.stdout.count("status: NOERROR"), (p.stdout + p.stderr).count("communications error"),
            took, p.stderr)


def check_dig(var, rate, n=100):
    """dig -f with n queries under VAR=RATE/s (run_dig): every
    answer, no "communications error", at least (n - 1) / rate s less
    the 1 ms of two clocks. Says so when dig is not installed."""
    r = run_dig({var: "%d/s" % rate}, n)
    if r is None:
        print("not run: dig (Debian: bind9-dnsutils, which scripts/deps.sh test installs)")
        return
    ok, errors, took, err = r
    low = (n - 1) / rate
    print("measured: dig: %d queries under %s=%d/s: %d answers, %d communications errors, "
          "%.3f s" % (n, var, rate, ok, errors, took))
    check(ok == n and errors == 0, "dig %s=%d/s: %d answers, no communications error (%d, %d; %s)"
          % (var, rate, n, ok, errors, err[-300:]))
    check(took >= low - 0.001, "dig %s=%d/s: %d queries take at least %.2f s: %.3f s"
          % (var, rate, n, low, took))
