# SPDX-License-Identifier: Apache-2.0
"""Ground truth for the evaluation: which traced calls a fault made, from the
fault log the workload wrote (eval/workload.py), and the scores of a verdict
against it.

A call of the row's layer is labelled
  1  (a fault's call) when
     - a point fault (an operator slowed, a Python function spinning) ran
       inside it (for HELD of the injected work's time at least), on its
       process, and no other call of the layer that holds it lies inside it:
       the innermost call that holds the injected work (each part of it, for
       a fault logged in parts: an operator slowed by running it on 30
       copies of its input slowed the copying too);
     - or a window fault (CPU contention, network delay and loss, a
       straggling rank) was in force for at least half of it, and the fault
       slowed it by a slowdown worth telling: at least SLOWED times the
       median of its function's calls outside every window and MIN_EXCESS
       longer (the reporting floor of `eacgm detect`'s defaults, under
       which every method's flags are judged: a 2 us copy that took 5 us
       during CPU contention is neither found nor missed);
  None (not scored) when it merely holds a fault's call (its caller, in the
     same thread: slow because of its child, the cause being the child;
     a detector that flags the caller of a point fault's call and not the
     call is credited with the call: it pointed at the slowdown, one frame
     out, as eacgm does when the call's own model missed it),
     when a window fault was in force but did not slow it, or when it is a
     warm-up call (its function's first calls in its process, which eacgm
     does not score: every detector is scored on the same calls);
  0  otherwise, outside every episode: a flag on it is a false alarm.

An injected fault's episode, fixed before any detector's output is looked
at: a point fault's (an operator slowed, a Python function spinning, a
straggling rank's extra work) runs from its onset to the end of its step; a
window fault's (CPU contention, network delay and loss) from its start to
the end of the step after its end (a slowed rank slows its peers, and a
window's last packets and hogs drain into the next step). An episode covers
every process of the job, and its steps are those the workload logged
itself. A call of an episode that is not a fault's call is not scored
(None), for any method: whether the fault slowed it is not known, and flags
on such calls are counted apart (`in_episode`).
"""
import collections
import json
import statistics

POINT = {"op", "py"}
# Faults of one step (their episode ends with it); the others hold for a window of steps.
POINT_EPISODE = {"op", "py", "straggle"}
SLOWED = 2.0
MIN_EXCESS = 100_000  # ns
HELD = 0.8  # a point fault is in a call that spans this much of it at least
# The fault class each injected kind should be named by (rootcause.h).
EXPECTED = {"op": "operator_slow", "py": "python_slow", "cpu": "cpu_contention", "net": "network",
            "straggle": "straggling_rank"}


def _read_log(paths, shifts, want):
    """Records of the workload's logs (one per rank) that `want` keeps, times
    moved by shifts[i] (a merge's clock shift of input i: (shift ns, {its
    pid: merged pid})) and pids mapped to the merged recording's."""
    out = []
    for i, path in enumerate(paths):
        with open(path) as f:
            for line in f:
                d = json.loads(line)
                if not want(d):
                    continue
                if shifts:
                    d["t0"] += shifts[i][0]
                    d["t1"] += shifts[i][0]
                    d["parts"] = [(t0 + shifts[i][0], t1 + shifts[i][0]) for t0, t1 in d.get("parts", ())]
                    d["pid"] = shifts[i][1].get(d["pid"], d["pid"])
                out.append(d)
    return out


def read_faults(paths, shifts=None):
    """The injected faults of the workload's logs, in the recording's times and pids."""
    return _read_log(paths, shifts, lambda d: "fault" in d)


def read_steps(paths, shifts=None):
    """The steps the workload timed, one record per process and step:
    {"step", "t0", "t1", "rank", "pid"}, in the recording's times and pids."""
    return _read_log(paths, shifts, lambda d: "step" in d and "fault" not in d)


def episodes(faults, steps):
    """Each fault's episode (t0, t1), in the faults' order (see above).
    steps: read_steps' records of every process of the job."""
    ends = collections.defaultdict(int)  # step -> its latest end over the job's processes
    starts = collections.defaultdict(list)  # pid -> its steps' (t0, step), in order
    for s in steps:
        ends[s["step"]] = max(ends[s["step"]], s["t1"])
        starts[s["pid"]].append((s["t0"], s["step"]))
    for v in starts.values():
        v.sort()
    last = max(ends) if ends else 0
    out = []
    for f in faults:
        if f["fault"] in POINT_EPISODE:
            step = f["step"]
        else:  # the step after the window: the first the fault's process began after it ended
            mine = starts.get(f["pid"], [])
            after = [s for t0, s in mine if t0 >= f["t1"]]
            step = after[0] if after else last
        out.append((f["t0"], max(ends.get(min(step, last), f["t1"]), f["t1"])))
    return out


def _overlap(r, f):
    return max(0, min(r["end"], f["t1"]) - max(r["start"], f["t0"]))


def _window_medians(rows, windows):
    """Median duration per key over its calls outside every window."""
    durs = collections.defaultdict(list)
    for r in rows:
        if not r["warmup"] and not any(_overlap(r, f) for f in windows):
            durs[r["key"]].append(r["dur"])
    return {k: statistics.median(v) for k, v in durs.items()}


def label(rows, faults, eps=()):
    """Sets r["label"] (1, 0 or None), r["fault_id"] (the index of the
    fault it belongs to) and r["in_episode"] (the index of the episode it
    overlaps, or None) on each row of one recording's evaluated layer.
    eps: the faults' episodes (episodes()); none, for a fault-free run."""
    windows = [f for f in faults if f["fault"] not in POINT]
    medians = _window_medians(rows, windows)
    for r in rows:
        r["label"], r["fault_id"] = (None, None) if r["warmup"] else (0, None)
        r["holds"] = None
        r["in_episode"] = next((i for i, (e0, e1) in enumerate(eps) if r["start"] < e1 and r["end"] > e0), None)
    for i, f in enumerate(faults):
        if f["fault"] in POINT:
            _label_point(rows, f, i)
    for r in rows:
        if r["warmup"] or r["label"] is None or r["label"] == 1:
            continue
        for i, f in enumerate(faults):
            ov = _overlap(r, f)
            if f["fault"] not in POINT and ov and ov * 2 >= r["dur"]:
                med = medians.get(r["key"], float("inf"))
                slowed = r["dur"] >= SLOWED * med and r["dur"] - med >= MIN_EXCESS
                r["label"], r["fault_id"] = (1, i) if slowed else (None, None)
                break
    _unscore_callers(rows)
    for r in rows:
        if r["label"] == 0 and r["in_episode"] is not None:
            r["label"] = None


def _label_point(rows, f, i):
    # The workload's clock reads bracket the call from Python: the traced
    # call sits inside them, a few microseconds short at each end. A fault
    # in parts (an operator slowed: its input copied 30 times, then the
    # operator run on the copies) has a call for each: both were slowed.
    for t0, t1 in f.get("parts") or [(f["t0"], f["t1"])]:
        part = {"t0": t0, "t1": t1}
        need = HELD * (t1 - t0)
        holders = [r for r in rows if r["pid"] == f["pid"] and _overlap(r, part) >= need]
        if not holders:
            continue
        inner = min(holders, key=lambda r: r["dur"])
        for r in holders:
            if r is not inner and r["label"] != 1:
                r["label"], r["holds"] = None, i
        if not inner["warmup"]:
            inner["label"], inner["fault_id"] = 1, i


def _unscore_callers(rows):
    """A fault's call that holds another of the same thread is its caller:
    not scored."""
    by_thread = collections.defaultdict(list)
    for r in rows:
        if r["label"] == 1:
            by_thread[(r["pid"], r["tid"])].append(r)
    for calls in by_thread.values():
        calls.sort(key=lambda r: (r["start"], -r["end"]))
        for j, r in enumerate(calls):
            for q in calls[j + 1:]:
                if q["start"] >= r["end"]:
                    break
                if q["end"] <= r["end"] and q is not r:
                    r["label"] = None
                    break


def verdicts(rows, flags):
    """Each scored row's verdict from per-row flags: its own flag, or for a
    point fault's call a flag on a call holding it (see above)."""
    held = {}
    for r, f in zip(rows, flags):
        if r.get("holds") is not None and f:
            held[r["holds"]] = True
    return [bool(f or (r["label"] == 1 and held.get(r["fault_id"]))) for r, f in zip(rows, flags)
            if r["label"] is not None]


def truth_and_verdicts(rows, flags):
    """The labels of a run's scored rows and the verdicts of these flags on them."""
    return [r["label"] for r in rows if r["label"] is not None], verdicts(rows, flags)


def scores(truth, verdict):
    """Accuracy, precision, recall and F1 of verdicts (bools) against labels (0/1)."""
    tp = sum(1 for t, v in zip(truth, verdict) if t and v)
    fp = sum(1 for t, v in zip(truth, verdict) if not t and v)
    fn = sum(1 for t, v in zip(truth, verdict) if t and not v)
    tn = len(truth) - tp - fp - fn
    prec = tp / (tp + fp) if tp + fp else 0.0
    rec = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"tp": tp, "fp": fp, "fn": fn, "tn": tn, "accuracy": (tp + tn) / len(truth) if truth else 0.0,
            "precision": prec, "recall": rec, "f1": f1}
