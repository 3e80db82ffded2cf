# SPDX-License-Identifier: Apache-2.0
"""A recursive Python function whose time a sampler must count once per
sample, however deep the function recurses: walk(DEPTH) spins 11 ms, calls
walk(DEPTH - 1), spins 11 ms again, down to walk(1); a pass is one call of
walk(10), 220 ms of CPU, and passes are separated by 20 ms in another
function (rest), so that each is a run of its own. The program measures
each pass itself (time.thread_time_ns around the call: the sampler counts
CPU time, not wall time; and time.perf_counter_ns, wall time) and writes
to the file given as argument one JSON object: the passes' CPU and wall
times and the thread's CPU time when it ends.
Usage: py_recursive.py OUT.json [PASSES]"""
import json
import sys
import time

PASSES = int(sys.argv[2]) if len(sys.argv) > 2 else 3
DEPTH = 10


def spin(seconds):
    # CPU time, not wall time: a pass is 220 ms of CPU however loaded the
    # machine is.
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def walk(depth):
    spin(0.011)
    if depth > 1:
        walk(depth - 1)
    spin(0.011)


def rest():
    spin(0.020)


passes, walls = [], []
for _ in range(PASSES):
    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    walk(DEPTH)
    c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
    passes.append(c1 - c0)
    walls.append(t1 - t0)
    rest()
with open(sys.argv[1], "w") as f:
    json.dump({"depth": DEPTH, "pass_cpu_ns": passes, "pass_wall_ns": walls, "thread_cpu_ns": time.thread_time_ns()}, f)
