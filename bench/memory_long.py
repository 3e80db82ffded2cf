#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""eacgm over a long recording: the GPT workload of bench/workloads trained
under `eacgm record` (default layers) for SECONDS, eacgm's RSS and peak RSS
(VmRSS, VmHWM) and its CPU (user and system, % of one core) read every 10 s.
The targets ask RSS under 100 MB on a long recording and eacgm under 2% of a
core while attached: what grows with the recording, and what its CPU
settles to once the overhead budget and the detector's first fits are
behind it, show here, not in the few seconds train_cost.py times.
Usage: bench/memory_long.py EACGM [SECONDS (120)]   (needs root)"""
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_cost as T  # noqa: E402  (the workloads and machine line)

eacgm = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 120


def status_mb(pid):
    """VmRSS and VmHWM of pid in MB, None once it is gone."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1]) / 1024
    except OSError:
        return None
    return out


def children(pid):
    """The pids of pid's children."""
    out = []
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def main():
    # More steps than the time allows: eacgm is stopped (SIGINT) at the end,
    # as an operator would stop a recording.
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "long.db")
        cmd = [eacgm, "record", "-o", db, "--", T.PYTHON, os.path.join(T.ROOT, "bench", "workloads", "gpt_train.py"),
               "1000000"]
        err = open(os.path.join(tmp, "stderr"), "w+")
        # SIGINT as the default: started in the background by a shell
        # (`make bench &`), this script's children would ignore it, and the
        # workload, which eacgm passes it on to, would go on untraced.
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        t0 = T.wait_ready(proc, err, "memory_long")  # timed from eacgm's ready line
        rows = []
        cpu0 = T.cpu_s(proc.pid)
        while time.monotonic() - t0 < seconds:
            time.sleep(10 - (time.monotonic() - t0) % 10)
            mb, cpu = status_mb(proc.pid), T.cpu_s(proc.pid)
            if mb is None or cpu is None:
                break
            rows.append((time.monotonic() - t0, mb["VmRSS"], mb["VmHWM"], cpu - cpu0))
            cpu0 = cpu
        workload = children(proc.pid)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        for pid in workload:  # never left running to weigh on what is measured next
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    print("machine: " + T.machine(T.PYTHON, "cpu"))
    print("eacgm record on the GPT workload for %.0f s (default layers): every 10 s" % seconds)
    print("  %8s %10s %10s %18s" % ("time", "RSS", "peak", "CPU, last 10 s"))
    for t, rss, hwm, cpu in rows:
        print("  %6.0f s %7.0f MB %7.0f MB %12.1f%% of a core" % (t, rss, hwm, 10 * cpu))
    if rows:
        first = next((r for r in rows if r[0] >= 20), rows[0])
        print("peak %.0f MB (target < 100); from %.0f s to the end RSS went %.0f -> %.0f MB" %
              (max(r[2] for r in rows), first[0], first[1], rows[-1][1]))
        late = sorted(10 * r[3] for r in rows if r[0] > 30)
        if late:
            print("eacgm's CPU after 30 s: median %.1f%% of a core over %d windows of 10 s (%.1f..%.1f; target 2)" %
                  (statistics.median(late), len(late), late[0], late[-1]))


if __name__ == "__main__":
    main()
