"""The Perfetto/Chrome trace JSON written by `eacgm record`: well-formed events,
names for every process and thread, spans that nest on each thread, and the
same spans as the recording's database."""
import collections
import numbers
import os
import unittest

import eacgm_e2e as E


class TraceChecks:
    """Checks shared by every recording; subclasses set cls.rec."""
    maxDiff = None

    def trace(self):
        return E.load_trace(self.rec.trace)

    def test_recorded(self):
        self.assertEqual(self.rec.rc, self.expected_rc, self.rec.stderr)

    def test_top_level(self):
        t = self.trace()
        self.assertIsInstance(t, dict)
        self.assertIsInstance(t.get("traceEvents"), list)
        self.assertTrue(E.x_events(t))

    def test_complete_events_well_formed(self):
        for e in E.x_events(self.trace()):
            self.assertEqual(set(e), {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}, e)
            self.assertIsInstance(e["name"], str)
            self.assertIsInstance(e["cat"], str)
            for k in ("ts", "dur"):
                self.assertTrue(isinstance(e[k], numbers.Real) and not isinstance(e[k], bool), e)
            self.assertGreaterEqual(e["dur"], 0, e)
            for k in ("pid", "tid"):
                self.assertTrue(isinstance(e[k], int) and not isinstance(e[k], bool) and e[k] > 0, e)
            self.assertIsInstance(e["args"], dict)
            self.assertIn("ret", e["args"])

    def test_names_for_every_process_and_thread(self):
        t = self.trace()
        meta = [e for e in t["traceEvents"] if e.get("ph") == "M"]
        procs = {e["pid"] for e in meta if e["name"] == "process_name" and e["args"].get("name")}
        threads = {(e["pid"], e["tid"]) for e in meta if e["name"] == "thread_name" and e["args"].get("name")}
        seen = E.by_thread(E.x_events(t))
        self.assertLessEqual({pid for pid, _ in seen}, procs)
        self.assertLessEqual(set(seen), threads)

    def test_events_nest_per_thread(self):
        for thread, events in E.by_thread(E.x_events(self.trace())).items():
            self.assertEqual(E.nesting_errors(events), [], thread)

    def test_events_in_start_order_per_thread(self):
        # Viewers nest complete events by order of appearance: a parent must come first.
        for thread, events in E.by_thread(E.x_events(self.trace())).items():
            key = [(e["ts"], -e["dur"]) for e in events]
            self.assertEqual(key, sorted(key), thread)

    def test_same_spans_as_database(self):
        from_db = collections.Counter((s["pid"], s["tid"], s["layer"], s["name"], s["start_ns"], s["dur_ns"])
                                      for s in self.rec.spans())
        from_json = collections.Counter((e["pid"], e["tid"], e["cat"], e["name"], round(e["ts"] * 1000),
                                         round(e["dur"] * 1000)) for e in E.x_events(self.trace()))
        self.assertEqual(from_json, from_db)


class CudaTrace(TraceChecks, unittest.TestCase):
    expected_rc = 3

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.rec = E.record(E.make_tempdir(cls), [E.CUDA_CALLS, "3"])

    def test_span_count(self):
        self.assertEqual(len(E.x_events(self.trace())), E.CUDA_CALLS_SPANS)

    def test_cuda_args(self):
        launches = [e for e in E.x_events(self.trace()) if e["name"] == "cudaLaunchKernel"]
        saxpy = [e["args"] for e in launches if e["args"]["grid"] == [4, 2, 1]]
        self.assertEqual(saxpy, [{"kernel": "demo::saxpy_kernel(float, float*, int)", "grid": [4, 2, 1],
                                  "block": [128, 1, 1], "sharedMem": 256, "stream": "0x5000",
                                  "ret": "cudaErrorInsufficientDriver"}])
        mallocs = sorted(e["args"]["bytes"] for e in E.x_events(self.trace()) if e["name"] == "cudaMalloc")
        self.assertEqual(mallocs, [1024, 2048, 4096, 4096, 4096])


class NestedTrace(TraceChecks, unittest.TestCase):
    expected_rc = 0

    @classmethod
    def setUpClass(cls):
        E.require_root()
        tmp = E.make_tempdir(cls)
        spec = E.write_json(os.path.join(tmp, "spec.json"), E.TESTLIB_SPEC)
        cls.rec = E.record(tmp, [E.TESTLIB_CALLS, "nest", "50"], "--layers", "cuda", "--spec", spec)

    def test_each_outer_contains_two_inner(self):
        events = E.x_events(self.trace())
        outer = [e for e in events if e["name"] == "tl_outer"]
        inner = [e for e in events if e["name"] == "tl_inner"]
        self.assertEqual((len(outer), len(inner)), (50, 100))
        self.assertEqual({e["cat"] for e in events}, {"testlib"})
        for o in outer:
            mine = [i for i in inner if (i["pid"], i["tid"]) == (o["pid"], o["tid"]) and E.contains(o, i)]
            self.assertEqual(len(mine), 2, o)
            # tl_outer(x) calls tl_inner(x) and tl_inner(x + 1): returns x + 1 and x + 2.
            rets = sorted(i["args"]["ret"] for i in mine)
            self.assertEqual([rets[0] + 1, sum(rets)], [rets[1], o["args"]["ret"]], o)


if __name__ == "__main__":
    unittest.main()
