#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""sshd under sluice (issue 19, part 2): sshd's pre-auth child installs a
seccomp filter that kills it on any system call it did not plan (a
getsockopt, an fcntl), so the shim must classify sockets before the filter
and ask the kernel nothing after it.

A private sshd (own host key, key auth for root, UsePAM=no, StrictModes no,
everything under a 0700 temp dir) listens on a loopback port the kernel
chose, under each of --send 1MiB/s, --recv 1MiB/s, --connect 10/s,
--accept 5/s, and --conns 1 (preloaded and supervised):
  login    `ssh ... echo hi` prints hi (three times under --accept; and
           once more with SLUICE_LOG=debug into a file);
  scp      a 4 MiB file copied from sshd (--send: the direction it limits)
           or to it (--recv) moves at no more than 1 MiB/s + 5 % (and at
           least 0.7, so a loaded machine passes): 3 MiB over the
           time of the 4 MiB copy minus that of a 1 MiB copy (the same
           login, sftp set-up and teardown cancel out; the faster of two
           runs of each); sha256 equal. Under --connect and
           --accept the copy from sshd is checked for its bytes only.
  conns    3 logins at once running `sleep 1; echo hi` end one at a time
           (the third not before 3 s: sshd re-execs per connection and
           closes its copy, shim/connfam.c and supervise/conns.c keep the
           slot; before, all three ended at ~1.4 s).
Skips (exit 77, not a pass) only if sshd cannot run on this machine at all
(not installed, not root, or `sshd -t` refuses the configuration).
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import eventloop_lib as el
from eventloop_lib import check, finish

MiB = 1 << 20
SIZE = 4 * MiB
SMALL = 1 * MiB
SSHD = "/usr/sbin/sshd"

CONFIG = """ListenAddress 127.0.0.1
Port {port}
HostKey {d}/host_key
PidFile {d}/sshd.pid
AuthorizedKeysFile {d}/authorized_keys
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
Subsystem sftp internal-sftp
"""


def skip(why):
    print("skip: %s" % why)
    sys.exit(77)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Sshd:
    """sshd -D -e under `sluice FLAGS`, its stderr drained by a thread;
    `env` adds SLUICE_* variables."""

    def __init__(self, d, flags, env=None):
        self.d = d
        for _ in range(5):  # the port is free when chosen; another may take it
            port = el.free_port()
            cfg = os.path.join(d, "sshd_config")
            with open(cfg, "w") as f:
                f.write(CONFIG.format(port=port, d=d))
            self.proc = el.Proc(flags, [SSHD, "-D", "-e", "-f", cfg],
                                env=el.clean_env(**(env or {})))
            self.log, self.port = [], None
            line = self.proc.p.stderr.readline().decode(errors="replace")
            self.log.append(line)
            if "Server listening" in line:
                self.port = port
                break
            self.proc.stop()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self):
        for line in iter(self.proc.p.stderr.readline, b""):
            self.log.append(line.decode(errors="replace"))

    def ssh_opts(self):
        return ["-i", os.path.join(self.d, "user_key"), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10"]

    def login(self):
        p = subprocess.run(["ssh"] + self.ssh_opts() + ["-p", str(self.port), "root@127.0.0.1",
                                                        "echo", "hi"],
                           capture_output=True, text=True, timeout=30)
        return p.returncode == 0 and p.stdout.strip() == "hi", p.stderr.strip()[-200:]

    def scp(self, src, dst):
        """Copy (a remote path is prefixed with 'r:'); returns (ok, seconds)."""
        def arg(x):
            return "root@127.0.0.1:" + x[2:] if x.startswith("r:") else x
        t0 = time.monotonic()
        p = subprocess.run(["scp", "-q"] + self.ssh_opts() + ["-P", str(self.port), arg(src),
                                                              arg(dst)],
                           capture_output=True, text=True, timeout=60)
        return p.returncode == 0, time.monotonic() - t0

    def sessions(self, n, cmd):
        """n logins at once running cmd; the sorted seconds each took to end
        well (printing cmd's output), from the common start."""
        out, t0 = [], time.monotonic()

        def one():
            p = subprocess.run(["ssh"] + self.ssh_opts() + ["-p", str(self.port),
                                                            "root@127.0.0.1", cmd],
                               capture_output=True, text=True, timeout=60)
            if p.returncode == 0 and p.stdout.strip() == "hi":
                out.append(time.monotonic() - t0)
        ts = [threading.Thread(target=one) for _ in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(90)
        return sorted(out)

    def stop(self):
        self.proc.stop()
        self.thread.join(5)


def rate_check(s, what, src_big, dst_big, src_small, dst_small, big_sha):
    # Each copy twice, the faster kept: a login's set-up time varies on a
    # loaded machine, and only ever upwards.
    runs_small = [s.scp(src_small, dst_small) for _ in range(2)]
    runs_big = [s.scp(src_big, dst_big) for _ in range(2)]
    ok1, t_small = all(ok for ok, _ in runs_small), min(t for _, t in runs_small)
    ok2, t_big = all(ok for ok, _ in runs_big), min(t for _, t in runs_big)
    got = dst_big[2:] if dst_big.startswith("r:") else dst_big
    check(ok1 and ok2, "%s: both copies succeeded" % what)
    if not (ok1 and ok2):
        return
    check(sha(got) == big_sha, "%s: sha256 of the 4 MiB copy is equal" % what)
    rate = (SIZE - SMALL) / (t_big - t_small) / MiB
    print("measured: %s: 4 MiB in %.3f s, 1 MiB in %.3f s: %.4f MiB/s"
          % (what, t_big, t_small, rate))
    # Never faster than the limit (5 %: two copies' set-up times); slower
    # only as far as a loaded machine makes it (CI: 0.94 once beside the
    # parallel pass).
    check(0.70 <= rate <= 1.05, "%s: at most 1 MiB/s + 5 %%, at least 0.7 (%.4f MiB/s)"
          % (what, rate))


def main():
    for prog in (SSHD, shutil.which("ssh"), shutil.which("scp"), shutil.which("ssh-keygen")):
        if prog is None or not os.path.exists(prog):
            skip("openssh-server and openssh-client are not installed "
                 "(scripts/deps.sh test installs them)")
    if os.geteuid() != 0:
        skip("sshd with privilege separation runs only as root here")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privsep chroot
    d = tempfile.mkdtemp(prefix="sluice-sshd-%d-" % os.getpid())
    os.chmod(d, 0o700)
    try:
        for key in ("host_key", "user_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            os.path.join(d, key)], check=True)
        shutil.copy(os.path.join(d, "user_key.pub"), os.path.join(d, "authorized_keys"))
        with open(os.path.join(d, "sshd_config"), "w") as f:
            f.write(CONFIG.format(port=22, d=d))
        t = subprocess.run([SSHD, "-t", "-f", os.path.join(d, "sshd_config")],
                           capture_output=True, text=True)
        if t.returncode != 0:
            skip("sshd -t refuses to run here: %s" % t.stderr.strip()[-300:])
        big, small = os.path.join(d, "big"), os.path.join(d, "small")
        with open(big, "wb") as f:
            f.write(os.urandom(SIZE))
        with open(small, "wb") as f:
            f.write(os.urandom(SMALL))
        big_sha = sha(big)
        # The last case logs every debug line to a file: sshd's pre-auth child
        # sets RLIMIT_FSIZE to 0 before its filter, so one line of ours in it
        # would kill it with SIGXFSZ.
        log = os.path.join(d, "sluice.log")
        for flags, env in ((["--send", "1MiB/s"], None), (["--recv", "1MiB/s"], None),
                           (["--connect", "10/s"], None), (["--accept", "5/s"], None),
                           (["--connect", "10/s"], {"SLUICE_LOG": "debug", "SLUICE_LOG_FILE": log}),
                           (["--conns", "1"], None), (["--supervise", "--conns", "1"], None)):
            what = " ".join(flags) + (" SLUICE_LOG=debug" if env else "")
            s = Sshd(d, flags, env)
            try:
                check(s.port is not None, "%s: sshd listening (%r)" % (what, s.log[:1]))
                if s.port is None:
                    continue
                if "--conns" in flags:
                    # sshd forks per connection, re-execs, and closes its own
                    # copy: the slot is held until the session ends.
                    t = s.sessions(3, "sleep 1; echo hi")
                    print("measured: %s: 3 sessions of 1 s at once end at %s"
                          % (what, ", ".join("%.3f" % x for x in t)))
                    check(len(t) == 3 and t[2] >= 3.0 and t[1] >= 2.0 and t[2] <= 30,
                          "%s: 3 sessions of 1 s, one at a time (%s)" % (what, t))
                    continue
                for i in range(3 if flags[0] == "--accept" else 1):
                    ok, err = s.login()
                    check(ok, "%s: login %d works (%s)" % (what, i + 1, err or "hi"))
                if flags[0] == "--send":
                    rate_check(s, what, "r:" + big, os.path.join(d, "copy"), "r:" + small,
                               os.path.join(d, "copy1"), big_sha)
                elif flags[0] == "--recv":
                    rate_check(s, what, big, "r:" + os.path.join(d, "up"), small,
                               "r:" + os.path.join(d, "up1"), big_sha)
                else:
                    ok, secs = s.scp("r:" + big, os.path.join(d, "copy"))
                    check(ok and sha(os.path.join(d, "copy")) == big_sha,
                          "%s: scp of 4 MiB from sshd intact (%.2f s)" % (what, secs))
            finally:
                s.stop()
                # "Received signal 15" is our own stop; a killed child shows
                # as a fatal line or "killed by signal" from the monitor.
                killed = [l.strip() for l in s.log
                          if "fatal" in l or "by signal" in l or "SIGSYS" in l]
                check(not killed, "%s: sshd logged no fatal error or signal (%s)"
                      % (what, killed[:2]))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
