#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""ctest docs.pictures: scripts/draw_readme.py draws the README's two
pictures from a real recording, and refuses one it cannot draw from with a
message that says what to record.

The recording, tests/data/gpt_ddp_3steps.db (under 200 KB), is
eval/workload.py's GPT over 2 gloo ranks, 3 steps, recorded with the
default Python sampling (no --python-entries: the import phase's entries
would make it ten times larger) and its pages made small:
  eacgm record -o run.db --layers python,torch,gloo,host -- bash -c \\
    "export GLOO_SOCKET_IFNAME=lo; for r in 0 1; do /usr/bin/python3 eval/workload.py steps.\\$r \\
     --model gpt --steps 3 --rank \\$r --world 2 --store $PWD/store & done; wait"
  sqlite3 run.db "VACUUM INTO 'v.db'"; sqlite3 v.db "PRAGMA page_size = 1024; VACUUM"
(eacgm 0.1.0, schema version 4; 7,841 spans, 178 KB.)
Usage: pictures_check.py EACGM SOURCE_DIR (no root needed: it only reads)."""
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import unittest

import matplotlib

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import numpy  # noqa: E402

EACGM, SOURCE_DIR = (sys.argv[1:3] + [None, None])[:2]
FIXTURE = "tests/data/gpt_ddp_3steps.db"
PNG = b"\x89PNG\r\n\x1a\n"


def draw(recording, outdir):
    script = os.path.join(SOURCE_DIR, "scripts", "draw_readme.py")
    return subprocess.run([sys.executable, script, recording, outdir, "--eacgm", EACGM, "--label", "test"],
                          capture_output=True, text=True, timeout=120)


class Pictures(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="eacgm-pictures-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_draws_two_pictures(self):
        sys.path.insert(0, os.path.join(SOURCE_DIR, "scripts"))
        sys.dont_write_bytecode = True  # nothing written into the source tree
        import draw_readme  # its palettes
        out = os.path.join(self.tmp, "img")
        p = draw(os.path.join(SOURCE_DIR, FIXTURE), out)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("step 2 drawn", p.stdout)  # the lower middle of its two full steps
        for name in ("timeline.png", "flamegraph.png"):
            path = os.path.join(out, name)
            with open(path, "rb") as f:
                data = f.read()
            self.assertEqual(data[:8], PNG, name)
            # IHDR is the first chunk: width and height follow its length and type.
            self.assertEqual(struct.unpack(">II", data[16:24]), (1200, 500), name)
            self.assertTrue(20_000 < len(data) < 200_000, "%s: %d bytes" % (name, len(data)))
            # Drawn on, with both layers: bars in the Python and the torch colours.
            rgb = matplotlib.image.imread(path)[..., :3]
            for layer in ("python", "torch"):
                hits = sum(int(numpy.all(numpy.abs(rgb - matplotlib.colors.to_rgb(c)) < 0.01, axis=-1).sum())
                           for c in draw_readme.PALETTES[layer])
                self.assertGreater(hits, 2000, "%s: %s bars cover %d pixels" % (name, layer, hits))

    def test_refuses_a_recording_without_spans(self):
        rec = os.path.join(self.tmp, "empty.db")
        shutil.copy(os.path.join(SOURCE_DIR, FIXTURE), rec)
        # The spans live in span_blocks (docs/store.md): without them the file is a recording with none.
        con = sqlite3.connect(rec)
        con.execute("DELETE FROM span_blocks")
        con.commit()
        con.close()
        out = os.path.join(self.tmp, "img")
        p = draw(rec, out)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("no Python function spans", p.stderr)  # the problem
        self.assertIn("eacgm record --layers python,torch", p.stderr)  # the fix
        self.assertFalse(os.path.exists(os.path.join(out, "timeline.png")))

    def test_names_a_missing_recording(self):
        p = draw(os.path.join(self.tmp, "absent.db"), os.path.join(self.tmp, "img"))
        self.assertEqual(p.returncode, 1)
        self.assertIn("absent.db: no such recording", p.stderr)


if __name__ == "__main__":
    if not (EACGM and SOURCE_DIR):
        sys.exit("usage: pictures_check.py EACGM SOURCE_DIR")
    unittest.main(argv=sys.argv[:1], verbosity=2)
