# SPDX-License-Identifier: Apache-2.0
"""--overhead-budget: a traced function hot enough to cost the job far more
than the budget (budget_load: bl_work, about 10 us of work a call, against a
trap of 0.6-1.5 us) is probed in bursts once the budget acts; a light function
beside it keeps every call. The hot function's calls then stand for those
missed (args.weight), and its estimated count is checked against what the
program itself counted; the summary, the events and the trace say what was
throttled. With --overhead-budget 0 every call is recorded."""
import bisect
import json
import os
import unittest

import eacgm_e2e as E

BUDGET_LOAD = os.path.join(E.TESTPROGS, "budget_load")
SPEC = {"layer": "budget", "library": "libeacgm_budgetlib*.so",
        "probes": [{"function": "bl_work"}, {"function": "bl_light"}]}
# About 10 us of work a call on any CPU (budget_load times its iterations): a
# trap of 0.6-1.5 us costs 6-15% of the job, several times the 2% budget on
# these machines. A fixed 30000 iterations was 55 us on a Xeon VM, where the
# probes cost 1.6% and the budget rightly did nothing.
# 15 s, the budget acting from 2: the count is estimated from the bursts of
# 13 s. Its error shrinks with the bursts it averages, and a VM's speed
# moves it: on a Xeon VM 9-s runs estimated 0.61-1.21 of the calls made and
# 15-s runs 0.79-1.08 (4 runs each; the AMD VMs stayed within 0.8-1.2 at
# 9 s). Held within 35%: a weight lost or doubled is still far outside.
SECONDS, WORK_NS = 15, 10000


class OverheadBudget(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.spec = E.write_json(os.path.join(cls.tmp, "spec.json"), SPEC)
        cls.rec = E.record(cls.tmp, [BUDGET_LOAD, str(SECONDS), str(WORK_NS)], "--layers", "cuda", "--spec",
                           cls.spec, "--no-detect", "--budget-after", "2")

    def setUp(self):
        self.assertEqual(self.rec.rc, 0, self.rec.stderr)
        self.made = json.loads(self.rec.stdout)  # what the program counted itself

    def test_light_function_keeps_every_call(self):
        light = self.rec.spans("name = 'bl_light'")
        self.assertEqual(len(light), self.made["light_calls"])
        self.assertEqual([s for s in light if "weight" in s["args"]], [])

    def test_hot_function_is_sampled_and_scaled(self):
        work = self.rec.spans("name = 'bl_work'")
        weighted = [s for s in work if "weight" in s["args"]]
        self.assertGreater(len(weighted), 0, self.rec.stderr)
        self.assertLess(len(work), self.made["work_calls"] * 0.8, "bursts record a fraction of the calls")
        self.assertTrue(all(s["args"]["weight"] > 1 for s in weighted))
        estimate = sum(s["args"].get("weight", 1) for s in work)
        self.assertAlmostEqual(estimate / self.made["work_calls"], 1.0, delta=0.35)

    def test_each_detach_between_bursts_is_kept(self):
        # detect charges a kworker's run while eacgm detached probes to eacgm
        # (the kernel's grace period polls for the calls in flight): the
        # recording keeps every detach, each once, between two bursts. A
        # detach takes the breakpoints out first (calls still trap while it
        # does, so a burst's last call may start just after it began), then
        # waits for the grace periods (30-80 ms here), when no call traps.
        # How long the probes stay off after it is the duty's: at a high
        # duty, less than the 100 ms that tells a gap between bursts apart
        # (the fresh-clone CI of c33ebfb: 12 detaches for 9 such gaps).
        starts = sorted(s["start_ns"] for s in self.rec.spans("name = 'bl_work'") if "weight" in s["args"])
        gaps = [(a, b) for a, b in zip(starts, starts[1:]) if b - a > 100 * 1000 * 1000]
        self.assertGreater(len(gaps), 3, self.rec.stderr)
        detaches = [(e["ts_ns"], json.loads(e["args"])) for e in self.rec.query(
            "SELECT ts_ns, args FROM events WHERE layer = 'eacgm' AND name = 'probe_detach' ORDER BY ts_ns")]
        for ts, args in detaches:
            self.assertEqual(args["end_ns"] - ts, args["dur_ns"])
            self.assertGreater(args["dur_ns"], 0)
        for (_, a), (b, _) in zip(detaches, detaches[1:]):
            self.assertLessEqual(a["end_ns"], b, "two detaches at once: one kept twice")
        # The first is the relink that set the hot probe apart, while its
        # first burst runs; each later one ends a burst: no call starts in
        # the second half of it, and no two end between the same two calls.
        ends_after = {}
        for ts, args in detaches[1:]:
            self.assertEqual([s for s in starts if ts + args["dur_ns"] // 2 <= s <= args["end_ns"]], [],
                             (ts, args))
            after = bisect.bisect_right(starts, args["end_ns"])
            self.assertNotIn(after, ends_after, (ends_after.get(after), (ts, args)))
            ends_after[after] = (ts, args)
        for a, b in gaps:
            self.assertEqual(len([ts for ts, x in detaches if a < x["end_ns"] < b]), 1, (a, b, detaches))
        # and only the last burst's ends after the last call
        self.assertEqual(len([ts for ts, x in detaches if x["end_ns"] > starts[-1]]), 1, detaches)

    def test_what_was_throttled_is_said(self):
        meta = E.meta(self.rec.db)
        self.assertEqual(float(meta["overhead_budget_pct"]), 2.0)
        throttled = json.loads(meta["overhead_throttled"])
        self.assertEqual([(t["layer"], t["function"]) for t in throttled], [("budget", "bl_work")])
        self.assertGreater(float(meta["overhead_full_pct_max"]), 2.0)
        events = self.rec.query("SELECT layer, name, args FROM events WHERE name = 'overhead_budget'")
        self.assertEqual([(e["layer"], json.loads(e["args"])["throttled"]) for e in events],
                         [("eacgm", ["budget/bl_work"])])
        self.assertIn("overhead budget 2.0%: traced calls would cost", self.rec.stderr)
        self.assertIn("  budget bl_work: attached", self.rec.stderr)
        row = [l for l in self.rec.stderr.splitlines() if l.startswith("  bl_work ")]
        self.assertEqual(len(row), 1, self.rec.stderr)
        self.assertIn(" ~", row[0])
        trace = E.load_trace(self.rec.trace)
        self.assertEqual(json.loads(trace["otherData"]["overhead_throttled"])[0]["function"], "bl_work")

    def test_cost_is_a_share_of_the_calling_threads_cpu(self):
        # A second thread spins throughout, making no traced call, as
        # OpenBLAS's workers do beside a training loop: the process uses
        # twice the CPU of the thread the traps slow. The budget's first
        # decision (every probe attached over its interval, seconds 2 to 4
        # with --budget-after 2) weighs a call's cost (hit_ns: the trap and
        # the programs' own time) against the calling thread's own CPU, as
        # the program measured it over those seconds; against the process's
        # CPU it came out at half.
        rec = E.record(self.tmp, [BUDGET_LOAD, "6", str(WORK_NS), "spin"], "--layers", "cuda", "--spec",
                       self.spec, "--no-detect", "--budget-after", "2", name="spin")
        self.assertEqual(rec.rc, 0, rec.stderr)
        made = json.loads(rec.stdout)
        self.assertEqual(made["spinning"], 1)
        events = rec.query("SELECT args FROM events WHERE name = 'overhead_budget' ORDER BY ts_ns")
        self.assertGreater(len(events), 0, rec.stderr)
        first = json.loads(events[0]["args"])
        calls = sum(w[0] for w in made["windows"][2:4])
        cpu = sum(w[1] for w in made["windows"][2:4])
        paid = first["hit_ns"] * calls
        ratio = first["full_pct"] / (100 * paid / (cpu - paid))
        self.assertGreater(ratio, 0.75, (first, made["windows"]))
        self.assertLess(ratio, 1.33, (first, made["windows"]))
        meta = E.meta(rec.db)
        self.assertEqual(meta["overhead_share_of"], "calling_threads")
        # The programs timed themselves: part of a call's cost, and less
        # than the timed trap, which ran them too (for a probe that reads
        # nothing, as this one).
        program, trap = float(meta["overhead_hit_program_ns"]), float(meta["overhead_hit_trap_ns"])
        self.assertGreater(program, 0)
        self.assertLess(program, trap)
        self.assertIn("of the calling threads' CPU", rec.stderr)

    def test_budget_off_records_every_call(self):
        rec = E.record(self.tmp, [BUDGET_LOAD, "3", str(WORK_NS)], "--layers", "cuda", "--spec", self.spec,
                       "--no-detect", "--budget-after", "0", "--overhead-budget", "0", name="off")
        self.assertEqual(rec.rc, 0, rec.stderr)
        made = json.loads(rec.stdout)
        self.assertEqual(len(rec.spans("name = 'bl_work'")), made["work_calls"])
        self.assertNotIn("overhead_throttled", E.meta(rec.db))


if __name__ == "__main__":
    unittest.main()
