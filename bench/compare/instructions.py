# SPDX-License-Identifier: MIT
"""instructions.py - instructions added per call, one row per rule and call
(workload 7 of make bench), against the budgets of issue 13.

Every case is one process, build/bench/calls (bench/calls.c), making N
1-byte calls of one kind: a write() to /dev/null that no rule matches, or a
send/write/writev/sendmsg/recv/read on a TCP loopback pair whose other end
the program drives with raw system calls no preloaded library sees.
valgrind --tool=callgrind counts the instructions of a run of 2,000 and of
22,000 calls; the difference over 20,000 is the instructions per call
(start-up, loading and parsing SLUICE_* cancel), and the same figure
without any tool is subtracted from each tool's. A plain run with
SLUICE_STATS first checks that the rule really matched every call, so a
rule that silently matched nothing cannot pass its budget.

Standalone: bench/instructions.sh [LIB] (or python3 bench/compare/instructions.py
[LIB]) prints the Markdown table and writes instructions.csv to BENCH_OUT
(default: a fresh directory under /tmp).

Before and after in one run: BENCH_BEFORE_LIB=OLD/libsluice.so (here and in
make bench) measures that library too, every case, in the same run and
against the same no-tool figures, as the table's "before" column and the
change between them ("tool" before in instructions.csv). Its rows have no
budget: the verdict is the library under test's.
"""

import concurrent.futures
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep the source tree clean

import proc  # noqa: E402
import report  # noqa: E402

N1, N2 = 2_000, 22_000
CHECK_ITERS = 200
RATE = "10GB/s"              # never reached by 1-byte calls
TRICKLE_KB = 1 << 20          # trickle -u/-d in KB/s: 1 GiB/s, also never reached
SHARED_PART = 60              # what one call does once however many rules match
# The calls trickle 1.07's trickle-overload.so interposes (nm -D): no
# sendmsg or recvmsg, so a sendmsg goes past trickle unthrottled.
TRICKLE_WRAPS = ("send", "write", "writev", "recv", "read")
WAIT_KINDS = ("devnull", "epoll", "poll", "epollpipe")
# A matched socket's wait, at most its cost before the readiness question
# was asked (issue 27: "no slower"; cases()).
WAIT_BEFORE = {"epoll": 238, "poll": 309}
# How a relative budget names its base row, where that is not "OP default".
BASE_TEXT = {"epollpipe": "epoll on a pipe"}

# (option text, short name, budget): ("abs", N): at most +N; ("dry", N): at
# most the same direction's default row (action=delay) + N; ("two",): at most
# that row plus the per=fd row minus SHARED_PART. The recv side has the same
# rows and budgets.
SCOPES = [
    ("", "default (per=process, token)", ("abs", 100)),
    ("shared=NAME", "shared=NAME", ("abs", 100)),
    ("algo=leaky", "algo=leaky", ("abs", 100)),
    ("algo=fixed", "algo=fixed", ("abs", 120)),
    ("algo=sliding", "algo=sliding", ("abs", 160)),
    ("per=fd", "per=fd", ("abs", 130)),
    ("per=thread", "per=thread", ("abs", 130)),
    ("per=peer", "per=peer", ("abs", 160)),
    ("action=dry-run", "action=dry-run", ("dry", 20)),
    ("TWO", "two rules: per=process and per=fd", ("two",)),
]
TRICKLE_NA = {
    "shared=NAME": "n/a: trickle has no limit shared by separate processes without trickled",
    "algo=leaky": "n/a: trickle has one algorithm",
    "algo=fixed": "n/a: trickle has one algorithm",
    "algo=sliding": "n/a: trickle has one algorithm",
    "per=fd": "n/a: trickle has no per-fd limit",
    "per=thread": "n/a: trickle has no per-thread limit",
    "per=peer": "n/a: trickle has no per-peer limit",
    "action=dry-run": "n/a: trickle has no dry run",
    "TWO": "n/a: trickle takes one limit per direction",
    "to=10.0.0.0/8": "n/a: trickle has no address matching",
}


def cases():
    """Every row: dict(name, kind, op, opts, label, budget); budget is
    ("abs", N), ("rel", base case name, +N) or ("two", case a, case b)."""
    out = [{"name": "devnull", "kind": "devnull", "op": "send", "opts": "",
            "label": "unmatched 1-byte write to /dev/null", "budget": ("abs", 12)}]
    for op, kinds in (("send", ("send", "write", "writev", "sendmsg")), ("recv", ("recv", "read"))):
        for opts, short, budget in SCOPES:
            if budget[0] == "dry":
                budget = ("rel", op, budget[1])
            elif budget[0] == "two":
                budget = ("two", op, op + " per=fd")
            name = op if not opts else "%s %s" % (op, "two-rules" if opts == "TWO" else opts)
            out.append({"name": name, "kind": op, "op": op, "opts": opts,
                        "label": "%s: %s" % (op, short), "budget": budget})
        for kind in kinds[1:]:
            out.append({"name": kind, "kind": kind, "op": op, "opts": "",
                        "label": "%s: default" % kind, "budget": ("rel", op, 20)})
    # The wait wrappers under a recv rule: epoll_wait and poll (timeout 0)
    # reporting one ready fd, which the rule matches (the limiter is asked
    # whether its next call would find units: shim/nb.h, sl__nb_unready) or
    # not (a pipe: its pass bit). The pipe's budget is the cost of the
    # wrapper before that question was asked (+281) plus 20. A matched
    # socket that no hold hides costs no more than before the question was
    # asked, WAIT_BEFORE (+238 and +309; measured +237 and +247): the fd's
    # bits and record's rule masks, one clock reading, one compare of a
    # per=process bucket's next free instant with now (core's
    # sl_fast_at_rest_tunable_gcra), the mirror's token (an epoll
    # registration a rule may hide holds one; the pipe's holds the
    # program's own data). epoll_wait's margin is one instruction: code
    # layout moves it by several (a spill more or less around the clock's
    # call), so a change to ep_translate or nb.h is measured here.
    # A thread sending on 4 sockets in turn under per=fd: thread-local
    # credit is keyed to one fd, so each call finds another's and takes the
    # plain fast path (shim/credit.h). No budget in the issue; measured
    # against the one-socket per=fd row (+178 before keyed credit).
    # A connected socket whose peer the rule's to= does not fit: classified
    # once, then the wrapper's pass bit (shim/fd.c, rec_pass), as a file's.
    out.append({"name": "send other-peer", "kind": "send", "op": "send",
                "opts": "to=10.0.0.0/8", "unmatched": True,
                "label": "send: a rule for other peers (to=10.0.0.0/8)", "budget": ("abs", 12)})
    out.append({"name": "send4 per=fd", "kind": "send4", "op": "send", "opts": "per=fd",
                "label": "send: per=fd, 4 sockets in turn", "budget": ("none",)})
    out.append({"name": "epollpipe", "kind": "epollpipe", "op": "recv", "opts": "",
                "label": "epoll_wait: a ready pipe (unmatched)", "budget": ("abs", 300)})
    for kind in ("epoll", "poll"):
        out.append({"name": kind, "kind": kind, "op": "recv", "opts": "",
                    "label": "%s: a ready socket the rule matches" % ("epoll_wait" if kind == "epoll"
                                                                      else kind),
                    "budget": ("abs", WAIT_BEFORE[kind])})
    return out


def sluice_env(lib, case, shared_name):
    """The environment that applies case's rule(s) with sluice at lib."""
    e = {"LD_PRELOAD": lib}
    opts = case["opts"].replace("NAME", shared_name or "")
    if opts == "TWO":
        e["SLUICE_RULES"] = "%s:%s;%s:%s,per=fd" % (case["op"], RATE, case["op"], RATE)
    else:
        e["SLUICE_" + case["op"].upper()] = RATE + ("," + opts if opts else "")
    return e


def rule_text(case):
    if case["kind"] == "devnull":
        return "SLUICE_SEND=%s (a file, not a socket)" % RATE
    if case["opts"] == "TWO":
        return "SLUICE_RULES=\"%s:%s;%s:%s,per=fd\"" % (case["op"], RATE, case["op"], RATE)
    return "SLUICE_%s=%s%s" % (case["op"].upper(), RATE, "," + case["opts"] if case["opts"] else "")


class Runner:
    """Runs calls under callgrind; knows the library, the launcher and a scratch dir."""

    def __init__(self, build, lib, tmp, before=None):
        self.calls = os.path.abspath(os.path.join(build, "bench", "calls"))
        self.lib = os.path.abspath(lib)
        self.before = os.path.abspath(before) if before else None
        cli = os.path.join(os.path.dirname(self.lib), "sluice")
        self.cli = cli if os.access(cli, os.X_OK) else os.path.abspath(os.path.join(build, "sluice"))
        self.tmp = tmp
        self._seq = itertools.count(1)

    def shared_name(self):
        """A segment name no other run (of this or another user's bench) uses."""
        return "slbench-%d-%d-%s" % (os.getpid(), next(self._seq), os.urandom(3).hex())

    def remove_shared(self, name):
        subprocess.run([self.cli, "rm", "--force", "shared:" + name], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30)

    def _cmd(self, tool, case, argv):
        """(argv, env) for one run of argv under tool."""
        if tool in ("sluice", "before"):
            name = self.shared_name() if "NAME" in case["opts"] else None
            lib = self.lib if tool == "sluice" else self.before
            return argv, sluice_env(lib, case, name), name
        if tool == "trickle":
            return ["trickle", "-s", "-u" if case["op"] == "send" else "-d",
                    str(TRICKLE_KB)] + argv, {}, None
        return argv, {}, None

    def total(self, tool, case, iters, keep=False):
        """Instructions callgrind counted in a whole run of iters calls
        (keep: (total, the callgrind output file) and the file is left)."""
        out = os.path.join(self.tmp, "callgrind-%s-%s-%d-%d.out" % (
            tool, case["name"].replace(" ", "_").replace("=", "-"), iters, next(self._seq)))
        vg = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
              self.calls, case["kind"], str(iters)]
        cmd, extra, name = self._cmd(tool, case, vg)
        try:
            proc.run_measured(cmd, extra, 120)
        finally:
            if name:
                self.remove_shared(name)
        with open(out) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    if keep:
                        return int(line.split()[1]), out
                    os.unlink(out)
                    return int(line.split()[1])
        raise proc.RunError("no totals in " + out)

    def check_matched(self, case):
        """'' if sluice's rule(s) counted every call (none for devnull), else why not."""
        stats = os.path.join(self.tmp, "stats-%d.json" % next(self._seq))
        cmd, extra, name = self._cmd("sluice", case, [self.calls, case["kind"], str(CHECK_ITERS)])
        extra["SLUICE_STATS"] = stats
        try:
            proc.run_measured(cmd, extra, 30)
        finally:
            if name:
                self.remove_shared(name)
        try:
            with open(stats) as f:
                rules = json.loads(f.read().splitlines()[-1]).get("rules", [])
        except (OSError, ValueError, IndexError) as e:
            return "no statistics (%s)" % e
        # No call of the rule's kind is made in the file and wait cases.
        want = 0 if case["kind"] in WAIT_KINDS or case.get("unmatched") else CHECK_ITERS
        seen = [r.get("calls") for r in rules]
        if not seen or any(c != want for c in seen):
            return "rule(s) counted %s of %d calls" % (seen or "no", want)
        return ""


def _budget(case, added):
    """(budget or None, budget text) from the measured rows added{name: instructions}."""
    b = case["budget"]
    if b[0] == "none":
        return None, "–"
    if b[0] == "abs":
        return b[1], "≤ +%d" % b[1]
    if b[0] == "rel":
        base = added.get(b[1])
        base_label = BASE_TEXT.get(b[1]) or "%s %s" % (
            case["op"], "default" if b[1] in ("send", "recv") else b[1])
        if base is None:
            return None, "≤ %s + %d" % (base_label, b[2])
        return round(base) + b[2], "≤ %s + %d = +%d" % (base_label, b[2], round(base) + b[2])
    a, f = added.get(b[1]), added.get(b[2])
    text = "≤ per=process + per=fd − %d" % SHARED_PART
    if a is None or f is None:
        return None, text
    s = round(a) + round(f)
    return s - SHARED_PART, "%s = %d + %d − %d = +%d (sum %d)" % (
        text, round(a), round(f), SHARED_PART, s - SHARED_PART, s)


def _verdict(value, budget):
    if value is None or budget is None:
        return "–"
    v = round(value)
    return "met" if v <= budget else "missed by %d" % (v - budget)


def measure(build, lib, tmp, jobs=2, have_trickle=True, before=None):
    """Rows: one per (tool, case) with instructions per call and, for sluice,
    the budget and verdict; 'none' rows give the no-tool figure per kind;
    'before' rows the library `before` (if given) on the same cases."""
    r = Runner(build, lib, tmp, before)
    if not os.access(r.calls, os.X_OK):
        raise proc.RunError("%s missing: make %s" % (r.calls, os.path.relpath(r.calls)))
    all_cases = cases()
    work = []  # (tool, case)
    kinds = []
    for c in all_cases:
        if c["kind"] not in kinds:
            kinds.append(c["kind"])
            work.append(("none", c))
        work.append(("sluice", c))
        if before:
            work.append(("before", c))
        if have_trickle and not c["opts"] and (c["kind"] in TRICKLE_WRAPS or
                                               c["kind"] == "devnull"):
            work.append(("trickle", c))
    rows = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        futs = {}
        for tool, c in work:
            for n in (N1, N2):
                futs[ex.submit(r.total, tool, c, n)] = (tool, c["name"], n)
            if tool == "sluice":
                futs[ex.submit(r.check_matched, c)] = (tool, c["name"], "check")
        for fut, (tool, name, n) in futs.items():
            row = rows.setdefault((tool, name), {"tool": tool, "case": name})
            try:
                row[n] = fut.result()
            except (proc.RunError, OSError, ValueError, subprocess.SubprocessError) as e:
                row.setdefault("note", "failed: %s" % e)
    base = {}
    out = []
    for tool, c in work:
        row = rows[(tool, c["name"])]
        res = {"tool": tool, "case": c["name"], "call": c["kind"], "rule": rule_text(c),
               "label": c["label"]}
        if row.get("check"):
            res["note"] = "not matched: %s" % row["check"]
        elif "note" in row:
            res["note"] = row["note"]
        if N1 in row and N2 in row:
            res["instr_per_call"] = (row[N2] - row[N1]) / (N2 - N1)
        if tool == "none" and "instr_per_call" in res:
            base[c["kind"]] = res["instr_per_call"]
        out.append(res)
    added = {}
    for res in out:
        if res["tool"] != "none" and "instr_per_call" in res and res["call"] in base \
                and "note" not in res:
            res["added_instr_per_call"] = res["instr_per_call"] - base[res["call"]]
            if res["tool"] == "sluice":
                added[res["case"]] = res["added_instr_per_call"]
    by_name = {c["name"]: c for c in all_cases}
    for res in out:
        if res["tool"] == "sluice":
            budget, text = _budget(by_name[res["case"]], added)
            res["budget"] = budget
            res["budget_text"] = text
            res["verdict"] = _verdict(res.get("added_instr_per_call"), budget)
    return out


def _added(rows, tool, case):
    for r in rows:
        if r["tool"] == tool and r["case"] == case:
            return r.get("added_instr_per_call")
    return None


def _cell(rows, tool, case):
    for r in rows:
        if r["tool"] == tool and r["case"] == case:
            if r.get("added_instr_per_call") is not None:
                return "%+.0f" % r["added_instr_per_call"]
            return " ".join(str(r.get("note", "–")).split()).replace("|", "/")
    return None


def table(rows, lib="", before=""):
    """The Markdown table of the rows measure() returned."""
    has_before = any(r["tool"] == "before" for r in rows)
    L = ["| call | rule (never reached) | sluice |%s trickle | target | verdict |" % (
        " before | change |" if has_before else ""),
         "|---|---|---|%s---|---|---|" % ("---|---|" if has_before else "")]
    for c in cases():
        s = [r for r in rows if r["tool"] == "sluice" and r["case"] == c["name"]]
        if not s:
            continue
        t = _cell(rows, "trickle", c["name"])
        if t is None:
            if c["opts"]:
                t = TRICKLE_NA.get(c["opts"], "n/a")
            elif c["kind"] not in TRICKLE_WRAPS and c["kind"] != "devnull":
                t = "n/a: trickle does not wrap %s (the call passes unthrottled)" % c["kind"]
            else:
                t = "not installed"
        b = ""
        if has_before:
            now_, was = (_added(rows, tool, c["name"]) for tool in ("sluice", "before"))
            b = " %s | %s |" % (_cell(rows, "before", c["name"]) or "–",
                                "%+.0f" % (round(now_) - round(was))
                                if now_ is not None and was is not None else "–")
        L.append("| %s | `%s` | %s |%s %s | %s | %s |" % (
            c["label"], rule_text(c), _cell(rows, "sluice", c["name"]), b, t,
            s[0].get("budget_text", "–"), s[0].get("verdict", "–")))
    base = ["%s %.0f" % (r["call"], r["instr_per_call"]) for r in rows
            if r["tool"] == "none" and r.get("instr_per_call") is not None]
    met = sum(1 for r in rows if r["tool"] == "sluice" and r.get("verdict") == "met")
    total = sum(1 for r in rows if r["tool"] == "sluice" and r.get("verdict", "–") != "–")
    L += ["", "Instructions per call added over the same program without a tool (callgrind, "
          "runs of %d and %d calls subtracted); without a tool a call costs: %s. "
          "trickle runs at -u/-d %d KB/s. Budgets met: %d of %d.%s%s" % (
              N1, N2, ", ".join(base), TRICKLE_KB, met, total,
              " Library: `%s`." % lib if lib else "",
              " Before: `%s` (BENCH_BEFORE_LIB), in the same run; change: sluice − before."
              % before if has_before and before else
              " Before: BENCH_BEFORE_LIB, in the same run." if has_before else "")]
    return L


def _per_function(path):
    """{file:function: instructions} of one callgrind output (self cost)."""
    r = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", path], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, timeout=60, check=True)
    out = {}
    for line in r.stdout.decode(errors="replace").splitlines():
        m = re.match(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*?)(?: \[[^]]*\])?$", line)
        if m and m.group(2) != "PROGRAM TOTALS":
            out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return out


def explain(build, lib, tmp, name):
    """Lines: where the instructions a case adds per call go, function by
    function (self cost; the runs of N1 and N2 calls subtracted per
    function, and the same without a tool)."""
    by_name = {c["name"]: c for c in cases()}
    if name not in by_name:
        raise KeyError("no case %r (cases: %s)" % (name, ", ".join(by_name)))
    c = by_name[name]
    r = Runner(build, lib, tmp)
    per = {}
    for tool in ("sluice", "none"):
        f1 = _per_function(r.total(tool, c, N1, keep=True)[1])
        f2 = _per_function(r.total(tool, c, N2, keep=True)[1])
        sign = 1 if tool == "sluice" else -1
        for fn in set(f1) | set(f2):
            per[fn] = per.get(fn, 0) + sign * (f2.get(fn, 0) - f1.get(fn, 0)) / (N2 - N1)
    home = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + "/"
    rows = sorted(((v, fn.replace(home, "")) for fn, v in per.items() if abs(v) >= 0.5),
                  reverse=True)
    L = ["| instructions per call | function (self cost, %s, `%s`) |" % (name, rule_text(c)),
         "|---|---|"]
    L += ["| %+.1f | %s |" % (v, fn) for v, fn in rows]
    L.append("| %+.1f | total added (functions under 0.5 included) |" % sum(per.values()))
    return L


def main():
    build = os.environ.get("SL_BUILD", "build")
    args = sys.argv[1:]
    what = None
    if args[:1] == ["--explain"]:
        if len(args) < 2:
            print("usage: instructions.py [--explain CASE] [LIB]", file=sys.stderr)
            return 2
        what, args = args[1], args[2:]
    lib = args[0] if args else os.environ.get("LIB", os.path.join(build, "libsluice.so"))
    if not os.path.exists(lib):
        print("instructions: %s: no such library" % lib, file=sys.stderr)
        return 2
    if not shutil.which("valgrind"):
        print("instructions: valgrind not installed (scripts/deps.sh bench)", file=sys.stderr)
        return 2
    out = os.environ.get("BENCH_OUT") or tempfile.mkdtemp(prefix="sluice-instr-")
    os.makedirs(out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="sluice-instr-run-")
    if what is not None:
        try:
            print("\n".join(explain(build, lib, tmp, what)))
        except (KeyError, proc.RunError, OSError, subprocess.SubprocessError) as e:
            print("instructions: %s" % e, file=sys.stderr)
            return 2
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return 0
    start = time.monotonic()
    before = os.environ.get("BENCH_BEFORE_LIB") or None
    if before and not os.path.exists(before):
        print("instructions: BENCH_BEFORE_LIB=%s: no such library" % before, file=sys.stderr)
        return 2
    rows = measure(build, lib, tmp, int(os.environ.get("BENCH_JOBS", "2")),
                   bool(shutil.which("trickle")), before)
    shutil.rmtree(tmp, ignore_errors=True)
    report.write_csv(os.path.join(out, "instructions.csv"), rows)
    print("\n".join(table(rows, os.path.abspath(lib),
                         os.path.abspath(before) if before else "")))
    print("\n(%.0f s; %s/instructions.csv)" % (time.monotonic() - start, out))
    return 1 if any(str(r.get("note", "")).startswith(("failed", "not matched"))
                    for r in rows if r["tool"] == "sluice") else 0


if __name__ == "__main__":
    sys.exit(main())
