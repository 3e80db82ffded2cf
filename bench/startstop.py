#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""eacgm's start and stop, median of ROUNDS:
  attach  `eacgm record -p PID` on a Python process that already runs and
          has imported torch (libtorch_cpu mapped: its symbols are read), from
          the command's start to its ready line (every probe in place);
  launch  `eacgm record -- /bin/true`, the whole command, wall time;
  exit    from the traced program's last instruction (it stamps
          CLOCK_MONOTONIC and exits) to eacgm's exit, summary written.
Usage: bench/startstop.py EACGM [ROUNDS (5)]   (needs root)"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

eacgm = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
READY = re.compile(r"eacgm: recording \(")
LAST = "import time,sys; sys.stdout.write('%d\\n' % time.clock_gettime_ns(time.CLOCK_MONOTONIC)); sys.stdout.flush()"


def attach(tmp):
    target = subprocess.Popen(["/usr/bin/python3", "-c", "import sys, torch; print('up', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    target.stdout.readline()  # torch imported
    t0 = time.monotonic()
    rec = subprocess.Popen([eacgm, "record", "-o", os.path.join(tmp, "a.db"), "-p", str(target.pid)],
                           stderr=subprocess.PIPE, text=True)
    for line in rec.stderr:
        if READY.search(line):
            break
    took = time.monotonic() - t0
    target.stdin.close()
    target.wait()
    rec.communicate()
    return took


def launch(tmp):
    t0 = time.monotonic()
    subprocess.run([eacgm, "record", "-o", os.path.join(tmp, "l.db"), "--", "/bin/true"], capture_output=True, check=True)
    return time.monotonic() - t0


def exit_latency(tmp):
    p = subprocess.run([eacgm, "record", "-o", os.path.join(tmp, "e.db"), "--", "/usr/bin/python3", "-c", LAST],
                       capture_output=True, text=True, check=True)
    done = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    return (done - int(p.stdout.split()[0])) / 1e9


with tempfile.TemporaryDirectory() as tmp:
    rows = []
    for name, f, target in (("attach to a running torch process (-p), to ready", attach, 0.3),
                            ("record -- /bin/true, whole", launch, None),
                            ("exit after the last traced process", exit_latency, 0.5)):
        xs = [f(tmp) for _ in range(rounds)]
        rows.append((name, statistics.median(xs), min(xs), max(xs), target))
print("start and stop (default layers, median of %d)" % rounds)
for name, med, lo, hi, target in rows:
    goal = "  (target < %.1f s)" % target if target else ""
    print("  %-44s %6.3f s  (%.3f..%.3f)%s" % (name, med, lo, hi, goal))
