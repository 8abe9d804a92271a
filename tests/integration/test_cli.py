#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""test_cli.py - the sluice launcher as a user runs it.

Runs $SL_BUILD/sluice (default build/) as a subprocess and checks its
flags, its messages and exit codes, the environment the program receives
(SLUICE_* and LD_PRELOAD, read back through `sh -c`), its warnings about
programs LD_PRELOAD cannot reach (a static binary, a set-user-ID copy, a
binary carrying a Go build-ID section, all built here in a temporary
directory), and the installed tree from `make install DESTDIR=...`.
Nothing here opens a socket.

test_programs.py imports run() and the paths from this file.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("SL_BUILD", "build"))
SLUICE = os.path.join(BUILD, "sluice")
LIBRARY = os.path.realpath(os.path.join(BUILD, "libsluice.so"))
UNIT_ERR = "(expected B, KB, KiB, MB, MiB, GB, GiB)"


def clean_env(**extra):
    """The test's environment without any SLUICE_* or LD_PRELOAD, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLUICE_") and k != "LD_PRELOAD"}
    env.update(extra)
    return env


def run(args, env=None, timeout=60, cwd=None, exe=None):
    """Run sluice ARGS; returns the CompletedProcess with text output."""
    return subprocess.run([exe or SLUICE] + args, env=env if env is not None else clean_env(),
                          cwd=cwd, capture_output=True, text=True, timeout=timeout)


def makefile_version():
    with open(os.path.join(ROOT, "Makefile")) as f:
        return re.search(r"^VERSION := (\S+)", f.read(), re.M).group(1)


def compile_c(directory, name, source, *flags):
    """Build a tiny C program; returns its path or None if cc cannot."""
    src = os.path.join(directory, name + ".c")
    with open(src, "w") as f:
        f.write(source)
    out = os.path.join(directory, name)
    r = subprocess.run(["cc", *flags, "-o", out, src], capture_output=True, text=True)
    return out if r.returncode == 0 else None


MAIN = "int main(void) { return 0; }\n"


class Cli(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="sluice-test-cli-")
        cls.dyn = compile_c(cls.tmp, "dyn", MAIN)
        assert cls.dyn, "cc cannot build a dynamic program"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check(self, r, code):
        self.assertEqual(r.returncode, code, f"stdout={r.stdout!r} stderr={r.stderr!r}")

    # -- help, version, usage ------------------------------------------------

    def test_help_lists_flags_and_variables(self):
        r = run(["--help"])
        self.check(r, 0)
        for flag in ["--connect", "--accept", "--send", "--recv", "--conns", "--rules",
                     "--stats", "-v", "--check", "--supervise", "--preload", "--help",
                     "--version"]:
            self.assertIn(flag, r.stdout)
        for var in ["SLUICE_CONNECT", "SLUICE_ACCEPT", "SLUICE_SEND", "SLUICE_RECV",
                    "SLUICE_CONNS", "SLUICE_RULES", "SLUICE_STATS", "SLUICE_LIBRARY",
                    "SLUICE_LOG", "SLUICE_LOG_FILE", "SLUICE_ONLY", "SLUICE_SKIP",
                    "SLUICE_CONFIG_ERROR", "SLUICE_REDIS"]:
            self.assertRegex(r.stdout, rf"{var}=\S", f"no example for {var}")
        for opt in ["burst", "algo", "action", "max-delay", "errno", "per", "to", "port",
                    "family", "type", "nonblock", "shared", "redis", "on-error", "lease"]:
            self.assertRegex(r.stdout, rf"(?m)^  {opt}=", f"no line for option {opt}")
            self.assertRegex(r.stdout, rf"e\.g\. --\w+ \S*,{opt}=", f"no example for {opt}")
        for sub in ["sluice stat [--json | --prometheus] [--watch[=SECONDS]] [PID]",
                    "sluice set PID|shared:NAME 'OP:SPEC'", "e.g. sluice stat", "e.g. sluice set"]:
            self.assertIn(sub, r.stdout)
        self.assertEqual([l for l in r.stdout.splitlines() if len(l) > 79], [])

    def test_subcommand_help_and_usage_errors(self):
        for sub, words in [("stat", ["--json", "--prometheus", "--watch", "stat-PID",
                                     "shared:NAME", "/run/sluice"]),
                           ("set", ["shared:NAME", "burst=", "owner", "sluice set 1234 '"]),
                           ("rm", ["shared:NAME", "--force", "sluice rm shared:uploads"])]:
            r = run([sub, "--help"])
            self.check(r, 0)
            self.assertTrue(r.stdout.startswith(f"Usage: sluice {sub} "), r.stdout)
            for w in words:
                self.assertIn(w, r.stdout)
            self.assertEqual([l for l in r.stdout.splitlines() if len(l) > 79], [])
        for args in [["stat", "--bogus"], ["stat", "1", "2"], ["stat", "--watch=0"],
                     ["set"], ["set", "1234"], ["set", "1", "send:1MiB/s", "x"],
                     ["set", "nopid", "send:1MiB/s"], ["set", "1", "send:1Mib/s"],
                     ["rm"], ["rm", "x"], ["rm", "shared:a/b"], ["rm", "--bogus", "shared:x"],
                     ["stat", "--prometheus", "shared:x"]]:
            r = run(args)
            self.check(r, 2)
            self.assertEqual(r.stdout, "")

    def test_version(self):
        r = run(["--version"])
        self.check(r, 0)
        self.assertEqual(r.stdout, f"sluice {makefile_version()}\n")

    def test_usage_errors_exit_2(self):
        for args in [[], ["--send"], ["--bogus", "true"], ["-v"]]:
            r = run(args)
            self.check(r, 2)
            self.assertIn("sluice --help", r.stderr)

    def test_usage_error_messages_name_and_suggest(self):
        # Exact lines: named `sluice:` (not the path it was run by), the
        # nearest flag suggested, a missing value called missing.
        cases = [
            (["--snd", "1MiB/s", "--", "true"],
             "sluice: unknown option '--snd' (did you mean --send?)"),
            (["--sned=1MiB/s", "true"], "sluice: unknown option '--sned' (did you mean --send?)"),
            (["--frobnicate", "true"], "sluice: unknown option '--frobnicate'"),
            (["-x", "true"], "sluice: unknown option '-x'"),
            (["--send", "--", "true"], "sluice: --send: missing value (e.g. --send 1MiB/s)"),
            (["--send", "--recv", "1MiB/s", "true"],
             "sluice: --send: missing value (e.g. --send 1MiB/s)"),
            (["--conns"], "sluice: --conns: missing value (e.g. --conns 4)"),
        ]
        for args, first in cases:
            r = run(args)
            self.check(r, 2)
            self.assertEqual(r.stderr.splitlines(),
                             [first, "Try 'sluice --help' for more information."], args)

    def test_set_error_names_what_was_typed(self):
        r = run(["set", str(os.getpid()), "recv:1MB"])
        self.check(r, 2)
        self.assertEqual(r.stderr, "sluice set: OP:SPEC=\"recv:1MB\": at column 9: expected '/' "
                         "and a period after '1MB' (e.g. 1MB/s)\n")

    # -- validation and canonical output ---------------------------------------

    def test_check_prints_canonical_rules(self):
        r = run(["--check", "--send", "1048576B/s", "--recv=1024KiB/1s", "--rules",
                 "connect:10/s;conns:4", "--stats", "/tmp/sluice-stats"])
        self.check(r, 0)
        self.assertEqual(r.stdout.splitlines(), [
            f"library: {LIBRARY}",
            "rule: send:1MiB/s",
            "rule: recv:1MiB/s",
            "rule: connect:10/s",
            "rule: conns:4",
            "stats: /tmp/sluice-stats",
        ])

    def test_bad_flag_exact_policy_message(self):
        r = run(["--check", "--send", "1Mib/s"])
        self.check(r, 2)
        self.assertEqual(r.stderr,
                         f"sluice: --send=\"1Mib/s\": at column 2: unknown unit 'Mib' {UNIT_ERR}\n")
        self.assertEqual(r.stdout, "")

    def test_bad_environment_exact_policy_message(self):
        r = run(["--check"], env=clean_env(SLUICE_SEND="1Mib/s"))
        self.check(r, 2)
        self.assertEqual(r.stderr,
                         f"sluice: SLUICE_SEND=\"1Mib/s\": at column 2: unknown unit 'Mib' {UNIT_ERR}\n")

    def test_bad_rule_stops_the_program(self):
        marker = os.path.join(self.tmp, "ran")
        r = run(["--recv", "1Mib/s", "--", "touch", marker])
        self.check(r, 2)
        self.assertFalse(os.path.exists(marker))

    def test_unknown_variable_rejected(self):
        r = run(["--check"], env=clean_env(SLUICE_SNED="1MiB/s"))
        self.check(r, 2)
        self.assertIn("SLUICE_SNED", r.stderr)

    def test_verbose_prints_to_stderr_and_runs(self):
        r = run(["-v", "--send", "1048576B/s", "--", "sh", "-c", "echo ran"])
        self.check(r, 0)
        self.assertEqual(r.stdout, "ran\n")
        self.assertIn("sluice: rule: send:1MiB/s\n", r.stderr)
        self.assertIn(f"sluice: library: {LIBRARY}\n", r.stderr)

    # -- flags and the environment ---------------------------------------------

    def child_env(self, args, env=None):
        """The SLUICE_* and LD_PRELOAD the program sees, as a dict."""
        r = run(args + ["--", "sh", "-c", "env"], env=env)
        self.check(r, 0)
        return {k: v for k, _, v in (line.partition("=") for line in r.stdout.splitlines())
                if k.startswith("SLUICE_") or k == "LD_PRELOAD"}

    def test_flag_sets_variable(self):
        e = self.child_env(["--send", "1MiB/s", "--stats", "/tmp/s"])
        self.assertEqual(e, {"SLUICE_SEND": "1MiB/s", "SLUICE_STATS": "/tmp/s",
                             "LD_PRELOAD": LIBRARY})
        r = run(["--check", "--stats", "rel/stats.json"], cwd=self.tmp)
        self.check(r, 0)
        self.assertIn(f"stats: {os.path.realpath(self.tmp)}/rel/stats.json\n", r.stdout)

    def test_repeated_flag_is_usage_error(self):
        r = run(["--check", "--recv", "1MiB/s", "--recv=2MiB/s"])
        self.check(r, 2)
        self.assertIn("sluice: --recv given twice ('1MiB/s' and '2MiB/s'): give it once, "
                      "or both limits as --rules 'recv:1MiB/s;recv:2MiB/s'\n", r.stderr)
        self.assertEqual(r.stdout, "")
        r = run(["--check", "--send", "1MiB/s", "--connect", "5/s", "--send", "1MiB/s"])
        self.check(r, 2)
        self.assertIn("--send given twice ('1MiB/s' and '1MiB/s')", r.stderr)
        e = self.child_env(["--rules", "send:1MiB/s;send:2MiB/s"])
        self.assertEqual(e["SLUICE_RULES"], "send:1MiB/s;send:2MiB/s")

    def test_flag_adds_to_inherited_variable(self):
        env = clean_env(SLUICE_SEND="1MiB/s", SLUICE_RULES="connect:5/s")
        e = self.child_env(["--send", "2MiB/s", "--rules", "conns:3"], env)
        self.assertEqual(e["SLUICE_SEND"], "1MiB/s")
        self.assertEqual(e["SLUICE_RULES"], "connect:5/s;send:2MiB/s;conns:3")
        r = run(["--check", "--send", "2MiB/s"], env=env)
        self.assertEqual(r.stdout.splitlines()[1:],
                         ["rule: send:1MiB/s", "rule: connect:5/s", "rule: send:2MiB/s"])

    def test_ld_preload_prepended_and_kept(self):
        other = compile_c(self.tmp, "libother.so", "int sluice_test_other;\n", "-shared", "-fPIC")
        self.assertIsNotNone(other)
        e = self.child_env(["--send", "1MiB/s"], clean_env(LD_PRELOAD=other))
        self.assertEqual(e["LD_PRELOAD"], f"{LIBRARY} {other}")
        e = self.child_env(["--send", "1MiB/s"], clean_env(LD_PRELOAD=f"{other}:{LIBRARY}"))
        self.assertEqual(e["LD_PRELOAD"], f"{other}:{LIBRARY}", "library added twice")

    def test_library_override_not_passed_on(self):
        lib = os.path.join(self.tmp, "copy-libsluice.so")
        shutil.copy(LIBRARY, lib)
        e = self.child_env(["--send", "1MiB/s"], clean_env(SLUICE_LIBRARY=lib))
        self.assertEqual(e["LD_PRELOAD"], lib)
        self.assertNotIn("SLUICE_LIBRARY", e)
        r = run(["--check"], env=clean_env(SLUICE_LIBRARY=os.path.join(self.tmp, "none.so")))
        self.check(r, 2)
        self.assertIn("SLUICE_LIBRARY", r.stderr)

    def test_library_never_from_current_directory(self):
        bindir = os.path.join(self.tmp, "lonely-bin")
        os.makedirs(bindir, exist_ok=True)
        exe = os.path.join(bindir, "sluice")
        shutil.copy(SLUICE, exe)
        cwd = os.path.join(self.tmp, "cwd-with-lib")
        os.makedirs(os.path.join(cwd, "lib", "sluice"), exist_ok=True)
        shutil.copy(LIBRARY, os.path.join(cwd, "libsluice.so"))
        r = run(["--check", "--send", "1MiB/s"], cwd=cwd, exe=exe)
        self.check(r, 2)
        self.assertIn("cannot find libsluice.so", r.stderr)

    def test_double_dash_optional(self):
        r = run(["--send", "1MiB/s", "sh", "-c", "echo $SLUICE_SEND"])
        self.check(r, 0)
        self.assertEqual(r.stdout, "1MiB/s\n")
        # Options after PROGRAM belong to PROGRAM.
        r = run(["sh", "-c", "echo \"$0\"", "-v"])
        self.check(r, 0)
        self.assertEqual(r.stdout, "-v\n")

    def test_exit_status_passed_through(self):
        r = run(["--send", "1MiB/s", "--", "sh", "-c", "exit 7"])
        self.check(r, 7)

    # -- programs that cannot be run or throttled ------------------------------

    def test_not_found_127_not_executable_126(self):
        r = run(["--send", "1MiB/s", "--", "sluice-no-such-program"])
        self.check(r, 127)
        self.assertIn("sluice-no-such-program: command not found", r.stderr)
        plain = os.path.join(self.tmp, "plain.txt")
        with open(plain, "w") as f:
            f.write("data\n")
        r = run(["--send", "1MiB/s", "--", plain])
        self.check(r, 126)
        r = run(["--send", "1MiB/s", "--", self.tmp])
        self.check(r, 126)

    def warnings(self, program, *flags):
        r = run(["--check", *flags, "--send", "1MiB/s", "--", program])
        self.check(r, 0)
        return [line for line in r.stderr.splitlines() if line.startswith("sluice: warning:")]

    def mode_lines(self, program):
        r = run(["--check", "--send", "1MiB/s", "--", program])
        self.check(r, 0)
        return [line for line in r.stderr.splitlines() if "mode" in line]

    def test_dynamic_program_no_warning(self):
        self.assertEqual(self.warnings(self.dyn), [])
        self.assertEqual(self.warnings("sh"), [])

    def test_static_binary_warns(self):
        static = compile_c(self.tmp, "static", MAIN, "-static")
        if static is None:
            self.skipTest("no libc.a (libc6-dev) for cc -static")
        # Supervised mode is chosen for it, without a warning; --preload
        # keeps the library, and warns.
        self.assertEqual(self.warnings(static), [])
        m = self.mode_lines(static)
        self.assertEqual(len(m), 1, m)
        self.assertIn("statically linked: supervised mode", m[0])
        w = self.warnings(static, "--preload")
        self.assertEqual(len(w), 1, w)
        self.assertIn("statically linked", w[0])
        # A warning does not stop the program; neither mode changes its status.
        self.check(run(["--preload", "--send", "1MiB/s", "--", static]), 0)
        self.check(run(["--send", "1MiB/s", "--", static]), 0)
        r = run(["--supervise", "--preload", "--", static])
        self.check(r, 2)
        self.assertIn("--supervise and --preload exclude each other", r.stderr)

    def test_script_judged_by_interpreter(self):
        static = compile_c(self.tmp, "static2", MAIN, "-static")
        if static is None:
            self.skipTest("no libc.a (libc6-dev) for cc -static")
        script = os.path.join(self.tmp, "script.sh")
        with open(script, "w") as f:
            f.write(f"#!{static}\n")
        os.chmod(script, 0o755)
        self.assertIn("statically linked: supervised mode", " ".join(self.mode_lines(script)))
        w = self.warnings(script, "--preload")
        self.assertEqual(len(w), 1, w)
        self.assertIn(f"(interpreter of {script})", w[0])
        self.assertIn("statically linked", w[0])

    def test_setuid_warns_when_it_changes_identity(self):
        copy = os.path.join(self.tmp, "suid")
        shutil.copy(self.dyn, copy)
        os.chmod(copy, 0o4755)
        # Set-user-ID to ourselves changes nothing: the loader keeps LD_PRELOAD.
        self.assertEqual(self.warnings(copy), [])
        if os.geteuid() != 0:
            self.skipTest("only root can give a file to another user")
        os.chown(copy, 65534, -1)
        os.chmod(copy, 0o4755)  # chown clears the bit
        w = self.warnings(copy)
        self.assertEqual(len(w), 1, w)
        self.assertIn("set-user-ID (uid 65534)", w[0])

    def test_file_capabilities_warn(self):
        setcap = shutil.which("setcap")
        if setcap is None or os.geteuid() != 0:
            self.skipTest("needs setcap and root")
        copy = os.path.join(self.tmp, "withcap")
        shutil.copy(self.dyn, copy)
        subprocess.run([setcap, "cap_net_raw+ep", copy], check=True)
        w = self.warnings(copy)
        self.assertEqual(len(w), 1, w)
        self.assertIn("file capabilities", w[0])

    def test_go_binary_warns(self):
        note = os.path.join(self.tmp, "go-buildid")
        with open(note, "wb") as f:
            f.write(b"\x04\x00\x00\x00\x28\x00\x00\x00\x04\x00\x00\x00Go\x00\x00" + b"x" * 40)
        gobin = os.path.join(self.tmp, "gobin")
        subprocess.run(["objcopy", "--add-section", f".note.go.buildid={note}", self.dyn, gobin],
                       check=True)
        self.assertIn("a Go binary: supervised mode", " ".join(self.mode_lines(gobin)))
        w = self.warnings(gobin, "--preload")
        self.assertEqual(len(w), 1, w)
        self.assertIn("Go binary", w[0])
        # Named like Go but not built by it: no warning, the library (the
        # file decides).
        named = os.path.join(self.tmp, "go")
        shutil.copy(self.dyn, named)
        self.assertEqual(self.warnings(named), [])
        self.assertIn("sluice: preload mode", " ".join(self.mode_lines(named)))

    # -- the installed tree ------------------------------------------------------

    def test_installed_tree(self):
        dest = os.path.join(self.tmp, "dest")
        r = subprocess.run(["make", "-s", f"BUILD={os.path.relpath(BUILD, ROOT)}", "install",
                            f"DESTDIR={dest}", "PREFIX=/usr"], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        exe = os.path.join(dest, "usr/bin/sluice")
        lib = os.path.join(dest, "usr/lib/sluice/libsluice.so")
        self.assertTrue(os.path.isfile(os.path.join(dest, "usr/share/man/man1/sluice.1")))
        r = run(["--check", "--send", "1MiB/s"], exe=exe, cwd=self.tmp)
        self.check(r, 0)
        self.assertEqual(r.stdout.splitlines()[0], f"library: {os.path.realpath(lib)}")
        r = run(["--send", "1MiB/s", "--", "sh", "-c", "echo $LD_PRELOAD"], exe=exe)
        self.check(r, 0)
        self.assertEqual(r.stdout, os.path.realpath(lib) + "\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
