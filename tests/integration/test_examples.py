#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""test_programs_examples.py - every script in examples/ runs as written.

Each example starts its own loopback helpers, prints what it shows and
cleans up; here each must exit 0 within its time limit, print its result
lines, and leave no helper process behind in its process group.
"""
import os
import re
import signal
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cli import ROOT, SLUICE, clean_env  # noqa: E402

EXAMPLES = os.path.join(ROOT, "examples")

# What each example must print: a regular expression per line of interest,
# and, for a line that reports a duration (group "s"), the least number of
# seconds the limit allows (amount beyond the default burst / rate).
EXPECT = {
    "throttle-download.sh": [
        (r"sluice --recv 256KiB/s curl: +1048576 bytes in (?P<s>[\d.]+) s", (1024 - 2) / 256),
        (r"intact", None)],
    "connect-rate.sh": [
        (r"sluice --connect 10/s load generator: +20 connections in (?P<s>[\d.]+) s", 19 / 10)],
    "slow-accept.sh": [
        # The server blocks in accept() before any client exists, and that
        # first call already takes the bucket's one token: so only 6 - 2
        # intervals of 1/4 s are sure to fall after the clients start.
        (r"all 6 clients answered within (?P<s>[\d.]+) s", (6 - 2) / 4),
        (r"client 3: answered after .* attempts: \d+", None)],
    "per-peer.sh": [
        (r"sluice: rule: recv:1MiB/s,to=127.0.0.1", None),
        (r"127.0.0.1:\d+/file: 524288 bytes in (?P<s>[\d.]+) s", (512 - 6) / 1024),
        (r"\[::1\]:\d+/file: 524288 bytes in (?P<s>[\d.]+) s", (512 - 2) / 256)],
    "combined.sh": [
        (r"rule: conns:2", None),
        (r"4 x 256 KiB under the policy in (?P<s>[\d.]+) s", (1024 - 64) / 1024)],
}


class Examples(unittest.TestCase):
    def test_every_example_is_covered(self):
        scripts = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".sh") and f != "common.sh")
        self.assertEqual(scripts, sorted(EXPECT))

    def run_example(self, name):
        p = subprocess.Popen(["sh", os.path.join(EXAMPLES, name)], env=clean_env(SLUICE=SLUICE),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        try:
            out, err = p.communicate(timeout=30)
        finally:
            try:  # anything left in the example's process group is a leak
                os.killpg(p.pid, signal.SIGKILL)
                leaked = True
            except ProcessLookupError:
                leaked = False
            p.wait()
        print(f"--- {name}\n{out}{err}", file=sys.stderr, end="")
        self.assertEqual(p.returncode, 0, err)
        self.assertFalse(leaked, f"{name} left processes behind")
        for pattern, least in EXPECT[name]:
            m = re.search(pattern, out + err)
            self.assertIsNotNone(m, f"{name} did not print /{pattern}/")
            if least is not None:
                self.assertGreaterEqual(float(m.group("s")), least,
                                        f"{name}: {m.group(0)!r} is faster than the limit")


def make_test(name):
    return lambda self: self.run_example(name)


for _name in EXPECT:
    setattr(Examples, "test_" + _name[:-3].replace("-", "_"), make_test(_name))

if __name__ == "__main__":
    unittest.main(verbosity=2)
