# SPDX-License-Identifier: Apache-2.0
"""What `make eval` records: the faulted scenarios and the fault-free control
runs, each a training job (eval/workload.py) under `eacgm record`, with the
VM's steal time read around it.

A scenario's rows are the layers it is judged on, as in the paper's Table I:
Torch (operators slowed), Python (a Python function slowed), Host (CPU
contention: the job's operator calls slowed by it) and Communication
(network delay and loss on one rank's link, a straggling rank: the gloo
collectives slowed by them). A control run is recorded as its rows'
scenarios are (same model, layers and options), with no fault."""
import collections
import json
import math
import os
import sqlite3
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "testprogs"))
from netns import IP, Namespaces  # noqa: E402

PY = "/usr/bin/python3"
WORKLOAD = os.path.join(HERE, "workload.py")
NETEM = os.path.join(ROOT, "tests", "testprogs", "host_netem.py")
ROWS = {"torch": ("Torch", "torch"), "python": ("Python", "python"), "host": ("Host", "torch"),
        "comm": ("Communication", "gloo")}
NET_DELAY_MS, NET_LOSS, QUEUE = 20, 0.02, 7
PYTHON_OPTS = ["--python-entries", "auto", "--sample-hz", "0"]

# faults: {kind: (how many, 0 for single steps or a window's length in steps)}
Spec = collections.namedtuple("Spec", "name rows model steps faults layers extra world")

SCENARIOS = [
    Spec("gpt-op", ("torch",), "gpt", 160, {"op": (12, 0)}, "torch,host", [], 1),
    Spec("resnet-op", ("torch",), "resnet", 100, {"op": (8, 0)}, "torch,host", [], 1),
    Spec("gpt-py", ("python",), "gpt", 160, {"py": (12, 0)}, "python,torch,host", PYTHON_OPTS, 1),
    Spec("gpt-cpu", ("host",), "gpt", 200, {"cpu": (3, 6)}, "torch,host", [], 1),
    Spec("resnet-cpu", ("host",), "resnet", 100, {"cpu": (2, 5)}, "torch,host", [], 1),
    Spec("ddp-net", ("comm",), "gpt", 120, {"net": (2, 5)}, "gloo,torch,host", [], 2),
    Spec("ddp-straggle", ("comm",), "gpt", 120, {"straggle": (8, 0)}, "gloo,torch,host", [], 2),
]
# The fault-free runs, one per way the scenarios are recorded; steps: their
# share of --control-steps (the steps per control over all seeds).
CONTROLS = [
    Spec("control-gpt", ("torch", "host"), "gpt", 0, {}, "torch,host", [], 1),
    Spec("control-resnet", ("torch", "host"), "resnet", 0, {}, "torch,host", [], 1),
    Spec("control-gpt-py", ("python",), "gpt", 0, {}, "python,torch,host", PYTHON_OPTS, 1),
    Spec("control-ddp", ("comm",), "gpt", 0, {}, "gloo,torch,host", [], 2),
]
NAMES = [s.name for s in SCENARIOS + CONTROLS]


def say(msg):
    print("eval: " + msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def fault_steps(rng, steps, how_many, length, first=10):
    """Seeded fault steps: single steps two apart at least, or windows of
    `length` steps with 10 clean steps between them."""
    if not length:
        pool = list(range(first, steps - 1))
        chosen = []
        while len(chosen) < how_many:
            s = rng.choice(pool)
            if all(abs(s - c) > 1 for c in chosen):
                chosen.append(s)
        return ",".join(map(str, sorted(chosen)))
    span = (steps - first) // how_many
    out = []
    for k in range(how_many):
        lo = first + k * span + rng.randrange(0, max(1, span - length - 10))
        out.append("%d-%d" % (lo, lo + length - 1))
    return ",".join(out)


def control_steps(total, seeds):
    """Each control run's steps: an equal share of total over the seeds."""
    return int(math.ceil(total / seeds))


def cpu_times():
    """The machine's CPU time so far (/proc/stat's first line): (steal, total), in ticks."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice: guest
    # time is counted in user and nice already.
    return v[7], sum(v[:8])


def steal_share(before, after):
    """The share of the machine's CPU time the hypervisor stole between two cpu_times()."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


def workload_cmd(spec, log, steps, faults):
    return [PY, WORKLOAD, log, "--model", spec.model, "--steps", str(steps),
            *sum((["--fault", f] for f in faults), [])]


def record_single(eacgm, spec, work, name, steps, faults):
    db, log = os.path.join(work, name + ".db"), os.path.join(work, name + ".faults")
    cmd = [eacgm, "record", "-o", db, "--layers", spec.layers, *spec.extra, "--",
           *workload_cmd(spec, log, steps, faults)]
    p = run(cmd, timeout=1800)
    with open(os.path.join(work, name + ".record.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n" + p.stdout + p.stderr)
    if p.returncode != 0:
        raise SystemExit("eval: %s: eacgm record failed (%d): %s" % (name, p.returncode, p.stderr[-2000:]))
    return db, [log], None


def start_shim(ns):
    """The user-space netem stand-in, bound to QUEUE in the faulted rank's
    namespace; idle until the workload's iptables rule sends it packets."""
    shim = subprocess.Popen([IP, "netns", "exec", ns, PY, NETEM, str(QUEUE), str(NET_DELAY_MS), str(NET_LOSS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    line = shim.stdout.readline()
    if line.strip() != "ready":
        raise SystemExit("eval: the netem shim did not start: %r %s" % (line, shim.stderr.read()[-500:]))
    return shim


def record_ranks(eacgm, spec, work, name, steps, faults):
    nets = Namespaces(spec.world, prefix="eacgm-ev", subnet="10.214.0")
    shim = None
    try:
        nets.create()
        if any(f.startswith("net:") for f in faults):
            shim = start_shim(nets.ranks[1])
        store = os.path.join(work, name + ".store")
        procs, dbs, logs = [], [], []
        for r, ns in enumerate(nets.ranks):
            db, log = os.path.join(work, "%s.r%d.db" % (name, r)), os.path.join(work, "%s.r%d.faults" % (name, r))
            cmd = [eacgm, "record", "-o", db, "--layers", spec.layers, *spec.extra, "--", IP, "netns", "exec", ns,
                   *workload_cmd(spec, log, steps, faults), "--rank", str(r), "--world", str(spec.world),
                   "--store", store, "--threads", "1", "--queue", str(QUEUE), "--fault-rank", "1"]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          env=dict(os.environ, GLOO_SOCKET_IFNAME="eth0"), start_new_session=True))
            dbs.append(db)
            logs.append(log)
        outs = [p.communicate(timeout=1800)[0] for p in procs]
        for r, out in enumerate(outs):
            with open(os.path.join(work, "%s.r%d.record.txt" % (name, r)), "w") as f:
                f.write(out)
        for r, (p, out) in enumerate(zip(procs, outs)):
            if p.returncode != 0:
                raise SystemExit("eval: %s rank %d: eacgm record failed (%d): %s" % (name, r, p.returncode,
                                                                                     out[-2000:]))
    finally:
        if shim:
            shim.terminate()
            shim.wait()
        nets.delete()
    merged = os.path.join(work, name + ".db")
    p = run([eacgm, "merge", *dbs, "-o", merged, "--force"])
    if p.returncode != 0:
        raise SystemExit("eval: %s: eacgm merge failed: %s" % (name, p.stderr[-2000:]))
    return merged, logs, merge_shifts(merged)


def merge_shifts(db):
    """Per input of a merge: (clock shift ns, {its pid: merged pid})."""
    con = sqlite3.connect(db)
    meta = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    inputs = json.loads(meta["merged_from"])
    pids = [{} for _ in inputs]
    for merged, o in json.loads(meta["process_origins"]).items():
        pids[o["input"]][o["pid"]] = int(merged)
    return [(inp["clock_shift_ns"], pids[k]) for k, inp in enumerate(inputs)]


def record(eacgm, spec, work, seed, steps, faults):
    """Records one run of spec; returns what the judging needs of it (and
    what --judge-only reads back from work/runs.json)."""
    name = "%s.s%d" % (spec.name, seed)
    t, before = time.monotonic(), cpu_times()
    db, logs, shifts = (record_ranks if spec.world > 1 else record_single)(eacgm, spec, work, name, steps, faults)
    return {"spec": spec.name, "seed": seed, "name": name, "db": db, "logs": logs, "shifts": shifts,
            "faults": faults, "steps": steps, "secs": time.monotonic() - t, "steal": steal_share(before, cpu_times())}
