# SPDX-License-Identifier: Apache-2.0
"""make eval's scoring rules (eval/labels.py, eval/events.py, eval/baselines.py,
eval/report.py) on runs small enough to score by hand: every count asserted
here is worked out in the comments beside it."""
import math
import os
import sys
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "eval"))
import baselines  # noqa: E402
import events  # noqa: E402
import labels  # noqa: E402
import report  # noqa: E402

MS = 1_000_000


def step(pid, k, t0, t1):
    return {"step": k, "t0": t0, "t1": t1, "pid": pid, "rank": 0}


def call(pid, start, dur, key="torch/aten::mm", tid=None, warmup=False):
    return {"key": key, "pid": pid, "tid": tid or pid, "start": start, "dur": dur, "end": start + dur,
            "warmup": warmup}


# Two processes (a 2-rank job), ten steps of 100 ms each; rank 1 (pid 2)
# runs 5 ms behind rank 0 and ends each step 10 ms later.
STEPS = [step(1, k, k * 100 * MS, k * 100 * MS + 90 * MS) for k in range(10)] + \
        [step(2, k, k * 100 * MS + 5 * MS, k * 100 * MS + 95 * MS) for k in range(10)]


class Episodes(unittest.TestCase):
    def test_point_fault_ends_with_its_step_on_every_process(self):
        f = {"fault": "op", "step": 3, "t0": 310 * MS, "t1": 320 * MS, "pid": 1}
        # Step 3 ends at 390 ms on pid 1 and 395 ms on pid 2: the job's end.
        self.assertEqual(labels.episodes([f], STEPS), [(310 * MS, 395 * MS)])

    def test_window_fault_ends_with_the_step_after_it(self):
        # A window over steps 4-5, stopped as step 6 began (600 ms): its
        # episode runs to the end of step 6 on every process, 695 ms.
        f = {"fault": "cpu", "step": 4, "t0": 399 * MS, "t1": 599 * MS, "pid": 1}
        self.assertEqual(labels.episodes([f], STEPS), [(399 * MS, 695 * MS)])

    def test_straggler_is_a_point_fault(self):
        f = {"fault": "straggle", "step": 7, "t0": 720 * MS, "t1": 730 * MS, "pid": 2}
        self.assertEqual(labels.episodes([f], STEPS), [(720 * MS, 795 * MS)])

    def test_labels_inside_an_episode_are_not_scored(self):
        f = {"fault": "op", "step": 3, "t0": 310 * MS, "t1": 320 * MS, "pid": 1}
        eps = labels.episodes([f], STEPS)
        rows = [call(1, 309 * MS, 12 * MS),        # holds the injected work: the fault's call
                call(2, 330 * MS, 1 * MS),         # the peer, inside the episode: not scored
                call(1, 500 * MS, 1 * MS),         # outside: scored, 0
                call(1, 20 * MS, 1 * MS, warmup=True)]
        labels.label(rows, [f], eps)
        self.assertEqual([r["label"] for r in rows], [1, None, 0, None])
        self.assertEqual([r["in_episode"] for r in rows], [0, 0, None, None])


class Run:
    def __init__(self, rows, faults, steps=STEPS):
        self.rows, self.faults = rows, faults
        self.steps = events.Steps(steps)
        self.eps = labels.episodes(faults, steps)
        labels.label(rows, faults, self.eps)


class Alerts(unittest.TestCase):
    def setUp(self):
        f = {"fault": "op", "step": 3, "t0": 310 * MS, "t1": 320 * MS, "pid": 1}
        self.rows = [call(1, 309 * MS, 12 * MS),            # 0: the fault's call (step 3)
                     call(1, 340 * MS, 1 * MS),             # 1: inside the episode, pid 1, step 3
                     call(2, 340 * MS, 1 * MS),             # 2: inside the episode, pid 2, step 3
                     call(1, 450 * MS, 1 * MS),             # 3: step 4: an "after" step
                     call(1, 460 * MS, 1 * MS),             # 4: step 4 again: the same alert
                     call(2, 150 * MS, 1 * MS)]             # 5: step 1: a clean step
        self.run_ = Run(self.rows, [f])

    def test_flags_merge_per_process_and_step(self):
        e = events.run_events(self.run_, [True] * 6)
        # (1, 3): a hit (true); (2, 3): inside only (not scored); (1, 4):
        # two false flags, one alert; (2, 1): false.
        self.assertEqual(e["alerts"]["true"], 1)
        self.assertEqual(e["alerts"]["unscored"], 1)
        self.assertEqual(e["alerts"]["false"], 2)
        self.assertEqual(e["inside_flags"], 1 + 1)
        self.assertEqual(set(e["found"]), {0})
        # Steps: 3 is the episode's; 4 to 9 follow it (AFTER 10, only 6
        # left); 0 to 2 are clean.
        self.assertEqual(e["steps_in"], {"episode": 1, "after": 6, "clean": 3})
        self.assertEqual(e["false_in"]["after"], 1)
        self.assertEqual(e["false_in"]["clean"], 1)
        s = events.event_scores([e])
        # One true alert of three scored: precision 1/3, recall 1, F1 1/2.
        self.assertEqual((s["recall"], s["precision"]), (1.0, 1 / 3))
        self.assertAlmostEqual(s["f1"], 0.5)
        self.assertEqual(events.rate([e], "after"), (1, 6, 1000 / 6))

    def test_a_caller_flagged_finds_the_fault(self):
        outer = call(1, 305 * MS, 30 * MS, key="torch/aten::softmax")
        run = Run(self.rows + [outer], self.run_.faults)
        self.assertEqual(outer["label"], None)
        self.assertEqual(outer["holds"], 0)
        e = events.run_events(run, [False] * 6 + [True])
        self.assertEqual(set(e["found"]), {0})
        self.assertEqual(e["alerts"]["true"], 1)

    def test_nothing_flagged(self):
        e = events.run_events(self.run_, [False] * 6)
        s = events.event_scores([e])
        self.assertEqual((s["found"], s["faults"], s["true"], s["false"], s["f1"]), (0, 1, 0, 0, 0.0))

    def test_control_rate(self):
        rows = [call(1, k * 100 * MS + MS, MS) for k in range(10)]
        run = Run(rows, [])
        flags = [k in (2, 7) for k in range(10)]
        e = events.run_events(run, flags)
        self.assertEqual(events.rate([e]), (2, 10, 200.0))


class Bootstrap(unittest.TestCase):
    def test_every_fault_found_and_no_false_alarm_is_certain(self):
        faults = [(True, 1, 1, 0)] * 8
        blocks = [(0, 0)] * 20
        self.assertEqual(events.bootstrap(faults, blocks, seed=1),
                         {"event_f1": (1.0, 1.0), "call_f1": (1.0, 1.0)})

    def test_interval_holds_the_estimate_and_is_seeded(self):
        faults = [(True, 1, 2, 0)] * 6 + [(False, 0, 0, 2)] * 2
        blocks = [(1, 1)] * 3 + [(0, 0)] * 17
        a = events.bootstrap(faults, blocks, seed=7)
        self.assertEqual(a, events.bootstrap(faults, blocks, seed=7))
        # Point estimates: recall 6/8, precision 6/9: F1 0.706; per call
        # recall 12/16, precision 12/15: F1 0.774.
        lo, hi = a["event_f1"]
        self.assertTrue(lo < 0.706 < hi, a)
        lo, hi = a["call_f1"]
        self.assertTrue(lo < 0.774 < hi, a)


class Baselines(unittest.TestCase):
    def test_cut_flags_as_many_negatives_as_asked(self):
        scores = [9.0, 8.0, 7.0, 6.0, 5.0, 4.0]
        negatives = [False, True, True, False, True, True]
        tau = baselines.cut_at(scores, negatives, 2)
        self.assertEqual(sum(1 for s, n in zip(scores, negatives) if n and s > tau), 2)
        self.assertEqual(baselines.cut_at(scores, negatives, 0), 8.0)
        self.assertEqual(baselines.cut_at(scores, negatives, 4), float("-inf"))

    def test_auprc(self):
        # Ranked: 1 0 1 0: precision 1 at recall 0.5, 2/3 at recall 1.
        self.assertAlmostEqual(baselines.auprc([1, 0, 1, 0], [4, 3, 2, 1]), 0.5 * 1 + 0.5 * 2 / 3)

    def test_robust_z(self):
        z = baselines.robust_z([1.0, 2.0, 3.0, 4.0, 100.0])
        # Median 3, median absolute deviation 1.
        self.assertAlmostEqual(z[4], 97 / 1.4826)


class OperatingPoints(unittest.TestCase):
    def test_flags_are_kept_by_how_slowed_their_call_was(self):
        # A faulted run: mm's usual calls take 1 ms (median 1 ms), its
        # fault's call 12 ms (12x), a false flag in step 6 3 ms (3x), and
        # a stall in step 8: a 1 ms call after a gap of 30 ms (the usual
        # gap 2 ms: 15x). A control run of 10 steps: one call 6 ms (6x).
        f = {"fault": "op", "step": 3, "t0": 310 * MS, "t1": 320 * MS, "pid": 1}
        rows = [call(1, k * 100 * MS + MS, MS) for k in range(10) if k not in (3, 6, 8)]
        rows += [call(1, 309 * MS, 12 * MS), call(1, 601 * MS, 3 * MS), call(1, 801 * MS, MS)]
        for r in rows:
            stall = r["start"] == 801 * MS
            r["x"], r["fault"] = [math.log1p((30 if stall else 2) * MS)], "stall" if stall else "operator_slow"
        faulted = Run(rows, [f])
        faulted.feats, faulted.control = ["log_gap"], False
        faulted.flags = {"eacgm": [r["start"] in (309 * MS, 601 * MS, 801 * MS) for r in rows]}
        self.assertEqual([round(x, 3) for x in report.slowdowns(faulted)[-3:]], [12.0, 3.0, 15.0])
        crow = [call(1, k * 100 * MS + MS, 6 * MS if k == 4 else MS) for k in range(10)]
        for r in crow:
            r["x"], r["fault"] = [math.log1p(2 * MS)], "operator_slow"
        control = Run(crow, [])
        control.feats, control.control = ["log_gap"], True
        control.flags = {"eacgm": [r["dur"] == 6 * MS for r in crow]}
        table = report.operating_points({"torch": [faulted, control]})
        # 2x: the fault found; alerts true 1, false 2 (steps 6 and 8):
        # precision 1/3, F1 0.5; the control's 6x call: 100 per 1,000.
        # 5x: the 3x flag goes (F1 2/3). 10x: the control's goes too.
        # 20x: none is left, the fault's 12x and the stall's 15x gone too.
        self.assertEqual(table[2:], ["| Torch | every flag | 1 of 1 | 0.500 | 100.0 (1 in 10) |",
                                     "| Torch | 2x | 1 of 1 | 0.500 | 100.0 (1 in 10) |",
                                     "| Torch | 5x | 1 of 1 | 0.667 | 100.0 (1 in 10) |",
                                     "| Torch | 10x | 1 of 1 | 0.667 | 0.0 (0 in 10) |",
                                     "| Torch | 20x | 0 of 1 | 0.000 | 0.0 (0 in 10) |"])


class Prevalence(unittest.TestCase):
    def test_matched_f1(self):
        # Recall 0.9 and a false-alarm rate of 0.01 at one faulty call in
        # six: precision 0.15 / (0.15 + 0.00833) = 0.947, F1 0.923.
        self.assertAlmostEqual(report.matched_f1(0.9, 0.01), 0.9231, places=4)
        self.assertEqual(report.matched_f1(0.0, 0.0), 0.0)


if __name__ == "__main__":
    unittest.main()
