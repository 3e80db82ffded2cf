# SPDX-License-Identifier: Apache-2.0
"""record --raw-dump (hidden; src/pipeline/raw_dump.h): every span record
decode saw, and the probes they count in, for bench_pipeline_cost --replay.
A torch training run's dump holds exactly the traced calls its recording
stored (the Python layer's sampled spans come from no span record), each
naming a probe the dump describes; the bench replays it by both paths."""
import json
import os
import struct
import subprocess
import unittest

import eacgm_e2e as E

TRAIN = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "torch_train.py")
MAGIC, END = b"eacgm raw dump 1\n", b"eacgm raw end\n"
RECORD = 56 + 8 * 8  # sizeof(struct eacgm_span_event), events.h's static_assert
BENCH = os.path.join(os.path.dirname(E.EACGM), "bench", "bench_pipeline_cost")


class RawDump(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.dump = os.path.join(cls.tmp, "torch.raw")
        # 2 Linear layers, 3 steps; the online detector on, as by default.
        cls.rec = E.record(cls.tmp, ["/usr/bin/python3", TRAIN, "2", "3"], "--layers", "torch,python",
                           "--raw-dump", cls.dump, name="torch")

    def setUp(self):
        self.assertEqual(self.rec.rc, 0, self.rec.stderr)

    def read_dump(self):
        with open(self.dump, "rb") as f:
            data = f.read()
        self.assertTrue(data.startswith(MAGIC))
        self.assertTrue(data.endswith(END))
        (n,) = struct.unpack("<I", data[-len(END) - 4:-len(END)])
        records = data[len(MAGIC):len(data) - len(END) - 4 - n]
        probes = json.loads(data[len(data) - len(END) - 4 - n:len(data) - len(END) - 4])
        self.assertEqual(len(records) % RECORD, 0)
        return [records[i:i + RECORD] for i in range(0, len(records), RECORD)], probes

    def test_the_dump_holds_the_calls_the_recording_stored(self):
        records, probes = self.read_dump()
        con = E.connect(self.rec.db)
        try:
            stored = dict(con.execute("SELECT name, count(*) FROM spans WHERE layer = 'torch' GROUP BY name"))
            others = con.execute("SELECT count(*) FROM spans WHERE layer NOT IN ('torch', 'python')").fetchone()[0]
        finally:
            con.close()
        self.assertEqual(others, 0)
        self.assertEqual(stored.get("aten::linear"), 6)
        # spec_id is the u32 after start_ns, dur_ns (u64 each), tgid, tid (events.h).
        by_name = {}
        for r in records:
            (spec_id,) = struct.unpack_from("<I", r, 24)
            self.assertLess(spec_id, len(probes["probes"]))
            p = probes["probes"][spec_id]
            self.assertEqual(p["layer"], "torch")
            by_name[p["function"]] = by_name.get(p["function"], 0) + 1
        self.assertEqual(by_name, stored)

    def test_the_bench_replays_it_by_both_paths(self):
        if not os.path.exists(BENCH):
            self.skipTest("bench_pipeline_cost is not built here")
        records, _ = self.read_dump()
        r = subprocess.run([BENCH, "--replay", self.dump, "--rounds", "1"], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("%s: %d records" % (self.dump, len(records)), r.stdout)
        self.assertIn("Span path   decode + store", r.stdout)
        self.assertIn("typed path  decode + store", r.stdout)
        # A cut dump is refused, and says why.
        cut = os.path.join(self.tmp, "cut.raw")
        with open(self.dump, "rb") as f, open(cut, "wb") as g:
            g.write(f.read()[:-3])
        r = subprocess.run([BENCH, "--replay", cut], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("no end", r.stderr)


if __name__ == "__main__":
    unittest.main()
