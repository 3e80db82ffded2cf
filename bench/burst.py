#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Burst: one thread calling a traced function as fast as it can, every call
to be recorded (--overhead-budget 0), for SECONDS. The workload is
tests/testprogs' testlib_calls noop: tl_noop(i), traced with its argument, in
a loop with no pause, stopped after SECONDS by the program itself, which
prints how many calls it made. eacgm records it with the cuda and host
layers (the cuda layer has nothing to trace here: its probes cost nothing).

Printed (markdown): the calls the program made and their rate, the spans
stored and the records lost (by reason), eacgm's own CPU while attached
(meta agent_cpu_attached_s over attached_s) and its peak RSS (meta
agent_max_rss_kb), the recording's bytes a span (the file, WAL included,
over SELECT count(*) FROM spans) and the trace's. The issue's target (issue
37): nothing lost, eacgm under half a core, RSS <= 100 MB, <= 40 bytes a span.

Usage: bench/burst.py BUILD_DIR [SECONDS (60)]   (needs root)"""
import os
import re
import sqlite3
import subprocess
import sys
import tempfile

SPEC = ('{"layer": "testlib", "library": "libeacgm_testlib*.so", "probes": '
        '[{"function": "tl_noop", "args": [{"name": "x", "slot": 0, "type": "i64"}]}]}')


def machine():
    with open("/proc/cpuinfo") as f:
        model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    return "%s, %d CPUs, Linux %s" % (model, os.cpu_count(), os.uname().release)


def run(build, seconds, tmp):
    spec = os.path.join(tmp, "spec.json")
    with open(spec, "w") as f:
        f.write(SPEC)
    db = os.path.join(tmp, "burst.db")
    p = subprocess.run([os.path.join(build, "eacgm"), "record", "-o", db, "--layers", "cuda,host", "--spec", spec,
                        "--overhead-budget", "0", "--no-detect", "--",
                        os.path.join(build, "tests", "testprogs", "testlib_calls"), "noop", str(10 ** 12)],
                       capture_output=True, text=True, env=dict(os.environ, STOP_AFTER_S=str(seconds)))
    if p.returncode != 0:
        sys.exit("burst: eacgm record exited %d:\n%s" % (p.returncode, p.stderr[-3000:]))
    calls = int(re.search(r"^calls (\d+)$", p.stdout, re.M).group(1))
    con = sqlite3.connect(db)
    con.enable_load_extension(True)
    con.load_extension(os.path.join(build, "eacgm_sql.so"))  # spans' module (docs/store.md)
    spans = con.execute("SELECT count(*) FROM spans").fetchone()[0]
    drops = con.execute("SELECT layer, reason, count FROM drops WHERE count > 0").fetchall()
    meta = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    size = sum(os.path.getsize(db + s) for s in ("", "-wal") if os.path.exists(db + s))
    trace = os.path.getsize(os.path.join(tmp, "burst.pftrace"))  # record's default: the native trace
    return calls, spans, drops, meta, size, trace


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60
    with tempfile.TemporaryDirectory() as tmp:
        calls, spans, drops, meta, size, trace = run(build, seconds, tmp)
    cpu = 100 * float(meta["agent_cpu_attached_s"]) / float(meta["attached_s"])
    rss = int(meta["agent_max_rss_kb"]) / 1024
    lost = sum(n for _, _, n in drops)
    # run_all.sh gives the section its heading; alone, this is the first line.
    print("Burst: one thread calling a traced function as fast as it can, %.0f s" % seconds)
    print()
    print("Written by `bench/burst.py` on %s, at commit %s." % (machine(), subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()))
    print()
    print("| calls made | calls/s | spans stored | lost | eacgm CPU | peak RSS | bytes a span | trace bytes a span |")
    print("|---|---|---|---|---|---|---|---|")
    print("| %d | %.0f | %d | %d%s | %.1f%% of a core | %.0f MB | %.1f | %.0f |" % (
        calls, calls / seconds, spans, lost, (" (" + ", ".join("%s %s %d" % d for d in drops) + ")") if drops else "",
        cpu, rss, size / max(spans, 1), trace / max(spans, 1)))
    ok = lost == 0 and spans == calls and cpu < 50 and rss <= 100 and size / max(spans, 1) <= 40
    print()
    print("targets (nothing lost, < half a core, RSS <= 100 MB, <= 40 bytes a span): %s" % ("met" if ok else "missed"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
