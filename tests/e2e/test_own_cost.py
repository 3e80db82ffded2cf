"""eacgm says what it cost: each recording's meta holds its own CPU and peak
memory while attached, and its BPF programs' runs and run time, counted by
the kernel. Checked exactly where the count is knowable: the test library's
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
        cls.rec = E.record(cls.tmp, [E.TESTLIB_CALLS, "nest", str(CALLS)], "--layers", "cuda", "--spec", spec)

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


if __name__ == "__main__":
    unittest.main()
