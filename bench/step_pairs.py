#!/usr/bin/env python3
"""A training step with eacgm attached against the same process's steps
without it, in alternating windows of one run.

train_cost.py compares fresh processes, round after round. On the 2-vCPU
VMs the same untraced run took 36 to 46 ms a GPT step from one process to
the next (its thread's CPU time equal to its wall time: the vCPU's speed
moved, in phases of minutes), which drowns a 2% bound. Here one workload
process trains throughout, and eacgm attaches to it (`record -p`) and
detaches in turn:

  untraced window | attach, settle, traced window, detach | untraced window | ...

Each traced window starts --settle-s (12) after eacgm is ready (its overhead
budget acts from 10 s: the steady state of an agent left attached) and lasts
--window-s (10); each untraced window starts once eacgm has exited and the
probes are gone, and lasts as long. A pair's ratio is the traced window's
median step over the mean of the untraced medians on either side of it. The
steps are the workload's own (bench/workloads, `--step-log`: each step's end
and length as it ran); eacgm's CPU is read from /proc over the traced window.

Printed per workload: each pair, then the median ratio and its range, and
eacgm's median CPU (% of one core) over the traced windows.

Usage: bench/step_pairs.py EACGM [PAIRS (5)] [--only resnet18|gpt]
       [--settle-s 12] [--window-s 10] [--python /usr/bin/python3] [--eacgm-args "..."]
(needs root). About 40 s a pair and workload: 7 minutes for the default."""
import argparse
import json
import os
import platform
import shlex
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from train_cost import cpu_s  # bench/, beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = {"resnet18": "resnet18_train.py", "gpt": "gpt_train.py"}
WARMUP_S = 12  # the workload's own warm-up before the first window


def steps_in(log, start_ns, end_ns):
    """Lengths (ns) of the steps that ended in [start_ns, end_ns]."""
    out = []
    with open(log) as f:
        for line in f:
            end, dur = map(int, line.split())
            if start_ns <= end <= end_ns and end - dur >= start_ns:
                out.append(dur)
    return out


def wait_file(path, proc, what):
    while not os.path.exists(path):
        if proc.poll() is not None:
            sys.exit("step_pairs: %s exited (%d) before it was ready" % (what, proc.returncode))
        time.sleep(0.05)


def traced_window(args, pid, tmp, i):
    """Attaches eacgm, waits out the settling time, and returns the traced
    window (monotonic ns) and eacgm's CPU over it, once eacgm has exited."""
    ready = os.path.join(tmp, "ready%s.json" % i)
    err = open(os.path.join(tmp, "eacgm%s.err" % i), "w")
    eacgm = subprocess.Popen([args.eacgm, "record", "-o", os.path.join(tmp, "pair%s.db" % i), "-p", str(pid),
                              "--ready-file", ready] + shlex.split(args.eacgm_args), stdout=subprocess.DEVNULL, stderr=err)
    wait_file(ready, eacgm, "eacgm")
    with open(ready) as f:
        ready_ns = json.load(f)["mono_ns"]  # CLOCK_MONOTONIC, as time.monotonic() reads it
    time.sleep(max(0, ready_ns / 1e9 + args.settle_s - time.monotonic()))
    start, cpu0 = time.monotonic_ns(), cpu_s(eacgm.pid)
    time.sleep(args.window_s)
    end, cpu1 = time.monotonic_ns(), cpu_s(eacgm.pid)
    eacgm.send_signal(signal.SIGINT)
    if eacgm.wait() != 0:
        sys.exit("step_pairs: eacgm exited %d: see %s" % (eacgm.returncode, err.name))
    err.close()
    cpu = None if None in (cpu0, cpu1) else 100 * (cpu1 - cpu0) / ((end - start) / 1e9)
    return (start, end), cpu, budget_of(os.path.join(tmp, "pair%s.db" % i))


def budget_of(db):
    """What the overhead budget did in a recording, from its meta: what
    every probe would cost at full rate (% of the job's CPU), what it was
    held to, the lowest sampling rate it set and the specs it throttled."""
    con = sqlite3.connect(db)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    throttled = ["%s (%.0f%%)" % (t["function"], 100 * t["coverage"])
                 for t in json.loads(meta.get("overhead_throttled", "[]")) if t["now"]]
    # overhead_displaced_pct: eacgm's own CPU that the job's threads gave
    # up (no idle core), which the calls' budget makes room for.
    taken = meta.get("overhead_displaced_pct")
    # overhead_sampler_pct: what the Python samples cost the sampled threads.
    sampler = meta.get("overhead_sampler_pct")
    return "budget: full %s%%, held to %s%%%s%s, sampling >= %s Hz, throttled %d: %s" % (
        meta.get("overhead_full_pct", "-"), meta.get("overhead_expected_pct", "-"),
        " + %s%% taken by eacgm" % taken if taken is not None else "",
        " + %s%% the samples" % sampler if sampler is not None else "",
        meta.get("python_sample_hz_min", "-"), len(throttled), ", ".join(sorted(throttled)[:6]) or "none")


def untraced_window(args):
    start = time.monotonic_ns()
    time.sleep(args.window_s)
    return start, time.monotonic_ns()


def run(args, name, tmp):
    log = os.path.join(tmp, name + ".steps")
    work = subprocess.Popen([args.python, os.path.join(ROOT, "bench", "workloads", WORKLOADS[name]), str(10 ** 9),
                             "--step-log", log], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(WARMUP_S)
        if work.poll() is not None:
            sys.exit("step_pairs: %s exited: %s" % (name, work.stderr.read()[-2000:]))
        plain = [untraced_window(args)]
        traced = []
        for i in range(args.pairs):
            window, cpu, budget = traced_window(args, work.pid, tmp, "%s%d" % (name, i))
            traced.append((window, cpu, budget))
            plain.append(untraced_window(args))
            print("  %s pair %d/%d done" % (name, i + 1, args.pairs), file=sys.stderr)
    finally:
        work.kill()
        work.wait()
    med = lambda w: statistics.median(steps_in(log, *w)) / 1000  # us
    ratios, cpus = [], []
    print("%s (median step of each %g-s window; traced from %g s after attaching)" %
          (name, args.window_s, args.settle_s))
    for i, (window, cpu, budget) in enumerate(traced):
        before, after, t = med(plain[i]), med(plain[i + 1]), med(window)
        ratios.append(t / ((before + after) / 2))
        cpus.append(cpu)
        print("  pair %d: untraced %9.1f us, eacgm %9.1f us, untraced %9.1f us  ratio %.3fx  eacgm cpu %s" %
              (i + 1, before, t, after, ratios[-1], "%.1f%%" % cpu if cpu is not None else "-"))
        print("          " + budget)
    known = [c for c in cpus if c is not None]
    print("  eacgm %s, steady state: %.3fx untraced (pairs %.3f..%.3f); eacgm cpu %s of a core" %
          (args.eacgm_args or "default", statistics.median(ratios), min(ratios), max(ratios),
           "%.1f%%" % statistics.median(known) if known else "-"))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("eacgm")
    p.add_argument("pairs", nargs="?", type=int, default=5)
    p.add_argument("--only", choices=sorted(WORKLOADS))
    p.add_argument("--settle-s", type=float, default=12)
    p.add_argument("--window-s", type=float, default=10)
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--eacgm-args", default="", help="more options for eacgm record (one string), to take a layer "
                   "or a feature apart: '--layers torch', '--sample-hz 0'")
    args = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("step_pairs: needs root (eacgm attaches with eBPF)")
    with open("/proc/cpuinfo") as f:
        model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), platform.machine())
    print("machine: %s, nproc %d, kernel %s" % (model, os.cpu_count(), platform.release()))
    with tempfile.TemporaryDirectory() as tmp:
        for name in [args.only] if args.only else sorted(WORKLOADS, reverse=True):
            run(args, name, tmp)


if __name__ == "__main__":
    main()
