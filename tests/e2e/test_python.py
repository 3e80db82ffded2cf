"""The Python layer on every CPython this machine has (pyenv 3.8 to 3.13 and
Debian's 3.11): sampled function spans with names, files, lines, nesting and
durations, on two threads; and the Python stack behind torch operator spans."""
import ast
import collections
import importlib.util
import os
import unittest

import eacgm_e2e as E

BUSY = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "py_busy.py")
TRAIN = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "torch_train.py")
PYTHONS = {
    "3.8": "/root/.pyenv/versions/3.8.18/bin/python3.8",
    "3.9": "/root/.pyenv/versions/3.9.18/bin/python3.9",
    "3.10": "/root/.pyenv/versions/3.10.13/bin/python3.10",
    "3.11": "/root/.pyenv/versions/3.11.7/bin/python3.11",
    "3.12": "/root/.pyenv/versions/3.12.1/bin/python3.12",
    "3.13": "/root/.pyenv/versions/3.13.0/bin/python3.13",
    "debian-3.11": "/usr/bin/python3.11",
}
# Known busy time of each function per call, in ms, and calls per thread.
EXPECTED_MS = {"middle": 100, "inner_a": 60, "inner_b": 40}
CALLS = {"middle": 3, "inner_a": 3, "inner_b": 3, "pause": 3, "spin": 9}


def def_lines(path):
    with open(path) as f:
        tree = ast.parse(f.read())
    # A class body runs as a function of its own (entered from C).
    lines = {n.name: n.lineno for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    lines["<module>"] = 1
    return lines


class PythonFunctions(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.lines = def_lines(BUSY)

    def check(self, version):
        py = PYTHONS[version]
        self.assertTrue(os.path.exists(py), py + " is part of this machine's image")
        folded = os.path.join(self.tmp, version + ".folded")
        rec = E.record(self.tmp, [py, BUSY], "--layers", "python", "--flamegraph", folded, name=version)
        self.assertEqual(rec.rc, 0, rec.stderr)
        # 3.13 states its own layout (_Py_DebugOffsets): it must agree with the table.
        self.assertNotIn("_Py_DebugOffsets", rec.stderr)
        # Flame graph: at 1 kHz, inner_a's 3 x 60 ms on each thread are about 180 samples.
        with open(folded) as f:
            lines = [l.rsplit(" ", 1) for l in f.read().splitlines()]
        leaf = "inner_a (py_busy.py:%d);spin (py_busy.py:%d)" % (self.lines["inner_a"], self.lines["spin"])
        per_stack = [int(n) for stack, n in lines if stack.endswith(leaf)]
        self.assertEqual(len(per_stack), 2, lines)  # one stack per thread (main and worker)
        for n in per_stack:
            self.assertLess(abs(n - 180), 36, per_stack)
        spans = [s for s in rec.spans() if s["layer"] == "python" and s["args"]["file"] == BUSY]
        threads = collections.defaultdict(list)
        for s in spans:
            threads[s["tid"]].append(s)
        self.assertEqual(len(threads), 2, "two threads run the functions")
        qual_run = "run" if version in ("3.8", "3.9", "3.10") else "Worker.run"  # co_qualname is 3.11+
        for tid, mine in threads.items():
            count = collections.Counter(s["name"] for s in mine)
            for name, n in CALLS.items():
                self.assertEqual(count[name], n, (version, tid, name, count))
            self.assertEqual(count[qual_run], 1, (version, count))
            for s in mine:
                short = s["name"].split(".")[-1] if s["name"] != "<module>" else s["name"]
                self.assertEqual(s["args"]["line"], self.lines[short], s)
                if s["name"] in EXPECTED_MS:
                    ms = s["dur_ns"] / 1e6
                    self.assertLess(abs(ms - EXPECTED_MS[s["name"]]), 0.2 * EXPECTED_MS[s["name"]], (version, s))
            # Nesting: each inner_a/inner_b inside a middle, each middle inside the Worker.run.
            ev = {id(s): E.span_as_event(s) for s in mine}
            run = [s for s in mine if s["name"] == qual_run][0]
            for s in mine:
                if s["name"] in ("inner_a", "inner_b"):
                    self.assertEqual(sum(E.contains(ev[id(m)], ev[id(s)]) for m in mine
                                         if m["name"] == "middle"), 1, s)
                    self.assertEqual(s["depth"], run["depth"] + 2)
                if s["name"] == "middle":
                    self.assertTrue(E.contains(ev[id(run)], ev[id(s)]), s)
        for thread, events in E.by_thread(E.x_events(E.load_trace(rec.trace))).items():
            self.assertEqual(E.nesting_errors(events), [], (version, thread))
        return rec


def _make(version):
    return lambda self: self.check(version)


for _v in PYTHONS:
    setattr(PythonFunctions, "test_python_" + _v.replace(".", "_").replace("-", "_"), _make(_v))


ENTRIES = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "py_entries.py")


class PythonEntries(unittest.TestCase):
    """Calls entered from C (a sort key, map()) are exact spans, back-to-back
    calls included, which a sampler alone merges; with --python-entries all
    on 3.8-3.10 every call is."""

    def record(self, version, *options):
        E.require_root()
        tmp = E.make_tempdir(self)
        rec = E.record(tmp, [PYTHONS[version], ENTRIES], "--layers", "python", *options)
        self.assertEqual(rec.rc, 0, rec.stderr)
        spans = [s for s in rec.spans() if s["layer"] == "python" and s["args"]["file"] == ENTRIES]
        by_name = collections.defaultdict(list)
        for s in spans:
            by_name[s["name"]].append(s)
        for thread, events in E.by_thread(E.x_events(E.load_trace(rec.trace))).items():
            self.assertEqual(E.nesting_errors(events), [], (version, thread))
        return rec, by_name

    def check_exact(self, version, by_name, names):
        for name, ms in (("key", 20), ("mapped", 30)):
            calls = by_name[name]
            self.assertEqual(len(calls), 3, (version, name, calls))
            for s in calls:
                self.assertTrue(s["args"].get("exact"), (version, s))
                self.assertLess(abs(s["dur_ns"] / 1e6 - ms), 0.1 * ms, (version, s))
                inner = [w for w in by_name["work"] if E.contains(E.span_as_event(s), E.span_as_event(w))]
                self.assertEqual(len(inner), 1, (version, s, by_name["work"]))
        for name in names:
            self.assertTrue(all(s["args"].get("exact") for s in by_name[name]), (version, name, by_name[name]))

    def test_entries_from_c_are_exact_on_3_11_and_later(self):
        for version in ("debian-3.11", "3.12", "3.13"):
            rec, by_name = self.record(version, "--python-entries", "auto")
            self.assertIn("entries from C exactly", rec.stderr)
            self.check_exact(version, by_name, ["<module>"])
            self.assertFalse(any(s["args"].get("exact") for s in by_name["work"] + by_name["main"]),
                             "Python-to-Python calls do not enter the eval loop on " + version)

    def test_every_call_is_exact_with_all_on_3_8_to_3_10(self):
        for version in ("3.8", "3.9", "3.10"):
            rec, by_name = self.record(version, "--python-entries", "all")
            self.check_exact(version, by_name, ["<module>", "main", "work"])
            self.assertEqual(len(by_name["work"]), 6, by_name["work"])
            self.assertEqual(len(by_name["main"]), 1)

    def test_auto_leaves_3_8_to_3_10_sampled_and_off_is_the_default(self):
        rec, by_name = self.record("3.9", "--python-entries", "auto")
        self.assertFalse([s for v in by_name.values() for s in v if s["args"].get("exact")])
        rec, by_name = self.record("debian-3.11")
        self.assertFalse([s for v in by_name.values() for s in v if s["args"].get("exact")])


class PythonProcesses(unittest.TestCase):
    def test_forked_workers_are_followed(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        script = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "py_fork.py")
        rec = E.record(tmp, [PYTHONS["3.12"], script], "--layers", "python")
        self.assertEqual(rec.rc, 0, rec.stderr)
        spans = [s for s in rec.spans() if s["layer"] == "python" and s["args"]["file"] == script]
        parent = [s for s in spans if s["name"] == "parent_work"]
        children = [s for s in spans if s["name"] == "child_work"]
        self.assertEqual(len(parent), 1)
        self.assertEqual(len(children), 2)
        self.assertEqual(len({s["pid"] for s in children}), 2)  # one per worker process
        self.assertNotIn(parent[0]["pid"], {s["pid"] for s in children})
        procs = {p["pid"]: p for p in rec.query("SELECT pid, ppid FROM processes")}
        for s in children:
            self.assertEqual(procs[s["pid"]]["ppid"], parent[0]["pid"])
            self.assertLess(abs(s["dur_ns"] / 1e6 - 80), 16, s)

    def test_unknown_version_is_named_and_other_layers_go_on(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        py37 = "/root/.pyenv/versions/3.7.16/bin/python3.7"
        self.assertTrue(os.path.exists(py37))
        rec = E.record(tmp, [py37, BUSY], "--layers", "cuda,python")
        self.assertEqual(rec.rc, 0, rec.stderr)
        self.assertIn("Python 3.7", rec.stderr)
        self.assertIn("no known frame layout", rec.stderr)
        self.assertEqual([s for s in rec.spans() if s["layer"] == "python"], [])
        self.assertIn("recording: ", rec.stderr)


class PythonStackBehindTorch(unittest.TestCase):
    def test_linear_spans_carry_the_forward_line(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        rec = E.record(tmp, ["/usr/bin/python3", TRAIN, "2", "3"], "--layers", "torch,python")
        self.assertEqual(rec.rc, 0, rec.stderr)
        linear = [s for s in rec.spans() if s["name"] == "aten::linear"]
        self.assertEqual(len(linear), 6)
        # Debian's torch: the file and line that call F.linear (found without importing torch).
        src = os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "nn", "modules", "linear.py")
        with open(src) as f:
            call_line = next(i for i, text in enumerate(f, 1) if "return F.linear(input, self.weight, self.bias)" in text)
        for s in linear:
            self.assertEqual(s["py_stack"][0], "Linear.forward (linear.py:%d)" % call_line, s)
            # It reaches the script's top level, also for the last calls, read
            # after the module's code was freed (named from the walker's names).
            self.assertTrue(s["py_stack"][-1].startswith("<module> (torch_train.py:"), s)


if __name__ == "__main__":
    unittest.main()
