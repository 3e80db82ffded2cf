# SPDX-License-Identifier: Apache-2.0
"""Known Python functions for the Python layer's tests: busy loops of known
length, nested to a known depth, on two threads. Works on Python 3.8+.
Each call is followed by a different busy function (pause), so that a
sampler can tell consecutive calls apart. The threads take turns (main
waits in join) rather than fight for the GIL: an on-CPU sampler sees a
thread only while it holds the GIL, which would blur the known durations.

With a file name as argument, it appends to that file one JSON line per call
of middle, inner_a and inner_b: pid, tid (the kernel's), name, the caller's
CLOCK_MONOTONIC ns just before and after the call (outer0, outer1), the
function's own at its start and end (t0, t1) and the CPU time its thread
spent in it (cpu, ns). The stamps are builtins called inline and the log is
written between the calls, so the timed functions' stacks stay as they were."""
import json
import os
import sys
import threading
import time

LOG = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if len(sys.argv) > 1 else None


def log(name, outer0, outer1, own):
    # One write per line on an O_APPEND fd: lines of two threads do not mix.
    if LOG is not None:
        line = dict(pid=os.getpid(), tid=threading.get_native_id(), name=name, outer0=outer0, outer1=outer1, **own)
        os.write(LOG, (json.dumps(line) + "\n").encode())


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def inner_a():
    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    spin(0.060)
    return dict(t0=t0, t1=time.perf_counter_ns(), cpu=time.thread_time_ns() - c0)


def inner_b():
    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    spin(0.040)
    return dict(t0=t0, t1=time.perf_counter_ns(), cpu=time.thread_time_ns() - c0)


def middle():
    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    outer0 = time.perf_counter_ns()
    own = inner_a()
    log("inner_a", outer0, time.perf_counter_ns(), own)
    outer0 = time.perf_counter_ns()
    own = inner_b()
    log("inner_b", outer0, time.perf_counter_ns(), own)
    return dict(t0=t0, t1=time.perf_counter_ns(), cpu=time.thread_time_ns() - c0)


def pause():
    spin(0.025)


class Worker:
    def run(self, rounds):
        for _ in range(rounds):
            outer0 = time.perf_counter_ns()
            own = middle()
            log("middle", outer0, time.perf_counter_ns(), own)
            pause()


def main():
    t = threading.Thread(target=Worker().run, args=(3,), name="worker")
    t.start()
    t.join()
    Worker().run(3)


main()
