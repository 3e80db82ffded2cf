# SPDX-License-Identifier: Apache-2.0
"""Shows that the build refuses an #include against the data flow: a file
compiled as the pipeline folder's sources are (their command in the build's
compile_commands.json) may include its own folder's and the folders it uses'
headers (the control: a failure there is the check's), and cannot find the
store's or a sink's (the compiler's error: the folder's include paths do not
reach them).

usage: folders_compile_check.py BUILD_DIR"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

FOLDER = "pipeline"
ALONG = ["pipeline/record_loop.h", "layers/python.h", "probe/spec.h", "common/model.h", "eacgm/abi/events.h"]
AGAINST = ["store/store.h", "sinks/metrics.h", "detect/online.h", "app/pipeline.h"]


def folder_command(build):
    """The compiler's words for a source of FOLDER, and its directory."""
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        for entry in json.load(f):
            if "/src/%s/" % FOLDER in entry["file"]:
                words = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
                return words, entry["directory"]
    raise SystemExit("no source of src/%s/ in %s/compile_commands.json: build first" % (FOLDER, build))


def compile_with(words, directory, include):
    """Compiles a file holding only `#include "include"` as FOLDER's sources are."""
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w in ("-o", "-c", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if w in ("-MD", "-MMD") or w.endswith((".cpp", ".cc")):
            continue
        out.append(w)
    with tempfile.TemporaryDirectory() as tmp:
        planted = os.path.join(tmp, "planted.cpp")
        with open(planted, "w", encoding="utf-8") as f:
            f.write('#include "%s"\n' % include)
        r = subprocess.run(out + ["-fsyntax-only", planted], cwd=directory, capture_output=True, text=True)
    return r.returncode, r.stderr


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    words, directory = folder_command(argv[1])
    problems = []
    for inc in ALONG:
        rc, err = compile_with(words, directory, inc)
        if rc != 0:
            problems.append("src/%s/ cannot include %s, along the flow (the control):\n%s" % (FOLDER, inc, err))
    for inc in AGAINST:
        rc, err = compile_with(words, directory, inc)
        if rc == 0:
            problems.append("src/%s/ can include %s, against the flow" % (FOLDER, inc))
        elif "%s: No such file or directory" % inc not in err:
            problems.append("including %s from src/%s/ fails, but not as a file the compiler cannot find:\n%s"
                            % (inc, FOLDER, err))
    for p in problems:
        print(p)
    if not problems:
        print("src/%s/ compiles with %s; %s are files its compiler cannot find"
              % (FOLDER, ", ".join(ALONG), ", ".join(AGAINST)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
