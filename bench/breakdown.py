#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where eacgm's cost goes, layer by layer, on the training workloads of
bench/workloads: the same step recorded with a growing set of layers, each
configuration a fresh process, in alternating rounds. Per configuration: the
median step against untraced, eacgm's own CPU (% of one core while attached),
and the time its BPF programs ran per second attached, by program, as the
kernel counted it (each recording's meta). The uprobe traps themselves (about
a microsecond a traced call here) are the kernel's and show only in the step.
Every call is traced (--overhead-budget 0): this is the cost at full rate,
which the budget then cuts (train_cost.py measures the steady state).

Usage: bench/breakdown.py EACGM [ROUNDS (3)] [--steps N (40)] [--only resnet18|gpt]"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_cost as T  # noqa: E402  (the workloads, runs and machine line)

LADDER = [
    ("untraced", None),
    ("torch probes", ["--layers", "torch", "--no-detect"]),
    ("+ online detection", ["--layers", "torch"]),
    ("+ Python stacks behind calls", ["--layers", "torch,python", "--sample-hz", "0"]),
    ("+ Python sampling 1 kHz", ["--layers", "torch,python"]),
    ("+ host (= default here)", []),
]


def run(eacgm, workload, steps, args, db):
    cmd = [T.PYTHON, os.path.join(T.ROOT, "bench", "workloads", workload), str(steps)]
    if args is not None:
        # Every call, whatever it costs: the breakdown is of the full rate.
        cmd = [eacgm, "record", "-o", db, "--overhead-budget", "0", "--bpf-stats", *args, "--", *cmd]
    out = T.run_checked(cmd, " ".join(cmd))
    step = float(T.STEP_RE.search(out).group(1))
    if args is None:
        return {"step": step}
    meta = T.read_meta(db)
    secs = float(meta["attached_s"])
    bpf = {k[len("bpf_ns:"):]: int(v) / secs / 1e6 for k, v in meta.items() if k.startswith("bpf_ns:")}
    return {"step": step, "cpu": 100 * float(meta["agent_cpu_attached_s"]) / secs, "bpf": bpf}


def report(name, results, rounds, steps):
    print("%s (median of %d steps, %d rounds; bpf: ms of program run time per second attached)" % (name, steps, rounds))
    base = statistics.median(r["step"] for r in results["untraced"])
    for label, _ in LADDER:
        rs = results[label]
        step = statistics.median(r["step"] for r in rs)
        line = "  %-30s %10.1f us  %.3fx" % (label, step, step / base)
        if "cpu" in rs[0]:
            progs = {}
            for r in rs:
                for p, ms in r["bpf"].items():
                    progs.setdefault(p, []).append(ms)
            ranked = sorted(((statistics.median(v), p) for p, v in progs.items()), reverse=True)
            top = ranked[:3]
            line += "  cpu %5.1f%%  bpf %5.2f ms/s (%s)" % (
                statistics.median(r["cpu"] for r in rs), sum(ms for ms, _ in ranked),
                ", ".join("%s %.2f" % (p, ms) for ms, p in top))
        print(line)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("eacgm")
    p.add_argument("rounds", nargs="?", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--only", choices=sorted(T.WORKLOADS))
    a = p.parse_args()
    print("machine: " + T.machine(T.PYTHON, "cpu"))
    with tempfile.TemporaryDirectory(prefix="breakdown.") as tmp:
        for name in [a.only] if a.only else list(T.WORKLOADS):
            results = {label: [] for label, _ in LADDER}
            for rnd in range(a.rounds):
                for i, (label, args) in enumerate(LADDER):
                    r = run(a.eacgm, T.WORKLOADS[name][0], a.steps, args, os.path.join(tmp, "b%d.db" % i))
                    results[label].append(r)
                    print("%s round %d/%d %-30s %.1f us" % (name, rnd + 1, a.rounds, label, r["step"]),
                          file=sys.stderr, flush=True)
            print()
            report(name, results, a.rounds, a.steps)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
