# SPDX-License-Identifier: Apache-2.0
"""A hang seen while it lasts (--hang-after): in a 2-rank gloo job, rank 1
stalls before its all_reduce number 2 (seq 2) until the test opens a gate,
which it does only once eacgm has printed the hang: rank 0's allreduce, its
sequence number, missing_ranks [1] and the Python line waiting on it. The
test waits on eacgm's line, never on a duration."""
import json
import os
import unittest

import eacgm_e2e as E

JOB = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "gloo_job.py")
LINE = (r"eacgm: warning: hang: gloo allreduce in flight for [0-9.]+ s: pid (\d+) tid \d+, rank 0 of 2, seq 2, "
        r"missing_ranks \[1\]; python: (.*)$")


class HangWhileItLasts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.out = os.path.join(cls.tmp, "job.json")
        gate = os.path.join(cls.tmp, "gate")
        started = E.start_record(cls.tmp, "--layers", "gloo,torch,python", "--hang-after", "1", "--",
                                 "/usr/bin/python3", JOB, cls.out, "--steps", "1", "--stall-rank", "1",
                                 "--gate", gate)
        cls.line = started.wait_for_line(LINE, timeout=180)
        with open(gate, "w"):
            pass
        cls.rec = started.wait()
        with open(cls.out) as f:
            cls.job = {int(r): v for r, v in json.load(f).items()}
        cls.events = E.query(cls.rec.db, "SELECT ts_ns, layer, name, key, pid, tid, args FROM events "
                             "WHERE name LIKE 'hang%' ORDER BY ts_ns")
        for e in cls.events:
            e["args"] = json.loads(e["args"])

    def test_the_job_ran_whole(self):
        self.assertEqual(self.rec.rc, 0, self.rec.stderr)

    def test_the_line_names_rank_0s_process_and_the_python_line_waiting(self):
        self.assertEqual(int(self.line.group(1)), self.job[0]["pid"])
        self.assertIn("gloo_job.py", self.line.group(2))

    def test_the_hang_event_was_told_while_rank_1_stalled(self):
        hangs = [e for e in self.events if e["name"] == "hang"]
        self.assertEqual(len(hangs), 1, self.events)
        h = hangs[0]
        self.assertEqual((h["layer"], h["key"], h["pid"]), ("gloo", "allreduce", self.job[0]["pid"]))
        a = h["args"]
        self.assertEqual((a["rank"], a["nranks"], a["seq"], a["missing_ranks"], a["ranks_not_seen"]),
                         (0, 2, 2, [1], []))
        self.assertGreaterEqual(a["age_s"], 1.0)
        stall = self.job[1]["stall"]  # rank 1's wait at the gate, as it measured it
        self.assertTrue(stall[0] < h["ts_ns"] < stall[1], (stall, h["ts_ns"]))
        self.assertTrue(any("gloo_job.py" in f for f in a["python_stack"]), a["python_stack"])

    def test_its_end_is_told_once_the_collective_returned(self):
        over = [e for e in self.events if e["name"] == "hang_over"]
        self.assertEqual(len(over), 1, self.events)
        self.assertEqual((over[0]["key"], over[0]["pid"]), ("allreduce", self.job[0]["pid"]))
        self.assertGreater(over[0]["ts_ns"], self.job[1]["stall"][1])
        span = E.load_spans(self.rec.db, "layer = 'gloo' AND pid = ? AND name = 'allreduce'",
                            (self.job[0]["pid"],))
        seq2 = [s for s in span if s["args"]["seq"] == 2]
        self.assertEqual(len(seq2), 1)
        self.assertEqual(seq2[0]["start_ns"], over[0]["args"]["start_ns"])


if __name__ == "__main__":
    unittest.main()
