# SPDX-License-Identifier: Apache-2.0
# Frames for the Python resolver's test (tests/unit/test_python_resolver.cpp).
# Usage: python3.X py_frames.py FRAME_INSTR_OFFSET
# Enters a known chain of functions and, from the innermost, prints one JSON
# line describing every caller frame as the BPF walker would read it: the code
# object's address and the frame's raw instruction field (read with ctypes
# from the real frame, not computed), with what the resolver must answer
# (co_qualname or co_name, co_filename, f_lineno). Then it stays in the call
# until stdin closes, so the test reads a live process. Runs on 3.8 to 3.13.
import ctypes
import json
import sys

INSTR = int(sys.argv[1])  # PyFrameObject.f_lasti (3.8-3.10), _PyInterpreterFrame.prev_instr/instr_ptr
F_FRAME = 24  # 3.11+ PyFrameObject.f_frame: after PyObject_HEAD (16) and f_back


def raw_instr(frame):
    if sys.version_info >= (3, 11):
        iframe = ctypes.c_void_p.from_address(id(frame) + F_FRAME).value
        return ctypes.c_uint64.from_address(iframe + INSTR).value
    return ctypes.c_int.from_address(id(frame) + INSTR).value


def describe(frame):
    code = frame.f_code
    return {"code": id(code), "raw": raw_instr(frame), "lasti": frame.f_lasti,
            "qualname": getattr(code, "co_qualname", code.co_name), "filename": code.co_filename,
            "line": frame.f_lineno, "first_line": code.co_firstlineno}


def gen():
    yield 1


def report():
    # Callers are suspended in their call to report(): their fields hold still.
    frames = []
    f = sys._getframe(1)
    while f is not None:
        frames.append(describe(f))
        f = f.f_back
    unstarted = gen()  # a frame before its first instruction (f_lasti -1 before 3.11)
    print(json.dumps({"version": "%d.%d" % sys.version_info[:2], "frames": frames,
                      "unstarted": describe(unstarted.gi_frame), "not_code": id(report)}), flush=True)
    sys.stdin.read()


# Long line deltas: lnotab continuation pairs, long varints in 3.11+.
ns = {"report": report}
exec(compile("def far():\n" + "\n" * 300 + "    return report()\n", "<generated>", "exec"), ns)
far = ns["far"]


class Outer:
    def method(self):
        return far()


def outer():
    def inner(*args):
        return Outer(
        ).method()
    try:
        x = 1
    except ValueError as e:  # table entries without a line (3.10+)
        x = e
    return inner(
        x,
        len(
            "a"))  # back to earlier lines: negative deltas


# Names with 1-, 2- and 4-byte str kinds.
def naïve():
    return outer()


def καλημέρα():
    return naïve()


def 𠀀():
    return καλημέρα()


𠀀()
