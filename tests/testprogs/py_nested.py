# SPDX-License-Identifier: Apache-2.0
# Traced library calls nested in one another, with and without Python code
# between them (tests/e2e/test_python.py): tl_outer calls tl_inner twice, all
# three made from the same Python frame; tl_call calls back into Python, whose
# function calls tl_noop, then calls tl_inner, from the module's frame again.
# Made once a line on stdin says so, with eacgm attached (-p); the process then
# lives until stdin closes, so that eacgm names the callback's frame (read from
# the process) before the program's end frees it.
# Usage: python3.X py_nested.py LIBEACGM_TESTLIB
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long)
lib.tl_outer.argtypes = [ctypes.c_long]
lib.tl_noop.argtypes = [ctypes.c_long]
lib.tl_call.argtypes = [CALLBACK, ctypes.c_long]


def callback(x):
    return lib.tl_noop(x)  # IN_CALLBACK


print("waiting", flush=True)
sys.stdin.readline()
lib.tl_outer(1)  # OUTER
lib.tl_call(CALLBACK(callback), 5)  # CALL
print("done", flush=True)
sys.stdin.read()
