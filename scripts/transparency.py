#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""transparency.py BUILD [TEST...] - a never-limiting rule must be invisible.

Runs CPython's own tests (default: test_socket, test_selectors,
test_asyncio; Debian: libpython3.11-testsuite) twice, without the library
and preloaded with rules that match every socket of every family and type
and never limit, and compares them test by test (regrtest's --junit-xml):
a test that passes without sluice and fails, errors or is skipped under
it, or the other way round, is listed. Exit 0 when the two runs agree, 1
when they differ, 77 when no python here has the tests.
  SL_TRANSPARENCY_TIMEOUT  seconds per run [1800]
  SL_TRANSPARENCY_TWO=1    a second never-limiting rule per direction
                           (per=fd), so each transfer spends two rules'
                           credit (shim/mcredit.c, hot2_NAME)
  SL_TRANSPARENCY_ADAPTIVE=1  also a conns:adaptive rule held at 100000
                           with system protection (rt=10s): every
                           connection's turns followed, its requests
                           counted on both sides, never limited
  SL_TRANSPARENCY_SUPERVISE=1  the second run under BUILD/sluice
                           --supervise with the same rules (the seccomp
                           supervisor instead of the preload)
make transparency runs it (not part of make test: about 2 x 5 min here).
"""
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

RULES = {
    "SLUICE_SEND": "10GB/s,family=inet+inet6+unix",
    "SLUICE_RECV": "10GB/s,family=inet+inet6+unix",
    "SLUICE_CONNECT": "1000000/s,family=inet+inet6+unix",
    "SLUICE_ACCEPT": "1000000/s,family=inet+inet6+unix",
}


def python_with(tests):
    for py in ("/usr/bin/python3", sys.executable):
        if os.path.exists(py) and subprocess.run(
                [py, "-c", "import " + ", ".join("test." + t for t in tests)],
                capture_output=True).returncode == 0:
            return py
    return None


def outcomes(xml_path):
    """{test id: outcome} from regrtest's junit file."""
    out = {}
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError) as e:
        print("transparency: no results in %s (%s)" % (xml_path, e))
        return out
    for tc in root.iter("testcase"):
        name = "%s.%s" % (tc.get("classname", "?"), tc.get("name", "?"))
        kinds = [c.tag for c in tc]
        out[name] = ("failure" if "failure" in kinds else "error" if "error" in kinds
                     else "skipped" if "skipped" in kinds else "ok")
    return out


def run(py, tests, env, label, tmp, prefix=()):
    xml_path = os.path.join(tmp, label + ".xml")
    t0 = time.monotonic()
    try:
        # AF_VSOCK tests wait for ever in a container without a vsock peer
        # (seen here: test_socket's VSock tests in vsock_accept, with or
        # without sluice); a test past the timeout fails instead of hanging.
        p = subprocess.run(list(prefix) + [py, "-m", "test", "--timeout", "300", "--ignore", "*VSOCK*", "--ignore", "*VSock*",
                            "--junit-xml", xml_path] + tests, env=env,
                           cwd=tmp, capture_output=True, text=True,
                           timeout=int(os.environ.get("SL_TRANSPARENCY_TIMEOUT", "1800")))
        rc, tail = p.returncode, (p.stdout + p.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        rc, tail = None, "(timed out)"
    took = time.monotonic() - t0
    res = outcomes(xml_path)
    counts = {}
    for v in res.values():
        counts[v] = counts.get(v, 0) + 1
    print("measured: %s: exit %s, %d tests %s, %.0f s" % (label, rc, len(res), counts, took))
    if rc != 0:
        print(tail)
    return res, took


def main():
    if len(sys.argv) < 2:
        print("usage: transparency.py BUILD [TEST...]", file=sys.stderr)
        return 2
    build = os.path.abspath(sys.argv[1])
    tests = sys.argv[2:] or ["test_socket", "test_selectors", "test_asyncio"]
    py = python_with(tests)
    if py is None:
        print("skip: no python here has %s (Debian: libpython3.11-testsuite)" % " ".join(tests))
        return 77
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    base.pop("LD_PRELOAD", None)
    under = dict(base, LD_PRELOAD=os.path.join(build, "libsluice.so"), **RULES)
    if os.environ.get("SL_TRANSPARENCY_TWO") == "1":
        under["SLUICE_RULES"] = ";".join("%s:10GB/s,per=fd,family=inet+inet6+unix" % op
                                         for op in ("send", "recv"))
    if os.environ.get("SL_TRANSPARENCY_ADAPTIVE") == "1":
        under["SLUICE_CONNS"] = "adaptive,min=100000,max=100000,rt=10s"
    prefix = ()
    if os.environ.get("SL_TRANSPARENCY_SUPERVISE") == "1":
        # The launcher reads the same SLUICE_* rules; it runs the program
        # supervised, with no preload.
        under.pop("LD_PRELOAD")
        prefix = (os.path.join(build, "sluice"), "--supervise", "--")
    with tempfile.TemporaryDirectory(prefix="sl-transparency-") as tmp:
        a, ta = run(py, tests, base, "without", tmp)
        b, tb = run(py, tests, under, "under-sluice", tmp, prefix)
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    for k in differ:
        print("differs: %s: %s without sluice, %s under it" % (k, a.get(k, "absent"),
                                                                b.get(k, "absent")))
    print("transparency: %d tests, %d differ; %.0f s without, %.0f s under sluice (%.2fx)"
          % (len(set(a) | set(b)), len(differ), ta, tb, tb / ta if ta else 0))
    print("%d passed, %d failed" % (len(set(a) | set(b)) - len(differ), len(differ)))
    return 0 if not differ and a else 1


if __name__ == "__main__":
    sys.exit(main())
