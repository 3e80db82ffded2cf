# SPDX-License-Identifier: Apache-2.0
"""A 2-rank data-parallel job over gloo (Debian's torch and libgloo), recorded
with the gloo layer: each collective's span is its execution on gloo's worker
thread, with the bytes, rank, world size and the per-group sequence number
that every rank gives the same collective (tests/testprogs/gloo_job.py), and
what torch's enqueue of it on the caller's thread read (the tensor's dtype and
shape, the reduce op, the Python line), joined by the group and seq."""
import collections
import json
import os
import re
import socket
import unittest

import eacgm_e2e as E

JOB = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "gloo_job.py")
STEPS = 3


# Where the job calls dist.all_reduce / dist.broadcast: the Python line each
# collective's span is given from the enqueue that issued it.
with open(JOB) as _f:
    _lines = _f.read().split("\n")
LINE = {op: "gloo_job.py:%d" % (1 + next(i for i, l in enumerate(_lines) if "lambda: dist.%s(t" % op in l))
        for op in ("all_reduce", "broadcast")}
# Args that differ per run (pointers, times, threads), checked apart.
RUN_ARGS = ("group", "issued_ns", "issued_tid", "work")


def explicit(rank):
    """The job's own collectives on one rank, in order: name, bytes, args."""
    ar = [("allreduce", 4000, {"count": 1000, "element_size": 4, "nranks": 2, "rank": rank, "seq": i,
                               "tensor": "float32[1000]", "reduce_op": "sum",
                               "issued_by": "c10d::ProcessGroupGloo::allreduce"})
          for i in range(4)]
    bc = [("broadcast", 2048, {"count": 256, "element_size": 8, "nranks": 2, "rank": rank, "root": 0, "seq": 4 + i,
                               "tensor": "int64[256]", "issued_by": "c10d::ProcessGroupGloo::broadcast"})
          for i in range(3)]
    return ar + bc


class GlooRecording(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.out = os.path.join(cls.tmp, "job.json")
        cls.rec = E.record(cls.tmp, ["/usr/bin/python3", JOB, cls.out, "--steps", str(STEPS), "--delay-rank", "1",
                                     "--delay-ms", "200"], "--layers", "gloo,torch,python")
        with open(cls.out) as f:
            cls.job = {int(r): v for r, v in json.load(f).items()}
        cls.pid_rank = {v["pid"]: r for r, v in cls.job.items()}
        spans = cls.rec.spans("layer = 'gloo'")
        cls.by_rank = collections.defaultdict(list)
        for s in spans:
            cls.by_rank[cls.pid_rank[s["pid"]]].append(s)
        for r in cls.by_rank:
            cls.by_rank[r].sort(key=lambda s: s["args"]["seq"])

    def test_recording(self):
        self.assertEqual(self.rec.rc, 0, self.rec.stderr)
        self.assertEqual(E.drops(self.rec.db), {r: 0 for r in E.DROP_REASONS})
        self.assertEqual(sorted(self.by_rank), [0, 1])
        # The machine's name, which eacgm merge labels its processes with.
        self.assertEqual(E.meta(self.rec.db)["hostname"], socket.gethostname())

    def test_each_ranks_collectives_exactly(self):
        for r in (0, 1):
            got = [(s["name"], s["bytes"], {k: v for k, v in s["args"].items() if k not in RUN_ARGS})
                   for s in self.by_rank[r][:7]]
            self.assertEqual(got, explicit(r))
            for s in self.by_rank[r]:
                self.assertEqual((s["args"]["rank"], s["args"]["nranks"]), (r, 2), s)

    def test_sequence_numbers_match_across_ranks(self):
        # DDP adds its own collectives (its parameters' shapes checked by an
        # allgather, their broadcast, then one allreduce per step's bucket):
        # every rank numbers them alike, from 0 with no gaps.
        def key(s):
            return (s["args"]["seq"], s["name"], s["bytes"])
        seqs = [[key(s) for s in self.by_rank[r]] for r in (0, 1)]
        self.assertEqual(seqs[0], seqs[1])
        self.assertEqual([k[0] for k in seqs[0]], list(range(len(seqs[0]))))
        steps = [k for k in seqs[0] if k[0] >= 7 and k[1] == "allreduce"]
        self.assertGreaterEqual(len(steps), STEPS)

    def test_spans_cover_the_execution_inside_the_callers_call(self):
        # Each explicit collective's span lies within the interval the rank
        # measured around dist.all_reduce / dist.broadcast (the same clock).
        for r in (0, 1):
            measured = self.job[r]["collectives"]
            for (op, i, t0, t1), s in zip(measured, self.by_rank[r][:7]):
                self.assertEqual(s["name"], op.replace("_", ""))
                self.assertGreaterEqual(s["start_ns"], t0, (r, op, i))
                self.assertLessEqual(s["start_ns"] + s["dur_ns"], t1, (r, op, i))

    def test_a_delayed_rank_lengthens_the_others_collective_and_straggles(self):
        # Rank 1 sleeps before all_reduce 2 (seq 2), measuring the sleep: rank
        # 0's allreduce lasts until rank 1's sleep is over (an enqueue-only
        # span would be microseconds), and rank 1 arrives last.
        d0, d1 = self.job[1]["delay"]
        self.assertGreater(d1, d0)
        r0, r1 = self.by_rank[0][2], self.by_rank[1][2]
        self.assertEqual((r0["args"]["seq"], r1["args"]["seq"]), (2, 2))
        self.assertGreaterEqual(r0["start_ns"] + r0["dur_ns"], d1)
        self.assertGreaterEqual(r1["start_ns"], d1)
        self.assertLess(r0["start_ns"], r1["start_ns"])
        # The summary's stragglers: seq 2's round has the largest arrival
        # skew, rank 1's start less rank 0's, and rank 1 arrived last.
        m = re.search(r"largest arrival skew .*\n\s+gloo allreduce\s+(\d+)\s+2\s+([\d.]+) ms\s+(\d+)\n",
                      self.rec.stdout + self.rec.stderr)
        self.assertIsNotNone(m, self.rec.stdout + self.rec.stderr)
        skew_ms = (r1["start_ns"] - r0["start_ns"]) / 1e6
        self.assertEqual((int(m.group(1)), int(m.group(3))), (2, 1))
        self.assertAlmostEqual(float(m.group(2)), skew_ms, delta=skew_ms * 0.005)

    def test_each_collective_is_joined_to_the_enqueue_that_issued_it(self):
        # Every collective of the job (its own and DDP's) ran work that a
        # ProcessGroupGloo call on the rank's main thread enqueued: the
        # span names that call, its thread and start (the enqueue span's own),
        # and was given its group, tensor and Python stack.
        for r in (0, 1):
            pid = self.job[r]["pid"]
            enq = {s["args"]["seq"]: s for s in self.rec.spans(
                "layer = 'torch' AND name LIKE 'c10d::ProcessGroupGloo::%' AND pid = ?", (pid,))}
            self.assertEqual(sorted(enq), [s["args"]["seq"] for s in self.by_rank[r]])
            for s in self.by_rank[r]:
                e = enq[s["args"]["seq"]]
                self.assertEqual(s["args"]["issued_by"], e["name"], s)
                self.assertEqual((s["args"]["issued_ns"], s["args"]["issued_tid"]), (e["start_ns"], e["tid"]))
                self.assertEqual(s["args"]["group"], e["args"]["group"])
                self.assertEqual(s["args"].get("tensor"), e["args"].get("tensor"))
                self.assertEqual(s["py_stack"], e["py_stack"])
                self.assertLessEqual(e["start_ns"], s["start_ns"])
            self.assertEqual(len({s["args"]["group"] for s in self.by_rank[r]}), 1)
            # The explicit ones were issued from the job's own lines, inside
            # the interval it measured around each call. (A stack is named
            # when eacgm reads it, within a poll period: a rank that exits
            # sooner, as this job's do in about 100 ms, can leave some
            # unnamed, each counted as lost.)
            for (op, i, t0, t1), s in zip(self.job[r]["collectives"], self.by_rank[r][:7]):
                if s["py_stack"]:
                    self.assertTrue(any(LINE[op] in f for f in s["py_stack"]), (op, s["py_stack"]))
                self.assertTrue(t0 <= s["args"]["issued_ns"] <= t1, (op, i))
            unnamed = sum(1 for e in enq.values() if not e["py_stack"])
            self.assertLessEqual(unnamed, sum(E.drops(self.rec.db, "python").values()))
        # The caller's wait on each explicit collective (dist.all_reduce and
        # dist.broadcast wait on the Work they enqueued) is joined to the
        # same enqueue: it carries the collective's seq and tensor.
        for r in (0, 1):
            pid = self.job[r]["pid"]
            waits = [w for w in self.rec.spans("layer = 'torch' AND name = 'c10d::Work::wait' AND pid = ?", (pid,))
                     if "issued_by" in w["args"]]
            by_seq = {w["args"]["seq"]: w for w in waits}
            for (op, i, t0, t1), s in zip(self.job[r]["collectives"], self.by_rank[r][:7]):
                w = by_seq[s["args"]["seq"]]
                self.assertEqual(w["tid"], pid)
                self.assertEqual((w["args"]["issued_by"], w["args"]["issued_ns"], w["args"]["tensor"]),
                                 (s["args"]["issued_by"], s["args"]["issued_ns"], s["args"]["tensor"]))
                # It waited for the collective: it ends after it, inside the call.
                self.assertGreaterEqual(w["start_ns"] + w["dur_ns"], s["start_ns"] + s["dur_ns"])
                self.assertLessEqual(w["start_ns"] + w["dur_ns"], t1)
        # DDP's gradient all-reduces were issued too, with their bucket's tensor.
        ddp = [s for s in self.by_rank[0][7:] if s["name"] == "allreduce"]
        self.assertGreaterEqual(len(ddp), STEPS)
        for s in ddp:
            self.assertTrue(s["args"]["tensor"].startswith("float32["), s["args"])
            self.assertEqual(s["args"]["reduce_op"], "sum")

    def test_the_enqueue_calls_are_in_the_torch_layer(self):
        # c10d::ProcessGroupGloo::allreduce only enqueues: one per explicit
        # allreduce and per DDP bucket, each far shorter than its execution.
        for r in (0, 1):
            pid = self.job[r]["pid"]
            enq = self.rec.spans("layer = 'torch' AND name = 'c10d::ProcessGroupGloo::allreduce' AND pid = ?", (pid,))
            ran = [s for s in self.by_rank[r] if s["name"] == "allreduce"]
            self.assertEqual(len(enq), len(ran))


if __name__ == "__main__":
    unittest.main()
