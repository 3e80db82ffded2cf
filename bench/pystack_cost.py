#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The Python stack read behind a torch call, on its own: a Python thread
calls torch.relu on a 4-element tensor ROUNDS x 300,000 times at a Python
stack depth of 1 and of 16 frames (its own recursion), recorded with `--layers
torch` (no stack) and `--layers torch,python --sample-hz 0` (the stack behind
every call, no sampler), `--overhead-budget 0` so that every call is kept,
and `--bpf-stats` for the programs' run time. Printed per depth and variant:
the program's own time per call (untraced beside it) and the span entry
program's mean run time, whose difference between the two variants is the
stack read. Rounds alternate (plain, torch, torch+python per depth); medians.

Usage: bench/pystack_cost.py EACGM [ROUNDS (3)]   (needs root)"""
import os
import platform
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile

CALLS = 300_000
WORK = r"""
import sys, time, torch
depth, n = int(sys.argv[1]), int(sys.argv[2])
x = torch.ones(4)
def loop():
    for _ in range(1000):
        torch.relu(x)  # warm
    t = time.perf_counter_ns()
    for _ in range(n):
        torch.relu(x)
    return (time.perf_counter_ns() - t) / n
def nest(d):
    return nest(d - 1) if d > 1 else loop()
print("per call %.1f ns" % nest(depth))
"""


def per_call(out):
    return float(re.search(r"per call ([0-9.]+) ns", out).group(1))


def entry_ns(db):
    con = sqlite3.connect(db)
    meta = dict(con.execute("SELECT key, value FROM meta WHERE key LIKE 'bpf_%:span_entry%'"))
    con.close()
    runs = sum(int(v) for k, v in meta.items() if k.startswith("bpf_runs:"))
    ns = sum(int(v) for k, v in meta.items() if k.startswith("bpf_ns:"))
    return ns / runs if runs else float("nan")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    eacgm, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
    if os.geteuid() != 0:
        sys.exit("pystack_cost: needs root (eacgm attaches with eBPF)")
    with open("/proc/cpuinfo") as f:
        model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), platform.machine())
    print("machine: %s, nproc %d, kernel %s; %d calls a round, median of %d rounds" %
          (model, os.cpu_count(), platform.release(), CALLS, rounds))
    variants = [("untraced", None), ("torch", "torch"), ("torch + Python stack", "torch,python")]
    with tempfile.TemporaryDirectory() as tmp:
        work = os.path.join(tmp, "work.py")
        with open(work, "w") as f:
            f.write(WORK)
        db = os.path.join(tmp, "r.db")
        for depth in (1, 16):
            calls = {name: [] for name, _ in variants}
            entry = {name: [] for name, _ in variants}
            for _ in range(rounds):
                for name, layers in variants:
                    cmd = ["/usr/bin/python3", work, str(depth), str(CALLS)]
                    if layers:
                        cmd = [eacgm, "record", "-o", db, "--perfetto", os.path.join(tmp, "t.json"), "--layers",
                               layers, "--sample-hz", "0", "--no-detect", "--overhead-budget", "0",
                               "--bpf-stats", "--"] + cmd
                    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                    calls[name].append(per_call(out))
                    if layers:
                        entry[name].append(entry_ns(db))
            print("Python stack depth %d (the workload's frames above the call)" % (depth + 2))
            for name, layers in variants:
                line = "  %-22s %8.0f ns a call" % (name, statistics.median(calls[name]))
                if layers:
                    line += "   span entry program %6.0f ns" % statistics.median(entry[name])
                print(line)
            stack = statistics.median(entry["torch + Python stack"]) - statistics.median(entry["torch"])
            print("  the stack read: %.0f ns of the entry program a call" % stack)


if __name__ == "__main__":
    main()
