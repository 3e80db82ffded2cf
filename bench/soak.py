#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Soak: eacgm record held for a long time at a high event rate. Run by hand,
not by `make test` or `make bench`, since it takes half an hour.

The workload is tests/testprogs' testlib_calls, calling tl_noop (traced with
its argument) in a loop paced to about 8,000 calls a second, for SECONDS,
with the host layer on. It uses --overhead-budget 0, so that every call must
be recorded. Every 60 s the script reads eacgm's RSS (VmRSS) and CPU (user
and system). At the end it checks three things:
  - no loss: the spans recorded equal the calls the workload counted, and
    every drop counter is 0;
  - memory flat: RSS from the end of the first 2 minutes to the end grows
    by less than BOUND_MB;
  - CPU stable: eacgm's CPU per minute, after the first 2 minutes.
The result (a markdown section) is written to bench/SOAK.md and put into
bench/RESULTS.md, replacing the soak section there; bench/run_all.sh
carries it into the next RESULTS.md.

Usage: bench/soak.py BUILD_DIR [SECONDS (1800)]   (needs root)"""
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import train_cost as T  # noqa: E402  (cpu_s, wait_ready: shared with the benchmarks)
BOUND_MB = 10  # RSS growth allowed after the first 2 minutes
RATE_PACE_US = "20"  # about 8,000 calls a second on the 2-CPU VM
SPEC = ('{"layer": "testlib", "library": "libeacgm_testlib*.so", "probes": '
        '[{"function": "tl_noop", "args": [{"name": "x", "slot": 0, "type": "i64"}]}]}')


def rss_mb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return next((int(l.split()[1]) / 1024 for l in f if l.startswith("VmRSS:")), None)  # None: a zombie
    except OSError:
        return None


def machine():
    with open("/proc/cpuinfo") as f:
        model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 1048576
    return "%s, %d CPUs, %.1f GiB, Linux %s" % (model, os.cpu_count(), mem, os.uname().release)


def record(build, seconds, tmp):
    """Runs the recording; returns (calls made, samples [(t, rss, cpu s in the minute)], db)."""
    spec = os.path.join(tmp, "spec.json")
    with open(spec, "w") as f:
        f.write(SPEC)
    db = os.path.join(tmp, "soak.db")
    err = open(os.path.join(tmp, "stderr"), "w+")
    env = dict(os.environ, PACE_US=RATE_PACE_US, STOP_AFTER_S=str(seconds))
    proc = subprocess.Popen([os.path.join(build, "eacgm"), "record", "-o", db, "--layers", "cuda,host", "--spec",
                             spec, "--overhead-budget", "0", "--",
                             os.path.join(build, "tests", "testprogs", "testlib_calls"), "noop", str(10 ** 12)],
                            stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    t0 = T.wait_ready(proc, err, "soak")  # timed from eacgm's ready line
    samples, last = [], T.cpu_s(proc.pid)
    # While the workload runs: what follows (indexes, trace, summary) is the
    # finish, reported apart.
    while proc.poll() is None and time.monotonic() - t0 + 60 <= seconds + 1:
        time.sleep(max(0.0, 60 - (time.monotonic() - t0) % 60))
        rss, cpu = rss_mb(proc.pid), T.cpu_s(proc.pid)
        if rss is None or cpu is None:
            break
        samples.append((time.monotonic() - t0, rss, cpu - last))
        last = cpu
        print("soak: %5.0f s  RSS %6.1f MB  CPU %5.1f%% of a core" % (samples[-1][0], rss, 100 * samples[-1][2] / 60),
              file=sys.stderr)
    t_end = time.monotonic()
    out, _ = proc.communicate(timeout=3600)
    finish_s = time.monotonic() - max(t_end, t0 + seconds)
    err.seek(0)
    if proc.returncode != 0:
        sys.exit("soak: eacgm record exited %d:\n%s" % (proc.returncode, err.read()[-3000:]))
    calls = int(re.search(r"^calls (\d+)$", out, re.M).group(1))
    return calls, samples, db, finish_s


def report(build, seconds, calls, samples, db, finish_s):
    con = sqlite3.connect(db)
    con.enable_load_extension(True)
    con.load_extension(os.path.join(build, "eacgm_sql.so"))  # spans' module (docs/store.md)
    spans = con.execute("SELECT count(*) FROM spans").fetchone()[0]
    drops = con.execute("SELECT layer, reason, count FROM drops WHERE count > 0").fetchall()
    con.close()
    size_mb = os.path.getsize(db) / 1e6
    settled = [s for s in samples if s[0] >= 120] or samples  # a short trial run: all of them
    grow = settled[-1][1] - settled[0][1]
    cpu = sorted(100 * s[2] / 60 for s in settled)
    lines = ["## Soak: %.0f minutes at a high event rate" % (seconds / 60), "",
             "Written by `bench/soak.py` (by hand; not in `make bench`) on %s at commit %s." % (
                 time.strftime("%Y-%m-%d", time.gmtime()),
                 subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()),
             "", "```text", "machine: " + machine(),
             "eacgm record --layers cuda,host --overhead-budget 0 of testlib_calls noop (tl_noop traced with its "
             "argument), %.0f s" % seconds,
             "calls made %d (%.0f a second); spans recorded %d; drops %s" % (
                 calls, calls / seconds, spans, drops or "none"),
             "recording %.0f MB; after the workload's end, eacgm finished (indexes, trace, summary) in %.0f s" % (
                 size_mb, finish_s),
             "  %8s %10s %18s" % ("time", "RSS", "CPU, last minute")]
    for t, rss, c in samples:
        lines.append("  %6.0f s %7.1f MB %12.1f%% of a core" % (t, rss, 100 * c / 60))
    ok_loss = spans == calls and not drops
    ok_mem = grow < BOUND_MB
    lines += ["no loss: %s (%d of %d calls recorded)" % ("yes" if ok_loss else "NO", spans, calls),
              "memory: RSS from 2 min to the end went %.1f -> %.1f MB (%+.1f MB; bound %d MB): %s" % (
                  settled[0][1], settled[-1][1], grow, BOUND_MB, "flat" if ok_mem else "GREW"),
              "CPU after 2 min: median %.1f%% of a core per minute (%.1f..%.1f over %d minutes)" % (
                  statistics.median(cpu), cpu[0], cpu[-1], len(cpu)),
              "```", ""]
    return "\n".join(lines), ok_loss and ok_mem


def splice(results, section):
    """RESULTS.md with its soak section replaced (or added at the end)."""
    with open(results) as f:
        text = f.read()
    m = re.search(r"^## Soak:.*?(?=^## |\Z)", text, re.M | re.S)
    text = text[:m.start()] + section + text[m.end():] if m else text.rstrip("\n") + "\n\n" + section
    with open(results, "w") as f:
        f.write(text)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 1800
    with tempfile.TemporaryDirectory() as tmp:
        calls, samples, db, finish_s = record(build, seconds, tmp)
        section, ok = report(build, seconds, calls, samples, db, finish_s)
    with open(os.path.join(HERE, "SOAK.md"), "w") as f:
        f.write(section)
    splice(os.path.join(HERE, "RESULTS.md"), section)
    print(section)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
