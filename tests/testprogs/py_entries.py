# SPDX-License-Identifier: Apache-2.0
"""Python functions entered from C: a sort key callback, called three times
back to back (20 ms each), and the same through map() (30 ms each). A
sampler alone sees each trio as one call; the eval-loop entry probe sees
every call. Also run by test_python.py with --python-entries all on 3.8-3.10,
where every call, work() included, is an entry.

With a file name as argument, it appends to that file one JSON line per call
of work, key and mapped, each written as the call ends: name and the
function's own CLOCK_MONOTONIC ns at its start and end (t0, t1); and one each
for sorted and map, named so, with main's ns just before and after them."""
import json
import os
import sys
import time

LOG = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if len(sys.argv) > 1 else None


def log(name, t0, t1):
    # One write per line on an O_APPEND fd.
    if LOG is not None:
        os.write(LOG, (json.dumps(dict(pid=os.getpid(), name=name, t0=t0, t1=t1)) + "\n").encode())


def work(seconds):
    t0 = time.perf_counter_ns()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    log("work", t0, time.perf_counter_ns())


def key(x):
    t0 = time.perf_counter_ns()
    work(0.020)
    log("key", t0, time.perf_counter_ns())
    return x


def mapped(x):
    t0 = time.perf_counter_ns()
    work(0.030)
    log("mapped", t0, time.perf_counter_ns())
    return x


def main():
    t0 = time.perf_counter_ns()
    sorted([3, 1, 2], key=key)
    log("sorted", t0, time.perf_counter_ns())
    t0 = time.perf_counter_ns()
    list(map(mapped, [1, 2, 3]))
    log("map", t0, time.perf_counter_ns())


main()
# Calls that end as the interpreter finalises may be read after their code
# objects are freed (then they stay sampled only): end with a pause.
time.sleep(0.2)
