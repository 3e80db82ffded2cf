# SPDX-License-Identifier: Apache-2.0
"""Spans kept in blocks (schema 4) read by SQL three ways, each checked
against what the traced programs know, not against another of the three:
`eacgm sql`, the sqlite3 shell with eacgm_sql.so loaded, and Python's
sqlite3 with it loaded; and the row-per-span copy `export --sqlite` writes,
read by a plain SQLite. docs/store.md."""
import json
import os
import sqlite3
import subprocess
import unittest

import eacgm_e2e as E

CALLS = 3000
PACE_US = 1000  # 3 s of calls: several batches, so several blocks
RECURSIVE = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "py_recursive.py")
TRAIN = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "torch_train.py")


class SqlOnBlocks(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        spec = E.write_json(os.path.join(cls.tmp, "testlib.json"), E.TESTLIB_SPEC)
        # tl_noop(i) for i in 0..CALLS-1, one after another, then tl_eight(1..8) CALLS times.
        cls.noop = E.record(cls.tmp, [E.TESTLIB_CALLS, "noop", str(CALLS)], "--layers", "cuda", "--spec", spec,
                            "--no-detect", name="noop", env={"PACE_US": str(PACE_US)})
        cls.eight = E.record(cls.tmp, [E.TESTLIB_CALLS, "eight", str(CALLS)], "--layers", "cuda", "--spec", spec,
                             "--no-detect", name="eight")
        cls.truth = os.path.join(cls.tmp, "passes.json")
        cls.py = E.record(cls.tmp, ["/usr/bin/python3", RECURSIVE, cls.truth, "2"], "--layers", "python",
                          "--no-detect", name="py")
        # 2 Linear layers, 3 steps: 6 aten::linear calls, each under Linear.forward.
        cls.torch = E.record(cls.tmp, ["/usr/bin/python3", TRAIN, "2", "3"], "--layers", "torch,python",
                             "--no-detect", name="torch")

    def setUp(self):
        for rec in (self.noop, self.eight, self.py, self.torch):
            self.assertEqual(rec.rc, 0, rec.stderr)

    def sql(self, db, query, *options):
        r = E.eacgm("sql", *options, db, query)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def shell(self, db, query):
        r = E.run(["sqlite3", "-cmd", ".load " + E.SQL_MODULE, db, query])
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_blocks_hold_the_spans(self):
        # The file keeps its spans in several blocks, none of them as rows.
        con = sqlite3.connect(self.noop.db)
        try:
            blocks, n = con.execute("SELECT count(*), sum(n) FROM span_blocks").fetchone()
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        finally:
            con.close()
        self.assertEqual(n, CALLS)
        self.assertGreater(blocks, 1)
        self.assertNotIn("span_rows", tables)

    def test_exact_counts_and_arguments_three_ways(self):
        want = "%d|%d|%d\n" % (CALLS, 0, CALLS - 1)
        q = "SELECT count(*), min(json_extract(args, '$.x')), max(json_extract(args, '$.x')) FROM spans " \
            "WHERE name = 'tl_noop'"
        self.assertEqual(self.sql(self.noop.db, q, "--no-header"), want)
        self.assertEqual(self.shell(self.noop.db, q), want)
        con = E.connect(self.noop.db)
        try:
            xs = [r[0] for r in con.execute("SELECT json_extract(args, '$.x') FROM spans WHERE name = 'tl_noop' "
                                            "ORDER BY id")]
        finally:
            con.close()
        self.assertEqual(xs, list(range(CALLS)))  # every call, in the order it was made
        # tl_eight(1..8) traced with g and h: every call's, whatever else a
        # call's args hold (runq_ns where its thread waited for a CPU).
        rows = self.sql(self.eight.db, "SELECT count(*) AS n, min(json_extract(args, '$.g')) AS g0, "
                                       "max(json_extract(args, '$.g')) AS g1, min(json_extract(args, '$.h')) AS h0, "
                                       "max(json_extract(args, '$.h')) AS h1 FROM spans WHERE name = 'tl_eight'",
                        "--format", "json").splitlines()
        self.assertEqual([json.loads(r) for r in rows], [{"n": CALLS, "g0": 7, "g1": 7, "h0": 8, "h1": 8}])

    def test_time_ranges_and_ids_pick_exactly_the_calls_in_them(self):
        # Calls are made one after another: those that began at or after
        # call K's start are calls K.., whichever blocks they are in.
        for k in (0, 1, CALLS // 3, CALLS - 1):
            q = ("SELECT count(*), min(json_extract(args, '$.x')) FROM spans WHERE name = 'tl_noop' AND start_ns >= "
                 "(SELECT start_ns FROM spans WHERE name = 'tl_noop' AND json_extract(args, '$.x') = %d)" % k)
            self.assertEqual(self.sql(self.noop.db, q, "--no-header"), "%d|%d\n" % (CALLS - k, k))
        first, last = self.sql(self.noop.db, "SELECT min(id), max(id) FROM spans", "--no-header").strip().split("|")
        self.assertEqual(int(last) - int(first) + 1, CALLS)
        mid = int(first) + CALLS // 2
        got = self.sql(self.noop.db, "SELECT count(*) FROM spans WHERE id > %d AND id <= %d" % (mid, mid + 100),
                       "--no-header")
        self.assertEqual(got, "100\n")
        desc = self.sql(self.noop.db, "SELECT json_extract(args, '$.x') FROM spans ORDER BY id DESC LIMIT 3",
                        "--no-header")
        self.assertEqual(desc.split(), [str(CALLS - 1), str(CALLS - 2), str(CALLS - 3)])

    def test_joins_with_processes_and_stacks(self):
        got = self.shell(self.noop.db, "SELECT p.comm, count(*) FROM spans s JOIN processes p ON p.pid = s.pid "
                                       "GROUP BY p.comm")
        self.assertEqual(got, "testlib_calls|%d\n" % CALLS)
        got = self.sql(self.torch.db, "SELECT count(*), json_extract(py_stack, '$[0]'), "
                                      "json_extract(py_stack, '$[#-1]') LIKE '<module> (torch_train.py:%' "
                                      "FROM spans WHERE name = 'aten::linear' GROUP BY 2, 3", "--no-header")
        self.assertRegex(got, r"^6\|Linear\.forward \(linear\.py:\d+\)\|1\n$")

    def test_durations_within_what_the_program_measured(self):
        # The recursive function's outermost span of each pass (inside no
        # other walk span) lasts no longer than the program's own wall clock
        # around that pass (perf_counter_ns), and not 5% less.
        with open(self.truth) as f:
            walls = json.load(f)["pass_wall_ns"]
        con = E.connect(self.py.db)
        try:
            durs = [r[0] for r in con.execute(
                "SELECT o.dur_ns FROM spans o WHERE o.layer = 'python' AND o.name = 'walk' AND NOT EXISTS ("
                " SELECT 1 FROM spans i WHERE i.layer = 'python' AND i.name = 'walk' AND i.id != o.id"
                " AND i.start_ns <= o.start_ns AND o.start_ns + o.dur_ns <= i.start_ns + i.dur_ns)"
                " ORDER BY o.start_ns")]
        finally:
            con.close()
        self.assertEqual(len(durs), len(walls), durs)
        for dur, wall in zip(durs, walls):
            self.assertLessEqual(dur, wall)
            self.assertGreater(dur, 0.95 * wall)

    def test_a_copy_with_a_row_per_span_reads_without_the_module(self):
        flat = os.path.join(self.tmp, "flat.db")
        r = E.eacgm("export", self.noop.db, "--sqlite", flat)
        self.assertEqual(r.returncode, 0, r.stderr)
        con = sqlite3.connect(flat)  # no module loaded
        try:
            rows = con.execute("SELECT * FROM spans ORDER BY id").fetchall()
            version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        finally:
            con.close()
        con = E.connect(self.noop.db)
        try:
            self.assertEqual(rows, con.execute("SELECT * FROM spans ORDER BY id").fetchall())
        finally:
            con.close()
        self.assertEqual(version, "3")
        self.assertEqual(len(rows), CALLS)
        # eacgm reads the copy as it reads the recording.
        self.assertEqual(E.eacgm("summary", flat).stdout, E.eacgm("summary", self.noop.db).stdout)
        again = E.eacgm("export", self.noop.db, "--sqlite", flat)
        self.assertEqual(again.returncode, 1)
        self.assertIn("exists", again.stderr)

    def test_without_the_module_spans_says_what_is_missing(self):
        con = sqlite3.connect(self.noop.db)
        try:
            self.assertEqual(con.execute("SELECT count(*) FROM processes").fetchone()[0], 1)
            with self.assertRaises(sqlite3.OperationalError) as e:
                con.execute("SELECT count(*) FROM spans")
        finally:
            con.close()
        self.assertIn("no such module: eacgm_spans", str(e.exception))

    def test_bad_input_is_a_clear_error(self):
        r = E.eacgm("sql", self.noop.db, "SELEC 1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("syntax error", r.stderr)
        r = E.eacgm("sql", self.noop.db, "DELETE FROM processes")
        self.assertEqual(r.returncode, 1)
        self.assertIn("readonly", r.stderr)
        r = E.eacgm("sql", os.path.join(self.tmp, "none.db"), "SELECT 1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot open recording", r.stderr)


if __name__ == "__main__":
    unittest.main()
