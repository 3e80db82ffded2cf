"""The host layer end to end (`eacgm record --layers host`), read back from the
recording's metrics table:

- a CPU-bound program pinned to one CPU, alone and then next to stress-ng on
  the same CPU: its scheduling delay goes from near zero to a large share of
  its run time, and stress-ng is the top interferer;
- a TCP transfer between two network namespaces over a veth pair, clean and
  then through `tc netem delay 20ms loss 2%` (or its user-space stand-in
  where the kernel has no netem): retransmits appear with the loss, exactly
  as many as the kernel counted, and the smoothed RTT rises by the delay.
"""
import os
import re
import shutil
import statistics
import subprocess
import time
import unittest

import eacgm_e2e as E

LOAD = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "host_load.py")
PYTHON = "/usr/bin/python3"


def metrics(rec, name, pid=None):
    """(key, pid, value) rows of one metric of the host layer, by time."""
    sql = "SELECT ts_ns, key, pid, value FROM metrics WHERE layer = 'host' AND name = ?"
    params = [name]
    if pid is not None:
        sql += " AND pid = ?"
        params.append(pid)
    return rec.query(sql + " ORDER BY ts_ns", params)


def total(rec, name, pid=None):
    return sum(r["value"] for r in metrics(rec, name, pid))


def root_pid(rec):
    rows = rec.query("SELECT pid FROM processes ORDER BY start_ns, pid LIMIT 1")
    return rows[0]["pid"]


def record_host(tmp, command, name):
    rec = E.record(tmp, command, "--layers", "host", name=name)
    if rec.rc != 0:
        raise AssertionError("eacgm record failed (%d): %s" % (rec.rc, rec.stderr))
    return rec


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
        time.sleep(1.0)  # its worker is forked and spinning
        cls.busy = record_host(cls.tmp, spin, "busy")
        E.kill_group(stress.pid)

    def test_delay_rises_with_a_competitor_on_the_cpu(self):
        quiet = total(self.quiet, "sched_delay_ns", root_pid(self.quiet))
        busy = total(self.busy, "sched_delay_ns", root_pid(self.busy))
        run_ns = self.SECONDS * 1e9
        # Alone on its CPU it hardly waits; sharing it with a CPU hog, it
        # waits about half the time (the fair scheduler splits the CPU).
        self.assertLess(quiet, 0.05 * run_ns, "quiet run waited %.0f ms" % (quiet / 1e6))
        self.assertGreater(busy, 0.3 * run_ns, "busy run waited %.0f ms" % (busy / 1e6))
        self.assertLess(busy, 0.7 * run_ns, "busy run waited %.0f ms" % (busy / 1e6))
        self.assertGreater(total(self.busy, "switches_involuntary", root_pid(self.busy)),
                           2 * total(self.quiet, "switches_involuntary", root_pid(self.quiet)))

    def test_stress_ng_is_the_top_interferer(self):
        pid = root_pid(self.busy)
        by = {}
        for r in metrics(self.busy, "interference_ns", pid):
            by[r["key"]] = by.get(r["key"], 0) + r["value"]
        self.assertTrue(by, "no interference recorded")
        top = max(by, key=by.get)
        self.assertRegex(top, r"^stress-ng[^:]*:\d+$")
        # It held the CPU for most of the wait.
        self.assertGreater(by[top], 0.8 * total(self.busy, "sched_delay_ns", pid))

    def test_intervals_and_machine_metrics(self):
        # One sample per 100 ms interval of the 2 s run, give or take start and end.
        n = len(metrics(self.busy, "sched_delay_ns", root_pid(self.busy)))
        self.assertGreaterEqual(n, 15)
        self.assertLessEqual(n, 30)
        for name in ("psi_cpu_some_avg10_pct", "psi_cpu_some_stall_us", "host_layer_cpu_pct"):
            rows = metrics(self.busy, name, 0)
            self.assertGreaterEqual(len(rows), 15, name)
        # Two spinning tasks on one CPU of two: CPU pressure shows.
        self.assertGreater(total(self.busy, "psi_cpu_some_stall_us", 0), 0.2 * self.SECONDS * 1e6)
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
    RATE = 2_000_000  # bytes/s: paced, so the clean path drops nothing
    PORT = 5201
    QUEUE = 7

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
        tc = self.in_a("tc", "qdisc", "add", "dev", self.veth_a, "root", "netem", "delay", "20ms", "loss", "2%")
        if tc.returncode == 0:
            return
        self.assertIn("qdisc kind is unknown", tc.stderr)
        netem = subprocess.Popen(["ip", "netns", "exec", self.ns_a, PYTHON, os.path.join(os.path.dirname(LOAD),
                                  "host_netem.py"), str(self.QUEUE), "20", "0.02"],
                                 stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.addCleanup(netem.stdout.close)
        self.addCleanup(netem.wait)  # cleanups run last-in first-out: killed, then waited for
        self.addCleanup(E.kill_group, netem.pid)
        self.assertEqual(netem.stdout.readline().strip(), "ready")
        r = self.in_a("iptables", "-A", "OUTPUT", "-o", self.veth_a, "-j", "NFQUEUE", "--queue-num", str(self.QUEUE))
        self.assertEqual(r.returncode, 0, r.stderr)

    def transfer(self, name):
        """Sends from ns_a (traced) to a sink in ns_b; returns the recording,
        the client's pid, the bytes it sent, its connection's key and the
        kernel's count of retransmitted segments meanwhile."""
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
        m = re.search(r"^sent (\d+)$", rec.stdout, re.M)
        self.assertTrue(m, "the client did not report: %r" % rec.stdout)
        pid = root_pid(rec)
        keys = {r["key"] for r in metrics(rec, "tcp_retransmits", pid)}
        mine = [k for k in keys if k.startswith(self.addr_a + ":") and k.endswith("->%s:%d" % (self.addr_b, self.PORT))]
        self.assertEqual(len(mine), 1, "connections of the client: %r" % keys)
        return rec, pid, int(m.group(1)), mine[0], retrans

    def test_loss_and_delay_show_as_retransmits_and_rtt(self):
        clean, pid, sent, key, retrans = self.transfer("clean")
        # Every byte the client sent, exactly; every retransmit the kernel counted.
        self.assertEqual(total(clean, "net_tx_bytes", pid), sent)
        self.assertGreater(total(clean, "net_tx_packets", pid), sent / 65536)
        self.assertEqual(total(clean, "tcp_retransmits", pid), retrans)
        self.assertEqual(retrans, 0)
        clean_rtt = statistics.median(r["value"] for r in metrics(clean, "tcp_srtt_us", pid) if r["key"] == key)
        self.assertLess(clean_rtt, 5000)

        self.add_delay_and_loss()
        lossy, pid, sent, key, retrans = self.transfer("lossy")
        self.assertEqual(total(lossy, "net_tx_bytes", pid), sent)
        self.assertEqual(total(lossy, "tcp_retransmits", pid), retrans)
        self.assertGreater(retrans, 0)
        lossy_rtt = statistics.median(r["value"] for r in metrics(lossy, "tcp_srtt_us", pid) if r["key"] == key)
        # The injected 20 ms, within 30%.
        self.assertAlmostEqual(lossy_rtt - clean_rtt, 20000, delta=6000)


if __name__ == "__main__":
    unittest.main()
