#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Cost of eacgm's Python layer, measured alternately in one run (median of
ROUNDS), as ratios:
  1. the 1 kHz stack sampler on a pure-Python workload (fixed work, its own
     elapsed time) untraced vs `--layers python`;
  2. the Python stack recorded behind every torch operator: the training step
     of tests/testprogs/torch_train.py under `--layers torch` vs
     `--layers torch,python --sample-hz 0 --python-entries off` (stacks only);
  3. exact spans of calls entered from C (3.11+: here each module call):
     the same step with and without `--python-entries auto`;
  4. every call exact on 3.8-3.10 (`--python-entries all`): a call-heavy
     pure-Python workload on pyenv's 3.10, untraced vs traced.
Usage: bench/python_cost.py EACGM [ROUNDS]   (needs root)"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
eacgm = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "eacgm")
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
python = "/usr/bin/python3"
work = ("import time\n"
        "def fib(n): return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "t = time.perf_counter(); fib(25); fib(25); fib(25)\n"
        "print('elapsed %.1f us' % (1e6 * (time.perf_counter() - t)))\n")
train = [python, os.path.join(root, "tests", "testprogs", "torch_train.py"), "4", "200", "256", "32"]


def measure(cmd, pattern):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(re.search(pattern, out).group(1))


def compare(name, plain_cmd, traced_cmd, pattern):
    plain, traced = [], []
    for _ in range(rounds):
        plain.append(measure(plain_cmd, pattern))
        traced.append(measure(traced_cmd, pattern))
    p, t = statistics.median(plain), statistics.median(traced)
    print("  %-44s %10.1f us -> %10.1f us   %.2fx" % (name, p, t, t / p))


with tempfile.TemporaryDirectory() as tmp:
    db = os.path.join(tmp, "r.db")
    rec = [eacgm, "record", "-o", db]
    print("Python layer cost (median of %d alternating rounds)" % rounds)
    compare("sampler, 1 kHz: fib(25) x 3, pure Python", [python, "-c", work],
            rec + ["--layers", "python", "--", python, "-c", work], r"elapsed ([0-9.]+) us")
    stacks = rec + ["--layers", "torch,python", "--sample-hz", "0"]
    compare("stacks behind torch ops: training step", rec + ["--layers", "torch", "--"] + train,
            stacks + ["--python-entries", "off", "--"] + train, r"median step ([0-9.]+) us")
    compare("entries from C, exact (3.11): training step", stacks + ["--python-entries", "off", "--"] + train,
            stacks + ["--python-entries", "auto", "--"] + train, r"median step ([0-9.]+) us")
    compare("all layers' defaults: training step", rec + ["--layers", "torch", "--"] + train,
            rec + ["--layers", "torch,python", "--"] + train, r"median step ([0-9.]+) us")
    py310 = "/root/.pyenv/versions/3.10.13/bin/python3.10"
    if os.path.exists(py310):
        small = work.replace("fib(25)", "fib(18)")
        compare("every call exact (3.10, all): fib(18) x 3", [py310, "-c", small],
                rec + ["--layers", "python", "--python-entries", "all", "--", py310, "-c", small],
                r"elapsed ([0-9.]+) us")
