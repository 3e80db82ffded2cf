# SPDX-License-Identifier: Apache-2.0
"""The host layer end to end (`eacgm record --layers host`), read back from the
recording's metrics table and held against what the traced program measured
itself (tests/testprogs/host_load.py prints it), so that the checks hold
however busy the machine is and a wrong eacgm still fails:

- a CPU-bound program pinned to one CPU, first with no competitor of the
  test's own and then next to a stress-ng worker pinned to the same CPU: its
  scheduling delay and involuntary switches agree with the kernel's own
  per-task figures (/proc/self/schedstat, /proc/self/status) taken at the
  start and end of its spin, and the time charged to the stress-ng worker
  agrees with the worker's own run time over the spin;
- a TCP transfer between two network namespaces over a veth pair, clean and
  then through `tc netem delay 20ms loss 2%` (or its user-space stand-in
  where the kernel has no netem): retransmits appear with the loss, exactly
  as many as the kernel counted; the smoothed RTT agrees with the sender's
  own readings of it (TCP_INFO) and, through the delay, never drops below it.
"""
import json
import os
import shutil
import statistics
import subprocess
import time
import unittest

import eacgm_e2e as E

LOAD = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "host_load.py")
PYTHON = "/usr/bin/python3"
INTERVAL_NS = 100_000_000  # --host-interval-ms, 100 by default (src/app/commands.h)
POLL_NS = 50_000_000  # record polls, then collects, every 50 ms at most (src/app/record.cpp)


def metrics(rec, name, pid=None):
    """(ts_ns, key, pid, value) rows of one metric of the host layer, by time."""
    sql = "SELECT ts_ns, key, pid, value FROM metrics WHERE layer = 'host' AND name = ?"
    params = [name]
    if pid is not None:
        sql += " AND pid = ?"
        params.append(pid)
    return rec.query(sql + " ORDER BY ts_ns", params)


def total(rec, name, pid=None, until=None):
    """A metric summed over the recording, or over the intervals ending by `until` (ns)."""
    return sum(r["value"] for r in metrics(rec, name, pid) if until is None or r["ts_ns"] <= until)


def root(rec):
    """The launched command's row of the processes table (pid, start_ns, end_ns...)."""
    return rec.query("SELECT * FROM processes ORDER BY start_ns, pid LIMIT 1")[0]


def root_pid(rec):
    return root(rec)["pid"]


def record_host(tmp, command, name):
    rec = E.record(tmp, command, "--layers", "host", name=name)
    if rec.rc != 0:
        raise AssertionError("eacgm record failed (%d): %s" % (rec.rc, rec.stderr))
    return rec


def report(rec):
    """What host_load.py measured itself: the JSON line it printed last."""
    lines = rec.stdout.strip().splitlines()
    if not lines:
        raise AssertionError("the program printed nothing: %r" % rec.stderr)
    return json.loads(lines[-1])


def delay_slack(ns):
    """How far eacgm's wait of a process may stray, one way, past a bound
    built from the kernel's own figure `ns`: 5 ms for the edges (a collect
    reads the clock, and may wait for a CPU, before it flips the interval,
    so an interval can hold a little past its time stamp), and 2% for
    anything that grows with the waits themselves (the kernel's schedstat
    runs on the scheduler's clock, eacgm on CLOCK_MONOTONIC; a wait starts
    at sched_wakeup for eacgm, a little after the enqueue for the kernel).
    A wrong eacgm is off by far more: half or double the wait, or none."""
    return 5e6 + 0.02 * ns


def switch_slack(n):
    """The same for a count of switches: a few at the edges, and 2%."""
    return 3 + 0.02 * n


def proc_stat(pid):
    """(state, ppid) of a process from /proc/PID/stat; None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the comm in parentheses may hold spaces
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], int(fields[1])


def running_child(parent, timeout=10.0):
    """The pid of `parent`'s child once it is running or runnable (state R):
    waits on that state, polling, rather than for a guessed time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in os.listdir("/proc"):
            st = proc_stat(int(name)) if name.isdigit() else None
            if st and st[1] == parent and st[0] == "R":
                return int(name)
        time.sleep(0.01)
    raise AssertionError("no child of %d running after %.0f s" % (parent, timeout))


class SchedulingDelay(unittest.TestCase):
    SECONDS = 2.0

    @classmethod
    def setUpClass(cls):
        E.require_root()
        if not shutil.which("stress-ng") or not shutil.which("taskset"):
            raise AssertionError("stress-ng and taskset are needed: run scripts/setup.sh")
        cls.tmp = E.make_tempdir(cls)
        spin = ["taskset", "-c", "0", PYTHON, LOAD, "spin", str(cls.SECONDS)]
        cls.quiet = record_host(cls.tmp, spin, "quiet")
        stress = subprocess.Popen(["stress-ng", "--cpu", "1", "--taskset", "0", "--timeout", "60s"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        cls.addClassCleanup(stress.wait)  # cleanups run last-in first-out: killed, then waited for
        cls.addClassCleanup(E.kill_group, stress.pid)
        cls.worker = running_child(stress.pid)  # the stressor, forked by stress-ng
        # The spinner reads the worker's figures too, at the same instants as its own.
        cls.busy = record_host(cls.tmp, spin + [str(cls.worker)], "busy")
        E.kill_group(stress.pid)

    # The spinner's wait and involuntary switches, against the kernel's
    # figures for it at t0 and t1 (read by the spinner itself). Both sides
    # count at the same scheduler points (a switch out while runnable, the
    # switch back in), so each bound is one-sided and exact but for the
    # slack: eacgm's intervals stamped by t1 hold no more than the kernel's
    # count at t1; the whole recording holds at least what the kernel
    # counted during the spin. Not all it counted by t1: eacgm can miss the
    # first waits of the process it launches (to be scheduled after the
    # fork, and after the gate opens, before the first switch it sees),
    # which grow with the load: 11 ms once on this project's busy 2-CPU VM.

    def check_delay(self, rec):
        me, k = report(rec), root(rec)
        t1, (at_t0, at_t1) = me["t1_ns"], me["self"]
        delay = at_t1["run_delay_ns"]
        spin_delay = delay - at_t0["run_delay_ns"]
        got = total(rec, "sched_delay_ns", k["pid"])
        by_t1 = total(rec, "sched_delay_ns", k["pid"], until=t1)
        what = "eacgm %.1f ms (%.1f ms by t1), kernel %.1f ms by t1 (%.1f ms during the spin)" % (
            got / 1e6, by_t1 / 1e6, delay / 1e6, spin_delay / 1e6)
        self.assertLessEqual(by_t1, delay + delay_slack(delay), what)
        self.assertGreaterEqual(got, spin_delay - delay_slack(spin_delay), what)
        # After t1 a task cannot wait longer than it has left to live.
        self.assertLessEqual(got, delay + (k["end_ns"] - t1) + delay_slack(delay), what)

    def check_switches(self, rec):
        me, pid = report(rec), root_pid(rec)
        at_t0, at_t1 = me["self"]
        n = at_t1["nonvoluntary_switches"]
        spin_n = n - at_t0["nonvoluntary_switches"]
        got = total(rec, "switches_involuntary", pid)
        by_t1 = total(rec, "switches_involuntary", pid, until=me["t1_ns"])
        what = "eacgm %d (%d by t1), kernel %d by t1 (%d during the spin)" % (got, by_t1, n, spin_n)
        self.assertLessEqual(by_t1, n + switch_slack(n), what)
        self.assertGreaterEqual(got, spin_n - switch_slack(spin_n), what)

    def test_delay_and_switches_agree_with_the_kernel(self):
        for name in ("quiet", "busy"):
            with self.subTest(name):
                self.check_delay(getattr(self, name))
                self.check_switches(getattr(self, name))

    def test_the_busy_run_waited_for_the_worker(self):
        # The scenario, by the kernel's account rather than by what a quiet
        # machine would give: the spinner waited a large share of its spin
        # (half, with the worker alone beside it), the worker ran a good
        # part of it.
        me = report(self.busy)
        wall = me["t1_ns"] - me["t0_ns"]
        waited = me["self"][1]["run_delay_ns"] - me["self"][0]["run_delay_ns"]
        w0, w1 = me["others"][str(self.worker)]
        ran = w1["on_cpu_ns"] - w0["on_cpu_ns"]
        self.assertGreater(waited, 0.3 * wall, "the spinner waited %.0f ms of %.0f" % (waited / 1e6, wall / 1e6))
        self.assertGreater(ran, 0.2 * wall, "the worker ran %.0f ms of %.0f" % (ran / 1e6, wall / 1e6))

    def test_the_worker_is_charged_its_run_time(self):
        me, k = report(self.busy), root(self.busy)
        by = {}
        for r in metrics(self.busy, "interference_ns", k["pid"]):
            by[r["key"]] = by.get(r["key"], 0) + r["value"]
        mine = [key for key in by if key.endswith(":%d" % self.worker)]
        self.assertEqual(len(mine), 1, "interferers: %r" % by)
        self.assertRegex(mine[0], r"^stress-ng[^:]*:\d+$")
        charged = by[mine[0]]
        # Both are pinned to CPU 0 and the spinner never blocks: whenever the
        # worker ran between the spinner's two readings, the spinner waited
        # for it, and eacgm charges the worker that overlap (by its clock,
        # which counts the interrupts the kernel's run time leaves out). Who
        # else shares the CPU does not matter. Outside the spin the worker
        # can be charged at most the wall time the spinner lived there.
        w0, w1 = me["others"][str(self.worker)]
        ran = w1["on_cpu_ns"] - w0["on_cpu_ns"]
        outside = (me["t0_ns"] - k["start_ns"]) + (k["end_ns"] - me["t1_ns"])
        what = "charged %.1f ms, the worker ran %.1f ms during the spin (%.1f ms outside it)" % (
            charged / 1e6, ran / 1e6, outside / 1e6)
        self.assertGreaterEqual(charged, ran - delay_slack(ran), what)
        self.assertLessEqual(charged, ran + outside + delay_slack(ran), what)
        # A wait is split among those who ran during it: never more than the wait.
        self.assertLessEqual(sum(by.values()), total(self.busy, "sched_delay_ns", k["pid"]), by)

    def test_one_sample_per_interval(self):
        k = root(self.busy)
        stamps = [r["ts_ns"] for r in metrics(self.busy, "sched_delay_ns", k["pid"])]
        self.assertGreater(len(stamps), 2, "intervals of the spinner")
        # An interval ends at the first collect at least --host-interval-ms
        # after the last one ended (src/layers/host.cpp), but for the last,
        # cut short when recording stops; collects follow each poll.
        gaps = [b - a for a, b in zip(stamps, stamps[1:])]
        self.assertGreaterEqual(min(gaps[:-1]), INTERVAL_NS, gaps)
        # So from the first interval's end to the exit, one interval per
        # 100 to 150 ms (one off for eacgm's own waits for a CPU).
        life = [t for t in stamps if t <= k["end_ns"]]
        span = k["end_ns"] - life[0]
        self.assertLessEqual(len(life), span / INTERVAL_NS + 1, gaps)
        self.assertGreaterEqual(len(life), span / (INTERVAL_NS + POLL_NS) - 1, gaps)
        # The machine is sampled at every interval's end.
        for name in ("psi_cpu_some_avg10_pct", "psi_cpu_some_stall_us", "host_layer_cpu_pct"):
            self.assertGreaterEqual(len(metrics(self.busy, name, 0)), len(stamps), name)

    def test_machine_metrics(self):
        # The spinner waiting on CPU 0 stalls that CPU; the machine's figure
        # is the CPUs' average weighted by busy time, CPU 0 busy throughout.
        me = report(self.busy)
        waited = me["self"][1]["run_delay_ns"] - me["self"][0]["run_delay_ns"]
        stall = metrics(self.busy, "psi_cpu_some_stall_us", 0)
        self.assertGreaterEqual(sum(r["value"] for r in stall) * 1e3, waited / os.cpu_count() - delay_slack(waited))
        # ...and the machine cannot stall longer than the intervals lasted
        # (the first one's start is not recorded; /proc is read a little
        # after each interval's time stamp, hence the slack).
        lasted = stall[-1]["ts_ns"] - stall[0]["ts_ns"]
        self.assertLessEqual(sum(r["value"] for r in stall[1:]) * 1e3, lasted + delay_slack(lasted))
        # eacgm's own cost: BPF run time and the collector's CPU time, not
        # wall time, so waiting for a CPU does not inflate it.
        cost = [r["value"] for r in metrics(self.busy, "host_layer_cpu_pct", 0)]
        self.assertLess(statistics.median(cost), 5.0)
        self.assertTrue(metrics(self.busy, "nic_rx_bytes"), "no NIC counters")


def retrans_segs(ns):
    """The kernel's own count of retransmitted TCP segments in a namespace."""
    snmp = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"], capture_output=True, text=True,
                          check=True).stdout
    head, values = [l.split() for l in snmp.splitlines() if l.startswith("Tcp:")]
    return int(values[head.index("RetransSegs")])


class TcpThroughNetem(unittest.TestCase):
    SECONDS = 3.0
    RATE = 2_000_000  # bytes/s: paced, so that no queue on the clean path overflows
    PORT = 5201
    QUEUE = 7
    DELAY_MS = 20

    def setUp(self):
        E.require_root()
        for tool in ("ip", "tc", "iptables"):
            if not shutil.which(tool):
                raise AssertionError("%s is needed: run scripts/setup.sh" % tool)
        self.tmp = E.make_tempdir(self)
        tag = "%d%d" % (os.getpid() % 10000, int(time.monotonic() * 1000) % 1000)
        self.ns_a, self.ns_b = "eacgm-a" + tag, "eacgm-b" + tag
        self.veth_a, self.veth_b = "eva" + tag, "evb" + tag  # interface names: 15 characters at most
        net = 1 + os.getpid() % 250
        self.addr_a, self.addr_b = "10.213.%d.1" % net, "10.213.%d.2" % net
        for ns in (self.ns_a, self.ns_b):
            self.ip("netns", "add", ns)
            self.addCleanup(subprocess.run, ["ip", "netns", "del", ns], capture_output=True)
        self.ip("link", "add", self.veth_a, "netns", self.ns_a, "type", "veth", "peer", "name", self.veth_b,
                "netns", self.ns_b)
        for ns, dev, addr in ((self.ns_a, self.veth_a, self.addr_a), (self.ns_b, self.veth_b, self.addr_b)):
            self.ip("-n", ns, "addr", "add", addr + "/24", "dev", dev)
            self.ip("-n", ns, "link", "set", dev, "up")
            self.ip("-n", ns, "link", "set", "lo", "up")

    def ip(self, *args):
        r = subprocess.run(["ip", *args], capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError("ip %s: %s" % (" ".join(args), r.stderr.strip()))

    def in_a(self, *cmd, **kw):
        return subprocess.run(["ip", "netns", "exec", self.ns_a, *cmd], capture_output=True, text=True, **kw)

    def add_delay_and_loss(self):
        """netem delay 20ms loss 2% on the client's way out. Kernels built
        without sch_netem (this project's VM) get the same from user space:
        an NFQUEUE holding each packet 20 ms (tests/testprogs/host_netem.py)."""
        tc = self.in_a("tc", "qdisc", "add", "dev", self.veth_a, "root", "netem", "delay", "%dms" % self.DELAY_MS,
                       "loss", "2%")
        if tc.returncode == 0:
            return
        self.assertIn("qdisc kind is unknown", tc.stderr)
        netem = subprocess.Popen(["ip", "netns", "exec", self.ns_a, PYTHON, os.path.join(os.path.dirname(LOAD),
                                  "host_netem.py"), str(self.QUEUE), str(self.DELAY_MS), "0.02"],
                                 stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.addCleanup(netem.stdout.close)
        self.addCleanup(netem.wait)  # cleanups run last-in first-out: killed, then waited for
        self.addCleanup(E.kill_group, netem.pid)
        self.assertEqual(netem.stdout.readline().strip(), "ready")
        r = self.in_a("iptables", "-A", "OUTPUT", "-o", self.veth_a, "-j", "NFQUEUE", "--queue-num", str(self.QUEUE))
        self.assertEqual(r.returncode, 0, r.stderr)

    def transfer(self, name):
        """Sends from ns_a (traced) to a sink in ns_b; returns the recording,
        the client's pid, its own report (bytes sent, its readings of the
        smoothed RTT), its connection's key and the kernel's count of
        retransmitted segments meanwhile."""
        sink = subprocess.Popen(["ip", "netns", "exec", self.ns_b, PYTHON, LOAD, "sink", self.addr_b,
                                 str(self.PORT)], stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.addCleanup(sink.stdout.close)
        self.addCleanup(sink.wait)
        self.addCleanup(E.kill_group, sink.pid)
        self.assertEqual(sink.stdout.readline().strip(), "ready")
        retrans = retrans_segs(self.ns_a)
        rec = record_host(self.tmp, ["ip", "netns", "exec", self.ns_a, PYTHON, LOAD, "send", self.addr_b,
                                     str(self.PORT), str(self.SECONDS), str(self.RATE)], name)
        retrans = retrans_segs(self.ns_a) - retrans
        sink.wait(timeout=30)
        me = report(rec)
        pid = root_pid(rec)
        keys = {r["key"] for r in metrics(rec, "tcp_retransmits", pid)}
        mine = [k for k in keys if k.startswith(self.addr_a + ":") and k.endswith("->%s:%d" % (self.addr_b, self.PORT))]
        self.assertEqual(len(mine), 1, "connections of the client: %r" % keys)
        return rec, pid, me, mine[0], retrans

    def srtt(self, rec, pid, key, me):
        """eacgm's interval means of the connection's smoothed RTT (us), checked
        against the client's own readings of the same kernel variable
        (tcpi_rtt is srtt_us >> 3, as eacgm reads it). The client reads it
        every 100 ms, eacgm averages it over the segments received in each
        interval: the two spread differently around the same values, so
        eacgm's median lies within what the client saw. A wrong scale or
        the wrong connection would not, however busy the machine."""
        got = [r["value"] for r in metrics(rec, "tcp_srtt_us", pid) if r["key"] == key]
        seen = [us for _, us in me["rtt"]]
        self.assertTrue(got, "no RTT samples")
        mid = statistics.median(got)
        self.assertTrue(min(seen) <= mid <= max(seen), "eacgm's median %.0f us, the client read %d..%d" % (
            mid, min(seen), max(seen)))
        return got, seen

    def test_loss_and_delay_show_as_retransmits_and_rtt(self):
        clean, pid, me, key, retrans = self.transfer("clean")
        # Every byte the client sent, exactly; every retransmit the kernel
        # counted. Paced, the clean path should need none, but on a busy
        # machine a late acknowledgement can still draw a tail-loss probe.
        self.assertEqual(total(clean, "net_tx_bytes", pid), me["sent"])
        self.assertGreater(total(clean, "net_tx_packets", pid), me["sent"] / 65536)
        self.assertEqual(total(clean, "tcp_retransmits", pid), retrans)
        self.srtt(clean, pid, key, me)

        self.add_delay_and_loss()
        lossy, pid, me, key, retrans = self.transfer("lossy")
        self.assertEqual(total(lossy, "net_tx_bytes", pid), me["sent"])
        self.assertEqual(total(lossy, "tcp_retransmits", pid), retrans)
        self.assertGreater(retrans, 0)
        got, seen = self.srtt(lossy, pid, key, me)
        # Every segment, the SYN too, is held 20 ms on its way out, so every
        # RTT sample is at least that, and so is their smoothed average:
        # a floor whatever else delays the packets. 5% off it for how the
        # kernel stamps segments (a paced retransmit carries its planned
        # departure time, a little ahead).
        floor = 0.95 * self.DELAY_MS * 1000
        self.assertGreaterEqual(min(seen), floor, "the client's own readings: the delay did not apply")
        self.assertGreaterEqual(min(got), floor, got)


if __name__ == "__main__":
    unittest.main()
