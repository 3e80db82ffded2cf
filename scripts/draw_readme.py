#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Draws the README's two pictures from a recording made by `eacgm record`:

  timeline.png    one training step, rows per layer and rank: the Python
                  functions (first rank only) and torch operators of each
                  rank's main thread, nested as they called each other, its
                  gloo collectives and how many of its threads waited for a
                  CPU (the host layer).
  flamegraph.png  every full step of the recording on every rank, Python
                  functions and the torch operators they called, nested by
                  time (a span inside another on the same thread is its
                  child), each as wide as its total time.

Usage: draw_readme.py RECORDING OUTDIR [--eacgm PATH] [--label TEXT]

The recording is read through `eacgm sql` (so the `spans` view needs nothing
but the binary) and must hold the python and torch layers: `make pictures`
(scripts/pictures.sh) makes one. Steps are found from the optimizer: a step
ends when a Python function `<Class>.step` (AdamW.step, SGD.step) returns on
a process's main thread, and begins when the previous one returned, so the
first step of each process (its start unknown) is never drawn. The timeline
shows the step of median length on rank 0 (gloo's rank, else the first
process), the lower middle one of an even count. Drawn with Debian's
matplotlib (python3-matplotlib); run by /usr/bin/python3."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import zlib

import matplotlib

matplotlib.use("Agg")  # files only: no display on a build machine
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

# nn.Module's call dispatch sits between every module and the next: it says
# nothing a reader needs and would double the Python rows' depth.
FOLD = ("Module._call_impl", "Module._wrapped_call_impl")
# An optimizer's step, by qualified name; schedulers step too but are not the
# training step's end.
STEP = re.compile(r"^[A-Za-z_]\w*\.step$")
NOT_STEP = re.compile(r"LR|Scheduler")
# Drawn at this size (1200 x 500 px): small on disk, legible on GitHub.
SIZE, DPI = (12, 5), 100
LAYER_ORDER = {"python": 0, "torch": 1, "gloo": 2}
PALETTES = {
    "python": ["#4e79a7", "#6b9bd1", "#3f6f9f", "#86b0db", "#5a8ec4", "#2f5f8f"],
    "torch": ["#f28e2b", "#e8743b", "#f5a54a", "#dd6b20", "#f7b267", "#e0863a"],
    "gloo": ["#8e6bb8", "#a58bd0"],
}
HOST_COLOR = "#eaeef2"  # a light band: its text is the measure
INK = "#24292f"  # GitHub's text colour in light mode


class Problem(Exception):
    """A recording the pictures cannot be drawn from: what is missing and how to get it."""


def sql(eacgm, recording, query):
    try:
        p = subprocess.run([eacgm, "sql", "--format", "json", recording, query], capture_output=True, text=True)
    except FileNotFoundError:
        raise Problem("cannot run %r: give the eacgm binary with --eacgm PATH (make pictures passes build/eacgm)"
                      % eacgm)
    if p.returncode != 0:
        raise Problem("eacgm sql on %s failed (exit %d): %s" % (recording, p.returncode, p.stderr.strip()))
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


RECORD_HINT = ("record a training run with the python and torch layers, e.g. `eacgm record --layers "
               "python,torch,gloo,host --python-entries auto -- /usr/bin/python3 train.py` (make pictures does)")


def find_steps(eacgm, recording):
    """{pid: [(start_ns, end_ns, step number)]} of every process whose main
    thread ran an optimizer step; the step function's name."""
    calls = sql(eacgm, recording, "SELECT pid, tid, name, start_ns, dur_ns FROM spans "
                                  "WHERE layer = 'python' AND name LIKE '%.step'")
    names = {}
    for c in calls:
        if STEP.match(c["name"]) and not NOT_STEP.search(c["name"]) and c["pid"] == c["tid"]:
            names[c["name"]] = names.get(c["name"], 0) + 1
    if not names:
        have = sql(eacgm, recording, "SELECT count(*) AS n FROM spans WHERE layer = 'python'")[0]["n"]
        if not have:
            raise Problem("%s has no Python function spans: %s" % (recording, RECORD_HINT))
        raise Problem("%s has no optimizer step (a Python function <Class>.step, such as AdamW.step, on a "
                      "process's main thread), so no training step to draw: record a training loop that "
                      "calls optimizer.step(); %s" % (recording, RECORD_HINT))
    name = max(names, key=names.get)  # the function most calls were made to
    ends = {}
    for c in calls:
        if c["name"] == name and c["pid"] == c["tid"]:
            ends.setdefault(c["pid"], []).append(c["start_ns"] + c["dur_ns"])
    steps = {}
    for pid, e in ends.items():
        e.sort()
        # Step k+1 ends with the optimizer's k+1-th return (step 1's start is unknown).
        steps[pid] = [(a, b, k + 2) for k, (a, b) in enumerate(zip(e, e[1:]))]
    steps = {pid: s for pid, s in steps.items() if s}
    if not steps:
        raise Problem("%s holds a single optimizer step (%s) per process: a step is drawn from one %s's return "
                      "to the next, so record at least 3 training steps" % (recording, name, name))
    return steps, name


def ranks_of(eacgm, recording, pids):
    """{pid: how the pictures name it} in the order drawn: by rank, from the
    gloo collectives' args, then the processes without any by pid."""
    rows = sql(eacgm, recording, "SELECT pid, min(json_extract(args, '$.rank')) AS rank FROM spans "
                                 "WHERE layer = 'gloo' GROUP BY pid")
    known = {r["pid"]: r["rank"] for r in rows if r["rank"] is not None}
    order = sorted(pids, key=lambda p: (p not in known, known.get(p, 0), p))
    return {p: "rank %d" % known[p] if p in known else "pid %d" % p for p in order}


def load_spans(eacgm, recording, pids, start, end):
    """The python, torch and gloo spans of these processes that overlap
    [start, end); Python's folded frames left out."""
    rows = sql(eacgm, recording,
               "SELECT pid, tid, layer, name, start_ns, dur_ns, depth, bytes FROM spans "
               "WHERE layer IN ('python', 'torch', 'gloo') AND start_ns < %d AND start_ns + dur_ns > %d "
               "AND pid IN (%s)" % (end, start, ",".join(str(p) for p in pids)))
    return [r for r in rows if not (r["layer"] == "python" and r["name"] in FOLD)]


def nest(spans, lo, hi):
    """Clips spans to [lo, hi), drops those that cover all of it (the frames
    around every step: <module>, main) and nests the rest by time: a span that
    starts inside another is its child, clipped to its parent's end. Returns
    [(depth, start, end, span, path of names from the outermost)] in start
    order, and the names of the frames dropped for covering it all."""
    around, inside = [], []
    for s in spans:
        a, b = s["start_ns"], s["start_ns"] + s["dur_ns"]
        if a <= lo and b >= hi:
            around.append(s)
        elif b > a:
            inside.append((max(a, lo), min(b, hi), s))
    # Outer first: the earlier start; at the same start the layer that calls
    # (a Python function shares its edges with the torch operator it is made
    # of), then the outer Python frame by its depth in the stack (sampled
    # frames begin at the same sample as their callers and may end after
    # them), then the longer.
    inside.sort(key=lambda t: (t[0], LAYER_ORDER[t[2]["layer"]],
                               t[2]["depth"] if t[2]["layer"] == "python" else 0, -t[1]))
    out, stack = [], []
    for a, b, s in inside:
        while stack and stack[-1][1] <= a:
            stack.pop()
        if stack:
            b = min(b, stack[-1][1])
        path = (stack[-1][2] if stack else ()) + (label_of(s),)
        out.append((len(stack), a, b, s, path))
        stack.append((a, b, path))
    around.sort(key=lambda s: s["start_ns"])
    return out, [s["name"] for s in around]


def label_of(s):
    """A span's name as drawn: torch's without their namespace (aten::linear
    as linear, c10d::Work::wait as Work::wait), a nested Python function by
    its own name (the part after the last `<locals>`)."""
    name = s["name"]
    if s["layer"] == "torch":
        return name.split("::", 1)[-1]
    return name.split(".<locals>.")[-1]


def color_of(layer, name):
    pal = PALETTES[layer]
    return pal[zlib.crc32(name.encode()) % len(pal)]


def ink_on(color):
    """Text colour that reads on a bar of this colour."""
    r, g, b = matplotlib.colors.to_rgb(color)
    return INK if 0.299 * r + 0.587 * g + 0.114 * b > 0.6 else "white"


def fit(text, width_px, font_px):
    """text, or as much of it as fits in width_px with an ellipsis, or ''."""
    room = int(width_px / (0.6 * font_px)) - 1
    if room >= len(text):
        return text
    return text[:room - 1] + "…" if room >= 5 else ""


def lanes(intervals):
    """A lane per interval so that none overlaps another in its lane (gloo's
    two worker threads can run collectives at once)."""
    ends, out = [], []
    for a, b in intervals:
        for i, e in enumerate(ends):
            if e <= a:
                ends[i] = b
                out.append(i)
                break
        else:
            ends.append(b)
            out.append(len(ends) - 1)
    return out, max(1, len(ends))


def human_bytes(n):
    for unit, k in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= k:
            return "%.1f %s" % (n / k, unit)
    return "%d B" % n


def cpu_wait(eacgm, recording, pids, lo, hi):
    """pid -> [(start, end, threads waiting for a CPU on average)] from the
    host layer's sched_delay_ns, each sample covering the interval since the
    process's previous one."""
    rows = sql(eacgm, recording, "SELECT ts_ns, pid, value FROM metrics WHERE layer = 'host' AND "
                                 "name = 'sched_delay_ns' AND ts_ns > %d AND ts_ns < %d AND pid IN (%s)"
               % (lo - 2 * 10**9, hi + 2 * 10**9, ",".join(str(p) for p in pids)))
    out = {}
    last = {}
    for r in sorted(rows, key=lambda r: r["ts_ns"]):
        p, t = r["pid"], r["ts_ns"]
        if p in last and t > last[p]:
            a, b = max(last[p], lo), min(t, hi)
            if b > a:
                out.setdefault(p, []).append((a, b, r["value"] / (t - last[p])))
        last[p] = t
    return out


def draw_timeline(eacgm, recording, steps, ranks, step_name, label, path):
    first = next(iter(ranks))
    durs = [b - a for a, b, _ in steps[first]]
    median = statistics.median_low(durs)
    lo, hi, number = steps[first][durs.index(median)]
    pids = list(ranks)
    spans = load_spans(eacgm, recording, pids, lo, hi)
    waits = cpu_wait(eacgm, recording, pids, lo, hi)

    # Rows, top to bottom: (title, [(lane, start, end, layer, text)], lanes).
    # The first rank in full; the others' operators, collectives and CPU
    # wait, to set their collectives against their own work.
    groups, around = [], []
    for pid in pids:
        who = ranks[pid]
        main = [s for s in spans if s["tid"] == pid]
        for layer in ("python", "torch") if pid == first else ("torch",):
            # Each layer nested on its own: a torch operator's row counts the operators above it.
            levels, outer = nest([s for s in main if s["layer"] == layer], lo, hi)
            if layer == "python":
                around = outer
            bars = [(d, a, b, layer, label_of(s)) for d, a, b, s, _ in levels]
            if bars:
                what = "Python functions" if layer == "python" else "torch operators"
                groups.append(("%s  %s" % (who, what), bars, 1 + max(b[0] for b in bars)))
        gloo = sorted((s for s in spans if s["layer"] == "gloo" and s["pid"] == pid), key=lambda s: s["start_ns"])
        if gloo:
            iv = [(max(s["start_ns"], lo), min(s["start_ns"] + s["dur_ns"], hi)) for s in gloo]
            which, n = lanes(iv)
            bars = [(w, a, b, "gloo", "%s %s" % (s["name"], human_bytes(s["bytes"])) if s["bytes"] else s["name"])
                    for w, (a, b), s in zip(which, iv, gloo)]
            groups.append(("%s  gloo collectives" % who, bars, n))
        if waits.get(pid):
            groups.append(("%s  host: CPU wait" % who, [(0, a, b, "host", v) for a, b, v in waits[pid]], 1))
    if not any(g[0].endswith("torch operators") for g in groups):
        raise Problem("%s has no torch operator spans in step %d: record with the torch layer; %s"
                      % (recording, number, RECORD_HINT))

    fig = plt.figure(figsize=SIZE, dpi=DPI)
    left, right, bottom, top = 0.135, 0.985, 0.1, 0.84
    ax = fig.add_axes([left, bottom, right - left, top - bottom])
    gap = 0.4
    total = sum(g[2] for g in groups) + gap * (len(groups) - 1)
    ax.set_ylim(total, 0)
    span_ms = (hi - lo) / 1e6
    ax.set_xlim(0, span_ms)
    px_per_ms = (right - left) * SIZE[0] * DPI / span_ms
    lane_px = (top - bottom) * SIZE[1] * DPI / total
    font = min(7.5, 0.62 * lane_px)
    font_px = font * DPI / 72
    y = 0
    ticks, names = [], []
    for title, bars, n in groups:
        ticks.append(y + n / 2)
        names.append(title)
        # Where the bars of the same lane before and after each one end and
        # start: a narrow collective's label goes beside it where it fits.
        after, before, seen = {}, {}, {}
        for lane, a, *_ in sorted(bars, key=lambda t: -t[1]):
            after[(lane, a)] = seen.get(lane, hi)
            seen[lane] = a
        seen = {}
        for lane, a, b, *_ in sorted(bars, key=lambda t: t[1]):
            before[(lane, a)] = seen.get(lane, lo)
            seen[lane] = b
        for lane, a, b, layer, text in bars:
            x0, w = (a - lo) / 1e6, (b - a) / 1e6
            if layer == "host":
                # Each interval's average of threads runnable but not running, as text on a light band.
                ax.add_patch(Rectangle((x0, y + 0.1), w, 0.8, facecolor=HOST_COLOR, edgecolor="white", lw=1))
                for words in ("%.1f threads waiting for a CPU", "%.1f waiting"):
                    if w * px_per_ms > len(words) * 0.6 * font_px + 8:
                        ax.text(x0 + w / 2, y + 0.5, words % text, ha="center", va="center",
                                fontsize=font, color=INK, clip_on=True)
                        break
                continue
            color = color_of(layer, text)
            ax.add_patch(Rectangle((x0, y + lane + 0.05), w, 0.9, facecolor=color, edgecolor="white", lw=0.3))
            shown = fit(text, w * px_per_ms - 3, font_px)
            if shown:
                ax.text(x0 + 2 / px_per_ms, y + lane + 0.5, shown, ha="left", va="center", fontsize=font,
                        color=ink_on(color), clip_on=True)
            elif layer == "gloo":
                room = (len(text) * 0.6 * font_px + 6) / px_per_ms * 1e6  # ns the label takes
                if b + room < after[(lane, a)]:
                    ax.text(x0 + w + 3 / px_per_ms, y + lane + 0.5, text, ha="left", va="center",
                            fontsize=font, color=INK)
                elif a - room > before[(lane, a)]:
                    ax.text(x0 - 3 / px_per_ms, y + lane + 0.5, text, ha="right", va="center",
                            fontsize=font, color=INK)
        y += n + gap
        if y < total:
            ax.axhline(y - gap / 2, color="#d0d7de", lw=0.6)
    ax.set_yticks(ticks)
    ax.set_yticklabels(names, fontsize=8, color=INK)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=8, colors=INK)
    ax.set_xlabel("ms from the step's start", fontsize=8, color=INK)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    numbers = [s[2] for s in steps[first]]
    fig.text(left, 0.955, "One training step across the layers: %s" % label, fontsize=11, weight="bold", color=INK)
    fig.text(left, 0.895, "%s's step %d (%.0f ms), the median-length one of steps %d-%d; a step runs from one %s "
                          "return to the next.\nPython frames around every step (%s) not drawn. CPU wait: the "
                          "process's threads runnable but not running, on average (host layer)."
             % (ranks[first].capitalize(), number, span_ms, numbers[0], numbers[-1], step_name,
                " › ".join(around) if around else "none"),
             fontsize=7.5, color="#57606a", linespacing=1.5)
    fig.savefig(path, dpi=DPI, facecolor="white")
    plt.close(fig)
    return number


def draw_flamegraph(eacgm, recording, steps, ranks, label, path):
    pids = list(ranks)
    lo = min(s[0][0] for s in steps.values())
    hi = max(s[-1][1] for s in steps.values())
    spans = load_spans(eacgm, recording, pids, lo, hi)
    by_thread = {}
    for s in spans:
        if s["tid"] == s["pid"] and s["layer"] in ("python", "torch"):
            by_thread.setdefault(s["pid"], []).append(s)
    totals, layer_of = {}, {}
    whole = 0
    for pid in pids:
        mine = sorted(by_thread.get(pid, []), key=lambda s: s["start_ns"])
        for a, b, _ in steps[pid]:
            whole += b - a
            # The spans that overlap this step (a long one may start steps before it).
            nested, _ = nest([s for s in mine if s["start_ns"] < b and s["start_ns"] + s["dur_ns"] > a], a, b)
            for _, x, y, s, p in nested:
                totals[p] = totals.get(p, 0) + (y - x)
                layer_of[p] = s["layer"]
    if not any(l == "torch" for l in layer_of.values()):
        raise Problem("%s has no torch operator spans inside its steps: %s" % (recording, RECORD_HINT))

    children = {}
    for p in totals:
        children.setdefault(p[:-1], []).append(p)
    n_steps = sum(len(s) for s in steps.values())
    depth = max(len(p) for p in totals)
    fig = plt.figure(figsize=SIZE, dpi=DPI)
    left, right, bottom, top = 0.01, 0.99, 0.03, 0.86
    ax = fig.add_axes([left, bottom, right - left, top - bottom])
    ax.set_xlim(0, whole)
    ax.set_ylim(0, depth + 1)
    ax.axis("off")
    px = (right - left) * SIZE[0] * DPI / whole
    row_px = (top - bottom) * SIZE[1] * DPI / (depth + 1)
    font = min(8, 0.55 * row_px)
    ax.add_patch(Rectangle((0, 0.04), whole, 0.92, facecolor="#d0d7de", lw=0))
    ax.text(whole / 2, 0.5, "all %d steps of %d processes (their main threads): %.2f s"
            % (n_steps, len(pids), whole / 1e9), ha="center", va="center", fontsize=font, color=INK)

    def place(parent, x0, level):
        kids = sorted(children.get(parent, ()), key=lambda p: -totals[p])
        for p in kids:
            w = totals[p]
            color = color_of(layer_of[p], p[-1])
            ax.add_patch(Rectangle((x0, level + 0.04), w, 0.92, facecolor=color,
                                   edgecolor="white", lw=0.3))
            share = 100.0 * w / whole
            text = "%s %.0f%%" % (p[-1], share) if share >= 1 else p[-1]
            shown = fit(text, w * px - 4, font * DPI / 72)
            if not shown or (shown != text and share >= 1):
                shown = fit(p[-1], w * px - 4, font * DPI / 72)
            if shown:
                ax.text(x0 + 2 / px, level + 0.5, shown, ha="left", va="center", fontsize=font,
                        color=ink_on(color), clip_on=True)
            place(p, x0, level + 1)
            x0 += w
    place((), 0, 1)
    fig.text(0.01, 0.955, "Where a step's time goes: %s" % label, fontsize=11, weight="bold", color=INK)
    fig.text(0.01, 0.91, "Flame graph of every full step on every rank: Python functions (blue; nn.Module's "
                         "_call_impl folded) and the torch operators they called (orange), each as wide as its total "
                         "time; the root's uncovered part is time in no traced call.",
             fontsize=7.5, color="#57606a")
    fig.savefig(path, dpi=DPI, facecolor="white")
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("recording")
    p.add_argument("outdir")
    p.add_argument("--eacgm", default="eacgm",
                   help="the eacgm binary that reads the recording (default: eacgm on PATH)")
    p.add_argument("--label", help="what was recorded, for the titles (default: the recording's file name)")
    a = p.parse_args()
    label = a.label or os.path.basename(a.recording)
    try:
        if not os.path.isfile(a.recording):
            raise Problem("%s: no such recording: %s" % (a.recording, RECORD_HINT))
        steps, step_name = find_steps(a.eacgm, a.recording)
        ranks = ranks_of(a.eacgm, a.recording, list(steps))
        os.makedirs(a.outdir, exist_ok=True)
        number = draw_timeline(a.eacgm, a.recording, steps, ranks, step_name, label,
                               os.path.join(a.outdir, "timeline.png"))
        draw_flamegraph(a.eacgm, a.recording, steps, ranks, label, os.path.join(a.outdir, "flamegraph.png"))
        # Lost records leave holes the pictures cannot show (a Python frame
        # missing makes its torch operators look called from its caller).
        lost = sql(a.eacgm, a.recording, "SELECT layer, sum(count) AS n FROM drops "
                                         "WHERE reason = 'ring_buffer_full' AND count > 0 GROUP BY layer")
        if lost:
            print("draw_readme: note: the recording lost %s records to a full ring buffer; frames may be missing from "
                  "the pictures (record with a larger --ring-buffer-kb)"
                  % " and ".join("%d %s" % (r["n"], r["layer"]) for r in lost), file=sys.stderr)
    except Problem as e:
        print("draw_readme: %s" % e, file=sys.stderr)
        return 1
    print("draw_readme: step %d drawn; wrote %s and %s" % (number, os.path.join(a.outdir, "timeline.png"),
                                                          os.path.join(a.outdir, "flamegraph.png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
