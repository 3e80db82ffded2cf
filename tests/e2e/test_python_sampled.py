# SPDX-License-Identifier: Apache-2.0
"""Sampled Python numbers say what they are: a function the sampler saw is
reported as samples and an estimated time with its error, never as a call
count, and the estimate is right. The workload (tests/testprogs/py_stdlib.py:
difflib, json, textwrap and re passes, 25 calls each, taken in turn) measures
the CPU time of each call itself; eacgm's estimate, samples x the sampler's
period, must be within 5% of it for each pass (each is over 90 ms in all).
A recursive function (tests/testprogs/py_recursive.py: 10 frames deep)
counts each sample once: its time never exceeds its thread's, and each of
its 220 ms passes is within 5% of what the program measured around it (its
samples of the CPU time, its span of the wall time)."""
import json
import os
import re
import unittest

import eacgm_e2e as E

WORK = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "py_stdlib.py")
RECURSIVE = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "py_recursive.py")
PASSES = ("difflib_pass", "json_pass", "textwrap_pass", "regex_pass")


class SampledPythonEstimates(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.truth_path = os.path.join(cls.tmp, "truth.json")
        cls.rec = E.record(cls.tmp, ["/usr/bin/python3", WORK, cls.truth_path], "--layers", "python")

    def setUp(self):
        self.assertEqual(self.rec.rc, 0, self.rec.stderr)
        with open(self.truth_path) as f:
            self.truth = json.load(f)
        self.period = int(E.meta(self.rec.db)["python_sample_period_ns"])

    def samples(self, name):
        spans = self.rec.spans("layer = 'python' AND name = ?", (name,))
        self.assertTrue(spans, name + ": no span")
        for s in spans:
            self.assertIn("samples", s["args"], (name, s))
            self.assertNotIn("exact", s["args"], (name, s))
        return sum(s["args"]["samples"] for s in spans), len(spans)

    def test_period_is_the_default_rate(self):
        self.assertEqual(self.period, 1_000_000)  # --sample-hz 1000

    def test_estimates_within_5_percent_of_the_programs_cpu_time(self):
        for name in PASSES:
            truth = self.truth["cpu_ns"][name]
            self.assertGreater(truth, 10_000_000, name + ": the workload must run over 10 ms")
            n, runs = self.samples(name)
            est = n * self.period
            self.assertLessEqual(abs(est - truth), 0.05 * truth,
                                 "%s: %d samples = %.1f ms, the program measured %.1f ms (%d runs)" %
                                 (name, n, est / 1e6, truth / 1e6, runs))

    def test_summary_shows_samples_and_error_not_calls(self):
        out = E.eacgm("summary", self.rec.db)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout, r"\npython +calls +samples +time +± 2 sd +mean +p50 +p99\n")
        for name in PASSES:
            n, runs = self.samples(name)
            row = re.search(r"\n  %s +(\S+) +(\d+) +(\S+ \S+) +±(\S+ \S+) +(\S+)" % name, out.stdout)
            self.assertIsNotNone(row, name + " row missing:\n" + out.stdout)
            calls, samples, _, _, mean = row.groups()
            self.assertEqual(calls, "-", name + ": a sampled function has no call count")
            self.assertEqual(int(samples), n, name)
            self.assertEqual(mean, "-", name + ": nor a mean per call")


class RecursiveFunctionCountsEachSampleOnce(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        truth_path = os.path.join(cls.tmp, "truth.json")
        cls.rec = E.record(cls.tmp, ["/usr/bin/python3", RECURSIVE, truth_path], "--layers", "python")
        cls.truth = {}
        if os.path.exists(truth_path):
            with open(truth_path) as f:
                cls.truth = json.load(f)

    def setUp(self):
        self.assertEqual(self.rec.rc, 0, self.rec.stderr)
        self.period = int(E.meta(self.rec.db)["python_sample_period_ns"])
        self.walks = self.rec.spans("layer = 'python' AND name = 'walk'")

    def outermost(self):
        """The walk runs inside no other walk run: one per pass."""
        return [s for s in self.walks if not any(
            o is not s and o["start_ns"] <= s["start_ns"] and s["start_ns"] + s["dur_ns"] <= o["start_ns"] + o["dur_ns"]
            for o in self.walks)]

    def test_the_recursion_was_seen(self):
        # Each pass nests walk 10 deep: the sampler saw most of the frames.
        passes = len(self.truth["pass_cpu_ns"])
        self.assertEqual(len(self.outermost()), passes)
        self.assertGreaterEqual(len(self.walks), 5 * passes)

    def test_each_pass_within_5_percent_of_the_programs_clocks(self):
        # Its samples against the CPU time the program measured around the
        # pass; its span, first sample to last, against the wall time.
        runs = sorted(self.outermost(), key=lambda s: s["start_ns"])
        self.assertEqual(len(runs), len(self.truth["pass_cpu_ns"]))
        for run, cpu, wall in zip(runs, self.truth["pass_cpu_ns"], self.truth["pass_wall_ns"]):
            est = run["args"]["samples"] * self.period
            self.assertLessEqual(abs(est - cpu), 0.05 * cpu, "%d samples = %.1f ms, the program measured %.1f ms" % (
                run["args"]["samples"], est / 1e6, cpu / 1e6))
            self.assertLessEqual(run["dur_ns"], wall)
            self.assertGreaterEqual(run["dur_ns"], 0.95 * wall, "span %.1f ms, the program measured %.1f ms" % (
                run["dur_ns"] / 1e6, wall / 1e6))

    def test_summary_counts_each_sample_once(self):
        out = E.eacgm("summary", self.rec.db)
        self.assertEqual(out.returncode, 0, out.stderr)
        row = re.search(r"\n  walk +(\S+) +(\d+) ", out.stdout)
        self.assertIsNotNone(row, "walk row missing:\n" + out.stdout)
        samples = int(row.group(2))
        self.assertEqual(samples, sum(s["args"]["samples"] for s in self.outermost()))
        est, truth = samples * self.period, sum(self.truth["pass_cpu_ns"])
        # Never more than the thread's time; within 5% of the program's.
        self.assertLessEqual(est, self.truth["thread_cpu_ns"])
        self.assertLessEqual(abs(est - truth), 0.05 * truth, "%.1f ms against %.1f ms" % (est / 1e6, truth / 1e6))


if __name__ == "__main__":
    unittest.main()
