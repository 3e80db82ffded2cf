# SPDX-License-Identifier: Apache-2.0
"""User probe specs (--spec) on the test library: nesting, recursion, stack
arguments, out-pointers read at return, longjmp, and many calls."""
import os
import unittest

import eacgm_e2e as E


class SpecRecordings(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.spec = E.write_json(os.path.join(cls.tmp, "spec.json"), E.TESTLIB_SPEC)

    def record(self, pattern, n, ends=("",)):
        """The spans of testlib_calls PATTERN N; each call ended as `ends` allows (its ret_name)."""
        rec = E.record(self.tmp, [E.TESTLIB_CALLS, pattern, str(n)], "--layers", "cuda", "--spec", self.spec,
                       name=pattern)
        self.assertEqual(rec.rc, 0, rec.stderr)
        spans = rec.spans()
        self.assertEqual({(s["layer"], s["bytes"]) for s in spans}, {("testlib", 0)})
        self.assertLessEqual({s["ret_name"] for s in spans}, set(ends))
        self.assertEqual(len({(s["pid"], s["tid"]) for s in spans}), 1)  # one single-threaded process
        return rec, spans

    def assertNoDrops(self, rec, **expected):
        self.assertEqual(E.drops(rec.db), {r: expected.get(r, 0) for r in E.DROP_REASONS})

    def test_nest(self):
        rec, spans = self.record("nest", 50)
        outer = [s for s in spans if s["name"] == "tl_outer"]
        inner = [s for s in spans if s["name"] == "tl_inner"]
        self.assertEqual((len(outer), len(inner), len(spans)), (50, 100, 150))
        self.assertEqual({s["depth"] for s in outer}, {0})
        self.assertEqual({s["depth"] for s in inner}, {1})
        self.assertEqual([s["ret"] for s in outer], [2 * i + 3 for i in range(50)])  # tl_outer(i)
        for i, o in enumerate(outer):
            mine = [s for s in inner if E.contains(E.span_as_event(o), E.span_as_event(s), tol=0)]
            self.assertEqual([s["ret"] for s in mine], [i + 1, i + 2], o)
            self.assertEqual({s["tid"] for s in mine}, {o["tid"]})
        self.assertNoDrops(rec)

    def test_recurse(self):
        rec, spans = self.record("recurse", 20)
        self.assertEqual({s["name"] for s in spans}, {"tl_recurse"})
        self.assertEqual(sorted(s["depth"] for s in spans), list(range(21)))
        for s in spans:
            self.assertEqual(s["args"], {"depth": 20 - s["depth"]}, s)
            self.assertEqual(s["ret"], 20 - s["depth"], s)  # tl_recurse(d) returns d
        chain = sorted(spans, key=lambda s: s["depth"])
        for outer, inner in zip(chain, chain[1:]):
            self.assertLess(outer["start_ns"], inner["start_ns"])
            self.assertLess(inner["start_ns"] + inner["dur_ns"], outer["start_ns"] + outer["dur_ns"])
        self.assertNoDrops(rec)

    def test_stack_arguments(self):
        rec, spans = self.record("eight", 10)
        self.assertEqual([(s["name"], s["args"], s["ret"], s["depth"]) for s in spans],
                         [("tl_eight", {"g": 7, "h": 8}, 36, 0)] * 10)
        self.assertNoDrops(rec)

    def test_out_pointer_read_at_exit(self):
        rec, spans = self.record("out", 10)
        self.assertEqual([(s["name"], s["args"], s["ret"]) for s in spans],
                         [("tl_out", {"out": 1000 + i, "value": 1000 + i}, 7) for i in range(10)])
        self.assertNoDrops(rec)

    def test_longjmp(self):
        rec, spans = self.record("escape", 5, ends=("", "left by longjmp"))
        # tl_jump_deep never returns: the longjmp ends its span (inside
        # tl_escape's, which returns); nothing is lost.
        self.assertEqual([(s["name"], s["depth"], s["ret"], s["ret_name"]) for s in spans],
                         [row for i in range(5) for row in (("tl_escape", 0, i, ""),
                                                            ("tl_jump_deep", 1, 0, "left by longjmp"))])
        for esc, jump in zip(spans[::2], spans[1::2]):
            self.assertTrue(E.contains(E.span_as_event(esc), E.span_as_event(jump), tol=0))
        self.assertNoDrops(rec)

    def test_past_endbr64_where_it_is_the_same(self):
        # tl_cet's probe goes past its endbr64 (the push is emulated: not in
        # the note); tl_cet_loop loops back there, so its probe stays on the
        # endbr64 and each call is one span, not one per pass.
        rec, spans = self.record("cet", 20)
        self.assertEqual([(s["name"], s["args"], s["ret"], s["depth"]) for s in spans],
                         [("tl_cet", {"x": i}, i + 1, 0) for i in range(20)] +
                         [("tl_cet_loop", {"n": 3}, 0, 0)] * 20)
        self.assertNoDrops(rec)
        note = [l for l in rec.stderr.splitlines() if "single-steps" in l]
        self.assertEqual(len(note), 1, rec.stderr)
        self.assertIn("tl_cet_loop (`endbr64`)", note[0])
        self.assertNotIn("tl_cet (", note[0])

    def test_many_calls(self):
        rec, spans = self.record("noop", 1000)
        self.assertEqual([(s["name"], s["args"], s["ret"], s["depth"]) for s in spans],
                         [("tl_noop", {"x": i}, i, 0) for i in range(1000)])
        self.assertNoDrops(rec)


if __name__ == "__main__":
    unittest.main()
