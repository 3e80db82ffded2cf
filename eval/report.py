# SPDX-License-Identifier: Apache-2.0
"""eval/RESULTS.md: every number computed here from the judged runs; the
text around them says how, and the provenance line is the script's own."""
import collections
import math
import os
import platform
import statistics

import baselines
import events
import judge
import labels
from scenarios import ROWS, PY, run

GOAL_EVENT_F1, GOAL_CONTROL, GOAL_CAUSE = 0.95, 1.0, 0.90
PREVALENCE = 1 / 6  # the paper's: about one anomalous sample in six
# Table I of the eACGM paper (arXiv 2506.02007), GMM's F1 in percent, and
# the row of ours each compares with (its CUDA row has none here: no GPU).
PAPER_F1 = {"torch": ("Torch", 72.6), "python": ("Python", 74.1), "host": ("Hardware", 58.7),
            "comm": ("NCCL", 80.8)}


def row_metrics(runs, seed):
    """Per method, everything the tables show for one row."""
    truth, score = judge.cut(runs, seed)
    faulted = [r for r in runs if not r.control]
    controls = [r for r in runs if r.control]
    out = {}
    for m in judge.METHODS:
        if isinstance(score[m], str):
            out[m] = score[m]
            continue
        t, v = [], []
        for r in faulted:
            rt, rv = labels.truth_and_verdicts(r.rows, r.flags[m])
            t += rt
            v += rv
        call = labels.scores(t, v)
        evs = [r.events(m) for r in faulted]
        cevs = [r.events(m) for r in controls if m in r.flags]
        fpr = call["fp"] / (call["fp"] + call["tn"]) if call["fp"] + call["tn"] else 0.0
        out[m] = {"call": call, "fpr": fpr, "auprc": baselines.auprc(truth, score[m]),
                  "event": events.event_scores(evs), "evs": evs,
                  "control": events.rate(cevs) if cevs else None,
                  "after": events.rate(evs, "after"), "clean": events.rate(evs, "clean"),
                  "ci": events.bootstrap(*events.units(evs, [events.call_counts(r, r.flags[m]) for r in faulted]),
                                         seed),
                  "matched_f1": matched_f1(call["recall"], fpr)}
    return out


def matched_f1(tpr, fpr, prevalence=PREVALENCE):
    """F1 with these per-call rates where one call in 1/prevalence is faulty."""
    p = tpr * prevalence / (tpr * prevalence + fpr * (1 - prevalence)) if tpr + fpr else 0.0
    return events.f1(p, tpr)


def ci(c, key):
    return "[%.3f, %.3f]" % c[key] if c else "-"


def summary(metrics, causes):
    """The issue's bar per row, met or not, with the numbers."""
    out = ["| Row | event F1 [95% CI] | alerts / 1,000 control steps | AUPRC: eacgm / best unsupervised | "
           "root cause right | per-call F1 [95% CI] | all met |", "|---|---|---|---|---|---|---|"]
    notes = []
    for row, ms in metrics.items():
        e = ms["eacgm"]
        best = max(baselines.UNSUPERVISED, key=lambda m: ms[m]["auprc"] if isinstance(ms[m], dict) else -1)
        ctl = e["control"]
        right, found = causes.get(row, (0, 0))
        share = right / found if found else 0.0
        met = {"event F1 >= 0.95": e["event"]["f1"] >= GOAL_EVENT_F1,
               "<= 1 alert / 1,000 control steps": ctl is not None and ctl[2] <= GOAL_CONTROL,
               "AUPRC >= every unsupervised baseline's": all(
                   e["auprc"] >= ms[m]["auprc"] for m in baselines.UNSUPERVISED if isinstance(ms[m], dict)),
               "root cause >= 90%": share >= GOAL_CAUSE}
        out.append("| %s | %.3f %s | %s | %.3f / %.3f (%s) | %d of %d (%.0f%%) | %.3f %s | %s |" % (
            ROWS[row][0], e["event"]["f1"], ci(e["ci"], "event_f1"),
            "%.1f (%d in %d)" % (ctl[2], ctl[0], ctl[1]) if ctl else "no control run", e["auprc"],
            ms[best]["auprc"], best, right, found, 100 * share, e["call"]["f1"], ci(e["ci"], "call_f1"),
            "yes" if all(met.values()) else "**no**"))
        missed = [k for k, ok in met.items() if not ok]
        if missed:
            notes.append("- %s falls short of: %s." % (ROWS[row][0], "; ".join(missed)))
    if notes:
        notes.append("- What the control runs' false alarms are, measured: docs/evaluation.md, "
                     "\"What the control runs' false alarms are\".")
    return out, notes


CUTS = (0, 2, 5, 10, 20)  # the slowdowns operating_points() keeps eacgm's flags at (0: every flag)


def slowdowns(run):
    """Per row of a run, how many times its function's median it took: its
    duration's, or its gap's for a flag told for its gap (a stall)."""
    gap_at = run.feats.index("log_gap") if "log_gap" in run.feats else None
    dur, gap = collections.defaultdict(list), collections.defaultdict(list)
    for r in run.rows:
        if not r["warmup"]:
            dur[r["key"]].append(r["dur"])
            if gap_at is not None and not math.isnan(r["x"][gap_at]):
                gap[r["key"]].append(r["x"][gap_at])
    med_dur = {k: statistics.median(v) for k, v in dur.items()}
    med_gap = {k: statistics.median(v) for k, v in gap.items()}
    out = []
    for r in run.rows:
        if r["fault"] == "stall" and r["key"] in med_gap and not math.isnan(r["x"][gap_at]):
            out.append(math.exp(r["x"][gap_at] - med_gap[r["key"]]))
        else:
            out.append(r["dur"] / med_dur[r["key"]] if med_dur.get(r["key"]) else 1.0)
    return out


def operating_points(by_row):
    """eacgm's flags kept only where the call took CUTS times its function's
    median or more (much as `detect --min-slowdown` would cut them, which
    measures against the call's own mode): per row and cut, faults found,
    event F1 and alerts per 1,000 control steps."""
    out = ["| Row | kept: slowed at least | faults found | event F1 | alerts / 1,000 control steps |",
           "|---|---|---|---|---|"]
    for row, runs in by_row.items():
        if all(r.control for r in runs):
            continue
        slow = {id(r): slowdowns(r) for r in runs}
        for cut in CUTS:
            def events_of(r):
                return events.run_events(r, [f and x >= cut for f, x in zip(r.flags["eacgm"], slow[id(r)])])
            e = events.event_scores([events_of(r) for r in runs if not r.control])
            ctl = events.rate([events_of(r) for r in runs if r.control])
            out.append("| %s | %s | %d of %d | %.3f | %.1f (%d in %d) |" % (
                ROWS[row][0], "%gx" % cut if cut else "every flag", e["found"], e["faults"], e["f1"], ctl[2], ctl[0], ctl[1]))
    return out


def per_call(metrics):
    out = ["| Row | Method | Precision | Recall | F1 | false-alarm rate | AUPRC | calls (faulty) |",
           "|---|---|---|---|---|---|---|---|"]
    for row, ms in metrics.items():
        for m in judge.METHODS:
            v = ms[m]
            if isinstance(v, str):
                out.append("| %s | %s | %s | | | | | |" % (ROWS[row][0], m, v))
                continue
            c = v["call"]
            out.append("| %s | %s%s | %.3f | %.3f | **%.3f** | %.1e | %.3f | %d (%d) |" % (
                ROWS[row][0], m, " (supervised)" if m in baselines.SUPERVISED else "", c["precision"], c["recall"],
                c["f1"], v["fpr"], v["auprc"], c["tp"] + c["fn"] + c["fp"] + c["tn"], c["tp"] + c["fn"]))
    return out


def per_event(metrics):
    out = ["| Row | Method | faults found | recall | alerts true / false | precision | event F1 [95% CI] | "
           "not scored: alerts (flags) inside episodes |", "|---|---|---|---|---|---|---|---|"]
    for row, ms in metrics.items():
        for m in judge.METHODS:
            v = ms[m]
            if isinstance(v, str):
                continue
            e = v["event"]
            out.append("| %s | %s | %d of %d | %.3f | %d / %d | %.3f | **%.3f** %s | %d (%d) |" % (
                ROWS[row][0], m, e["found"], e["faults"], e["recall"], e["true"], e["false"], e["precision"],
                e["f1"], ci(v["ci"], "event_f1"), e["unscored"], e["inside_flags"]))
    return out


def false_alarms(metrics):
    def cell(r):
        return "%.1f (%d in %d)" % (r[2], r[0], r[1]) if r and r[1] else "-"
    out = ["| Row | Method | control runs | after a fault (%d steps) | other steps of faulted runs |" % events.AFTER,
           "|---|---|---|---|---|"]
    for row, ms in metrics.items():
        for m in ("eacgm",) + baselines.UNSUPERVISED:
            v = ms[m]
            if isinstance(v, dict):
                out.append("| %s | %s | %s | %s | %s |" % (ROWS[row][0], m, cell(v["control"]), cell(v["after"]),
                                                          cell(v["clean"])))
    return out


def runs_table(all_runs):
    """Per recording: its steps, time, the VM's steal, eacgm's per-call and alert counts."""
    out = ["| run | seed | row | steps | faults injected | recorded in | steal | eacgm TP / FP / FN | "
           "eacgm alerts true / false |", "|---|---|---|---|---|---|---|---|---|"]
    for r in all_runs:
        if "eacgm" not in r.flags:  # a control run of a row no faulted run was judged on
            continue
        s = labels.scores(*labels.truth_and_verdicts(r.rows, r.flags["eacgm"]))
        ev = r.events("eacgm")
        out.append("| %s | %d | %s | %d | %s | %.0f s | %.2f%% | %d / %d / %d | %d / %d |" % (
            r.name, r.seed, ROWS[r.row][0], r.steps.count, "`%s`" % " ".join(r.rec["faults"]) if r.rec["faults"]
            else "none (control)", r.rec["secs"], 100 * r.rec["steal"], s["tp"], s["fp"], s["fn"],
            ev["alerts"]["true"], ev["alerts"]["false"]))
    return out


def named_causes(runs):
    """Per fault of eacgm's faulted runs: (row, kind, found, named class),
    the class its earliest flagged call of the fault named."""
    out = []
    for r in runs:
        if r.control:
            continue
        first = {}
        for row, flag in zip(r.rows, r.flags["eacgm"]):
            kind, f = events.flag_class(row) if flag else (None, None)
            if kind == "hit" and (f not in first or row["start"] < first[f]["start"]):
                first[f] = row
        for i, f in enumerate(r.faults):
            out.append((r.row, f["fault"], i in first, first[i]["fault"] if i in first else None))
    return out


def causes_table(named):
    out = ["| fault | expected | injected | found | named right | named |", "|---|---|---|---|---|---|"]
    by = collections.defaultdict(list)
    for row, kind, found, name in named:
        by[kind].append((found, name))
    for kind, v in by.items():
        found = [n for ok, n in v if ok]
        right = sum(1 for n in found if n == labels.EXPECTED[kind])
        names = collections.Counter(found)
        out.append("| %s | %s | %d | %d | %d (%s) | %s |" % (
            kind, labels.EXPECTED[kind], len(v), len(found), right,
            "%.0f%%" % (100 * right / len(found)) if found else "-",
            ", ".join("%s %d" % kv for kv in names.most_common())))
    return out


def causes_by_row(named):
    out = {}
    for row, kind, found, name in named:
        right, n = out.get(row, (0, 0))
        if found:
            out[row] = (right + (name == labels.EXPECTED[kind]), n + 1)
    return out


def latency(runs):
    """Per row: from each fault's onset to eacgm's first flag on it, offline
    (when the flagged call ended: the earliest a judge after the fact could
    know) and live (when `eacgm record`'s detector flagged it)."""
    out = ["| Row | faults | found offline | median / max offline | flagged live | median / max live |",
           "|---|---|---|---|---|---|"]
    by = collections.defaultdict(lambda: {"n": 0, "off": [], "live": []})
    for r in runs:
        if r.control:
            continue
        online = judge.online_flags(r.rec["db"])
        ev = r.events("eacgm")
        d = by[r.row]
        d["n"] += len(r.faults)
        for i, f in enumerate(r.faults):
            if i in ev["found"]:
                d["off"].append(ev["found"][i] - f["t0"])
            live = [online[k] for k in ((row["pid"], row["tid"], row["start"]) for row in r.rows
                                        if events.flag_class(row) == ("hit", i)) if k in online]
            if live:
                d["live"].append(min(live) - f["t0"])

    def ms(v):
        return "%.0f / %.0f ms" % (statistics.median(v) / 1e6, max(v) / 1e6) if v else "-"
    for row, d in by.items():
        out.append("| %s | %d | %d | %s | %d | %s |" % (ROWS[row][0], d["n"], len(d["off"]), ms(d["off"]),
                                                      len(d["live"]), ms(d["live"])))
    return out


def paper(metrics):
    out = ["| Row (paper's) | paper's GMM F1 | eacgm per-call F1, prevalence-matched | eacgm per-call F1, as measured "
           "(prevalence) |", "|---|---|---|---|"]
    for row, ms in metrics.items():
        e = ms["eacgm"]
        c = e["call"]
        n = c["tp"] + c["fn"] + c["fp"] + c["tn"]
        name, f1 = PAPER_F1[row]
        out.append("| %s (%s) | %.1f | %.1f | %.1f (1 in %.0f) |" % (
            ROWS[row][0], name, f1, 100 * e["matched_f1"], 100 * c["f1"], n / max(1, c["tp"] + c["fn"])))
    return out


def machine(rev):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
    torch_v = run([PY, "-c", "import torch, torchvision; print(torch.__version__, torchvision.__version__)"])
    import sklearn
    return ("%s, %d CPUs, %.0f GiB; kernel %s; Python %s; torch/torchvision %s; scikit-learn %s; xgboost %s; "
            "eacgm at %s" % (cpu, os.cpu_count(), int(mem) / 2**20, platform.release(), platform.python_version(),
                             torch_v.stdout.strip(), sklearn.__version__,
                             baselines.xgboost.__version__ if baselines.xgboost else "absent", rev))
