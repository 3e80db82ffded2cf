#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What eacgm costs a real CPU training job, next to torch.profiler.

For each workload in bench/workloads (ResNet-18 and a small GPT), runs four
configurations, each a fresh process, in alternating rounds (A B C D A B C D ...,
so that drift on a noisy machine hits every configuration alike):

  untraced            python3 WORKLOAD STEPS
  eacgm default       eacgm record -o DB -- python3 WORKLOAD STEPS
  eacgm every layer   the same with EVERY_LAYER_ARGS
  torch.profiler      python3 WORKLOAD STEPS --profiler

Every run warms up for --warmup-s (12) seconds from its start, then times its
steps: the steady state of an agent left attached (eacgm's --overhead-budget,
default 2%, acts from 10 s; before that every call is traced).

It prints per configuration the median of the per-run median step times, its
ratio to untraced, the range of the per-round ratios, and eacgm's own CPU (% of
one core while attached) and peak RSS, read from each recording's meta table.

Usage: bench/train_cost.py EACGM [ROUNDS (5)] [--steps N (60)] [--only resnet18|gpt]
       [--device cpu|cuda] [--python PYTHON (/usr/bin/python3)] [--configs A;B]
(needs root for eacgm). --device cuda trains on the GPU (bench/gpu_check.sh,
on a machine that has one). Progress goes to stderr, the report to stdout.

The default run (both workloads, 4 configurations, 5 rounds of 60 steps: 40
fresh processes) took 511 to 535 s (under 9 minutes) on a 2-vCPU Xeon VM with
torch 1.13 on 1 intra-op thread; ROUNDS=2 takes about 3.5 minutes. Most of a
GPT round is torch.profiler's run, where building the event list after the
timed loop costs about 0.25 s per step."""
import argparse
import os
import platform
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# Extra `eacgm record` arguments for the every-layer configuration; kept apart
# so that it can follow eacgm's options as they change.
EVERY_LAYER_ARGS = ["--sample-hz", "1000", "--python-entries", "auto"]

PYTHON = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = {
    "resnet18": ("resnet18_train.py", "batch 16, 64x64"),
    "gpt": ("gpt_train.py", "vocab 512, d 128, 4 heads, 4 layers, T 64, batch 8"),
}
CONFIGS = ["untraced", "eacgm default", "eacgm every layer", "torch.profiler"]
# The workload's own line, matched whole so that nothing in eacgm's summary
# (which shares stdout) can be taken for it.
STEP_RE = re.compile(r"^\w+_train: \d+ steps, median step ([0-9.]+) us$", re.M)
EVENTS_RE = re.compile(r"^profiler: (\d+) events$", re.M)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("eacgm")
    p.add_argument("rounds", nargs="?", type=int, default=5)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--only", choices=sorted(WORKLOADS))
    p.add_argument("--warmup-s", type=float, default=12,
                   help="steps are timed from this many seconds after each workload started: the steady "
                        "state an always-on agent is judged by (eacgm's overhead budget acts from 10 s)")
    p.add_argument("--device", default="cpu", help="where the workloads train: cpu, or cuda")
    p.add_argument("--configs", default=";".join(CONFIGS),
                   help="the configurations to run, separated by ';' (untraced is always run: the ratios "
                        "need it): those above, or 'eacgm ARGS' for eacgm record with ARGS, such as "
                        "'eacgm --layers cuda,gpu,host' (what each layer costs)")
    p.add_argument("--python", default=PYTHON, help="the interpreter with torch and torchvision")
    args = p.parse_args()
    chosen = [" ".join(c.split()) for c in args.configs.split(";") if c.strip()]
    unknown = [c for c in chosen if c not in CONFIGS and not c.startswith("eacgm --")]
    if unknown:
        p.error("unknown configuration %s (choose from %s, or 'eacgm ARGS')" %
                (", ".join(unknown), ", ".join(CONFIGS)))
    # Untraced first; the named ones in their order, then the others asked.
    args.configs = [c for c in CONFIGS if c == "untraced" or c in chosen]
    args.configs += [c for c in chosen if c not in CONFIGS and c not in args.configs]
    return args


def command(eacgm, config, workload, steps, db, warmup_s=0, python=PYTHON, device="cpu"):
    run = [python, os.path.join(ROOT, "bench", "workloads", workload), str(steps), "--warmup-s", str(warmup_s),
           "--device", device]
    if config == "untraced":
        return run
    if config == "torch.profiler":
        return run + ["--profiler"]
    if config == "eacgm every layer":
        extra = EVERY_LAYER_ARGS
    elif config.startswith("eacgm --"):
        extra = config.split()[1:]
    else:
        extra = []
    return [eacgm, "record", "-o", db, *extra, "--", *run]


def check_exit(cmd, what, returncode, stderr):
    """Any failure ends the benchmark, since a ratio built on a run that did
    not finish would be meaningless: the end of its stderr, and why."""
    if returncode != 0:
        sys.stderr.write("\n".join(stderr.splitlines()[-25:]) + "\n")
        sys.exit("train_cost: %s failed (exit %d): %s" % (what, returncode, " ".join(cmd)))


def run_checked(cmd, what):
    """stdout of cmd (check_exit on failure)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        sys.exit("train_cost: %s could not start: %s" % (what, e))
    check_exit(cmd, what, proc.returncode, proc.stderr)
    return proc.stdout


def cpu_s(pid):
    """A process's CPU seconds (user + system) from /proc, None once gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(proc, err, who):
    """Waits for eacgm's ready line in err (its stderr, a file) and returns
    the time it was seen; exits with eacgm's stderr if eacgm ended first."""
    ready = re.compile(r"eacgm: recording \(")
    while proc.poll() is None:
        err.seek(0)
        if ready.search(err.read()):
            return time.monotonic()
        time.sleep(0.05)
    err.seek(0)
    sys.exit("%s: eacgm exited before it was ready:\n%s" % (who, err.read()))


def peak_rss_kb(pid):
    """A process's peak RSS so far (VmHWM, kB), None once gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def watch_peak(pid, out):
    """Until pid is gone, keeps out[0] at its last seen peak RSS: the
    recording's meta has eacgm's peak while it recorded, not while it
    writes the trace and summary at the end."""
    while True:
        kb = peak_rss_kb(pid)
        if kb is None:
            return
        out[0] = kb
        time.sleep(0.02)


def run_timed(cmd, what):
    """Like run_checked, with eacgm's CPU (% of one core) while the workload
    timed its steps: from its 'timing N steps' line to its median line, the
    steady state the step times are taken from (the whole run's share, in
    the recording's meta, also counts the start and the first seconds at
    full rate, before the overhead budget acts); and eacgm's peak RSS to
    its end (MB, watch_peak)."""
    with tempfile.TemporaryFile(mode="w+") as err:  # a file: a full pipe would stall eacgm
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        except OSError as e:
            sys.exit("train_cost: %s could not start: %s" % (what, e))
        lines, marks, peak = [], [], [None]
        watcher = threading.Thread(target=watch_peak, args=(proc.pid, peak), daemon=True)
        watcher.start()
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("timing ") or STEP_RE.match(line.rstrip("\n")):
                marks.append((time.monotonic(), cpu_s(proc.pid)))
        proc.wait()
        watcher.join()
        err.seek(0)
        stderr = err.read()
    check_exit(cmd, what, proc.returncode, stderr)
    steady = None
    if len(marks) == 2 and None not in (marks[0][1], marks[1][1]) and marks[1][0] > marks[0][0]:
        steady = 100 * (marks[1][1] - marks[0][1]) / (marks[1][0] - marks[0][0])
    return "".join(lines), steady, peak[0] / 1024 if peak[0] else None


def read_meta(db):
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT key, value FROM meta").fetchall())


def agent_cost(db):
    """eacgm's CPU (% of one core while attached) and peak RSS (MB), None
    where the recording does not have the key (older eacgm)."""
    meta = read_meta(db)
    cpu, attached, rss = (meta.get(k) for k in ("agent_cpu_attached_s", "attached_s", "agent_max_rss_kb"))
    cpu_pct = 100 * float(cpu) / float(attached) if cpu and attached and float(attached) > 0 else None
    return cpu_pct, float(rss) / 1024 if rss else None


def remove_recording(db):
    """Only the last recording of a configuration is kept (for `eacgm
    summary`): a long run would otherwise fill the temporary directory."""
    if db is None:
        return
    for path in (db, os.path.splitext(db)[0] + ".trace.json", os.path.splitext(db)[0] + ".pftrace"):
        if os.path.exists(path):
            os.remove(path)


def run_once(args, name, config, rnd, tmp, last_db):
    """One run: a dict with its step time and, for eacgm, its own cost."""
    db = os.path.join(tmp, "%s-%s-r%d.db" % (name, config.replace(" ", "_"), rnd))
    cmd = command(args.eacgm, config, WORKLOADS[name][0], args.steps, db, args.warmup_s, args.python, args.device)
    began = time.monotonic()
    what = "%s %s round %d" % (name, config, rnd + 1)
    steady = peak = None
    if config.startswith("eacgm"):
        out, steady, peak = run_timed(cmd, what)
    else:
        out = run_checked(cmd, what)
    step = STEP_RE.search(out)
    if not step:
        sys.exit("train_cost: no 'median step' line in the output of %s" % " ".join(cmd))
    result = {"step_us": float(step.group(1))}
    if config.startswith("eacgm"):
        result["cpu_pct"], result["rss_mb"] = agent_cost(db)
        result["steady_cpu_pct"] = steady
        result["peak_mb"] = peak
        remove_recording(last_db.get(config))
        last_db[config] = db
    events = EVENTS_RE.search(out)
    if events:
        result["events"] = int(events.group(1))
    print("%-9s round %d/%d  %-18s median step %10.1f us  (run took %.1f s)" % (
        name, rnd + 1, args.rounds, config, result["step_us"], time.monotonic() - began), file=sys.stderr, flush=True)
    return result


def measure(args, name, tmp):
    """Per configuration, the list of its runs (one per round), and the first
    line of `eacgm summary` on its last recording."""
    runs, last_db = {c: [] for c in args.configs}, {}
    for rnd in range(args.rounds):
        for config in args.configs:
            runs[config].append(run_once(args, name, config, rnd, tmp, last_db))
    summaries = {c: run_checked([args.eacgm, "summary", db], "eacgm summary").splitlines()[0]
                 for c, db in last_db.items()}
    return runs, summaries


def median_of(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def fmt(value, pattern):
    return "n/a" if value is None else pattern % value


def table_line(config, runs, base):
    step = median_of(runs, "step_us")
    line = "  %-18s %10.1f us  %.3fx" % (config, step, step / median_of(base, "step_us"))
    if config == "untraced":
        return line
    # Each round's ratio pairs runs made next to each other, so its spread
    # shows how far the machine's noise moves a single comparison.
    ratios = [r["step_us"] / b["step_us"] for r, b in zip(runs, base)]
    line += " (%.2f..%.2f)" % (min(ratios), max(ratios))
    if config.startswith("eacgm"):
        line += "  cpu %s of a core timed (%s whole run)  rss %s recording, %s at the end" % (
            fmt(median_of(runs, "steady_cpu_pct"), "%.1f%%"), fmt(median_of(runs, "cpu_pct"), "%.1f%%"),
            fmt(median_of(runs, "rss_mb"), "%.0f MB"), fmt(median_of(runs, "peak_mb"), "%.0f MB"))
    elif median_of(runs, "events") is not None:
        line += "  %d profiler events" % median_of(runs, "events")
    return line


def report(args, name, runs, summaries):
    print("%s (%s; median of %d steps timed from %g s after the start, %d rounds)" % (
        name, WORKLOADS[name][1], args.steps, args.warmup_s, args.rounds))
    for config in args.configs:
        print(table_line(config, runs[config], runs["untraced"]))
    for config, line in summaries.items():
        print("  last %s recording: %s" % (config, line))


def proc_field(path, pattern):
    with open(path) as f:
        match = re.search(pattern, f.read(), re.M)
    return match.group(1) if match else None


def machine(python, device):
    """One line on what the numbers were taken on: they mean little without it."""
    model = proc_field("/proc/cpuinfo", r"^model name\s*:\s*(.*)$") or platform.machine()
    mem_kb = proc_field("/proc/meminfo", r"^MemTotal:\s*(\d+) kB") or 0
    # Asked of the interpreter the workloads run under, not of this one.
    torch = run_checked([python, "-c", "import torch, torchvision; print(torch.__version__, "
                         "torchvision.__version__, torch.get_num_threads())"], "torch version").split()
    line = "%s, nproc %d, %.1f GiB, kernel %s, torch %s (torchvision %s, intra-op threads %s)" % (
        model, len(os.sched_getaffinity(0)), int(mem_kb) / 2**20, platform.release(), *torch)
    if device != "cpu":
        gpu = run_checked([python, "-c", "import torch; print(torch.cuda.get_device_name(0))"], "GPU name")
        line += ", training on %s (%s)" % (device, gpu.strip())
    return line


def main():
    args = parse_args()
    # Found out now rather than after the first untraced run.
    if not os.access(args.eacgm, os.X_OK):
        sys.exit("train_cost: %s is not an executable eacgm" % args.eacgm)
    start = time.monotonic()
    print("machine: " + machine(args.python, args.device))
    print("eacgm every layer: " + " ".join(EVERY_LAYER_ARGS))
    with tempfile.TemporaryDirectory(prefix="train_cost.") as tmp:
        for name in [args.only] if args.only else list(WORKLOADS):
            print()
            report(args, name, *measure(args, name, tmp))
            sys.stdout.flush()
    print("train_cost: done in %.0f s" % (time.monotonic() - start), file=sys.stderr)


if __name__ == "__main__":
    main()
