#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""sluice stat --listen: the Prometheus endpoint, scraped as Prometheus does.

  - A preloaded child makes 20 sends of 1000 bytes and idles. The endpoint
    (127.0.0.1, port chosen by the kernel) answers curl's GET /metrics with
    200 and the 0.0.4 content type; the body passes a strict exposition-format
    parser written here from the format's specification (every line a HELP,
    TYPE or sample line; names and label names by the grammar; label values
    with only the three escapes; TYPE before the family's samples, once;
    samples of a family contiguous; no series twice; counters never negative)
    and prometheus_client's parser; it has the child's exact counters, and
    the same series and counter values as `sluice stat --prometheus`.
  - 16 threads scrape 5 times each at once, while 40 idle connections (more
    than the 32 slots) are open: every scrape is a full 200 within 3 s.
  - A client that sends nothing is closed after the 5 s timeout (not
    before 4.5 s, within 9 s); a head over 8 KiB gets 431; a bad request
    line 400; POST 405 with Allow; another path 404; HEAD the headers only.
  - A non-loopback address without --listen-any, a host name, --listen with
    a PID: exit 2 with a precise message. SIGTERM: exit 0 within 2 s.
"""
import os
import re
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shim_lib import SLUICE, Server, check, child_env, debian_module, finish  # noqa: E402
from test_shm_stat import KNOWN  # noqa: E402  (20 sends of 1000 bytes, then idle)

_parser = debian_module("prometheus_client.parser")
text_string_to_metric_families = _parser.text_string_to_metric_families if _parser else None

METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
FLOAT = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|Inf|inf|NaN)")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


class FormatError(Exception):
    pass


def parse_labels(s, i, lineno):
    """Parse '{a="x",b="y"}' from s[i] == '{'; return (labels, index after '}')."""
    labels = {}
    i += 1
    while True:
        if s[i] == "}":
            return labels, i + 1
        m = LABEL.match(s, i)
        if not m:
            raise FormatError("line %d: bad label name at column %d" % (lineno, i))
        name = m.group(0)
        i = m.end()
        if s[i:i + 2] != '="':
            raise FormatError("line %d: expected =\" after label %s" % (lineno, name))
        i += 2
        val = []
        while True:
            if i >= len(s):
                raise FormatError("line %d: unterminated label value" % lineno)
            c = s[i]
            if c == "\\":
                esc = s[i + 1:i + 2]
                if esc not in ("\\", '"', "n"):
                    raise FormatError("line %d: bad escape \\%s" % (lineno, esc))
                val.append({"\\": "\\", '"': '"', "n": "\n"}[esc])
                i += 2
            elif c == '"':
                i += 1
                break
            elif c == "\n":
                raise FormatError("line %d: raw newline in a label value" % lineno)
            else:
                val.append(c)
                i += 1
        if name in labels:
            raise FormatError("line %d: label %s twice" % (lineno, name))
        labels[name] = "".join(val)
        if s[i] == ",":
            i += 1
        elif s[i] != "}":
            raise FormatError("line %d: expected , or } at column %d" % (lineno, i))


def parse_strict(text):
    """Parse the text exposition format 0.0.4 strictly. Returns
    {family: {"type", "help", "samples": {(name, labels): value}}}."""
    if text and not text.endswith("\n"):
        raise FormatError("the last line does not end with a newline")
    fams, order, seen_series = {}, [], set()
    current = None
    for lineno, line in enumerate(text.split("\n")[:-1], 1):
        if line == "":
            raise FormatError("line %d: empty line" % lineno)
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not METRIC.fullmatch(name):
                    raise FormatError("line %d: bad metric name %r" % (lineno, name))
                fam = fams.setdefault(name, {"type": None, "help": None, "samples": {}})
                key = parts[1].lower()
                if fam[key] is not None:
                    raise FormatError("line %d: second %s for %s" % (lineno, parts[1], name))
                if fam["samples"]:
                    raise FormatError("line %d: %s after %s's samples" % (lineno, parts[1], name))
                value = parts[3] if len(parts) == 4 else ""
                if key == "type" and value not in TYPES:
                    raise FormatError("line %d: unknown type %r" % (lineno, value))
                if key == "help" and re.search(r"\\[^\\n]", value):
                    raise FormatError("line %d: bad escape in HELP" % lineno)
                fam[key] = value
                if name not in order:
                    order.append(name)
                current = name
            continue
        m = METRIC.match(line)
        if not m:
            raise FormatError("line %d: not a sample: %r" % (lineno, line))
        name, i = m.group(0), m.end()
        labels = {}
        if i < len(line) and line[i] == "{":
            labels, i = parse_labels(line, i, lineno)
        if line[i:i + 1] != " ":
            raise FormatError("line %d: expected one space before the value" % lineno)
        rest = line[i + 1:].split(" ")
        if len(rest) not in (1, 2) or not FLOAT.fullmatch(rest[0]) or \
                (len(rest) == 2 and not re.fullmatch(r"-?\d+", rest[1])):
            raise FormatError("line %d: bad value or timestamp %r" % (lineno, line[i + 1:]))
        fam_name = name
        if fam_name not in fams:
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[:-len(suffix)] in fams:
                    fam_name = name[:-len(suffix)]
        if fam_name != current and fam_name in fams and fams[fam_name]["samples"]:
            raise FormatError("line %d: samples of %s are not contiguous" % (lineno, fam_name))
        fam = fams.setdefault(fam_name, {"type": None, "help": None, "samples": {}})
        if fam_name not in order:
            order.append(fam_name)
        current = fam_name
        key = (name, tuple(sorted(labels.items())))
        if key in seen_series:
            raise FormatError("line %d: series %r twice" % (lineno, key))
        seen_series.add(key)
        value = float(rest[0])
        if fam["type"] == "counter" and value < 0:
            raise FormatError("line %d: negative counter" % lineno)
        fam["samples"][key] = value
    return fams


def http(port, raw, timeout=10):
    """Send raw bytes, read to EOF; return (status, headers, body, seconds)."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(raw)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1]) if lines and lines[0].startswith("HTTP/1.1 ") else 0
    headers = dict(l.split(": ", 1) for l in lines[1:] if ": " in l)
    return status, headers, body, time.monotonic() - t0


def start_server(*args):
    p = subprocess.Popen([SLUICE, "stat", "--listen"] + list(args), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    m = re.fullmatch(r"sluice stat: serving http://127\.0\.0\.1:(\d+)/metrics", line)
    check(m is not None, "the server says where it listens: %r" % line)
    return p, int(m.group(1)) if m else 0




BAD_TEXTS = [
    "a 1",                                           # no final newline
    "a 1\n\nb 2\n",                                   # empty line
    "# TYPE a counter\na{x=\"1\"} 1\n# TYPE a gauge\n",  # TYPE twice
    "a 1\n# TYPE a counter\n",                        # TYPE after samples
    "a{x=\"\\q\"} 1\n",                               # bad escape
    "a{x=\"1\",x=\"2\"} 1\n",                           # label twice
    "a 1\nb 1\na 2\n",                                 # not contiguous (and twice)
    "a{x=\"1\"} 1\na{x=\"1\"} 2\n",                     # series twice
    "1a 1\n",                                          # bad name
    "a  1\n",                                          # two spaces
    "a one\n",                                         # bad value
    "# TYPE a counter\na -1\n",                        # negative counter
    "# TYPE a countr\n",                               # unknown type
]


def main():
    refused = 0
    for t in BAD_TEXTS:
        try:
            parse_strict(t)
        except FormatError:
            refused += 1
    check(refused == len(BAD_TEXTS), "the strict parser refuses %d of %d malformed texts"
          % (refused, len(BAD_TEXTS)))
    ok = parse_strict('# HELP a x\n# TYPE a counter\na{l="q\\"\\\\\\n"} 3 17\nb 1e3\nc +Inf\n')
    check(ok["a"]["samples"] == {("a", (("l", 'q"\\\n'),)): 3.0} and ok["b"]["samples"][("b", ())] == 1000,
          "the strict parser reads escapes, timestamps, exponents")
    sink = Server("sink")
    child = subprocess.Popen([sys.executable, "-c", KNOWN, str(sink.port)],
                             env=child_env({"SLUICE_RULES": "send:1MiB/s;connect:100/s"}),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    check(child.stdout.readline().strip() == "ready", "child made its 20 sends")
    pid = str(child.pid)
    srv, port = start_server("127.0.0.1:0")
    try:
        url = "http://127.0.0.1:%d/metrics" % port
        c = subprocess.run(["curl", "-sS", "--max-time", "10", "-D", "-", url],
                           capture_output=True, timeout=20)  # bytes: keep the CRLFs
        head, _, body = c.stdout.decode().partition("\r\n\r\n")
        check(c.returncode == 0 and head.startswith("HTTP/1.1 200 OK"), "curl: 200 (%r)" % head[:40])
        check("Content-Type: text/plain; version=0.0.4; charset=utf-8" in head,
              "content type of the 0.0.4 text format")
        try:
            fams = parse_strict(body)
            check(True, "strict parser accepts the body (%d families)" % len(fams))
        except FormatError as e:
            fams = {}
            check(False, "strict parser: %s" % e)
        if text_string_to_metric_families is not None:
            try:
                n = len(list(text_string_to_metric_families(body)))
                check(n == len(fams) and n >= 8,
                      "prometheus_client parses the %d families the strict parser found: %d"
                      % (len(fams), n))
            except Exception as e:  # its verdict is the check
                check(False, "prometheus_client parser: %r" % e)

        def sample(fam, rule):
            for (name, labels), v in fams.get(fam, {}).get("samples", {}).items():
                d = dict(labels)
                if d.get("pid") == pid and d.get("rule") == rule:
                    return v
            return None
        check(sample("sluice_calls_total", "1") == 20, "send calls 20: %r" % sample("sluice_calls_total", "1"))
        check(sample("sluice_bytes_total", "1") == 20000, "send bytes 20000")
        check(sample("sluice_calls_total", "2") == 1, "connect calls 1")
        check(fams.get("sluice_calls_total", {}).get("type") == "counter", "calls is a counter")
        # The same text as --prometheus: the same families, and for the
        # child (other processes of this user come and go, and move) the
        # same series and counter values.
        cli = subprocess.run([SLUICE, "stat", "--prometheus"], capture_output=True, text=True,
                             timeout=20).stdout
        ref = parse_strict(cli)

        def mine(fs, f):
            return {k: v for k, v in fs[f]["samples"].items() if ("pid", pid) in k[1]}
        # Every family of a rule's counters has the child's series; the
        # families of other kinds (warm-up, breakers) may have none of it.
        base = [f for f in ref if f.startswith("sluice_") and not f.startswith(
            ("sluice_warmup_", "sluice_breaker", "sluice_redis_", "sluice_adaptive_",
             "sluice_system_"))]
        same = sorted(ref) == sorted(fams) and len(base) >= 8 and all(
            set(mine(ref, f)) == set(mine(fams, f)) for f in ref) and all(
            mine(ref, f) for f in base)
        check(same, "the same families, and the child's series, as sluice stat --prometheus")
        counters_equal = all(mine(ref, f) == mine(fams, f) for f in ref
                             if ref[f]["type"] == "counter" and f in fams)
        check(counters_equal, "the child's counter values as sluice stat --prometheus")

        # Concurrent scrapes while more idle connections than slots are open.
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]
        results, lock = [], threading.Lock()

        def scraper():
            for _ in range(5):
                r = http(port, b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                with lock:
                    results.append(r)
        threads = [threading.Thread(target=scraper) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        good = [r for r in results if r[0] == 200 and r[1].get("Content-Length") == str(len(r[2]))]
        parsed = 0
        for r in good:
            try:
                parse_strict(r[2].decode())
                parsed += 1
            except FormatError:
                pass
        worst = max((r[3] for r in results), default=99)
        check(len(results) == 80 and len(good) == 80 and parsed == 80,
              "80 concurrent scrapes beside 40 idle connections: %d answered, %d full 200, %d parse"
              % (len(results), len(good), parsed))
        check(worst < 3, "slowest scrape %.3f s (< 3 s)" % worst)
        print("measured: 16 threads x 5 scrapes beside 40 idle connections, slowest %.1f ms" % (worst * 1000))
        for s in idle:
            s.close()

        # A silent client is closed by the timeout, not before.
        s = socket.create_connection(("127.0.0.1", port), timeout=15)
        t0 = time.monotonic()
        try:
            got = s.recv(100)
        except OSError:
            got = b"error"
        waited = time.monotonic() - t0
        s.close()
        check(got == b"" and 4.5 <= waited < 9, "a silent client closed after %.2f s (5 s timeout)" % waited)

        st, hd, body, _ = http(port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n")
        check(st == 431, "a head over 8 KiB: 431 (%d)" % st)
        st, hd, body, _ = http(port, b"GARBAGE\r\n\r\n")
        check(st == 400, "a bad request line: 400 (%d)" % st)
        st, hd, body, _ = http(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        check(st == 405 and hd.get("Allow") == "GET, HEAD", "POST: 405 with Allow (%d %r)" % (st, hd))
        st, hd, body, _ = http(port, b"GET /other HTTP/1.1\r\n\r\n")
        check(st == 404, "another path: 404 (%d)" % st)
        st, hd, body, _ = http(port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
        check(st == 200 and body == b"" and int(hd.get("Content-Length", "0")) > 500,
              "HEAD: 200, Content-Length %s, no body" % hd.get("Content-Length"))
        c = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                            "http://127.0.0.1:%d/nope" % port], capture_output=True, text=True, timeout=20)
        check(c.stdout == "404", "curl of another path: %s" % c.stdout)

        t0 = time.monotonic()
        srv.terminate()
        rc = srv.wait(10)
        check(rc == 0 and time.monotonic() - t0 < 2, "SIGTERM: exit %d in %.2f s" % (rc, time.monotonic() - t0))
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
        child.stdin.close()
        child.wait(20)
        sink.stop()

    for args, want in [
        (["0.0.0.0:0"], "sluice stat: --listen 0.0.0.0:0: not a loopback address; add --listen-any "
                        "to serve the counters to other hosts\n"),
        (["localhost:9464"], "sluice stat: --listen localhost:9464: \"localhost\" is not a numeric "
                             "IPv4 address (host names are not resolved)\n"),
        (["127.0.0.1:0", "1234"], "sluice stat: --listen serves every process in the --prometheus "
                                  "format: it takes no PID, --json or --watch\n"),
    ]:
        p = subprocess.run([SLUICE, "stat", "--listen"] + args, capture_output=True, text=True,
                           timeout=20)
        check(p.returncode == 2 and p.stderr == want, "--listen %s: exit 2, %r" % (" ".join(args), p.stderr))
    p = subprocess.run([SLUICE, "stat", "--listen-any"], capture_output=True, text=True, timeout=20)
    check(p.returncode == 2 and "needs --listen" in p.stderr, "--listen-any alone: exit 2")
    finish()


if __name__ == "__main__":
    main()
