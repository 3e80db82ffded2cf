# SPDX-License-Identifier: Apache-2.0
"""Records tests/testprogs/cuda_calls (libcudart, no GPU driver) and checks every
call it makes, in the parent and in its forked child, field by field."""
import collections
import json
import os
import re
import unittest

import eacgm_e2e as E

ERR = (35, "cudaErrorInsufficientDriver")  # every call fails: no driver


def call(name, args, nbytes=0):
    return (name, json.dumps(args, sort_keys=True), *ERR, nbytes)


H2D = {"dst": "0x3000", "src": "0x4000", "count": 512, "kind": "cudaMemcpyHostToDevice"}
PARENT_CALLS = collections.Counter([
    call("cudaMalloc", {"devPtr": "0x0", "size": 1024}, 1024),
    call("cudaMalloc", {"devPtr": "0x0", "size": 2048}, 2048),
    call("cudaFree", {"devPtr": "0x1000"}),
    call("cudaMallocHost", {"ptr": "0x0", "size": 4096}, 4096),
    call("cudaFreeHost", {"ptr": "0x2000"}),
    *[call("cudaMemcpy", H2D, 512)] * 3,
    call("cudaMemcpy", {"dst": "0x4000", "src": "0x3000", "count": 512, "kind": "cudaMemcpyDeviceToHost"}, 512),
    call("cudaMemcpyAsync", {"dst": "0x3000", "src": "0x3800", "count": 256, "kind": "cudaMemcpyDeviceToDevice",
                             "stream": "0x5000"}, 256),
    call("cudaMemset", {"devPtr": "0x6000", "value": 7, "count": 128}, 128),
    call("cudaMemsetAsync", {"devPtr": "0x6000", "value": 9, "count": 64, "stream": "0x5000"}, 64),
    # A failed cudaGetKernel leaves its handle as it was: no name for a launch by it.
    call("cudaGetKernel", {"handle": "0xa000", "kernel": "demo::saxpy_kernel(float, float*, int)"}),
    call("cudaLaunchKernel", {"kernel": "0xa000", "grid": [1, 1, 1], "block": [32, 1, 1], "sharedMem": 0,
                              "stream": "0x5000"}),
    call("cudaLaunchKernel", {"kernel": "demo::saxpy_kernel(float, float*, int)", "grid": [4, 2, 1],
                              "block": [128, 1, 1], "sharedMem": 256, "stream": "0x5000"}),
    call("cudaStreamSynchronize", {"stream": "0x5000"}),
    call("cudaDeviceSynchronize", {}),
    call("cudaEventRecord", {"event": "0x7000", "stream": "0x5000"}),
    call("cudaEventSynchronize", {"event": "0x7000"}),
    call("cudaGraphLaunch", {"graphExec": "0x8000", "stream": "0x5000"}),
])
CHILD_CALLS = collections.Counter([
    *[call("cudaMalloc", {"devPtr": "0x0", "size": 4096}, 4096)] * 3,
    *[call("cudaLaunchKernel", {"kernel": "demo::reduce_kernel(float const*, float*)", "grid": [8, 8, 2],
                                "block": [16, 16, 1], "sharedMem": 0, "stream": "0x9000"})] * 2,
    call("cudaMemcpy", {"dst": "0x4000", "src": "0x3000", "count": 8192, "kind": "cudaMemcpyDeviceToHost"}, 8192),
])


def calls(spans):
    return collections.Counter((s["name"], json.dumps(s["args"], sort_keys=True), s["ret"], s["ret_name"],
                                s["bytes"]) for s in spans)


class CudaRecording(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.rec = E.record(cls.tmp, [E.CUDA_CALLS, "3"])
        cls.procs = {p["pid"]: p for p in cls.rec.query("SELECT * FROM processes")}
        parents = [p for p in cls.procs.values() if p["ppid"] not in cls.procs]
        cls.parent = parents[0]["pid"] if len(parents) == 1 else None
        cls.child = next((p for p in cls.procs if p != cls.parent), None)

    def test_exit_code_is_the_targets(self):
        self.assertEqual(self.rec.rc, 3, self.rec.stderr)

    def test_files_written(self):
        self.assertEqual(sorted(os.listdir(self.tmp)), ["r.db", "r.trace.json"])

    def test_processes(self):
        self.assertEqual(len(self.procs), 2, self.procs)
        self.assertIsNotNone(self.parent)
        parent, child = self.procs[self.parent], self.procs[self.child]
        self.assertEqual(parent["ppid"], self.rec.pid)  # eacgm launched it
        self.assertEqual(child["ppid"], self.parent)
        self.assertEqual(parent["comm"], "cuda_calls")
        self.assertEqual(parent["cmdline"], E.CUDA_CALLS + " 3")
        self.assertEqual((parent["exit_code"], child["exit_code"]), (3, 0))
        for p in (parent, child):
            self.assertLess(p["start_ns"], p["end_ns"])
        self.assertLess(parent["start_ns"], child["start_ns"])
        self.assertLess(child["end_ns"], parent["end_ns"])
        threads = self.rec.query("SELECT pid, tid FROM threads ORDER BY pid")
        self.assertEqual([(t["pid"], t["tid"]) for t in threads], sorted((p, p) for p in self.procs))

    def test_parent_calls(self):
        self.assertEqual(calls(self.rec.spans("pid = ?", (self.parent,))), PARENT_CALLS)

    def test_child_calls(self):
        self.assertEqual(calls(self.rec.spans("pid = ?", (self.child,))), CHILD_CALLS)

    def test_span_fields(self):
        spans = self.rec.spans()
        self.assertEqual(sum(PARENT_CALLS.values()) + sum(CHILD_CALLS.values()), E.CUDA_CALLS_SPANS)
        self.assertEqual(len(spans), E.CUDA_CALLS_SPANS)
        m = E.meta(self.rec.db)
        rec_start = int(m["start_mono_ns"])
        rec_end = rec_start + int(float(m["duration_s"]) * 1e9) + 1000  # duration_s has µs precision
        for s in spans:
            self.assertEqual((s["layer"], s["depth"], s["tid"]), ("cuda", 0, s["pid"]), s)
            self.assertGreater(s["dur_ns"], 0, s)
            self.assertTrue(rec_start <= s["start_ns"] and s["start_ns"] + s["dur_ns"] <= rec_end, s)
            p = self.procs[s["pid"]]
            self.assertTrue(p["start_ns"] <= s["start_ns"] and s["start_ns"] + s["dur_ns"] <= p["end_ns"], s)

    def test_no_drops(self):
        d = E.drops(self.rec.db)
        self.assertEqual(set(d), set(E.DROP_REASONS))
        self.assertEqual(sum(d.values()), 0, d)

    def test_printed_summary(self):
        lines = self.rec.stderr.splitlines()
        self.assertEqual(lines[-2:], ["recording: " + self.rec.db,
                                      "trace:     " + self.rec.trace + " (open in ui.perfetto.dev)"])
        self.assertIn("2 processes, 2 threads, %d spans" % E.CUDA_CALLS_SPANS, self.rec.stderr)
        self.assertIn("lost records: 0", lines)

    def test_summary_command(self):
        r = E.eacgm("summary", self.rec.db)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, re.compile(r"^\s+cudaMalloc\s+5\s+5\s", re.M))
        self.assertRegex(r.stdout, re.compile(r"^\s+cudaLaunchKernel\s+4\s+4\s", re.M))
        self.assertRegex(r.stdout, re.compile(r"^\s+cudaMemcpy\s+5\s+5\s", re.M))

    def test_export_matches_recorded_trace(self):
        out = os.path.join(E.make_tempdir(self), "exported.json")
        r = E.eacgm("export", self.rec.db, "--perfetto", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "wrote %s (%d spans); open it in ui.perfetto.dev" % (out, E.CUDA_CALLS_SPANS))
        self.assertEqual(E.load_trace(out), E.load_trace(self.rec.trace))


if __name__ == "__main__":
    unittest.main()
