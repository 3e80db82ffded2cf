#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Paced: one thread calling a traced function at a GPU node's call rate
(RATE a second, each call at its own deadline: tests/testprogs' testlib_calls
noop with RATE), every call recorded (--overhead-budget 0, --no-detect), for
SECONDS, recorded by each build in alternating rounds (A B A B ...):

  this build, its rings read on a thread of their own (the default),
  this build with EACGM_RING_READER=0 (read between the pipeline's rounds),
  and, given --base BUILD, another build's eacgm (0580e50's, issue 64's
  reference), tracing this build's program.

Printed (markdown): per configuration, the medians over its rounds of the
calls made, the records lost and eacgm's own CPU while attached (meta
agent_cpu_attached_s over attached_s, % of a core; the BPF programs' time is
charged to the traced thread, the job's), each round's too, and the machine.
Issue 64's target: nothing lost and eacgm at most 2.5% of a core.

Usage: bench/paced.py BUILD_DIR [--seconds S (60)] [--rate R (160000)]
                      [--rounds N (2)] [--base BASE_BUILD_DIR]   (needs root)"""
import argparse
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile

from burst import SPEC, machine  # the traced function's spec, the machine line (same directory)


def run(build, env, a, tmp, name):
    """One recording: (calls made, records lost, eacgm's CPU in % of a core)."""
    spec = os.path.join(tmp, "spec.json")
    with open(spec, "w") as f:
        f.write(SPEC)
    db = os.path.join(tmp, name + ".db")
    p = subprocess.run([os.path.join(build, "eacgm"), "record", "-o", db, "--layers", "cuda", "--spec", spec,
                        "--overhead-budget", "0", "--no-detect", "--",
                        # this build's: it paces its calls (RATE), an older one may not
                        os.path.join(a.build, "tests", "testprogs", "testlib_calls"), "noop", str(10 ** 12)],
                       capture_output=True, text=True,
                       env=dict(os.environ, STOP_AFTER_S=str(a.seconds), RATE=str(a.rate), **env))
    if p.returncode != 0:
        sys.exit("paced: eacgm record (%s) exited %d:\n%s" % (name, p.returncode, p.stderr[-3000:]))
    calls = int(re.search(r"^calls (\d+)$", p.stdout, re.M).group(1))
    con = sqlite3.connect(db)
    lost = sum(n for (n,) in con.execute("SELECT count FROM drops WHERE count > 0"))
    meta = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    os.unlink(db)
    return calls, lost, 100 * float(meta["agent_cpu_attached_s"]) / float(meta["attached_s"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("build")
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--rate", type=int, default=160000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--base")
    a = p.parse_args()
    configs = [("ring thread (default)", a.build, {}), ("EACGM_RING_READER=0", a.build, {"EACGM_RING_READER": "0"})]
    if a.base:
        configs.append(("base build: " + a.base, a.base, {}))
    rows = {name: [] for name, _, _ in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for i, (name, build, env) in enumerate(configs):
                rows[name].append(run(build, env, a, tmp, "r%d_%d" % (r, i)))
                print("paced: round %d, %s: %d calls, %d lost, %.2f%% of a core" % ((r + 1, name) + rows[name][-1]),
                      file=sys.stderr)
    print("Paced: one thread calling a traced function %d times a second, %.0f s" % (a.rate, a.seconds))
    print()
    print("Written by `bench/paced.py` on %s, at commit %s; %d alternating rounds." % (machine(), subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(), a.rounds))
    print()
    print("| configuration | calls made (median) | lost (median) | eacgm CPU (median) | each round's CPU |")
    print("|---|---|---|---|---|")
    for name, _, _ in configs:
        v = rows[name]
        print("| %s | %d | %d | %.2f%% of a core | %s |" % (
            name, statistics.median(x[0] for x in v), statistics.median(x[1] for x in v),
            statistics.median(x[2] for x in v), ", ".join("%.2f%%" % x[2] for x in v)))
    first = rows[configs[0][0]]
    ok = all(x[1] == 0 for x in first) and statistics.median(x[2] for x in first) <= 2.5
    print()
    print("target (issue 64: nothing lost, eacgm at most 2.5%% of a core): %s" % ("met" if ok else "missed"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
