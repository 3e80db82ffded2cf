# SPDX-License-Identifier: Apache-2.0
"""The gpu layer end to end: `eacgm record --layers cuda,gpu` with the NVML
stand-in (tests/nvml) on the library path, scripted by a scenario; checks the
SQLite tables and the Perfetto trace against the script. And without any
NVML: the gpu layer says why once and the cuda layer records as before."""
import collections
import ctypes
import json
import os
import unittest

import eacgm_e2e as E

STANDIN_DIR = os.environ.get("NVML_STANDIN_DIR", os.path.join(E._ROOT, "build", "tests", "nvml"))
GiB, MiB = 1 << 30, 1 << 20
STEP_MS, LOST_MS, XID_MS = 800, 1000, 500
# Wakeup latency allowed to the event watcher (it blocks in nvmlEventSetWait):
# a liveness bound, far above a loaded machine's scheduling delays.
WAKE_MS = 100
# cuda_calls after 1.6 s (at least: longer on a loaded machine, which only
# adds samples), so that the gpu layer samples for a while; its exit code (3)
# must come back through sh and eacgm.
COMMAND = ["sh", "-c", 'sleep 1.6; exec "$0" 3', E.CUDA_CALLS]

GPU0 = {"name": "Stand-in H100", "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000",
        "not_supported": ["nvmlDeviceGetFanSpeed"],
        "timeline": [{"at_ms": 0, "util_gpu": 30, "util_mem": 12, "mem_used": 4 * GiB, "mem_total": 80 * GiB,
                      "temp": 45, "power_mw": 150000, "power_limit_mw": 700000, "clock_sm": 1755,
                      "clock_mem": 2619, "throttle": 0, "pcie_tx_kbps": 512, "pcie_rx_kbps": 1024},
                     {"at_ms": STEP_MS, "util_gpu": 90, "power_mw": 512500, "throttle": 0x4}],
        # "children": what eacgm launched (sh, then cuda_calls); pid 1 is not traced.
        "processes": [{"pid": "children", "timeline": [{"at_ms": 0, "mem_used": GiB, "sm_util": 60,
                                                        "mem_util": 30}]},
                      {"pid": 1, "timeline": [{"at_ms": 0, "mem_used": 777 * MiB, "sm_util": 1,
                                               "mem_util": 1}]}],
        "events": [{"at_ms": XID_MS, "xid": 48}]}
GPU1 = {"name": "Stand-in L4", "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000",
        "lost_at_ms": LOST_MS,
        "timeline": [{"at_ms": 0, "util_gpu": 7, "mem_used": GiB, "mem_total": 24 * GiB, "fan": 41}]}
# Metric name -> (scenario value, factor to the metric's unit).
FROM_SCENARIO = {"util_gpu_pct": ("util_gpu", 1), "util_mem_pct": ("util_mem", 1),
                 "mem_used_bytes": ("mem_used", 1), "mem_total_bytes": ("mem_total", 1), "temp_c": ("temp", 1),
                 "power_w": ("power_mw", 1e-3), "power_limit_w": ("power_limit_mw", 1e-3),
                 "clock_sm_mhz": ("clock_sm", 1), "clock_mem_mhz": ("clock_mem", 1),
                 "throttle_reasons_mask": ("throttle", 1), "pcie_tx_bytes_per_s": ("pcie_tx_kbps", 1024),
                 "pcie_rx_bytes_per_s": ("pcie_rx_kbps", 1024), "fan_pct": ("fan", 1)}
LOST_WARNING = "gpu1 (Stand-in L4) was lost (GPU is lost)"
UNAVAILABLE = "gpu layer unavailable: libnvidia-ml.so.1 not found (no NVIDIA driver)"


def scripted(timeline, name, t_ms):
    v = 0
    for step in timeline:
        if step["at_ms"] <= t_ms and name in step:
            v = step[name]
    return v


def possible(timeline, name, t_ms, next_ms):
    """The values a sample stamped at t_ms can hold: eacgm stamps a device's
    sample before reading it, and one thread reads the samples in turn, so the
    stand-in answered somewhere in [t_ms, next_ms) (next_ms: the device's next
    sample), whatever the machine's load."""
    return {scripted(timeline, name, t) for t in
            [t_ms] + [s["at_ms"] for s in timeline if t_ms < s["at_ms"] <= next_ms and name in s]}


def has_real_nvml():
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False


class GpuRecording(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        E.require_root()
        if not os.path.exists(os.path.join(STANDIN_DIR, "libnvidia-ml.so.1")):
            raise AssertionError("no NVML stand-in in %s: build the nvml_standin target" % STANDIN_DIR)
        cls.tmp = E.make_tempdir(cls)
        origin_file = os.path.join(cls.tmp, "origin")
        scenario = E.write_json(os.path.join(cls.tmp, "scenario.json"),
                                {"origin_file": origin_file, "devices": [GPU0, GPU1]})
        cls.rec = E.record(cls.tmp, COMMAND, "--layers", "cuda,gpu",
                           env={"LD_LIBRARY_PATH": STANDIN_DIR, "EACGM_NVML_SCENARIO": scenario})
        with open(origin_file) as f:
            cls.origin = int(f.read())
        cls.metrics = cls.rec.query("SELECT * FROM metrics WHERE layer = 'gpu' ORDER BY ts_ns, rowid")
        cls.events = cls.rec.query("SELECT * FROM events ORDER BY ts_ns, rowid")
        for e in cls.events:
            e["args"] = json.loads(e["args"]) if e["args"] else {}
        cls.trace = E.load_trace(cls.rec.trace)

    def ms(self, ts_ns):
        return (ts_ns - self.origin) / 1e6

    def rows(self, key, name, pid=0):
        return [m for m in self.metrics if m["key"] == key and m["name"] == name and m["pid"] == pid]

    def named(self, name):
        return [e for e in self.events if e["name"] == name]

    def test_exit_code_and_cuda_spans(self):
        self.assertEqual(self.rec.rc, 3, self.rec.stderr)
        spans = self.rec.spans()
        self.assertEqual(len(spans), E.CUDA_CALLS_SPANS, self.rec.stderr)
        self.assertEqual({s["layer"] for s in spans}, {"cuda"})
        self.assertNotIn("gpu layer unavailable", self.rec.stderr)

    def test_device_values_as_scripted(self):
        # The gpu layer's measures, and online detection's status (detect/status.h).
        layers = {m["layer"] for m in self.rec.query("SELECT DISTINCT layer FROM metrics")}
        self.assertEqual(layers, {"gpu", "detect"})
        for key, dev in (("gpu0", GPU0), ("gpu1", GPU1)):
            for name, (field, factor) in FROM_SCENARIO.items():
                rows = self.rows(key, name)
                if key == "gpu0" and name == "fan_pct":
                    self.assertEqual(rows, [], "not supported: absent, not zero")
                    continue
                # 10 Hz: gpu0 through the whole 1.6 s and more, gpu1 until lost at 1 s.
                self.assertGreaterEqual(len(rows), 15 if key == "gpu0" else 9, (key, name))
                times = [self.ms(m["ts_ns"]) for m in rows] + [float("inf")]
                for m, t, t_next in zip(rows, times, times[1:]):
                    self.assertIn(m["value"], {v * factor for v in possible(dev["timeline"], field, t, t_next)},
                                  (key, name, t))
        self.assertEqual(self.rows("gpu0", "power_w")[-1]["value"], 512.5)

    def test_process_memory_of_the_traced_program_only(self):
        procs = {p["pid"] for p in self.rec.query("SELECT pid FROM processes")}
        launched = [p["pid"] for p in self.rec.query("SELECT pid, ppid FROM processes") if p["ppid"] == self.rec.pid]
        self.assertEqual(len(launched), 1)
        per_pid = collections.Counter(m["pid"] for m in self.metrics if m["name"] == "proc_mem_used_bytes")
        self.assertEqual(set(per_pid), {launched[0]}, "only eacgm's traced child; pid 1 is not traced")
        self.assertGreaterEqual(per_pid[launched[0]], 15)
        for m in self.metrics:
            if m["pid"]:
                self.assertIn(m["pid"], procs, m)
        self.assertEqual({m["value"] for m in self.rows("gpu0", "proc_mem_used_bytes", launched[0])}, {float(GiB)})
        self.assertEqual({m["value"] for m in self.rows("gpu0", "proc_util_sm_pct", launched[0])}, {60.0})

    def test_events(self):
        xid = self.named("xid")
        self.assertEqual([(e["layer"], e["key"], e["pid"], e["args"]) for e in xid], [("gpu", "gpu0", 0, {"xid": 48})])
        # Stamped once the stand-in delivered it, which it does from XID_MS on.
        self.assertTrue(XID_MS <= self.ms(xid[0]["ts_ns"]) < XID_MS + WAKE_MS, self.ms(xid[0]["ts_ns"]))
        lost = self.named("device_lost")
        self.assertEqual([e["key"] for e in lost], ["gpu1"])
        # Found by the sampling round after gpu1's last values, which were read
        # (after their stamp) before LOST_MS: gpu0's sample of that round, and
        # only it, lies between them.
        last = max(m["ts_ns"] for m in self.metrics if m["key"] == "gpu1")
        self.assertLess(self.ms(last), LOST_MS)
        self.assertLess(last, lost[0]["ts_ns"])
        self.assertEqual(len([m for m in self.rows("gpu0", "util_gpu_pct") if last < m["ts_ns"] < lost[0]["ts_ns"]]),
                         1)
        self.assertGreaterEqual(len([m for m in self.rows("gpu0", "util_gpu_pct") if m["ts_ns"] > lost[0]["ts_ns"]]),
                                5, "gpu0 goes on after gpu1 is lost")
        self.assertEqual(self.rec.stderr.count(LOST_WARNING), 1, self.rec.stderr)
        throttle = self.named("clock_throttle")
        self.assertEqual([(e["key"], e["args"]) for e in throttle], [("gpu0", {"reasons": ["sw_power_cap"]})])
        devices = self.named("device")
        self.assertEqual([(e["key"], e["args"]["name"], e["args"]["uuid"]) for e in devices],
                         [("gpu0", GPU0["name"], GPU0["uuid"]), ("gpu1", GPU1["name"], GPU1["uuid"])])

    def test_perfetto_counters_and_instants(self):
        events = self.trace["traceEvents"]
        tracks = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
        counters = [e for e in events if e.get("ph") == "C" and e.get("cat") == "gpu"]
        # Every metric row is one counter event, at the same time with the same value.
        self.assertEqual(len(counters), len(self.metrics))
        util = [(round(e["ts"], 3), e["args"]["value"]) for e in counters
                if e["name"] == "util_gpu_pct" and tracks.get(e["pid"]) == "gpu gpu0"]
        self.assertEqual(util, [(round(m["ts_ns"] / 1000.0, 3), m["value"]) for m in self.rows("gpu0", "util_gpu_pct")])
        self.assertEqual({v for _, v in util}, {30, 90})
        instants = [e for e in events if e.get("ph") == "i" and e.get("cat") == "gpu"]
        xid = [e for e in instants if e["name"] == "xid"]
        self.assertEqual(len(xid), 1)
        self.assertEqual((xid[0]["args"]["xid"], xid[0]["args"]["key"]), (48, "gpu0"))
        self.assertEqual(sorted(e["name"] for e in instants),
                         sorted(["xid", "device_lost", "clock_throttle", "device", "device"]))


class GpuWithoutNvml(unittest.TestCase):
    def test_unavailable_once_and_cuda_still_recorded(self):
        E.require_root()
        if has_real_nvml():
            self.skipTest("this machine has libnvidia-ml.so.1")
        tmp = E.make_tempdir(self)
        env = {"LD_LIBRARY_PATH": "", "EACGM_NVML_SCENARIO": ""}
        rec = E.record(tmp, [E.CUDA_CALLS, "3"], "--layers", "cuda,gpu", env=env)
        self.assertEqual(rec.rc, 3, rec.stderr)
        self.assertEqual(rec.stderr.count(UNAVAILABLE), 1, rec.stderr)
        self.assertEqual(len(rec.spans()), E.CUDA_CALLS_SPANS)
        self.assertEqual(rec.query("SELECT COUNT(*) AS n FROM metrics WHERE layer = 'gpu'")[0]["n"], 0)
        self.assertEqual(rec.query("SELECT COUNT(*) AS n FROM events")[0]["n"], 0)


if __name__ == "__main__":
    unittest.main()
