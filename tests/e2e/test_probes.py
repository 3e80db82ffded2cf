# SPDX-License-Identifier: Apache-2.0
"""eacgm probes list|generate on real libraries: the output lines, bad input,
and a generated spec that `eacgm record --spec` traces with."""
import json
import os
import re
import unittest

import eacgm_e2e as E

NCCL = "/usr/local/cuda/lib64/libnccl.so.2"
LINE = re.compile(r"^0x[0-9a-f]{8,}  +\d+  (\S.*?)(  \(alias(?:es)?: (.*)\))?$")


def need_nccl():
    if not os.access(NCCL, os.R_OK):
        raise unittest.SkipTest(NCCL + " is not installed on this machine")


class ProbesList(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        self.tmp = E.make_tempdir(self)

    def probes(self, *args):
        return E.eacgm("probes", *args, cwd=self.tmp, timeout=120)

    def test_nccl_all_reduce_with_its_alias(self):
        need_nccl()
        r = self.probes("list", "--lib", NCCL, "--match", "^ncclAllReduce$")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 2, r.stdout)
        self.assertRegex(lines[0], r"^0x[0-9a-f]{8}  [1-9]\d*  ncclAllReduce  \(alias: pncclAllReduce\)$")
        self.assertEqual(lines[1], "1 function matches in " + os.path.realpath(NCCL))

    def test_lib_by_soname(self):
        need_nccl()
        by_path = self.probes("list", "--lib", NCCL, "--match", "^ncclAll")
        by_name = self.probes("list", "--lib", "libnccl.so.2", "--match", "^ncclAll")
        self.assertEqual(by_name.returncode, 0, by_name.stderr)
        self.assertEqual(by_name.stdout, by_path.stdout)
        names = [LINE.match(l).group(1) for l in by_name.stdout.splitlines()[:-1]]
        self.assertEqual(names, ["ncclAllGather", "ncclAllReduce", "ncclAlltoAll"])  # sorted, no .cold parts
        self.assertTrue(by_name.stdout.endswith(" match in %s\n" % os.path.realpath(NCCL)), by_name.stdout)

    def test_testlib_functions(self):
        r = self.probes("list", "--lib", E.TESTLIB, "--match", "^tl_")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual([LINE.match(l).group(1) for l in lines[:-1]],
                         ["tl_call", "tl_cet", "tl_cet_loop", "tl_eight", "tl_escape", "tl_inner", "tl_jump_deep",
                          "tl_leaf", "tl_noop", "tl_out", "tl_outer", "tl_recurse"])
        self.assertEqual(lines[-1], "12 functions match in " + os.path.realpath(E.TESTLIB))
        # The note names the probes record would leave single-stepped: tl_cet's
        # goes past its endbr64, tl_cet_loop's cannot.
        self.assertIn("tl_cet_loop (`endbr64`)", r.stderr)
        self.assertNotIn("tl_cet (", r.stderr)

    def test_max_exceeded_gives_count_and_cost(self):
        r = self.probes("list", "--lib", E.TESTLIB, "--match", "^tl_", "--max", "3")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        msg = r.stderr.strip()
        self.assertTrue(msg.startswith("eacgm: 12 functions in %s match '^tl_', more than --max 3"
                                       % os.path.realpath(E.TESTLIB)), msg)
        self.assertIn("narrower --match", msg)
        self.assertIn("µs", msg)
        if os.geteuid() == 0:
            self.assertRegex(msg, r"costs about \d+\.\d\d µs here \(measured now")
        else:
            self.assertIn("run as root to measure", msg)
        # --all lifts the limit.
        r = self.probes("list", "--lib", E.TESTLIB, "--match", "^tl_", "--max", "3", "--all")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_no_match_lists_close_matches(self):
        r = self.probes("list", "--lib", E.TESTLIB, "--match", "tl_recurze")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(r.stdout, "")
        lines = r.stderr.splitlines()
        self.assertEqual(lines[0], "eacgm: no function in %s matches 'tl_recurze'; close matches:"
                         % os.path.realpath(E.TESTLIB))
        self.assertEqual(lines[1], "  tl_recurse")
        self.assertTrue(2 <= len(lines) <= 6, r.stderr)

    def expect_error(self, args, *words):
        r = self.probes(*args)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        for w in ("eacgm: ",) + words:
            self.assertIn(w, lines[0])

    def test_not_an_elf_file(self):
        path = E.write_json(os.path.join(self.tmp, "notes.so"), {"not": "elf"})
        self.expect_error(["list", "--lib", path, "--match", "x"], path, "not an ELF file")

    def test_missing_file_and_unknown_soname(self):
        missing = os.path.join(self.tmp, "libmissing.so")
        self.expect_error(["list", "--lib", missing, "--match", "x"], missing, "cannot open")
        self.expect_error(["list", "--lib", "libeacgm_no_such.so.3", "--match", "x"], "libeacgm_no_such.so.3",
                          "loader cache")

    def test_invalid_regex(self):
        self.expect_error(["list", "--lib", E.TESTLIB, "--match", "tl_("], "'tl_('", "not a valid regular expression")

    def test_generate_refuses_unwritable_path(self):
        out = os.path.join(self.tmp, "no", "such", "dir", "gen.json")
        self.expect_error(["generate", "--lib", E.TESTLIB, "--match", "^tl_outer$", "-o", out], "cannot write", out)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_generate_refuses_bad_layer(self):
        out = os.path.join(self.tmp, "gen.json")
        self.expect_error(["generate", "--lib", E.TESTLIB, "--match", "^tl_outer$", "-o", out, "--layer", "My Lib"],
                          "layer")
        self.assertEqual(os.listdir(self.tmp), [])


class ProbesGenerate(unittest.TestCase):
    maxDiff = None

    def test_generated_spec_records(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        gen = os.path.join(tmp, "gen.json")
        r = E.eacgm("probes", "generate", "--lib", E.TESTLIB, "--match", "^tl_(outer|inner)$", "-o", gen)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("wrote 2 probes", r.stdout)
        with open(gen) as f:
            spec = json.load(f)
        self.assertEqual(spec["layer"], "user")
        self.assertEqual(spec["library"], "libeacgm_testlib.so*")
        self.assertIn("args", spec["about"])
        self.assertEqual(spec["probes"], [{"function": "tl_inner", "symbols": ["tl_inner"]},
                                          {"function": "tl_outer", "symbols": ["tl_outer"]}])
        rec = E.record(tmp, [E.TESTLIB_CALLS, "nest", "5"], "--layers", "cuda", "--spec", gen)
        self.assertEqual(rec.rc, 0, rec.stderr)
        counts = {}
        for s in rec.spans("layer = 'user'"):
            counts[s["name"]] = counts.get(s["name"], 0) + 1
        self.assertEqual(counts, {"tl_outer": 5, "tl_inner": 10})


class OverLongSymbolName(unittest.TestCase):
    """A function named with 20,000 characters (C++ templates come close):
    listed whole, traced by a spec naming it, stored whole, and cut short with
    an ellipsis where a table has a column for it."""

    def test_listed_traced_and_shown(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        name = "f_" + "x" * 20000
        src, main = os.path.join(tmp, "long.c"), os.path.join(tmp, "main.c")
        with open(src, "w") as f:
            f.write("long %s(long a) { return a + 1; }\nlong short_one(long a) { return %s(a); }\n" % (name, name))
        with open(main, "w") as f:
            f.write("long short_one(long);\nint main(void) { long s = 0; for (int i = 0; i < 3; i++) "
                    "s += short_one(i); return s == 6 ? 0 : 1; }\n")
        lib, prog = os.path.join(tmp, "liblong.so"), os.path.join(tmp, "main")
        for cmd in (["cc", "-O0", "-shared", "-fPIC", "-o", lib, src],
                    ["cc", "-o", prog, main, "-L" + tmp, "-llong", "-Wl,-rpath," + tmp]):
            r = E.run(cmd)
            self.assertEqual(r.returncode, 0, r.stderr)
        listed = E.eacgm("probes", "list", "--lib", lib, "--match", "^f_x")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertEqual([LINE.match(l).group(1) for l in listed.stdout.splitlines() if LINE.match(l)], [name])
        spec = E.write_json(os.path.join(tmp, "spec.json"), {"layer": "long", "library": "liblong.so",
                                                              "probes": [{"function": name}, {"function": "short_one"}]})
        rec = E.record(tmp, [prog], "--layers", "cuda", "--spec", spec)
        self.assertEqual(rec.rc, 0, rec.stderr)
        self.assertEqual(rec.query("SELECT name, count(*) AS n FROM spans GROUP BY name ORDER BY length(name)"),
                         [{"name": "short_one", "n": 3}, {"name": name, "n": 3}])
        self.assertRegex(rec.stderr, r"(?m)^  f_x{30,}\u2026 +3 +0 ")


if __name__ == "__main__":
    unittest.main()
