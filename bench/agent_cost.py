#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The node agent's own cost: `eacgm serve` (every layer, its defaults, a
store in a temporary directory) idle and while torchvision's ResNet-18
trains on the CPU (bench/workloads/resnet18_train.py), ROUNDS alternating
rounds of the workload untraced and with the agent attached (A B A B ...).

Idle: the agent's CPU (user + system, /proc/PID/stat) over IDLE_S seconds
with no traced process, and its resident memory (VmRSS). Under load: its CPU
from the workload's "timing" line to its median line (the timed steps), as
a share of one core, and its RSS at the end; the step ratio is the median
step with the agent over the median step untraced, of the same round.
Usage: bench/agent_cost.py EACGM [ROUNDS (3)] [STEPS (20)] [IDLE_S (20)]   (needs root)"""
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

eacgm = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
idle_s = float(sys.argv[4]) if len(sys.argv) > 4 else 20
here = os.path.dirname(os.path.abspath(__file__))
RESNET = os.path.join(here, "workloads", "resnet18_train.py")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        return [int(l.split()[1]) for l in f if l.startswith("VmRSS:")][0] / 1024


def start_agent(tmp):
    ready = os.path.join(tmp, "ready.json")
    cfg = os.path.join(tmp, "eacgm.toml")
    with open(cfg, "w") as f:
        f.write('store = "%s"\n' % os.path.join(tmp, "agent.db"))
    p = subprocess.Popen([eacgm, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--ready-file", ready],
                         stderr=subprocess.DEVNULL)
    while not os.path.exists(ready):  # the agent's own signal that it serves
        if p.poll() is not None:
            sys.exit("eacgm serve exited (%d) before serving" % p.returncode)
        time.sleep(0.01)
    return p


def workload(agent=None):
    """Median step (us) and, with the agent, its CPU share and RSS over the timed steps."""
    w = subprocess.Popen(["/usr/bin/python3", RESNET, str(steps)], stdout=subprocess.PIPE, text=True)
    t0 = c0 = None
    for line in w.stdout:
        if line.startswith("timing") and agent:
            t0, c0 = time.monotonic(), cpu_s(agent.pid)
        if line.startswith("resnet18_train:"):
            median = float(line.split()[-2])
            share = (cpu_s(agent.pid) - c0) / (time.monotonic() - t0) if agent else None
            rss = rss_mb(agent.pid) if agent else None
    w.wait()
    return median, share, rss


def main():
    tmp = tempfile.mkdtemp(prefix="eacgm-agent-")
    agent = start_agent(tmp)
    time.sleep(2)  # past start-up: the steady idle state is what is measured
    c0, t0 = cpu_s(agent.pid), time.monotonic()
    rss_idle = []
    while time.monotonic() - t0 < idle_s:
        time.sleep(1)
        rss_idle.append(rss_mb(agent.pid))
    idle_share = (cpu_s(agent.pid) - c0) / (time.monotonic() - t0)
    print("idle:   agent CPU %.2f%% of a core over %.0f s, RSS %.1f MB (max %.1f)" %
          (100 * idle_share, idle_s, statistics.median(rss_idle), max(rss_idle)))
    agent.send_signal(signal.SIGTERM)
    agent.wait()

    ratios, shares, rsss = [], [], []
    for r in range(rounds):
        base, _, _ = workload()
        agent = start_agent(tmp)
        traced, share, rss = workload(agent)
        agent.send_signal(signal.SIGTERM)
        agent.wait()
        ratios.append(traced / base)
        shares.append(share)
        rsss.append(rss)
        print("round %d: untraced %.0f us/step, with the agent %.0f us/step (%.3fx); agent CPU %.2f%% of a core, "
              "RSS %.1f MB" % (r + 1, base, traced, traced / base, 100 * share, rss))
    print("ResNet-18 (%d steps x %d rounds): step ratio median %.3fx; agent CPU median %.2f%% of a core; "
          "RSS median %.1f MB" % (steps, rounds, statistics.median(ratios), 100 * statistics.median(shares),
                                  statistics.median(rsss)))


if __name__ == "__main__":
    main()
