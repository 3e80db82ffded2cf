# SPDX-License-Identifier: Apache-2.0
"""Judging the recordings: `eacgm detect --features` on each, its calls
labelled against the workload's own logs (eval/labels.py), every baseline's
score beside eacgm's verdict, and per row (layer) every method cut at
eacgm's false-alarm rate (eval/baselines.py)."""
import csv
import os
import sqlite3

import numpy as np

import baselines
import events
import labels
from scenarios import ROWS, run

METHODS = ("eacgm",) + baselines.UNSUPERVISED + baselines.SUPERVISED
BOOST = 1e6  # eacgm's ranking: its reported calls first, then its score's margin


def detect(eacgm, db, csv_path, layers):
    """The rows of the feature table `eacgm detect` writes, of these layers."""
    p = run([eacgm, "detect", db, "--json", "--no-store", "--features", csv_path, "--max-rows", "0"])
    if p.returncode != 0:
        raise SystemExit("eval: eacgm detect %s failed: %s" % (db, p.stderr[-2000:]))
    rows = []
    with open(csv_path) as f:
        reader = csv.reader(f)
        head = next(reader)
        col = {c: i for i, c in enumerate(head)}
        first = col["site"] + 1
        feats = head[first:]
        for v in reader:
            if v[col["key"]].split("/")[0] not in layers:
                continue
            start, dur = int(v[col["start_ns"]]), int(v[col["dur_ns"]])
            score, thr = float(v[col["score"]] or "nan"), float(v[col["threshold"]] or "nan")
            rows.append({"key": v[col["key"]], "pid": int(v[col["pid"]]), "tid": int(v[col["tid"]]),
                         "start": start, "dur": dur, "end": start + dur, "warmup": v[col["warmup"]] == "1",
                         "flagged": v[col["flagged"]] == "1", "fault": v[col["fault"]],
                         "worth": v[col["worth"]] == "1", "margin": thr - score,
                         "x": [float(x) if x else float("nan") for x in v[first:]]})
    os.remove(csv_path)  # hundreds of MB for a long control run; detect writes it again
    return rows, feats


def online_flags(db):
    """(pid, tid, start) -> when the live detector of `eacgm record` flagged
    the call (its anomalies stay in the recording: make eval's detect runs
    with --no-store)."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT pid, tid, ts_ns, detected_ns FROM anomalies WHERE detected_ns > 0").fetchall()
    finally:
        con.close()
    return {(p, t, ts): d for p, t, ts, d in rows}


class Run:
    """One recording judged on one row: its calls of the row's layer,
    labelled, its steps and episodes, and each method's score per call."""

    def __init__(self, rec, row, rows, feats, scores):
        self.rec, self.row, self.name, self.seed = rec, row, rec["spec"], rec["seed"]
        self.control = not rec["faults"]
        self.faults = labels.read_faults(rec["logs"], rec["shifts"])
        steps = labels.read_steps(rec["logs"], rec["shifts"])
        self.steps = events.Steps(steps)
        self.eps = labels.episodes(self.faults, steps)
        self.rows, self.feats = rows, feats
        labels.label(rows, self.faults, self.eps)
        self.scores = scores
        self.flags = {}
        self._events = {}

    def scored(self):
        return [i for i, r in enumerate(self.rows) if r["label"] is not None]

    def events(self, method):
        """events.run_events of the method's flags, made once."""
        if method not in self._events:
            self._events[method] = events.run_events(self, self.flags[method])
        return self._events[method]


def scores_of(rows, feats, seed):
    """Every unsupervised method's score per row and eacgm's ranking, each
    held to the reporting test all methods share (detect's `worth`: a
    duration or gap at least twice its function's median and more than the
    machine's own stalls explain); the others rank below every such call."""
    out = baselines.unsupervised(rows, feats, seed)
    worth = np.array([r["worth"] for r in rows])
    for m in out:
        out[m] = np.where(worth, out[m], -np.inf)
    out["eacgm"] = np.array([(BOOST if r["flagged"] else 0.0) + (r["margin"] if r["worth"] else -BOOST)
                             for r in rows])
    return out


def judge_recording(eacgm, rec, spec, work, seed):
    """The Runs of one recording, one per row its spec is judged on."""
    layers = {ROWS[row][1] for row in spec.rows}
    all_rows, feats = detect(eacgm, rec["db"], os.path.join(work, rec["name"] + ".csv"), layers)
    out = []
    cache = {}
    for row in spec.rows:
        layer = ROWS[row][1]
        if layer not in cache:
            rows = [r for r in all_rows if r["key"].split("/")[0] == layer]
            cache[layer] = (rows, scores_of(rows, feats, seed))
        rows, scores = cache[layer]
        out.append(Run(rec, row, [dict(r) for r in rows], feats, scores))
    return out


def cut(runs, seed):
    """Per method, its flags on every run of one row: eacgm's own; each
    other method cut where it flags as many of the faulted runs' fault-free
    calls as eacgm does; the supervised ones on the faulted runs only
    (cross-validated probabilities). Returns per method its per-call truth
    and score over the faulted runs (for AUPRC)."""
    faulted = [(r, r.scored()) for r in runs if not r.control]
    truth, flagged, score = [], [], {m: [] for m in METHODS}
    x = []
    for r, idx in faulted:
        truth += [r.rows[i]["label"] for i in idx]
        flagged += [r.rows[i]["flagged"] for i in idx]
        for m in ("eacgm",) + baselines.UNSUPERVISED:
            score[m] += list(r.scores[m][idx])
        if idx:
            x += list(baselines.matrix([r.rows[i] for i in idx], r.feats)[0])
    truth = np.array(truth)
    neg = truth == 0
    n_false = int(np.sum(neg & np.array(flagged, dtype=bool)))
    for r in runs:
        r.flags["eacgm"] = [row["flagged"] for row in r.rows]
    for m in baselines.UNSUPERVISED:
        tau = baselines.cut_at(np.array(score[m]), neg, n_false)
        for r in runs:
            r.flags[m] = list(r.scores[m] > tau)
    sup = baselines.supervised(np.array(x), truth, seed) if len(truth) else {}
    for m in baselines.SUPERVISED:
        v = sup.get(m, "not run")
        if isinstance(v, str):
            score[m] = v
            continue
        score[m] = list(v)
        tau = baselines.cut_at(v, neg, n_false)
        k = 0
        for r, idx in faulted:
            r.flags[m] = [False] * len(r.rows)
            for i, p in zip(idx, v[k:k + len(idx)]):
                r.flags[m][i] = bool(p > tau)
            k += len(idx)
    return truth, score
