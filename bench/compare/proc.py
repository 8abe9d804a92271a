# SPDX-License-Identifier: MIT
"""proc.py - starting the measured program and its peer, and the tc namespaces.

Every child is started here, waited for with a deadline and killed by its
own pid if it overstays, so a misbehaving tool can cost a benchmark one run
but never hang it. The tc baseline runs both ends in two network namespaces
joined by a veth pair, with a tbf qdisc on each end's egress; the namespaces
are always deleted on exit (atexit and SIGINT/SIGTERM).
"""

import atexit
import os
import select
import signal
import subprocess
import time

# Names carry this run's pid: two benchmarks running at once (other
# engineers on the same machine) must not delete each other's namespaces.
NS_A = "slbench-a-%d" % os.getpid()   # the throttled program (client side)
NS_B = "slbench-b-%d" % os.getpid()   # the peer (server side)
VETH_A = "slb-va%d" % os.getpid()     # at most 15 characters (pid_max 4194304)
VETH_B = "slb-vb%d" % os.getpid()
# RFC 2544 reserves 198.18.0.0/15 for benchmarking; these addresses exist
# only inside the two namespaces this file creates.
ADDR_A = "198.18.0.1"
ADDR_B = "198.18.0.2"


class RunError(Exception):
    """A run failed: the message says which program and why."""


def _kill(p):
    if p.poll() is None:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def start_peer(cmd, timeout=10.0):
    """Start a listening flow mode; return (Popen, port) once it listens."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
            _kill(p)
            raise RunError("%s: no port within %.0f s" % (cmd[0], timeout))
        ch = os.read(p.stdout.fileno(), 1)
        if not ch:
            err = p.stderr.read().decode(errors="replace").strip()
            _kill(p)
            raise RunError("peer exited: %s" % err)
        line += ch
    word, port = line.decode().split()
    if word != "port":
        _kill(p)
        raise RunError("peer said %r" % line)
    return p, int(port)


def wait_peer(p, timeout):
    """Wait for a peer to finish; kill it and raise past the deadline."""
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(p)
        raise RunError("peer did not finish within %.0f s" % timeout)
    if p.returncode != 0:
        raise RunError("peer failed (%d): %s" % (p.returncode,
                       p.stderr.read().decode(errors="replace").strip()))


def run_measured(cmd, env_extra=None, timeout=60.0, stdin=None):
    """Run the measured program to completion.

    Returns (elapsed seconds, cpu seconds user+sys, stdout text). The CPU time
    comes from wait4 on the child itself, so it is the measured program's own
    (a launcher that execs, as trickle does, is the same process)."""
    # Only the tool's own SLUICE_* reach the program: sluice refuses unknown
    # SLUICE_ names, and run-bench.sh exports SLUICE_BUILD.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    if env_extra:
        env.update(env_extra)
    start = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdin=stdin, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    deadline = start + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            _kill(p)
            raise RunError("%s did not finish within %.0f s" % (" ".join(cmd[:3]), timeout))
        time.sleep(0.005)
    elapsed = time.monotonic() - start
    p.returncode = os.waitstatus_to_exitcode(status)
    out = p.stdout.read().decode(errors="replace")
    err = p.stderr.read().decode(errors="replace").strip()
    if p.returncode < 0:
        raise RunError("%s killed by signal %d (%s)" % (" ".join(cmd[:3]), -p.returncode,
                                                       signal.Signals(-p.returncode).name))
    if p.returncode != 0:
        raise RunError("%s failed (%d): %s" % (" ".join(cmd[:3]), p.returncode,
                                              " ".join((err or out).split())[-300:]))
    return elapsed, ru.ru_utime + ru.ru_stime, out


def run_with_peer(peer, cmd, env_extra, timeout, stdin=None):
    """run_measured(cmd) against a started peer (or None), which must then exit
    by itself; the peer is killed whatever happens. Returns run_measured's."""
    try:
        res = run_measured(cmd, env_extra, timeout, stdin)
        if peer:
            wait_peer(peer, 15)
        return res
    finally:
        if peer:
            _kill(peer)


def in_ns(ns, cmd):
    """cmd run inside network namespace ns (None: here)."""
    return ["ip", "netns", "exec", ns] + cmd if ns else cmd


def _ip(*args):
    subprocess.run(["ip"] + list(args), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


class Netns:
    """The two namespaces and the veth pair of the tc tbf baseline."""

    def __init__(self):
        self.ok = False
        self.why = ""

    def setup(self):
        """Create everything; on failure set self.why and return False."""
        self.teardown()
        try:
            _ip("netns", "add", NS_A)
            _ip("netns", "add", NS_B)
            _ip("link", "add", VETH_A, "netns", NS_A, "type", "veth", "peer", "name",
                VETH_B, "netns", NS_B)
            for ns, dev, addr in ((NS_A, VETH_A, ADDR_A), (NS_B, VETH_B, ADDR_B)):
                _ip("-n", ns, "addr", "add", addr + "/24", "dev", dev)
                _ip("-n", ns, "link", "set", dev, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            msg = getattr(e, "stderr", b"") or b""
            self.why = "network namespaces not permitted here (%s)" % (
                msg.decode(errors="replace").strip() or e)
            self.teardown()
            return False
        atexit.register(self.teardown)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        self.ok = True
        return True

    def _on_signal(self, signum, frame):
        self.teardown()
        raise SystemExit(128 + signum)

    def shape(self, rate_bytes):
        """tbf at rate_bytes/s on both egresses (burst: 10 ms of rate, >= 32 KiB)."""
        burst = max(32 * 1024, rate_bytes // 100)
        for ns, dev in ((NS_A, VETH_A), (NS_B, VETH_B)):
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev,
                            "root", "tbf", "rate", "%dbit" % (rate_bytes * 8), "burst",
                            str(burst), "latency", "50ms"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return burst

    def teardown(self):
        for ns in (NS_A, NS_B):
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        self.ok = False
