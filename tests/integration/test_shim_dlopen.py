#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A library loaded with RTLD_DEEPBIND is named in one warning (shim/dlopen.c).

Such a library binds its libc calls to libc before the preloaded library
(PHP loads its extensions so: curl under --recv 1MiB/s ran unthrottled,
"calls": 0, without a word). Built here: libdeep.so, whose function sends 3
bytes on an fd, and a program that dlopen()s it by bare name through its
RUNPATH ($ORIGIN), with or without RTLD_DEEPBIND, then calls it on one end
of a socketpair... under SLUICE_SEND=1/s,family=unix:

  deepbind  one warning naming libdeep.so, RTLD_DEEPBIND and --supervise
            (however many times it is loaded), none for a second library
            loaded so (libdeep2.so), which SLUICE_LOG=info names;
  plain     the same load without RTLD_DEEPBIND: no warning, and the sends
            made through the library are throttled (3 sends at 1/s,
            burst 1: at least 2 s);
  caller    dlopen is still the caller's: the bare name is found through
            the program's own RUNPATH (the library's would not find it).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

from shim_lib import check, child_env, finish, sanitizer_runtime

LIB = r"""
#include <sys/socket.h>
int deep_send(int fd) { return (int)send(fd, "abc", 3, 0); }
"""

MAIN = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	int deep = strcmp(argv[1], "deep") == 0, times = atoi(argv[2]);
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return 3;
	for (int i = 0; i < times; i++) {
		void *h = dlopen("libdeep.so", RTLD_NOW | (deep ? RTLD_DEEPBIND : 0));
		if (h == NULL) {
			printf("dlopen failed: %s\n", dlerror());
			return 4;
		}
		int (*f)(int) = (int (*)(int))dlsym(h, "deep_send");
		if (f == NULL || f(sv[0]) != 3)
			return 5;
		dlclose(h);
	}
	if (deep && dlopen("libdeep2.so", RTLD_NOW | RTLD_DEEPBIND) == NULL)
		return 6;
	printf("ok\n");
	return 0;
}
"""


def build(tmp):
    with open(os.path.join(tmp, "deep.c"), "w") as f:
        f.write(LIB)
    with open(os.path.join(tmp, "main.c"), "w") as f:
        f.write(MAIN)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(tmp, "libdeep.so"),
                    os.path.join(tmp, "deep.c")], check=True)
    shutil.copy(os.path.join(tmp, "libdeep.so"), os.path.join(tmp, "libdeep2.so"))
    subprocess.run(["cc", "-o", os.path.join(tmp, "main"), os.path.join(tmp, "main.c"),
                    "-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags", "-ldl"], check=True)


def run(tmp, how, times, log=None):
    t0 = time.monotonic()
    env = {"SLUICE_SEND": "1/s,family=unix"}
    if log:
        env["SLUICE_LOG"] = log
    p = subprocess.run([os.path.join(tmp, "main"), how, str(times)], cwd="/",
                       env=child_env(env), capture_output=True, text=True, timeout=60)
    return p, time.monotonic() - t0


def main():
    if shutil.which("cc") is None:
        print("skip: no C compiler")
        sys.exit(77)
    if os.uname().machine != "x86_64":
        print("skip: dlopen is interposed on x86-64 only")
        sys.exit(77)
    if sanitizer_runtime():
        # The ASan runtime's own dlopen refuses RTLD_DEEPBIND, and its
        # interceptor is the caller glibc sees (no RUNPATH), with or without
        # sluice.
        print("skip: under the ASan runtime (it refuses RTLD_DEEPBIND and hides the caller)")
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="sl-dlopen-")
    try:
        build(tmp)
        p, took = run(tmp, "deep", 3)
        warns = [l for l in p.stderr.splitlines() if "RTLD_DEEPBIND" in l]
        print("measured: deepbind: exit %d, %d warning(s), %.3f s: %r"
              % (p.returncode, len(warns), took, warns))
        check(p.returncode == 0 and p.stdout.strip() == "ok",
              "caller: the bare name is found through the program's RUNPATH (%r %r)"
              % (p.stdout, p.stderr[-300:]))
        check(len(warns) == 1 and "libdeep.so" in warns[0] and "--supervise" in warns[0],
              "deepbind: one warning naming the first library and --supervise, none for the "
              "second (%r)" % warns)
        p, _ = run(tmp, "deep", 1, log="info")
        named = [l for l in p.stderr.splitlines() if "RTLD_DEEPBIND" in l]
        check(len(named) == 2 and "libdeep2.so" in named[1],
              "deepbind, SLUICE_LOG=info: the second library named too (%r)" % named)
        p, took = run(tmp, "plain", 3)
        print("measured: plain: exit %d, %.3f s" % (p.returncode, took))
        check(p.returncode == 0 and "RTLD_DEEPBIND" not in p.stderr,
              "plain: no warning without RTLD_DEEPBIND (%r)" % p.stderr[-300:])
        check(took >= 2 - 0.001, "plain: the library's 3 sends at 1/s take at least 2 s: %.3f s"
              % took)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish()


if __name__ == "__main__":
    main()
