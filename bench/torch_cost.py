#!/usr/bin/env python3
"""Cost of eacgm's default torch probe set on a CPU training loop: the median
step time of tests/testprogs/torch_train.py untraced and under
`eacgm record --layers torch`, measured alternately in the same run, as a ratio.
Usage: bench/torch_cost.py EACGM [ROUNDS]   (needs root)"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
eacgm = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build", "eacgm")
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
train = os.path.join(root, "tests", "testprogs", "torch_train.py")
# 4 layers of 256, batch 32: matrices big enough that the step is not all Python.
model = ["4", "200", "256", "32"]


def step_us(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"median step ([0-9.]+) us", out).group(1))


with tempfile.TemporaryDirectory() as tmp:
    plain, traced = [], []
    for r in range(rounds):
        plain.append(step_us(["/usr/bin/python3", train, *model]))
        db = os.path.join(tmp, "r%d.db" % r)
        traced.append(step_us([eacgm, "record", "--layers", "torch", "-o", db, "--", "/usr/bin/python3", train, *model]))
    spans = subprocess.run([eacgm, "summary", db], capture_output=True, text=True, check=True).stdout.splitlines()[0]
p, t = statistics.median(plain), statistics.median(traced)
print("torch CPU training step (4 x Linear 256, batch 32; median of 200 steps, median of %d rounds)" % rounds)
print("  untraced                 %9.1f us" % p)
print("  eacgm --layers torch     %9.1f us   %.2fx" % (t, t / p))
print("  last traced run: " + spans)
