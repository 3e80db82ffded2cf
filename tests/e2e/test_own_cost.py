# SPDX-License-Identifier: Apache-2.0
"""eacgm says what it cost: each recording's meta holds its own CPU and peak
memory while attached, and its BPF programs' runs and run time, counted by
the kernel when asked (--bpf-stats). Checked exactly where the count is knowable: the test library's
calls, one entry and one return program run each."""
import os
import unittest

import eacgm_e2e as E

CALLS = 500  # tl_outer calls, each with two nested tl_inner: 1,500 traced calls


class OwnCost(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        spec = E.write_json(os.path.join(cls.tmp, "spec.json"), E.TESTLIB_SPEC)
        cls.rec = E.record(cls.tmp, [E.TESTLIB_CALLS, "nest", str(CALLS)], "--layers", "cuda", "--spec", spec,
                           "--bpf-stats")

    def setUp(self):
        self.assertEqual(self.rec.rc, 0, self.rec.stderr)
        self.meta = E.meta(self.rec.db)

    def runs(self, prefix):
        # Per-function and uprobe_multi copies of a program (names cut at 15).
        return sum(int(v) for k, v in self.meta.items() if k.startswith("bpf_runs:" + prefix))

    def test_program_runs_are_the_traced_calls(self):
        self.assertEqual(len(self.rec.spans()), 3 * CALLS)
        self.assertEqual(self.runs("span_entry"), 3 * CALLS)
        self.assertEqual(self.runs("span_exit"), 3 * CALLS)

    def test_run_time_adds_up(self):
        per_prog = sum(int(v) for k, v in self.meta.items() if k.startswith("bpf_ns:"))
        self.assertEqual(int(self.meta["bpf_run_ns"]), per_prog)
        self.assertGreater(per_prog, 0)
        for k, v in self.meta.items():
            if k.startswith("bpf_runs:"):
                self.assertGreater(int(v), 0, k + ": programs that never ran are left out")

    def test_cpu_and_memory(self):
        attached, total = float(self.meta["agent_cpu_attached_s"]), float(self.meta["agent_cpu_s"])
        self.assertGreaterEqual(attached, 0)
        self.assertLessEqual(attached, total)
        self.assertGreater(float(self.meta["attached_s"]), 0)
        self.assertLessEqual(float(self.meta["attached_s"]), float(self.meta["duration_s"]))
        self.assertGreater(int(self.meta["agent_max_rss_kb"]), 1024)


class NoStatsByDefault(unittest.TestCase):
    """Without --bpf-stats the kernel's accounting stays off (it costs every
    BPF program run on the machine two clock reads): no run counts."""

    def test_no_program_stats(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        spec = E.write_json(os.path.join(tmp, "spec.json"), E.TESTLIB_SPEC)
        rec = E.record(tmp, [E.TESTLIB_CALLS, "nest", "20"], "--layers", "cuda", "--spec", spec)
        self.assertEqual(rec.rc, 0, rec.stderr)
        self.assertEqual(len(rec.spans()), 60)
        meta = E.meta(rec.db)
        self.assertNotIn("bpf_run_ns", meta)
        self.assertEqual([k for k in meta if k.startswith("bpf_")], [])
        self.assertIn("agent_cpu_attached_s", meta)


if __name__ == "__main__":
    unittest.main()
