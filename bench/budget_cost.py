#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""--overhead-budget holding a job's overhead at its setting. The job:
tests/testprogs/budget_load, a thread calling a traced function (bl_work,
about 10 us of work) as fast as it can, which counts its calls per second of
its own CPU time (a trap is CPU time of the thread that takes it, so this
measures what tracing costs the job, whatever else the 2-core VM runs).
Configs, in alternating rounds: untraced; eacgm with --overhead-budget 0
(every call); eacgm with budgets of 2% (the default) and 5%. The budget
acts after --budget-after 2 s; the steady rate is the median of the
windows from second WARM on. Overhead = the round's untraced rate / traced
rate - 1, median over rounds. The work a call does is timed once, untraced,
before the rounds, and every process is given that many iterations: timed
by each process, it came out a quarter apart between processes here (the
VM's speed jumps), and a whole configuration's rounds with it (one make
bench read 27.8% at the default budget, another -26.1% for every call). Also: the hot function's estimated count (sum of the
weights) against the calls the program made, and eacgm's own CPU.
Usage: bench/budget_cost.py EACGM BUILD_DIR [ROUNDS (5)]   (needs root)"""
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile

eacgm, build = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
load = os.path.join(build, "tests", "testprogs", "budget_load")
SECONDS, WARM, WORK_NS = 16, 6, 10000  # budget_load times its iterations to about 10 us a call
SPEC = {"layer": "budget", "library": "libeacgm_budgetlib*.so", "probes": [{"function": "bl_work"}]}
CONFIGS = [("untraced", None), ("eacgm, every call (--overhead-budget 0)", "0"),
           ("eacgm --overhead-budget 2 (default)", "2"), ("eacgm --overhead-budget 5", "5")]


def iterations():
    """bl_work's iterations for about WORK_NS of CPU, timed by budget_load."""
    p = subprocess.run([load, "1", str(WORK_NS)], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["iters"]


def run(tmp, budget, iters):
    cmd = [load, str(SECONDS), "i%d" % iters]
    db = os.path.join(tmp, "b.db")
    if budget is not None:
        spec = os.path.join(tmp, "spec.json")
        with open(spec, "w") as f:
            json.dump(SPEC, f)
        cmd = [eacgm, "record", "-o", db, "--layers", "cuda", "--spec", spec, "--no-detect",
               "--budget-after", "2", "--overhead-budget", budget, "--"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    made = json.loads(p.stdout)
    rate = statistics.median(c / ns * 1e9 for c, ns in made["windows"][WARM:])
    if budget is None:
        return rate, None, None
    con = sqlite3.connect(db)
    con.enable_load_extension(True)
    con.load_extension(os.path.join(build, "eacgm_sql.so"))  # spans' module (docs/store.md)
    est = con.execute("SELECT sum(coalesce(json_extract(args, '$.weight'), 1)) FROM spans").fetchone()[0]
    meta = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    cpu = float(meta["agent_cpu_attached_s"]) / float(meta["attached_s"]) * 100
    return rate, est / made["work_calls"] - 1, cpu


with tempfile.TemporaryDirectory() as tmp:
    iters = iterations()
    got = {name: [] for name, _ in CONFIGS}
    for r in range(rounds):
        for name, budget in CONFIGS:
            got[name].append(run(tmp, budget, iters))
    base = [g[0] for g in got["untraced"]]
    print("%-42s %14s %10s %22s %12s" % ("config", "calls/CPU-s", "overhead", "count estimate error",
                                            "eacgm CPU"))
    for name, budget in CONFIGS:
        rates = [g[0] for g in got[name]]
        over = statistics.median(b / x - 1 for b, x in zip(base, rates)) * 100
        if budget is None:
            print("%-42s %14.0f %10s %22s %12s" % (name, statistics.median(rates), "-", "-", "-"))
            continue
        errs = [g[1] * 100 for g in got[name]]
        print("%-42s %14.0f %9.1f%% %12.1f%% (%+.0f..%+.0f) %11.1f%%" % (
            name, statistics.median(rates), over, statistics.median(errs), min(errs), max(errs),
            statistics.median(g[2] for g in got[name])))
    print("\n%d alternating rounds of %d s each, every process doing %d iterations a call (timed once); rates "
          "are medians of the 1-s windows from second %d on (the budget acts at 2 s and decides every 2 s); "
          "overhead is the round's untraced rate over the config's, then the median over rounds." %
          (rounds, SECONDS, iters, WARM))
