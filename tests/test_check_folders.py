# SPDX-License-Identifier: Apache-2.0
"""scripts/check_folders.py: an include against the folders' list, a relative
include, a folder the build does not declare and a cycle in the list each
fail the check; includes along the flow, direct or through a use, pass."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import check_folders as check  # noqa: E402

LIST = "common: \nprobe: common\npipeline: probe\nstore: pipeline\nsinks: store\n"


class Tree(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        for d in ("common", "probe", "pipeline", "store", "sinks"):
            os.makedirs(os.path.join(self.root, "src", d))
        self.write("src/pipeline/decode.cpp", '#include "pipeline/decode.h"\n#include "probe/spec.h"\n'
                   '#include "common/model.h"\n#include "eacgm/abi/events.h"\n#include "span.skel.h"\n')
        self.write("src/sinks/store.h", '#include "store/store.h"\n#include "common/model.h"\n')

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, rel, text):
        with open(os.path.join(self.root, rel), "w", encoding="utf-8") as f:
            f.write(text)

    def problems(self, listing=LIST):
        return check.problems_of(self.root, check.parse_folders(listing))

    def test_includes_along_the_flow_pass(self):
        self.assertEqual(self.problems(), [])

    def test_an_include_against_the_flow_is_found_where_it_is(self):
        self.write("src/pipeline/record_loop.h", '// the record loop\n#include <vector>\n\n#include "store/store.h"\n')
        p = self.problems()
        self.assertEqual(len(p), 1, p)
        self.assertTrue(p[0].startswith('src/pipeline/record_loop.h:4: #include "store/store.h": pipeline may use '
                                        'common, probe'), p[0])
        self.assertIn("against the data flow", p[0])

    def test_a_relative_include_is_refused_even_along_the_flow(self):
        self.write("src/store/blocks.cpp", '#include "../probe/spec.h"\n')
        p = self.problems()
        self.assertEqual(len(p), 1, p)
        self.assertIn('src/store/blocks.cpp:1: #include "../probe/spec.h": a relative include', p[0])

    def test_a_folder_the_build_does_not_declare_is_refused(self):
        os.makedirs(os.path.join(self.root, "src", "ingest"))
        p = self.problems()
        self.assertEqual(p, ["src/ingest: a folder the build does not declare (add an eacgm_folder call to "
                             "CMakeLists.txt saying what it uses)"])

    def test_a_cycle_in_the_list_is_refused(self):
        p = self.problems(LIST.replace("probe: common", "probe: common sinks"))
        self.assertEqual([x for x in p if "cycle" in x],
                         ["CMakeLists.txt: the folders' uses make a cycle: pipeline -> probe -> sinks -> store "
                          "-> pipeline"])

    def test_a_use_of_no_folder_is_refused(self):
        p = self.problems(LIST + "merge: storage\n")
        self.assertIn("CMakeLists.txt: folder merge uses storage, which is no folder of the list", p)

    def test_a_bad_line_of_the_list_is_bad_input(self):
        with self.assertRaises(ValueError):
            check.parse_folders("common\n")


if __name__ == "__main__":
    unittest.main()
