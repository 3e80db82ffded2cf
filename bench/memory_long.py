#!/usr/bin/env python3
"""eacgm's memory over a long recording: the GPT workload of bench/workloads
trained under `eacgm record` (default layers) for SECONDS, eacgm's RSS and
peak RSS (VmRSS, VmHWM) read every 10 s. The targets ask RSS under 100 MB on
a long recording: what grows with the recording shows here, not in the
half-minute runs of train_cost.py.
Usage: bench/memory_long.py EACGM [SECONDS (120)]   (needs root)"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_cost as T  # noqa: E402  (the workloads and machine line)

eacgm = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 120
READY = re.compile(r"eacgm: recording \(")


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


def main():
    # More steps than the time allows: eacgm is stopped (SIGINT) at the end,
    # as an operator would stop a recording.
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "long.db")
        cmd = [eacgm, "record", "-o", db, "--", T.PYTHON, os.path.join(T.ROOT, "bench", "workloads", "gpt_train.py"),
               "1000000"]
        err = open(os.path.join(tmp, "stderr"), "w+")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        # Timed from eacgm's ready line (it writes it to stderr).
        t0 = None
        while t0 is None and proc.poll() is None:
            err.seek(0)
            if READY.search(err.read()):
                t0 = time.monotonic()
            else:
                time.sleep(0.05)
        if t0 is None:
            err.seek(0)
            sys.exit("memory_long: eacgm exited before it was ready:\n" + err.read())
        rows = []
        while time.monotonic() - t0 < seconds:
            time.sleep(10 - (time.monotonic() - t0) % 10)
            mb = status_mb(proc.pid)
            if mb is None:
                break
            rows.append((time.monotonic() - t0, mb["VmRSS"], mb["VmHWM"]))
        proc.send_signal(2)
        proc.wait(timeout=120)
    print("machine: " + T.machine())
    print("eacgm record on the GPT workload for %.0f s (default layers): RSS every 10 s" % seconds)
    print("  %8s %10s %10s" % ("time", "RSS", "peak"))
    for t, rss, hwm in rows:
        print("  %6.0f s %7.0f MB %7.0f MB" % (t, rss, hwm))
    if rows:
        first = next((r for r in rows if r[0] >= 20), rows[0])
        print("peak %.0f MB (target < 100); from %.0f s to the end RSS went %.0f -> %.0f MB" %
              (max(r[2] for r in rows), first[0], first[1], rows[-1][1]))


if __name__ == "__main__":
    main()
