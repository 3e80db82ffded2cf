# SPDX-License-Identifier: Apache-2.0
"""eacgm merge on three gloo ranks, each in a network namespace of its own
(the test's: joined by veth links to a bridge in a fourth), each recorded by
an eacgm of its own, as ranks on three nodes would be. Two of the recordings'
wall offsets are then made wrong (+50 ms, -30 ms) so that the merge has a
residual to find from the collectives. Rank 2 sleeps before its all_reduce
number 2 (seq 2): the straggler the summary and the trace must name."""
import json
import os
import re
import sqlite3
import subprocess
import sys
import unittest

import eacgm_e2e as E

sys.path.insert(0, os.path.join(E.SOURCE_DIR, "tests", "testprogs"))
from netns import IP, Namespaces  # noqa: E402

JOB = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "gloo_job.py")
WORLD = 3
STEPS = 3
DELAY_MS = 100
WRONG_MS = {1: 50, 2: -30}  # added to the recordings' wall offsets
MS = 1_000_000


def start_rank(tmp, ns, rank, out, store):
    """`eacgm record --layers gloo -o rR.db -- ip netns exec NS python3 gloo_job.py ...`:
    eacgm runs outside the namespace and follows ip into python3 (an exec)."""
    cmd = [E.EACGM, "record", "--layers", "gloo", "-o", os.path.join(tmp, "r%d.db" % rank), "--",
           IP, "netns", "exec", ns, "/usr/bin/python3", JOB, out, "--rank", str(rank), "--world", str(WORLD),
           "--store", store, "--steps", str(STEPS), "--delay-rank", "2", "--delay-ms", str(DELAY_MS)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, GLOO_SOCKET_IFNAME="eth0"), start_new_session=True)


def shift_wall_offset(db, ms):
    con = sqlite3.connect(db)
    try:
        con.execute("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + ? AS TEXT) WHERE key = 'wall_offset_ns'",
                    (ms * MS,))
        con.commit()
    finally:
        con.close()


class MergeNamespacedRanks(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        nets = Namespaces(WORLD, prefix="eacgm-m")
        cls.addClassCleanup(nets.delete)
        nets.create()
        out, store = os.path.join(cls.tmp, "job.json"), os.path.join(cls.tmp, "store")
        procs = [start_rank(cls.tmp, ns, r, out, store) for r, ns in enumerate(nets.ranks)]
        for p in procs:
            cls.addClassCleanup(E.kill_group, p.pid)
        cls.records = [p.communicate(timeout=400) + (p.returncode,) for p in procs]
        cls.dbs = [os.path.join(cls.tmp, "r%d.db" % r) for r in range(WORLD)]
        cls.job = {}
        for r in range(WORLD):
            with open("%s.%d" % (out, r)) as f:
                cls.job[r] = json.load(f)
        cls.own_offsets = [int(E.meta(db)["wall_offset_ns"]) for db in cls.dbs]
        for r, ms in WRONG_MS.items():
            shift_wall_offset(cls.dbs[r], ms)
        cls.all, cls.trace = os.path.join(cls.tmp, "all.db"), os.path.join(cls.tmp, "all.json")
        cls.merge = E.eacgm("merge", *cls.dbs, "-o", cls.all, "--perfetto", cls.trace)
        cls.spans = E.load_spans(cls.all, "layer = 'gloo'") if cls.merge.returncode == 0 else []

    def rounds(self):
        """The merged gloo spans by (seq, name): one per rank."""
        out = {}
        for s in self.spans:
            out.setdefault((s["args"]["seq"], s["name"]), []).append(s)
        return out

    def test_each_rank_recorded_in_its_namespace(self):
        for r, (stdout, stderr, rc) in enumerate(self.records):
            self.assertEqual(rc, 0, stderr)
            self.assertIn("gloo_job: rank %d done" % r, stdout)
            self.assertEqual(E.drops(self.dbs[r]), {k: 0 for k in E.DROP_REASONS})
            ranks = {s["args"]["rank"] for s in E.load_spans(self.dbs[r], "layer = 'gloo'")}
            self.assertEqual(ranks, {r})

    def test_merge_succeeds(self):
        self.assertEqual(self.merge.returncode, 0, self.merge.stderr)
        self.assertIn("merged 3 recordings into " + self.all, self.merge.stdout)
        self.assertIn("wrote " + self.trace, self.merge.stdout)

    def test_every_collective_matched_across_the_three_ranks(self):
        rounds = self.rounds()
        seqs = sorted(seq for seq, _ in rounds)
        self.assertEqual(seqs, list(range(len(seqs))))  # one name per seq, none missing
        self.assertGreaterEqual(len(seqs), 7 + STEPS)
        for key, spans in rounds.items():
            self.assertEqual(sorted(s["args"]["rank"] for s in spans), [0, 1, 2], key)

    def test_residuals_found_and_recorded(self):
        merged_from = json.loads(E.meta(self.all)["merged_from"])
        self.assertEqual([m["file"] for m in merged_from], self.dbs)
        n = len(self.rounds())
        self.assertEqual(merged_from[0]["residual_ns"], 0)
        for r, ms in WRONG_MS.items():
            m = merged_from[r]
            self.assertEqual(m["pid_offset"], r * 10_000_000)
            self.assertEqual(m["wall_offset_ns"], self.own_offsets[r] + ms * MS)
            self.assertEqual(m["clock_shift_ns"], m["wall_offset_ns"] - self.own_offsets[0])
            # One machine, one clock: what the wall offsets got wrong is what was added.
            self.assertLess(abs(m["residual_ns"] + ms * MS), 1 * MS, m)
            self.assertEqual(m["residual_rounds"], n)

    def original(self):
        """The recordings' own gloo spans by (rank, seq, name): all on this
        machine's one monotonic clock, which input 0's is."""
        out = {}
        for r, db in enumerate(self.dbs):
            for s in E.load_spans(db, "layer = 'gloo'"):
                out[(r, s["args"]["seq"], s["name"])] = s
        return out

    def test_alignment_restores_the_one_clock(self):
        # The wall offsets were made wrong by +50 and -30 ms: every span is
        # back where its machine's clock put it, to well under a millisecond.
        original = self.original()
        self.assertEqual(len(original), len(self.spans))
        for s in self.spans:
            o = original[(s["args"]["rank"], s["args"]["seq"], s["name"])]
            self.assertLess(abs(s["start_ns"] - o["start_ns"]), 1 * MS, (s, o))
            self.assertEqual(s["dur_ns"], o["dur_ns"])

    def test_each_all_reduce_ends_together_after_alignment(self):
        # The ranks' ends of an all-reduce are as close after the merge as
        # they were on the one clock (within a millisecond). How close they
        # were is the ranks' doing, not the merge's: on a loaded machine
        # (three ranks and their eacgms share its cores, and whatever else
        # runs) a rank descheduled at its end spreads them by milliseconds,
        # so no bound is put on the spread itself.
        original = self.original()
        allreduces = [v for (seq, name), v in self.rounds().items() if name == "allreduce"]
        self.assertGreaterEqual(len(allreduces), 4 + STEPS)
        for spans in allreduces:
            ends = [s["start_ns"] + s["dur_ns"] for s in spans]
            true_ends = [o["start_ns"] + o["dur_ns"] for o in
                         (original[(s["args"]["rank"], s["args"]["seq"], s["name"])] for s in spans)]
            spread, true_spread = max(ends) - min(ends), max(true_ends) - min(true_ends)
            self.assertLess(abs(spread - true_spread), 1 * MS, spans)

    def test_processes_labelled_by_host_and_rank(self):
        meta = E.meta(self.all)
        hostnames = [E.meta(db).get("hostname") for db in self.dbs]
        origins = json.loads(meta["process_origins"])
        trace = E.load_trace(self.trace)
        names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
                 if e.get("ph") == "M" and e["name"] == "process_name"}
        for r in range(WORLD):
            pid = self.job[r]["pid"]
            merged = pid + r * 10_000_000
            host = "%s/r%d" % (hostnames[r], r) if hostnames[r] else "r%d" % r
            self.assertEqual(origins[str(merged)], {"host": host, "pid": pid, "input": r})
            self.assertEqual(names[merged], "python3 (%d) %s rank %d" % (pid, host, r))
            self.assertEqual({s["pid"] for s in self.spans if s["args"]["rank"] == r}, {merged})

    def test_flows_link_each_seq_across_ranks_in_arrival_order(self):
        trace = E.load_trace(self.trace)
        events = {}
        for e in E.x_events(trace):
            if e["cat"] == "gloo":
                events.setdefault((e["args"]["seq"], e["name"]), []).append(e)
        self.assertEqual(sorted(events), sorted(self.rounds()))
        ids = set()
        for key, evs in events.items():
            evs.sort(key=lambda e: (e["ts"], e["args"]["rank"]))
            self.assertEqual(len({e["bind_id"] for e in evs}), 1, key)
            ids.add(evs[0]["bind_id"])
            flags = [(e.get("flow_in", False), e.get("flow_out", False)) for e in evs]
            self.assertEqual(flags, [(False, True), (True, True), (True, False)], key)
            skew_ms = (evs[-1]["ts"] - evs[0]["ts"]) / 1000
            for e in evs:
                self.assertAlmostEqual(e["args"]["arrival_skew_ms"], skew_ms, delta=1e-5)
                self.assertEqual(e["args"]["last_rank"], evs[-1]["args"]["rank"])
        self.assertEqual(len(ids), len(events))  # one flow per seq

    def test_summary_names_the_straggler(self):
        s = E.eacgm("summary", self.all)
        self.assertEqual(s.returncode, 0, s.stderr)
        n = len(self.rounds())
        self.assertIn("collectives across ranks: %d rounds, %d with every rank seen" % (n, n), s.stdout)
        # Rank 2 slept DELAY_MS before all_reduce 2 (seq 2): the largest skew, rank 2 last.
        lines = s.stdout.splitlines()
        head = lines.index(next(l for l in lines if l.startswith("  largest arrival skew")))
        top = lines[head + 1].split()  # gloo allreduce SEQ RANKS SKEW UNIT LAST
        self.assertEqual(top[:4] + top[-1:], ["gloo", "allreduce", "2", "3", "2"], lines[head + 1])
        d0, d1 = self.job[2]["delay"]
        starts = sorted(x["start_ns"] for x in self.rounds()[(2, "allreduce")])
        self.assertGreaterEqual(starts[-1] - starts[0], (d1 - d0) - 5 * MS)
        last = re.search(r"^  arrived last: (.*)$", s.stdout, re.M)
        self.assertIsNotNone(last, s.stdout)
        counts = dict(re.findall(r"gloo rank (\d) x(\d+)", last.group(1)))
        self.assertEqual(sum(int(c) for c in counts.values()), n)
        self.assertGreaterEqual(int(counts.get("2", 0)), 1)


if __name__ == "__main__":
    unittest.main()
