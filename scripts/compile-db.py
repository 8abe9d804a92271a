#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""compile-db.py DIR < make-n-output > compile_commands.json

Turn the commands `make -n -B` prints into a JSON compilation database
(https://clang.llvm.org/docs/JSONCompilationDatabase.html): one entry per C
source on every compiler line (cc, gcc, clang, with or without a version
suffix or target prefix), the command split as the shell would split it.
Lines that run anything else (ar, printf, mkdir) are skipped. Used by
`make compile_commands.json`; needs no bear or compiler wrapper.
"""
import json
import os
import re
import shlex
import sys

COMPILER = re.compile(r"^(.*-)?(cc|gcc|clang)(-[0-9.]+)?$")


def main():
    directory = sys.argv[1]
    entries = []
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            args = shlex.split(line)
        except ValueError:
            continue
        if not args or not COMPILER.match(os.path.basename(args[0])):
            continue
        for a in args[1:]:
            if a.endswith(".c") and not a.startswith("-"):
                entries.append({"directory": directory, "arguments": args,
                                "file": os.path.join(directory, a)})
    json.dump(entries, sys.stdout, indent=1)
    sys.stdout.write("\n")
    if not entries:
        sys.exit("compile-db.py: no compiler line in the input")


if __name__ == "__main__":
    main()
