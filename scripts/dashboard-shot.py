#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""dashboard-shot.py [BUILD] [OUT.png] [SECONDS] - the README's picture of the
page `sluice stat --listen` serves, taken from a real run on loopback:

  - an uploader under `--send 200KiB/s --connect 20/s` (a new connection per
    64 KiB), whose sends and connects wait;
  - a downloader under `--recv 1MiB/s,shared=downloads` whose rule `sluice
    set` halves half way, and a breaker tripped by a closed port;
  - `sluice stat --listen 127.0.0.1:0`, and headless chromium on its page
    for SECONDS (default 45) of real time, driven over the DevTools
    protocol (a small WebSocket client here: no package needed), then a
    screenshot of the whole page.
Every process ends with the script. Needs chromium (scripts/deps.sh test).
"""
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs", "dashboard.png")
SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else 45
SLUICE = os.path.join(BUILD, "sluice")

UPLOADER = r'''
import socket, sys, time
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.sendall(b"u" * 65536)
    s.close()
'''
DOWNLOADER = r'''
import socket, sys, time
end = time.monotonic() + float(sys.argv[3])
n = 0
while time.monotonic() < end:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    while s.recv(65536):
        pass
    s.close()
    n += 1
    if n % 4 == 0:
        try:  # a closed port: the breaker counts the refusals and opens
            socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=1).close()
        except OSError:
            pass
'''


def serve(kind):
    """A loopback server: 'sink' reads to EOF, 'source' sends 1 MiB."""
    ls = socket.create_server(("127.0.0.1", 0))

    def one(c):
        with c:
            if kind == "sink":
                while c.recv(65536):
                    pass
            else:
                c.sendall(b"d" * (1 << 20))

    def loop():
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
    return ls


class DevTools:
    """Just enough of RFC 6455 for the DevTools protocol: text frames, the
    client's masked, the server's not."""

    def __init__(self, ws_url):
        host, _, path = ws_url[len("ws://"):].partition("/")
        h, p = host.split(":")
        self.s = socket.create_connection((h, int(p)))
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
                        % (path, host, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise RuntimeError("websocket handshake: %r" % head[:80])
        self.next_id = 0

    def _read(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c:
                raise RuntimeError("devtools closed")
            b += c
        return b

    def _frame(self):
        b0, b1 = self._read(2)
        n = b1 & 0x7f
        if n == 126:
            n = int.from_bytes(self._read(2), "big")
        elif n == 127:
            n = int.from_bytes(self._read(8), "big")
        data = self._read(n)
        return b0 & 0x0f, data

    def call(self, method, **params):
        self.next_id += 1
        msg = json.dumps({"id": self.next_id, "method": method, "params": params}).encode()
        mask = os.urandom(4)
        n = len(msg)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + n.to_bytes(2, "big"))
        self.s.sendall(head + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(msg)))
        buf = b""
        while True:
            op, data = self._frame()
            buf += data
            if op == 0:  # continuation: the last one says FIN; keep simple
                pass
            try:
                m = json.loads(buf)
            except ValueError:
                continue
            buf = b""
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})


def main():
    chrome = shutil.which("chromium") or shutil.which("chromium-browser")
    if chrome is None:
        sys.exit("dashboard-shot: chromium is not installed (scripts/deps.sh test)")
    sink, source = serve("sink"), serve("source")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connects are refused
    run_s = str(SECONDS + 30)
    procs = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    procs.append(subprocess.Popen([SLUICE, "--send", "200KiB/s", "--connect", "20/s", "--",
                                   sys.executable, "-c", UPLOADER, str(sink.getsockname()[1]),
                                   run_s], env=env))
    procs.append(subprocess.Popen([SLUICE, "--recv", "1MiB/s,shared=downloads", "--break",
                                   "errors=3,window=10s,open=5s", "--", sys.executable, "-c",
                                   DOWNLOADER, str(source.getsockname()[1]),
                                   str(closed.getsockname()[1]), run_s], env=env))
    srv = subprocess.Popen([SLUICE, "stat", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                           text=True, env=env)
    url = srv.stdout.readline().split()[-1].replace("/metrics", "/")
    profile = tempfile.mkdtemp(prefix="sluice-shot-")
    argv = [chrome, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--user-data-dir=" + profile, "--remote-debugging-port=0", "--window-size=1200,900",
            "about:blank"]
    if os.geteuid() == 0:
        argv.insert(1, "--no-sandbox")
    br = subprocess.Popen(argv, stderr=subprocess.DEVNULL, env=env)
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file) and time.monotonic() < deadline:
            time.sleep(0.1)
        with open(port_file) as f:
            dport = int(f.readline())
        with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % dport, timeout=10) as r:
            page = [t for t in json.load(r) if t["type"] == "page"][0]
        dt = DevTools(page["webSocketDebuggerUrl"])
        dt.call("Page.enable")
        dt.call("Page.navigate", url=url)
        time.sleep(SECONDS / 2)
        subprocess.run([SLUICE, "set", "shared:downloads", "recv:512KiB/s,shared=downloads"],
                       env=env, check=False)
        time.sleep(SECONDS / 2)
        size = dt.call("Runtime.evaluate", expression="document.documentElement.scrollHeight",
                       returnByValue=True)["result"]["value"]
        dt.call("Emulation.setDeviceMetricsOverride", width=1200, height=int(size),
                deviceScaleFactor=1, mobile=False)
        shot = dt.call("Page.captureScreenshot", format="png")
        with open(OUT, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        print("dashboard-shot: %s (%d px high, after %.0f s)" % (OUT, size, SECONDS))
    finally:
        for p in [br, srv] + procs:
            p.terminate()
        for p in [br, srv] + procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run([SLUICE, "rm", "--force", "shared:downloads"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    main()
