# SPDX-License-Identifier: Apache-2.0
"""The traces `eacgm record` writes: the Perfetto/Chrome JSON (well-formed events,
names for every process and thread, spans that nest on each thread, and the
same spans as the recording's database), and the native .pftrace (NativeTrace)."""
import collections
import numbers
import os
import re
import subprocess
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


GPT = os.path.join(E.SOURCE_DIR, "bench", "workloads", "gpt_train.py")


class NativeTrace(unittest.TestCase):
    """record's default trace, NAME.pftrace (Perfetto's protobuf format),
    read with the tests' own decoder (E.load_pftrace): every span a slice
    with its exact times, every metric a counter value; and at least five
    times smaller than the JSON of the same recording, on the benchmark's
    small GPT (bench/workloads/gpt_train.py) with the default layers."""

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.db = os.path.join(cls.tmp, "r.db")
        cls.recorded = E.run([E.EACGM, "record", "-o", cls.db, "--", "/usr/bin/python3", GPT, "12"])

    def setUp(self):
        self.assertEqual(self.recorded.returncode, 0, self.recorded.stderr)

    def test_the_default_trace_is_native(self):
        self.assertEqual(sorted(os.listdir(self.tmp)), ["r.db", "r.pftrace"])
        self.assertIn("trace:     " + os.path.join(self.tmp, "r.pftrace"), self.recorded.stderr)

    def test_every_span_is_a_slice_with_its_times(self):
        trace = E.load_pftrace(os.path.join(self.tmp, "r.pftrace"))
        spans = E.load_spans(self.db)
        self.assertGreater(len(spans), 5000)
        want = collections.Counter((s["pid"], s["tid"], s["layer"], s["name"], s["start_ns"],
                                    s["start_ns"] + s["dur_ns"]) for s in spans)
        self.assertEqual(collections.Counter(trace["slices"]), want)

    def test_every_metric_is_a_counter_value(self):
        trace = E.load_pftrace(os.path.join(self.tmp, "r.pftrace"))
        metrics = E.query(self.db, "SELECT ts_ns, value FROM metrics")
        self.assertGreater(len(metrics), 0)
        self.assertEqual(collections.Counter((ts, v) for _, ts, v in trace["counters"]),
                         collections.Counter((m["ts_ns"], m["value"]) for m in metrics))

    def test_five_times_smaller_than_the_json(self):
        json_path = os.path.join(E.make_tempdir(self), "same.json")
        r = E.eacgm("export", self.db, "--perfetto", json_path)
        self.assertEqual(r.returncode, 0, r.stderr)
        native = os.path.getsize(os.path.join(self.tmp, "r.pftrace"))
        self.assertLessEqual(5 * native, os.path.getsize(json_path),
                             "native %d bytes, JSON %d" % (native, os.path.getsize(json_path)))

    def test_protoc_reads_it_and_knows_every_field(self):
        # protoc (Debian's protobuf-compiler: an implementation that is not
        # eacgm's writer) against src/export/pftrace.proto, the subset of
        # Perfetto's format written from its public field numbers.
        proto = os.path.join(E.SOURCE_DIR, "src", "export", "pftrace.proto")
        with open(os.path.join(self.tmp, "r.pftrace"), "rb") as f:
            r = subprocess.run(["protoc", "--decode=eacgm.pftrace.Trace", "--proto_path=" + os.path.dirname(proto),
                                proto], stdin=f, capture_output=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, b"")
        text = r.stdout.decode(errors="replace")
        self.assertIsNone(re.search(r"^\s*\d+:", text, re.M), "a field pftrace.proto does not name")
        count = lambda sql: E.query(self.db, sql)[0]["n"]
        want = (2 * count("SELECT count(*) AS n FROM spans") + count("SELECT count(*) AS n FROM metrics") +
                count("SELECT count(*) AS n FROM events") + count("SELECT count(*) AS n FROM anomalies") +
                count("SELECT count(*) AS n FROM spans WHERE json_extract(args, '$.issued_ns') IS NOT NULL"))
        self.assertEqual(text.count("track_event {"), want)

    def test_an_unknown_extension_is_refused_before_recording(self):
        r = E.run([E.EACGM, "record", "-o", os.path.join(self.tmp, "x.db"), "--perfetto",
                   os.path.join(self.tmp, "x.trace"), "--", "true"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("name it .pftrace", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x.db")))
