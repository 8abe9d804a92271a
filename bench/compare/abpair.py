# SPDX-License-Identifier: MIT
"""abpair.py - wall-clock A/B in long-lived processes, batches interleaved.

Each side is one `build/bench/ab_pair` process (bench/ab_pair.c), started
once with its own TCP connection to its own `flow drain` on 127.0.0.1, under
its own environment (none: no preload). Every round asks each side for one
batch of `calls` 1-byte sends, the sides in a new random order each round,
so a noisy moment of the shared machine hits every side and no side is
always first; a side's start-up and address-space layout are the same for
all its batches. Used by bench/ab_pair.py and by workload 5 (overhead.py).
Loopback only; every process is bounded (ab_pair: 600 s).
"""
import os
import subprocess


class Side:
    """One ab_pair process (environment env) and its drain."""

    def __init__(self, build, env):
        self.drain = subprocess.Popen([os.path.join(build, "bench", "flow"), "drain",
                                       "127.0.0.1"], stdout=subprocess.PIPE, text=True)
        port = self.drain.stdout.readline().split()[1]
        self.proc = subprocess.Popen([os.path.join(build, "bench", "ab_pair"), port],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)

    def batch(self, calls):
        """ns per call of one batch of calls sends."""
        self.proc.stdin.write("%d\n" % calls)
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("ab_pair: a side ended (exit %s)" % self.proc.wait())
        return float(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.drain.wait(timeout=30)


def clean_env(extra=None):
    """This environment without SLUICE_* and LD_PRELOAD, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLUICE_") and k != "LD_PRELOAD"}
    env.update(extra or {})
    return env


def rounds(build, envs, count, calls, rng, warm=5):
    """One set: a process per environment of envs, count rounds after warm
    dropped ones; a list of rounds, each the list of the sides' ns per call."""
    sides = []
    try:
        for e in envs:
            sides.append(Side(build, e))
        out = []
        for r in range(warm + count):
            order = list(range(len(sides)))
            rng.shuffle(order)
            got = [0.0] * len(sides)
            for k in order:
                got[k] = sides[k].batch(calls)
            if r >= warm:
                out.append(got)
        return out
    finally:
        for s in sides:
            s.close()
