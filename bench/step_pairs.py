#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
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

A pair is only as good as its untraced windows' agreement: the ratio
takes the VM's speed between them as a straight line. These VMs also jump
(a GPT step went from 51 to 36 ms between two windows 45 s apart, the
job's own CPU per step moving with it), and a traced window beside a jump
reads half the jump, either way. So a pair whose untraced medians differ by
more than --max-jump (5%, fixed before any run it was applied to) is
printed but left out of the median, and the count of such pairs said. The
hypervisor's steal time (the guest's /proc/stat) is printed per window.

Printed per workload and configuration (--eacgm-args, more than one
compared in the same run): each pair, then the median ratio over the pairs kept
and its range, the median over all pairs beside it, and eacgm's median CPU
(% of one core) over the traced windows.

With --floor, one more configuration runs in the same rounds: bpftrace
attaching an empty uprobe and uretprobe to every function of libtorch_cpu
the torch layer probes (specs/torch.json), settled and timed as eacgm is.
It is the empty-probe floor of the step: what the traps alone cost, with
every call taken (no budget), no program doing work and no agent.

Usage: bench/step_pairs.py EACGM [PAIRS (5)] [--only resnet18|gpt]
       [--settle-s 12] [--window-s 10] [--max-jump 0.05] [--python /usr/bin/python3]
       [--eacgm-args "..." [--eacgm-args "..." ...]] [--floor]
(needs root). About 40 s a pair and workload: 7 minutes for the default."""
import argparse
import json
import os
import platform
import re
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


def steal_ticks():
    """The whole machine's steal time so far (USER_HZ ticks, every CPU), and
    its total time, from /proc/stat's cpu line."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is in user)
    return fields[7] if len(fields) > 7 else 0, sum(fields[:8])


def steal_pct(before, after):
    total = after[1] - before[1]
    return 100.0 * (after[0] - before[0]) / total if total > 0 else 0.0


def wait_file(path, proc, what):
    while not os.path.exists(path):
        if proc.poll() is not None:
            sys.exit("step_pairs: %s exited (%d) before it was ready" % (what, proc.returncode))
        time.sleep(0.05)


def settled_window(args, tracer, ready_s):
    """Waits --settle-s from ready_s (CLOCK_MONOTONIC s), then times one
    --window-s window: returns it (monotonic ns), the tracer's CPU over it
    (% of a core, None if unreadable) and the machine's steal (%)."""
    time.sleep(max(0, ready_s + args.settle_s - time.monotonic()))
    start, cpu0, st0 = time.monotonic_ns(), cpu_s(tracer.pid), steal_ticks()
    time.sleep(args.window_s)
    end, cpu1, st1 = time.monotonic_ns(), cpu_s(tracer.pid), steal_ticks()
    cpu = None if None in (cpu0, cpu1) else 100 * (cpu1 - cpu0) / ((end - start) / 1e9)
    return (start, end), cpu, steal_pct(st0, st1)


def traced_window(args, extra, pid, tmp, i):
    """Attaches eacgm (with the options `extra`), waits out the settling
    time, and returns the traced window (monotonic ns) and eacgm's CPU over
    it, once eacgm has exited."""
    ready = os.path.join(tmp, "ready%s.json" % i)
    err = open(os.path.join(tmp, "eacgm%s.err" % i), "w")
    eacgm = subprocess.Popen([args.eacgm, "record", "-o", os.path.join(tmp, "pair%s.db" % i), "-p", str(pid),
                              "--ready-file", ready] + shlex.split(extra), stdout=subprocess.DEVNULL, stderr=err)
    wait_file(ready, eacgm, "eacgm")
    with open(ready) as f:
        ready_ns = json.load(f)["mono_ns"]  # CLOCK_MONOTONIC, as time.monotonic() reads it
    window, cpu, steal = settled_window(args, eacgm, ready_ns / 1e9)
    eacgm.send_signal(signal.SIGINT)
    if eacgm.wait() != 0:
        sys.exit("step_pairs: eacgm exited %d: see %s" % (eacgm.returncode, err.name))
    err.close()
    return window, cpu, steal, budget_of(os.path.join(tmp, "pair%s.db" % i))


FLOOR = "floor"  # the configuration name of --floor


def torch_functions(pid):
    """libtorch_cpu.so as the workload maps it, and the mangled names of its
    functions that specs/torch.json's probes match: the functions eacgm's
    torch layer probes in that process by default."""
    with open("/proc/%d/maps" % pid) as f:
        lib = next(l.split()[-1] for l in f if re.search(r"/libtorch_cpu\.so[.\d]*$", l.strip()))
    with open(os.path.join(ROOT, "specs", "torch.json")) as f:
        spec = json.load(f)
    patterns = [re.compile(p["match"]) for p in spec["probes"] if "match" in p and "library" not in p]
    nm = lambda *o: subprocess.run(["nm", "-D", "--defined-only", *o, lib], capture_output=True, text=True,
                                   check=True).stdout.splitlines()
    # nm lists the same symbols in the same order with and without -C.
    names = [(m.split(" ", 2)[2], d.split(" ", 2)[2]) for m, d in zip(nm(), nm("-C"))
             if m.split(" ", 2)[1] in "TtWw"]
    return lib, sorted({m for m, d in names if any(p.search(d) for p in patterns)})


def floor_window(args, pid, tmp, i):
    """The same windows as traced_window, but with bpftrace attaching an
    empty uprobe and uretprobe to every function the torch layer probes:
    what the traps alone cost the step (the empty-probe floor), with no
    program doing work and no agent reading records."""
    lib, functions = torch_functions(pid)
    probes = ",\n".join("uprobe:%s:%s,uretprobe:%s:%s" % (lib, f, lib, f) for f in functions)
    prog = "%s {}\nBEGIN { printf(\"ready\\n\"); }\n" % probes
    out = open(os.path.join(tmp, "floor%s.out" % i), "w+")
    bt = subprocess.Popen(["bpftrace", "-p", str(pid), "-e", prog], stdout=out, stderr=subprocess.STDOUT)
    while True:  # BEGIN runs once every probe is attached
        out.seek(0)
        if "ready" in out.read().split():
            break
        if bt.poll() is not None:
            out.seek(0)
            sys.exit("step_pairs: bpftrace exited (%d): %s" % (bt.returncode, out.read()[-2000:]))
        time.sleep(0.05)
    window, cpu, steal = settled_window(args, bt, time.monotonic())
    bt.send_signal(signal.SIGINT)
    bt.wait()
    out.close()
    return window, cpu, steal, "bpftrace: %d functions, empty probes" % len(functions)


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
    """The window (monotonic ns) and the machine's steal over it (%)."""
    start, st0 = time.monotonic_ns(), steal_ticks()
    time.sleep(args.window_s)
    return (start, time.monotonic_ns()), steal_pct(st0, steal_ticks())


def run(args, name, tmp):
    log = os.path.join(tmp, name + ".steps")
    work = subprocess.Popen([args.python, os.path.join(ROOT, "bench", "workloads", WORKLOADS[name]), str(10 ** 9),
                             "--step-log", log], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(WARMUP_S)
        if work.poll() is not None:
            sys.exit("step_pairs: %s exited: %s" % (name, work.stderr.read()[-2000:]))
        plain = [untraced_window(args)]
        traced = []  # (configuration, window, cpu, steal, budget), in the order run
        configs = args.eacgm_args
        for i in range(args.pairs):
            # Each round starts one configuration further on, so none
            # always follows the same one.
            for k in range(len(configs)):
                c = (i + k) % len(configs)
                window = floor_window if configs[c] == FLOOR else traced_window
                extra = () if configs[c] == FLOOR else (configs[c],)
                traced.append((c,) + window(args, *extra, pid=work.pid, tmp=tmp, i="%s%d_%d" % (name, i, c)))
                plain.append(untraced_window(args))
            print("  %s pair %d/%d done" % (name, i + 1, args.pairs), file=sys.stderr)
    finally:
        work.kill()
        work.wait()
    med = lambda w: statistics.median(steps_in(log, *w)) / 1000  # us
    plain = [(med(w), steal) for w, steal in plain]
    for c, extra in enumerate(configs):
        at = [j for j, t in enumerate(traced) if t[0] == c]
        report(args, name, extra, [(plain[j], plain[j + 1]) for j in at],
               [(med(w), cpu, steal, budget) for _, w, cpu, steal, budget in (traced[j] for j in at)])


def report(args, name, extra, flanks, traced):
    """Each pair of one configuration (eacgm's options `extra`), then the
    medians; flanks: the (median step, steal %) of the untraced windows
    before and after each traced one, traced: (median step, eacgm cpu,
    steal %, budget)."""
    ratios, kept, cpus = [], [], []
    label = "the empty-probe floor (bpftrace)" if extra == FLOOR else "eacgm " + (extra or "default")
    print("%s, %s (median step of each %g-s window; traced from %g s after attaching)" %
          (name, label, args.window_s, args.settle_s))
    for i, (t, cpu, steal, budget) in enumerate(traced):
        (before, steal0), (after, steal1) = flanks[i]
        ratios.append(t / ((before + after) / 2))
        jump = abs(after - before) / min(before, after)
        if jump <= args.max_jump:
            kept.append(ratios[-1])
        cpus.append(cpu)
        print("  pair %d: untraced %9.1f us, eacgm %9.1f us, untraced %9.1f us  ratio %.3fx  eacgm cpu %s%s" %
              (i + 1, before, t, after, ratios[-1], "%.1f%%" % cpu if cpu is not None else "-",
               "" if jump <= args.max_jump else "  (left out: the untraced windows differ by %.0f%%)" % (100 * jump)))
        print("          steal %.1f%% / %.1f%% / %.1f%% of the machine; %s" % (steal0, steal, steal1, budget))
    known = [c for c in cpus if c is not None]
    cpu = "%.1f%%" % statistics.median(known) if known else "-"
    if kept:
        print("  %s, steady state: %.3fx untraced (%d of %d pairs, %.3f..%.3f; all pairs %.3fx); "
              "its cpu %s of a core" % (label, statistics.median(kept), len(kept),
                                         len(ratios), min(kept), max(kept), statistics.median(ratios), cpu))
    else:
        print("  %s, steady state: none of %d pairs kept (the VM's speed jumped in each; all pairs %.3fx); "
              "its cpu %s of a core" % (label, len(ratios), statistics.median(ratios), cpu))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("eacgm")
    p.add_argument("pairs", nargs="?", type=int, default=5)
    p.add_argument("--only", choices=sorted(WORKLOADS))
    p.add_argument("--settle-s", type=float, default=12)
    p.add_argument("--window-s", type=float, default=10)
    p.add_argument("--max-jump", type=float, default=0.05,
                   help="leave out a pair whose untraced windows' median steps differ by more than this share")
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--eacgm-args", action="append",
                   help="more options for eacgm record (one string), to take a layer or a feature apart: "
                        "'--layers torch', '--sample-hz 0'. Given more than once, each pair round runs every "
                        "configuration (each round starting one further on), each traced window between "
                        "untraced ones, and each is reported on its own; '' is the default")
    p.add_argument("--floor", action="store_true",
                   help="also run, in the same rounds, bpftrace with an empty uprobe and uretprobe on every "
                        "function the torch layer probes: what the traps alone cost the step")
    args = p.parse_args()
    args.eacgm_args = (args.eacgm_args or [""]) + ([FLOOR] if args.floor else [])
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
