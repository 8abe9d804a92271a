#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""test_programs.py - unmodified third-party programs under sluice, on loopback.

  curl      downloads 3 MiB from a python3 http.server under --recv 1MiB/s:
            the bytes never exceed rate * elapsed + burst, the time is not
            wildly longer than the ideal, and the copy is intact (sha256).
  iperf3    the client under --send 4MiB/s for 5 s: iperf3's own sender
            report is within 2% of the configured rate.
  python3   an http.server under --accept 5/s,burst=1: eleven sequential
            requests take at least (11 - 1) / 5 = 2 s.

Lower bounds are strict (they are what the limiter promises); upper bounds
are generous, because the machine is a shared and noisy 2-core VM. Every
server binds 127.0.0.1 on a port the kernel picks, and every step has a
timeout.
"""
import functools
import hashlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import SLUICE, clean_env  # noqa: E402

MiB = 1 << 20


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def free_port():
    """A port free on 127.0.0.1 right now (for iperf3, which cannot print
    the port it got)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sluice(args, **kw):
    return subprocess.run([SLUICE] + args, env=clean_env(), capture_output=True, **kw)


class Programs(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sluice-test-programs-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    @unittest.skipUnless(shutil.which("curl"), "curl not installed")
    def test_curl_recv(self):
        rate, burst, size = 1 * MiB, 64 * 1024, 3 * MiB
        data = os.urandom(size)
        with open(os.path.join(self.tmp, "file"), "wb") as f:
            f.write(data)
        handler = functools.partial(QuietHandler, directory=self.tmp)
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        out = os.path.join(self.tmp, "copy")
        try:
            start = time.monotonic()
            r = sluice([f"--recv={rate}B/s,burst={burst}B", "--", "curl", "-sS", "-o", out,
                        f"http://127.0.0.1:{srv.server_address[1]}/file"], timeout=60)
            elapsed = time.monotonic() - start
        finally:
            srv.shutdown()
            srv.server_close()
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(),
                             hashlib.sha256(data).hexdigest(), "download corrupted")
        print(f"curl: {size} bytes in {elapsed:.3f} s = {size / elapsed:.0f} B/s "
              f"(limit {rate} B/s, burst {burst} B)", file=sys.stderr)
        self.assertLessEqual(size, rate * elapsed + burst,
                             f"{size} bytes in {elapsed:.3f} s beats {rate} B/s + {burst} B")
        ideal = (size - burst) / rate
        self.assertLess(elapsed, ideal * 1.5 + 3, f"took {elapsed:.3f} s, ideal {ideal:.3f} s")

    @unittest.skipUnless(shutil.which("iperf3"), "iperf3 not installed")
    def test_iperf3_send(self):
        rate = 4 * MiB
        port = free_port()
        server = subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_listening_iperf(port)
            r = sluice([f"--send={rate}B/s,burst=64KiB", "--", "iperf3", "-c", "127.0.0.1",
                        "-p", str(port), "-t", "5", "-l", "16K", "-J"], timeout=40, text=True)
        finally:
            server.kill()
            server.wait(timeout=10)
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout[-2000:])
        report = json.loads(r.stdout)
        sent = report["end"]["sum_sent"]
        bps = sent["bits_per_second"]
        print(f"iperf3: sender {sent['bytes']} bytes in {sent['seconds']:.3f} s = {bps:.0f} bit/s "
              f"(limit {rate * 8} bit/s, {100 * (bps / (rate * 8) - 1):+.2f}%)", file=sys.stderr)
        self.assertLessEqual(abs(bps - rate * 8), 0.02 * rate * 8,
                             f"iperf3 sender {bps:.0f} bit/s, configured {rate * 8} bit/s")

    def test_http_server_accept_rate(self):
        n, rate = 11, 5
        ready = os.path.join(self.tmp, "port")
        script = (
            "import http.server, sys\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n"
            "        self.send_response(200); self.send_header('Content-Length', '2')\n"
            "        self.end_headers(); self.wfile.write(b'ok')\n"
            "    def log_message(self, *a): pass\n"
            "srv = http.server.HTTPServer(('127.0.0.1', 0), H)\n"
            "open(sys.argv[1] + '.tmp', 'w').write(str(srv.server_address[1]))\n"
            "import os; os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
            "srv.serve_forever()\n")
        server = subprocess.Popen([SLUICE, f"--accept={rate}/s,burst=1", "--", sys.executable,
                                   "-c", script, ready], env=clean_env(),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 10
            while not os.path.exists(ready) and time.monotonic() < deadline:
                time.sleep(0.05)
            with open(ready) as f:
                port = int(f.read())
            start = time.monotonic()
            for _ in range(n):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
                    self.assertEqual(resp.read(), b"ok")
            elapsed = time.monotonic() - start
        finally:
            server.kill()
            _, err = server.communicate(timeout=10)
        print(f"http.server: {n} requests in {elapsed:.3f} s under --accept {rate}/s,burst=1",
              file=sys.stderr)
        # HTTPServer select()s before it accepts, so its first accept (the
        # one the bucket's single token pays for) comes with the first
        # request; each further one waits 1/rate.
        ideal = (n - 1) / rate
        self.assertGreaterEqual(elapsed, ideal, f"{n} accepts in {elapsed:.3f} s")
        self.assertLess(elapsed, ideal * 1.5 + 3, err)


def wait_listening_iperf(port):
    """iperf3 -s -1 serves exactly one client, so it must not be probed with a
    connection: poll /proc/net/tcp for the listening socket instead."""
    deadline = time.monotonic() + 10
    needle = f":{port:04X} 00000000:0000 0A"
    while time.monotonic() < deadline:
        with open("/proc/net/tcp") as f:
            if needle in f.read():
                return
        time.sleep(0.05)
    raise AssertionError(f"iperf3 does not listen on {port}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
