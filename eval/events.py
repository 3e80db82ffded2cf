# SPDX-License-Identifier: Apache-2.0
"""Event-level scores: a detector's flags merged into alerts, judged against
the faults' episodes (eval/labels.py), for eacgm and every baseline alike.

An alert is the flags one process raised in one step (its step: the last
step the process began at or before the flagged call began; -1 before its
first). Each flag is
  a hit      on a fault's call (label 1, or a caller of one), or on a call
             holding a point fault's call: it points at that fault;
  inside     on any other call of an episode: not scored (whether the fault
             slowed it is not known), counted apart;
  false      on a call outside every episode: a false alarm;
  ignored    on a warm-up call outside every episode (no method scores those).
An alert with a hit is true; one with only inside flags is not scored; one
with a false flag and no hit is a false alarm. A fault is found when one of
its hits is flagged (fault recall); alert precision is true alerts over true
and false ones; event F1 is their harmonic mean.

Rates of false alarms are per 1,000 job steps (a step of a data-parallel job
is one step, however many ranks take it), on the fault-free control runs and,
in the faulted runs, apart for the AFTER steps after each episode (the
after-effects of a fault) and for the other steps outside every episode.
"""
import bisect
import collections
import random

AFTER = 10  # steps after an episode's last step that count as its after-effects
BLOCK = 10  # job steps per unit of false alarms, in the bootstrap
REPLICATES = 1000


def flag_class(r):
    """(class, fault index or None) of a flag on row r (see above)."""
    if r["label"] == 1 or (r["label"] is None and r.get("fault_id") is not None):
        return "hit", r["fault_id"]
    if r.get("holds") is not None:
        return "hit", r["holds"]
    if r.get("in_episode") is not None:
        return "inside", None
    if r["label"] is None:
        return "ignored", None
    return "false", None


class Steps:
    """The job's steps, as the workload logged them: per process, its steps'
    starts (to place a call in its step), and per step the job's interval."""

    def __init__(self, steps):
        self.starts = collections.defaultdict(list)
        span = {}
        for s in steps:
            self.starts[s["pid"]].append((s["t0"], s["step"]))
            lo, hi = span.get(s["step"], (s["t0"], s["t1"]))
            span[s["step"]] = (min(lo, s["t0"]), max(hi, s["t1"]))
        for v in self.starts.values():
            v.sort()
        self.t0s = {pid: [t for t, _ in v] for pid, v in self.starts.items()}
        self.span = span
        self.count = len(span)

    def of(self, pid, t):
        """The step of process pid a call beginning at t belongs to (-1:
        before its first; None: a process that logged no steps)."""
        if pid not in self.t0s:
            return None
        i = bisect.bisect_right(self.t0s[pid], t) - 1
        return self.starts[pid][i][1] if i >= 0 else -1

    def overlapping(self, t0, t1):
        """The job steps whose interval overlaps [t0, t1)."""
        return {s for s, (a, b) in self.span.items() if a < t1 and b > t0}


def alerts(rows, flags, steps):
    """The alerts of one run: {(pid, step): {"hits": {fault: the earliest
    end of its flagged calls}, "inside": n, "false": n}} from the flags
    (one per row)."""
    out = {}
    for r, flag in zip(rows, flags):
        if not flag:
            continue
        kind, fault = flag_class(r)
        if kind == "ignored":
            continue
        a = out.setdefault((r["pid"], steps.of(r["pid"], r["start"])),
                           {"hits": {}, "inside": 0, "false": 0})
        if kind == "hit":
            a["hits"][fault] = min(a["hits"].get(fault, r["end"]), r["end"])
        else:
            a[kind] += 1
    return out


def verdict(a):
    return "true" if a["hits"] else ("false" if a["false"] else "unscored")


def step_classes(steps, eps):
    """Job steps by class: "episode" (overlapping one), "after" (within AFTER
    steps after one's last step, and in none) and "clean" (the others)."""
    in_ep, after = set(), set()
    for e0, e1 in eps:
        mine = steps.overlapping(e0, e1)
        in_ep |= mine
        if mine:
            after |= set(range(max(mine) + 1, max(mine) + 1 + AFTER))
    after = (after & set(steps.span)) - in_ep
    return {"episode": in_ep, "after": after, "clean": set(steps.span) - in_ep - after}


def run_events(run, flags):
    """One run's event counts for one method: its alerts by verdict, its
    false alarms by the class of their step, and the faults found, each
    with the earliest end of its flagged calls (when a judge after the fact
    could know)."""
    al = alerts(run.rows, flags, run.steps)
    classes = step_classes(run.steps, run.eps)
    false_in = collections.Counter()
    false_steps = []  # job step of each false alarm (for the bootstrap's blocks)
    for (pid, step), a in al.items():
        if verdict(a) == "false":
            cls = next((c for c, ss in classes.items() if step in ss), "clean")
            false_in[cls] += 1
            false_steps.append(step if step is not None else -1)
    found = {}
    for a in al.values():
        for f, end in a["hits"].items():
            found[f] = min(found.get(f, end), end)
    true_of = collections.Counter()
    for a in al.values():
        if a["hits"]:
            true_of[min(a["hits"])] += 1
    return {"alerts": collections.Counter(verdict(a) for a in al.values()), "false_in": false_in,
            "steps_in": {c: len(ss) for c, ss in classes.items()}, "steps": run.steps.count,
            "false_steps": false_steps, "found": found, "true_of": true_of, "faults": len(run.faults),
            "inside_flags": sum(a["inside"] for a in al.values())}


def f1(p, r):
    return 2 * p * r / (p + r) if p + r else 0.0


def event_scores(evs):
    """Fault recall, alert precision and event F1 over runs' run_events."""
    faults = sum(e["faults"] for e in evs)
    found = sum(len(e["found"]) for e in evs)
    true = sum(e["alerts"]["true"] for e in evs)
    false = sum(e["alerts"]["false"] for e in evs)
    recall = found / faults if faults else 0.0
    precision = true / (true + false) if true + false else 0.0
    return {"faults": faults, "found": found, "true": true, "false": false,
            "unscored": sum(e["alerts"]["unscored"] for e in evs),
            "inside_flags": sum(e["inside_flags"] for e in evs),
            "recall": recall, "precision": precision, "f1": f1(precision, recall)}


def rate(evs, cls=None):
    """(false alarms, steps, per 1,000 steps) over runs, in steps of class
    cls (None: every step of the runs, which are fault-free controls)."""
    n = sum(e["alerts"]["false"] if cls is None else e["false_in"][cls] for e in evs)
    steps = sum(e["steps"] if cls is None else e["steps_in"][cls] for e in evs)
    return n, steps, 1000.0 * n / steps if steps else float("nan")


def units(evs, call_counts=None):
    """The bootstrap's units of the faulted runs: one per fault (found or
    not, its true alerts, and its faulty calls flagged and missed) and one
    per block of BLOCK job steps (its false alarms, and its falsely flagged
    calls). call_counts: per run, {"tp_of": {fault: n}, "fn_of": {fault: n},
    "fp_steps": [job step of each false positive call]}."""
    faults, blocks = [], []
    for k, e in enumerate(evs):
        cc = call_counts[k] if call_counts else {"tp_of": {}, "fn_of": {}, "fp_steps": []}
        for f in range(e["faults"]):
            faults.append((f in e["found"], e["true_of"][f], cc["tp_of"].get(f, 0), cc["fn_of"].get(f, 0)))
        per = collections.Counter(max(s, 0) // BLOCK for s in e["false_steps"])
        fp = collections.Counter(max(s, 0) // BLOCK for s in cc["fp_steps"])
        for b in range(max(1, (e["steps"] + BLOCK - 1) // BLOCK)):
            blocks.append((per[b], fp[b]))
    return faults, blocks


def bootstrap(faults, blocks, seed, reps=REPLICATES):
    """95% percentile intervals of event F1 and per-call F1, resampling the
    faults and the blocks of steps (with replacement, each apart)."""
    if not faults:
        return None
    rng = random.Random(seed)
    ev, call = [], []
    for _ in range(reps):
        fs = [faults[rng.randrange(len(faults))] for _ in faults]
        bs = [blocks[rng.randrange(len(blocks))] for _ in blocks] if blocks else []
        rec = sum(f[0] for f in fs) / len(fs)
        true, false = sum(f[1] for f in fs), sum(b[0] for b in bs)
        ev.append(f1(true / (true + false) if true + false else 0.0, rec))
        tp, fn, fp = sum(f[2] for f in fs), sum(f[3] for f in fs), sum(b[1] for b in bs)
        call.append(f1(tp / (tp + fp) if tp + fp else 0.0, tp / (tp + fn) if tp + fn else 0.0))
    ev.sort()
    call.sort()
    lo, hi = int(0.025 * reps), int(0.975 * reps) - 1
    return {"event_f1": (ev[lo], ev[hi]), "call_f1": (call[lo], call[hi])}


def call_counts(run, flags):
    """Per-call counts of one run for the bootstrap: flagged and missed
    faulty calls per fault (a point fault's call credited when a call
    holding it is flagged, as labels.verdicts does) and the job step of
    each falsely flagged call."""
    held = {r["holds"] for r, f in zip(run.rows, flags) if f and r.get("holds") is not None}
    tp, fn, fp = collections.Counter(), collections.Counter(), []
    for r, f in zip(run.rows, flags):
        if r["label"] == 1:
            (tp if f or r["fault_id"] in held else fn)[r["fault_id"]] += 1
        elif r["label"] == 0 and f:
            s = run.steps.of(r["pid"], r["start"])
            fp.append(s if s is not None else -1)
    return {"tp_of": tp, "fn_of": fn, "fp_steps": fp}
