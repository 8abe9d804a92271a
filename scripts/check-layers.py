#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make check-layers: the floors of the tree, checked from its own includes.

Each folder may include the headers of the folders below it and its own,
nothing above or beside it:

    core/       the limiters: C11 integers and atomics only
    policy/     the rules, from text        over core/
    engine/     the decisions (pure)        over policy/, core/
    common/     segments, the shm format    over engine/, policy/, core/
    shim/       the preloaded library       over common/ and below
    supervise/  the seccomp supervisor      over common/ and below
    cli/        the launcher                over supervise/, common/ and below

A quoted include is resolved as the compiler does (the including file's own
folder first, then the -I folders in the Makefile's order), so a header is
charged to the folder it really comes from. Besides: core/ includes only
<stdint.h>, <stdbool.h>, <stddef.h>, <stdatomic.h>; policy/ and engine/ never
read the environment, resolve symbols, allocate or set errno, and engine/
makes no system call; every source carries an SPDX line; and inside shim/
and supervise/ no circle of includes between files (a .c with its .h is one
file) is larger than a pair, no file is over 500 lines and internal.h over
150.
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = ["core", "policy", "engine", "common", "shim", "supervise"]  # -I order
FLOORS = {
    "core": set(),
    "policy": {"core"},
    "engine": {"policy", "core"},
    "common": {"engine", "policy", "core"},
    "shim": {"common", "engine", "policy", "core"},
    "supervise": {"common", "engine", "policy", "core"},
    "cli": {"supervise", "common", "engine", "policy", "core"},
}
# The largest circle of includes allowed inside a folder (files, a .c and
# its .h counted once): a pair that calls each other, commented where it
# does (log.c and real.c, fair.c and nb.c, redis.c and redis_proto.h), and
# nothing larger.
CIRCLE_BUDGET = {"shim": 2, "supervise": 2}
# HACKING.md: one idea per file; past ~500 lines, split. Held to in the
# front ends, and their shared header at most 150 lines.
LINES_MAX = {"shim": 500, "supervise": 500}
INTERNAL_MAX = 150
INC = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
PURE_BAD = re.compile(r'\b(getenv|secure_getenv|dlsym|dlopen|environ|malloc|calloc|realloc)\b'
                      r'|\berrno\s*=[^=]')
SYSCALL_BAD = re.compile(r'\b(syscall|open|openat|read|write|close|mmap|clock_gettime|'
                         r'nanosleep|clock_nanosleep|getsockopt|getpeername|fstat)\s*\(')


def sources(folder):
    return sorted(glob.glob(os.path.join(ROOT, folder, "*.[ch]")))


def resolve(folder, name):
    """The folder a quoted include of `name` from `folder` comes from."""
    if os.path.exists(os.path.join(ROOT, folder, name)):
        return folder
    for f in ORDER:
        if os.path.exists(os.path.join(ROOT, f, name)):
            return f
    return None


def strip_comments(text):
    return re.sub(r'/\*.*?\*/|//[^\n]*', '', text, flags=re.S)


def circles(folder):
    """Strongly connected sets of files (stem) of folder's include graph."""
    graph = {}
    for path in sources(folder):
        stem = os.path.splitext(os.path.basename(path))[0]
        deps = graph.setdefault(stem, set())
        for _, name in INC.findall(open(path).read()):
            if "/" in name or not os.path.exists(os.path.join(ROOT, folder, name)):
                continue
            dep = os.path.splitext(name)[0]
            if dep != stem:
                deps.add(dep)
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan, iterative enough for a few hundred files
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def main():
    bad = []
    for folder, allowed in FLOORS.items():
        for path in sources(folder):
            rel = os.path.relpath(path, ROOT)
            text = open(path).read()
            for kind, name in INC.findall(text):
                if kind == "<":
                    if folder == "core" and name not in ("stdint.h", "stdbool.h", "stddef.h",
                                                         "stdatomic.h"):
                        bad.append("%s: core/ includes <%s> (C11 integers and atomics only)"
                                   % (rel, name))
                    continue
                src = resolve(folder, os.path.basename(name) if name.startswith("../") else name)
                if src is None or src == folder:
                    continue
                if src not in allowed:
                    bad.append('%s: includes "%s" of %s/, above or beside %s/ (it may use %s)'
                               % (rel, name, src, folder, ", ".join(sorted(allowed)) or "nothing"))
            code = strip_comments(text)
            if folder in ("policy", "engine"):
                for m in PURE_BAD.finditer(code):
                    bad.append("%s: %s/ must be pure: uses %r" % (rel, folder, m.group(0)))
            if folder == "engine":
                for m in SYSCALL_BAD.finditer(code):
                    bad.append("%s: engine/ makes no system call: %r" % (rel, m.group(0)))
    for folder, most in LINES_MAX.items():
        for path in sources(folder):
            n = sum(1 for _ in open(path))
            cap = INTERNAL_MAX if os.path.basename(path) == "internal.h" else most
            if n > cap:
                bad.append("%s: %d lines, past %d: split it by idea (HACKING.md)"
                           % (os.path.relpath(path, ROOT), n, cap))
    for folder, budget in CIRCLE_BUDGET.items():
        for comp in circles(folder):
            if len(comp) > budget:
                bad.append("%s/: a circle of %d files by includes (budget %d): %s"
                           % (folder, len(comp), budget, " ".join(comp)))
    pats = ["core/*.[ch]", "policy/*.[ch]", "engine/*.[ch]", "common/*.[ch]", "shim/*.[ch]",
            "supervise/*.[ch]", "cli/*.[ch]", "tests/*.[ch]", "tests/fuzz/*.c", "bench/*.c",
            "tests/integration/*.py", "tests/integration/*.sh", "scripts/*",
            "tests/integration/*/*.c"]
    for pat in pats:
        for path in sorted(glob.glob(os.path.join(ROOT, pat))):
            if os.path.isfile(path):
                with open(path, errors="replace") as f:
                    head = "".join(f.readline() for _ in range(3))
                if "SPDX-License-Identifier: MIT" not in head:
                    bad.append("%s: no SPDX-License-Identifier line" % os.path.relpath(path, ROOT))
    if bad:
        print("check-layers: %d problem(s):" % len(bad))
        for b in bad:
            print("  " + b)
        return 1
    print("check-layers: ok (floors: %s)" % " < ".join(["core", "policy", "engine", "common",
                                                         "shim|supervise", "cli"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
