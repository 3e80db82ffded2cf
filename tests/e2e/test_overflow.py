# SPDX-License-Identifier: Apache-2.0
"""A ring buffer too small for the event rate: every call is either recorded
or counted as lost, never silently missing."""
import os
import unittest

import eacgm_e2e as E

CALLS = 200000


class Overflow(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        E.require_root()
        tmp = E.make_tempdir(cls)
        spec = E.write_json(os.path.join(tmp, "spec.json"), E.TESTLIB_SPEC)
        cls.rec = E.record(tmp, [E.TESTLIB_CALLS, "noop", str(CALLS)], "--layers", "cuda", "--spec", spec,
                           "--ring-buffer-kb", "4")
        cls.drops = E.drops(cls.rec.db)

    def test_recorded(self):
        self.assertEqual(self.rec.rc, 0, self.rec.stderr)

    def test_every_call_recorded_or_counted(self):
        n = self.rec.query("SELECT count(*) AS n FROM spans")[0]["n"]
        lost = self.drops["ring_buffer_full"]
        self.assertGreater(lost, 0, "a 4 KiB ring buffer kept up with %d calls" % CALLS)
        self.assertEqual(n + lost, CALLS, (n, self.drops))
        self.assertEqual({r: c for r, c in self.drops.items() if r != "ring_buffer_full"},
                         {r: 0 for r in E.DROP_REASONS if r != "ring_buffer_full"})

    def test_recorded_spans_are_distinct_calls_in_order(self):
        xs = [s["args"]["x"] for s in self.rec.spans()]
        self.assertEqual(xs, sorted(set(xs)))
        self.assertTrue(0 <= xs[0] and xs[-1] < CALLS)

    def test_summary_reports_lost_records(self):
        lost = self.drops["ring_buffer_full"]
        self.assertRegex(self.rec.stderr, r"(?m)^lost records: %d \(ring buffer full: %d\)$" % (lost, lost))
        r = E.eacgm("summary", self.rec.db)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"(?m)^lost records: %d \(ring buffer full: %d\)$" % (lost, lost))
        self.assertRegex(r.stdout, r"(?m)^\s+tl_noop\s+%d\s+0\s" % (CALLS - lost))


if __name__ == "__main__":
    unittest.main()
