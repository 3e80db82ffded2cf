#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What shipping to ClickHouse costs the agent: eacgm record attached (-p,
default layers) to a training workload that runs throughout, without and
with --clickhouse (a clickhouse-server of this script's own on loopback), in
alternating rounds (A B A B ...), on torchvision's ResNet-18 and the small
GPT (bench/workloads).

Per round: the workload started and left to reach its steps (its step log:
its own signal), eacgm attached (its ready file), SETTLE_S seconds for the
overhead budget to act (it decides from 10 s), then eacgm's CPU (user +
system, /proc/PID/stat) over WINDOW_S seconds, then SIGINT. With the sink:
the spans it shipped and the bytes on the wire (its last line), rows per
second over the time attached, and ClickHouse's bytes on disk per row
(system.parts, the active parts of the round's table).

Printed per workload: each round, then the median CPU of each configuration
(% of one core), the extra CPU the sink costs (median of the per-round
differences B - A, rounds paired in order), rows per second, wire and disk
bytes per span, and per table its rows and bytes on disk a second (what
each of serve's `spans` choices ships: the small tables always, spans as
chosen). Usage: bench/clickhouse_cost.py EACGM [ROUNDS (3)]
[--only resnet18|gpt] [--settle-s 12] [--window-s 20]   (needs root)"""
import argparse
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
from test_clickhouse import ClickHouse  # noqa: E402  (the tests' server, on loopback)
from train_cost import cpu_s  # noqa: E402

PYTHON = "/usr/bin/python3"
WORKLOADS = {"resnet18": os.path.join(HERE, "workloads", "resnet18_train.py"),
             "gpt": os.path.join(HERE, "workloads", "gpt_train.py")}
SHIPPED = re.compile(r"clickhouse: (\d+) spans(?: and \d+ more rows \([^)]*\))? shipped to \S+ \((\S+ \S+) sent(?:, ([\d.]+) B a row)?\)")


def wait_for(what, check, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("%s never came (exit %s)" % (what, proc.poll()))
        time.sleep(0.05)


def one_round(args, eacgm, workload, tmp, ch, rnd, sink):
    steps = os.path.join(tmp, "steps.log")
    open(steps, "w").close()
    work = subprocess.Popen([PYTHON, WORKLOADS[workload], "1000000", "--step-log", steps],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("the workload's first step", lambda: os.path.getsize(steps) > 0, work)
        db, ready = os.path.join(tmp, "r.db"), os.path.join(tmp, "r.ready")
        for f in (db, ready):
            if os.path.exists(f):
                os.unlink(f)
        table = "cost_%s_%d" % (workload, rnd)
        extra = ["--clickhouse", ch.url(table)] if sink else []
        err_path = os.path.join(tmp, "eacgm.err")
        with open(err_path, "w") as err:
            rec = subprocess.Popen([eacgm, "record", "-o", db, "--perfetto", os.path.join(tmp, "r.pftrace"),
                                    "--ready-file", ready, "-p", str(work.pid), *extra],
                                   stdout=subprocess.DEVNULL, stderr=err)
        wait_for("eacgm's ready file", lambda: os.path.exists(ready), rec)
        attached = time.monotonic()
        time.sleep(args.settle_s)
        c0 = cpu_s(rec.pid)
        time.sleep(args.window_s)
        cpu = (cpu_s(rec.pid) - c0) / args.window_s * 100
        rec.send_signal(signal.SIGINT)
        rec.wait(timeout=120)
        attached = time.monotonic() - attached
        out = {"cpu": cpu}
        if sink:
            text = open(err_path).read()
            m = SHIPPED.search(text)
            if not m:
                raise SystemExit("no shipped line from eacgm: " + text[-2000:])
            out["rows"] = int(m.group(1))
            out["rows_s"] = out["rows"] / attached
            out["wire"] = float(m.group(3) or 0)
            disk = ch.query("SELECT sum(bytes_on_disk), sum(rows) FROM system.parts WHERE active AND "
                            "database = '%s' AND table = 'spans'" % table)[0]
            out["disk"] = int(disk[0]) / max(1, int(disk[1]))
            # Every table's rows a second and bytes on disk a second: what
            # each `spans` choice of serve costs (docs/clickhouse.md).
            out["tables"] = {}
            for name, rows, size in ch.query("SELECT table, sum(rows), sum(bytes_on_disk) FROM system.parts WHERE "
                                             "active AND database = '%s' GROUP BY table" % table):
                out["tables"][name] = (int(rows) / attached, int(size) / attached)
        return out
    finally:
        work.kill()
        work.wait()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("eacgm")
    p.add_argument("rounds", type=int, nargs="?", default=3)
    p.add_argument("--only", choices=sorted(WORKLOADS))
    p.add_argument("--settle-s", type=float, default=12)
    p.add_argument("--window-s", type=float, default=20)
    args = p.parse_args()
    cpu = open("/proc/cpuinfo").read()
    model = re.search(r"model name\s*: (.*)", cpu).group(1)
    print("machine: %s, %d CPUs, kernel %s; %d rounds, settle %g s, window %g s" %
          (model, os.cpu_count(), platform.release(), args.rounds, args.settle_s, args.window_s))
    with tempfile.TemporaryDirectory(prefix="eacgm-chcost-") as tmp:
        ch = ClickHouse(os.path.join(tmp, "ch"))
        try:
            for workload in ([args.only] if args.only else sorted(WORKLOADS)):
                runs = {False: [], True: []}
                for rnd in range(args.rounds):
                    for sink in (False, True):
                        r = one_round(args, args.eacgm, workload, tmp, ch, rnd, sink)
                        runs[sink].append(r)
                        print("  %s round %d %-14s eacgm %.2f%% of a core%s" % (
                            workload, rnd + 1, "--clickhouse" if sink else "store only", r["cpu"],
                            ", %d spans, %.0f rows/s, %.1f B a row on the wire, %.1f on disk" % (
                                r["rows"], r["rows_s"], r["wire"], r["disk"]) if sink else ""), flush=True)
                med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
                for name in sorted(runs[True][0]["tables"]):
                    got = [r["tables"].get(name, (0, 0)) for r in runs[True]]
                    print("  %s table %-10s %8.1f rows/s, %8.0f B/s on disk (medians)" % (
                        workload, name, statistics.median(g[0] for g in got), statistics.median(g[1] for g in got)))
                extra = statistics.median(b["cpu"] - a["cpu"] for a, b in zip(runs[False], runs[True]))
                print("%s: eacgm %.2f%% of a core store only, %.2f%% with --clickhouse: the sink %+.2f%% "
                      "(median of the rounds' differences); %.0f rows/s, %.1f B a row on the wire, "
                      "%.1f on ClickHouse's disk" % (workload, med(runs[False], "cpu"), med(runs[True], "cpu"),
                                                     extra, med(runs[True], "rows_s"), med(runs[True], "wire"),
                                                     med(runs[True], "disk")), flush=True)
        finally:
            ch.kill()


if __name__ == "__main__":
    main()
