#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Helpers for the event-loop integration tests (test_eventloop_*.py):
unmodified event-loop programs (nginx, redis, python asyncio, curl, wrk)
run under the sluice launcher on loopback, with their CPU time measured.

Each test starts the throttled program with `sluice FLAGS -- PROGRAM`,
drives it from this (unthrottled) process or a second program, and checks:
  - the configured rate holds: strict lower bounds (what a limiter admits
    can never exceed rate * elapsed + burst);
  - other connections of the same loop are not slowed by a throttled one;
  - no connection hangs (every step has a timeout);
  - CPU time per second of wall time stays low while throttled (no spin),
    from the kernel's rusage of the program (wait4).
Upper bounds are generous: the machine is a shared, noisy 2-core VM.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import SLUICE, clean_env  # noqa: E402
from shim_lib import check, finish  # noqa: E402,F401

KiB = 1024

# CPU seconds per wall second a throttled event loop may use. An idle loop
# uses ~0; one that spins on EAGAIN or on a level-triggered event uses ~1.
CPU_BOUND = 0.25


def have(*progs):
    """True if every program is installed; else print why the test skips."""
    missing = [p for p in progs if shutil.which(p) is None]
    if missing:
        print("skip: not installed: %s (scripts/deps.sh test installs them)"
              % " ".join(missing))
    return not missing


def free_port():
    """A port free on 127.0.0.1 right now (for programs that cannot report
    the one they got)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A program started under `sluice FLAGS --`, its start time, and at
    stop() its CPU time from the kernel."""

    def __init__(self, flags, argv, cwd=None, env=None):
        self.t0 = time.monotonic()
        self.p = subprocess.Popen([SLUICE] + flags + ["--"] + argv, cwd=cwd,
                                  env=env if env is not None else clean_env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.cpu = None
        self.wall = None
        self.rc = None

    def wait(self, timeout):
        """Wait for the program to exit by itself; kill it after timeout."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pid, status, ru = os.wait4(self.p.pid, os.WNOHANG)
            if pid != 0:
                return self._done(status, ru)
            time.sleep(0.02)
        print("timeout: killing %s" % self.p.args)
        return self.stop(signal.SIGKILL)

    def stop(self, sig=signal.SIGTERM):
        """Signal the program, reap it, and return (stdout, stderr)."""
        try:
            self.p.send_signal(sig)
        except ProcessLookupError:
            pass
        end = time.monotonic() + 10
        while True:
            pid, status, ru = os.wait4(self.p.pid, os.WNOHANG)
            if pid != 0:
                return self._done(status, ru)
            if time.monotonic() > end:
                self.p.kill()
                end += 10
            time.sleep(0.02)

    def _done(self, status, ru):
        self.wall = time.monotonic() - self.t0
        self.cpu = ru.ru_utime + ru.ru_stime
        self.rc = os.waitstatus_to_exitcode(status)
        self.p.returncode = self.rc
        out, err = self.p.stdout.read(), self.p.stderr.read()
        return out.decode(errors="replace"), err.decode(errors="replace")

    def check_cpu(self, what, bound=CPU_BOUND):
        """The program's CPU time per wall second stays under bound."""
        per = self.cpu / self.wall
        print("measured: %s used %.3f s CPU in %.2f s wall (%.3f CPU s/s)"
              % (what, self.cpu, self.wall, per))
        check(per < bound, "%s: CPU %.3f s per wall second < %.2f (no busy spin)"
              % (what, per, bound))


# nginx as one process (one epoll loop, edge-triggered) serving {d}/www on
# 127.0.0.1:{port}, everything it writes kept under {d}.
NGINX_CONF = """daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 8192;
error_log {d}/error.log;
pid {d}/nginx.pid;
events {{ worker_connections 4096; use epoll; }}
http {{
  access_log off;
  sendfile on;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{ listen 127.0.0.1:{port} backlog=4096; root {d}/www; keepalive_timeout 0; }}
}}
"""


def nginx_setup(d, port, files):
    """Write {d}/www/NAME for each (name, bytes) of files and {d}/nginx.conf;
    returns nginx's argv."""
    os.makedirs(os.path.join(d, "www"), exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(d, "www", name), "wb") as f:
            f.write(data)
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(d=d, port=port))
    return ["nginx", "-p", d, "-c", conf]


def wait_port(port, timeout=10):
    """Wait until something accepts on 127.0.0.1:port (a bare connect: it
    counts against an accept limit like any other)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def http_get(port, path, timeout=30):
    """GET path over HTTP/1.0; returns (body bytes, seconds from connect to
    EOF). Raises on timeout (a hung connection)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n" % path.encode())
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    data = b"".join(chunks)
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200") and not head.startswith(b"HTTP/1.0 200"):
        raise RuntimeError("bad response: %r" % head[:80])
    return body, time.monotonic() - t0
