# SPDX-License-Identifier: Apache-2.0
"""A Python parent whose forked children exec other programs, for the Python
layer's exec test: the first child execs another Python (the interpreter
given, at other addresses than the parent's) running this script's child
part, the second a program without Python (/bin/sh, spinning in a loop).

  py_exec.py parent LOG OTHER_PYTHON
  py_exec.py child LOG

Each Python process appends one JSON line per timed call to LOG: pid, name,
the caller's CLOCK_MONOTONIC ns just before and after the call (outer0,
outer1) and the CPU time the call took (cpu). The parent also logs its
children's pids (name "children")."""
import json
import os
import sys
import time

# A loop that keeps /bin/sh on the CPU for a few hundred milliseconds: a
# sampler still holding the parent's interpreter would read it.
SH_LOOP = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"


def log(path, **line):
    # One write per line on an O_APPEND fd: the processes' lines do not mix.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (json.dumps(dict(pid=os.getpid(), **line)) + "\n").encode())
    os.close(fd)


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def timed(path, fn):
    outer0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    fn()
    log(path, name=fn.__name__, outer0=outer0, outer1=time.perf_counter_ns(), cpu=time.thread_time_ns() - c0)


def parent_spin():
    spin(0.3)


def exec_child_spin():
    spin(0.5)


def fork_exec(argv):
    pid = os.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        sys.exit("py_exec: %s exited with status %d" % (argv[0], status))
    return pid


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "child":
        timed(path, exec_child_spin)
        return
    timed(path, parent_spin)
    python = fork_exec([sys.argv[3], os.path.abspath(__file__), "child", path])
    shell = fork_exec(["/bin/sh", "-c", SH_LOOP])
    log(path, name="children", python=python, shell=shell)
    print("py_exec: both children done")


if __name__ == "__main__":
    main()
