# SPDX-License-Identifier: Apache-2.0
"""Checks that the compiler holds the layer table to its rows
(src/common/layers.h): tests/compile/layer_row.cpp compiles with every
column given (the control: a failure there is the check's, not the
table's), and fails, on Layer's constructor, with a column left out or two
swapped.

usage: compile_check.py CXX SOURCE_TREE"""
import subprocess
import sys


def compile_row(cxx, root, variant):
    r = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-I", root + "/src", "-D" + variant,
                        root + "/tests/compile/layer_row.cpp"], capture_output=True, text=True)
    return r.returncode, r.stderr


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    cxx, root = argv[1], argv[2]
    problems = []
    rc, err = compile_row(cxx, root, "EVERY_COLUMN")
    if rc != 0:
        problems.append("a row with every column does not compile:\n" + err)
    for variant, what in (("NO_THROTTLE", "a column left out"), ("SWAPPED", "two columns swapped")):
        rc, err = compile_row(cxx, root, variant)
        if rc == 0:
            problems.append("a row with %s compiles (%s)" % (what, variant))
        elif "no matching" not in err or "Layer" not in err:
            problems.append("a row with %s fails, but not on Layer's constructor:\n%s" % (what, err))
    for p in problems:
        print(p)
    if not problems:
        print("the layer table's rows: every column given compiles; one left out or two swapped does not")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
