# SPDX-License-Identifier: Apache-2.0
"""A parent that forks workers (multiprocessing, fork start method) which run
known busy functions; for the Python layer's process-following test.

With a file name as argument, each process appends to that file one JSON line
per call of parent_work or child_work (the workers share the parent's fd):
pid, name, the caller's CLOCK_MONOTONIC ns just before and after the call
(outer0, outer1), the function's own at its start and end (t0, t1) and the
CPU time it took (cpu, ns)."""
import json
import multiprocessing as mp
import os
import sys
import time

LOG = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if len(sys.argv) > 1 else None


def log(name, outer0, outer1, own):
    # One write per line on an O_APPEND fd: the processes' lines do not mix.
    if LOG is not None:
        line = dict(pid=os.getpid(), name=name, outer0=outer0, outer1=outer1, **own)
        os.write(LOG, (json.dumps(line) + "\n").encode())


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def child_work(n):
    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    spin(0.080)
    return dict(t0=t0, t1=time.perf_counter_ns(), cpu=time.thread_time_ns() - c0)


def child(n):
    # The worker's target: times child_work from outside.
    outer0 = time.perf_counter_ns()
    own = child_work(n)
    log("child_work", outer0, time.perf_counter_ns(), own)


def parent_work():
    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    spin(0.050)
    return dict(t0=t0, t1=time.perf_counter_ns(), cpu=time.thread_time_ns() - c0)


if __name__ == "__main__":
    outer0 = time.perf_counter_ns()
    own = parent_work()
    log("parent_work", outer0, time.perf_counter_ns(), own)
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=child, args=(i,)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print("py_fork: 2 workers done")
