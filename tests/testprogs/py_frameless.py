# SPDX-License-Identifier: Apache-2.0
# A traced library call from a thread that has a Python thread state but no
# Python frames, between two calls from Python code (tests/e2e/test_python.py).
# _thread.start_new_thread of a C function runs it with no frame on the new
# thread's stack, as torch's autograd and CUDA worker threads call libtorch and
# libcudart. The calls are made once a line on stdin says so, with eacgm
# attached (-p): its Python layer knows the process by then; the process then
# lives until stdin closes, so that eacgm names the frames (read from the
# process) before the program's end frees them.
# Usage: python3.X py_frameless.py LIBEACGM_TESTLIB
import _thread
import ctypes
import sys
import time

lib = ctypes.CDLL(sys.argv[1])
lib.tl_noop.argtypes = [ctypes.c_long]
print("waiting", flush=True)
sys.stdin.readline()
lib.tl_noop(1)  # FROM_PYTHON_1
out = ctypes.c_uint64(0)
_thread.start_new_thread(lib.tl_out, (ctypes.byref(out), 42))
# tl_out has written 42 and the thread has ended (it is counted from its start
# until it returns from tl_out and finishes).
while out.value != 42 or _thread._count():
    time.sleep(0.001)
lib.tl_noop(3)  # FROM_PYTHON_3
print("done", flush=True)
sys.stdin.read()
