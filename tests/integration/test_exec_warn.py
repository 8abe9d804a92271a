#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A preloaded process about to exec or spawn a program the shim cannot
throttle warns on stderr, once per program, naming it and the reason
(shim/exec.c): `sluice --recv 1MiB/s -- sh -c './prog'` for a static binary,
a Go binary (a real one if `go` is installed, and one carrying Go's build-ID
note), a set-user-ID copy owned by another user (root only), a script whose
interpreter is static; python's os.posix_spawn and os.execv; a C program's
execl, execlp and execle. A dynamic
program gives no warning, nor does a process without rules; the exec's
result and errno are the kernel's.
"""
import os
import shutil
import subprocess
import sys
import tempfile

from test_cli import SLUICE, clean_env, compile_c
from shim_lib import check, finish

MAIN = '#include <stdio.h>\nint main(void) { puts("ran"); return 0; }\n'


def sluice(argv, flags=("--recv", "1MiB/s"), cwd=None):
    r = subprocess.run([SLUICE, *flags, "--", *argv], cwd=cwd, env=clean_env(),
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, [l for l in r.stderr.splitlines() if "warning" in l]


def main():
    d = tempfile.mkdtemp(prefix="sluice-exec-%d-" % os.getpid())
    try:
        dyn = compile_c(d, "dyn", MAIN)
        static = compile_c(d, "static", MAIN, "-static")
        check(dyn is not None and static is not None, "cc built a dynamic and a static program")
        note = os.path.join(d, "note")
        with open(note, "wb") as f:
            f.write(b"\x04\x00\x00\x00\x28\x00\x00\x00\x04\x00\x00\x00Go\x00\x00" + b"x" * 40)
        gonote = os.path.join(d, "gonote")
        subprocess.run(["objcopy", "--add-section", ".note.go.buildid=%s" % note, dyn, gonote],
                       check=True)
        script = os.path.join(d, "script.sh")
        with open(script, "w") as f:
            f.write("#!%s\n" % static)
        os.chmod(script, 0o755)

        rc, out, w = sluice(["sh", "-c", "./dyn; ./static; ./static; ./gonote; ./script.sh"],
                            cwd=d)
        print("measured: sh -c under --recv: rc %d, warnings:\n  %s" % (rc, "\n  ".join(w)))
        check(rc == 0 and out.count("ran") == 5, "every program ran (rc %d)" % rc)
        check(len(w) == 3, "three warnings: static (once), gonote, the script (%d)" % len(w))
        check(any("./static cannot be throttled (statically linked" in l for l in w),
              "static: named, reason given")
        check(sum("./static cannot" in l for l in w) == 1, "static: warned once")
        check(any("./gonote cannot be throttled (a Go binary" in l for l in w),
              "Go build-ID note: named, reason given")
        check(any("./script.sh (its interpreter %s) cannot be throttled (statically linked"
                  % static in l for l in w), "a script: judged by its interpreter")
        check(not any("./dyn " in l for l in w), "a dynamic program: no warning")

        rc, out, w = sluice(["sh", "-c", "./static"], flags=(), cwd=d)
        check(not any("cannot be throttled (" in l for l in w), "no rules: no warning from the shim")

        if shutil.which("go"):
            gosrc = os.path.join(d, "main.go")
            with open(gosrc, "w") as f:
                f.write('package main\nimport "fmt"\nfunc main() { fmt.Println("ran") }\n')
            env = clean_env(GOCACHE=os.path.join(d, "gocache"), GOPATH=os.path.join(d, "gopath"),
                            GOFLAGS="-mod=mod")
            r = subprocess.run(["go", "build", "-o", os.path.join(d, "goprog"), gosrc],
                               cwd=d, env=env, capture_output=True, text=True, timeout=300)
            check(r.returncode == 0, "go build (%s)" % r.stderr[-200:])
            rc, out, w = sluice(["sh", "-c", "./goprog"], cwd=d)
            print("measured: a real Go program: %s" % w)
            check(rc == 0 and len(w) == 1 and "./goprog cannot be throttled" in w[0] and
                  "a Go binary" in w[0], "a real Go program: warned, named, Go given")
        else:
            print("skip: go not installed: the real Go program case")

        code = ("import os, sys\n"
                "pid = os.posix_spawn(sys.argv[1], ['s'], os.environ); os.waitpid(pid, 0)\n"
                "pid = os.posix_spawn(sys.argv[1], ['s'], os.environ); os.waitpid(pid, 0)\n"
                "try:\n    os.execv('/nonexistent/prog', ['x'])\n"
                "except FileNotFoundError:\n    print('ENOENT')\n"
                "os.execv(sys.argv[2], ['g'])\n")
        rc, out, w = sluice([sys.executable, "-c", code, static, gonote])
        print("measured: python posix_spawn x2 + execv: %s" % w)
        check(rc == 0 and out.split() == ["ran", "ran", "ENOENT", "ran"],
              "spawns and exec ran; a failed exec kept its errno (%r)" % out)
        check(len(w) == 2 and "%s cannot be throttled (statically linked" % static in w[0] and
              "%s cannot be throttled (a Go binary" % gonote in w[1],
              "posix_spawn warned once for two spawns, execv once")

        execl_src = r"""
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv)
{
	for (int k = 0; k < 3; k++) {
		pid_t pid = fork();
		if (pid == 0) {
			if (k == 0)
				execl(argv[1], "s", (char *)NULL);
			else if (k == 1)
				execlp(argv[1], "s", (char *)NULL);
			else
				execle(argv[1], "s", (char *)NULL, environ);
			perror("exec");
			_exit(9);
		}
		int st;
		waitpid(pid, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			return 1;
	}
	return 0;
}
"""
        execl_prog = compile_c(d, "execl", execl_src)
        rc, out, w = sluice([execl_prog, static])
        print("measured: execl, execlp, execle of a static program: rc %d, %s" % (rc, w))
        check(rc == 0 and out.split() == ["ran"] * 3, "execl, execlp, execle ran it (rc %d, %r)"
              % (rc, out))
        check(len(w) == 3 and all("%s cannot be throttled (statically linked" % static in l
                                  for l in w), "execl, execlp, execle: each warned (%s)" % w)

        if os.geteuid() == 0:
            suid = os.path.join(d, "suid")
            shutil.copy(dyn, suid)
            os.chown(suid, 65534, -1)
            os.chmod(suid, 0o4755)
            rc, out, w = sluice(["sh", "-c", "./suid"], cwd=d)
            check(len(w) == 1 and "./suid cannot be throttled (set-user-ID" in w[0],
                  "set-user-ID to another user: warned (%s)" % w)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
