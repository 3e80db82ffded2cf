# SPDX-License-Identifier: Apache-2.0
"""The Python layer on every CPython this machine has (pyenv 3.8 to 3.13 and
Debian's 3.11): sampled function spans with names, files, lines, nesting and
durations, on two threads; and the Python stack behind torch operator spans.
Times are checked against what the traced program measured around the same
calls (its log), not against the lengths it asked for: a busy machine
stretches those, and cannot fail the test."""
import ast
import collections
import importlib.util
import json
import os
import signal
import subprocess
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
# Calls per thread; the programs log the times of TIMED's calls (see py_busy.py).
CALLS = {"middle": 3, "inner_a": 3, "inner_b": 3, "pause": 3, "spin": 9}
TIMED = ("middle", "inner_a", "inner_b")
SAMPLE_HZ = 1000  # eacgm's default sampling rate


def def_lines(path):
    with open(path) as f:
        tree = ast.parse(f.read())
    # A class body runs as a function of its own (entered from C).
    lines = {n.name: n.lineno for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    lines["<module>"] = 1
    return lines


def read_calls(path):
    """The traced program's own account of its calls: the JSON lines it logged, in order.
    Its clock (perf_counter_ns) is CLOCK_MONOTONIC, as are eacgm's span times."""
    with open(path) as f:
        return [json.loads(line) for line in f]


def sampler_slack_ns(cpu_ns):
    """How much of a call's CPU time its sampled span may miss. Each CPU ticks
    once a ms, and a tick samples the thread only while it runs there; the
    span runs from the first tick that finds the function to the last, so it
    misses the function's CPU time before the first and after the last: under
    a period each where the thread runs a period or more at a time, more where
    a busy CPU cuts it into shorter slices that fall between ticks. Ticks
    missed within the call do not shorten the span. 5 ms allows a few such
    slices at each end, 10% is headroom on the longer calls (middle,
    child_work). A span 30% short of a call that ran on a quiet CPU (cpu close
    to its wall time) fails; on a busy one cpu is less and the bound looser,
    but the span must still lie inside the call."""
    return max(5 * 10**6, cpu_ns // 10)


def check_sampled(test, span, call, what):
    """A sampled span lies inside the call, exactly: each sample that holds
    the function was taken during it, between the caller's stamps outer0 and
    outer1. It covers the CPU time the function took but what the sampler
    misses at its ends."""
    end = span["start_ns"] + span["dur_ns"]
    test.assertLessEqual(call["outer0"], span["start_ns"], what)
    test.assertLessEqual(end, call["outer1"], what)
    test.assertGreaterEqual(span["dur_ns"], call["cpu"] - sampler_slack_ns(call["cpu"]), what)


class PythonFunctions(unittest.TestCase):
    def module_line(self, version):
        """The line a module's code object names: 1 from 3.10 on, the first
        statement's before (a comment above it, the SPDX line, is skipped)."""
        return self.first_statement if version in ("3.8", "3.9") else 1

    maxDiff = None

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.lines = def_lines(BUSY)
        with open(BUSY) as f:
            cls.first_statement = ast.parse(f.read()).body[0].lineno

    def check(self, version):
        py = PYTHONS[version]
        self.assertTrue(os.path.exists(py), py + " is part of this machine's image")
        folded = os.path.join(self.tmp, version + ".folded")
        log = os.path.join(self.tmp, version + ".calls")
        rec = E.record(self.tmp, [py, BUSY, log], "--layers", "python", "--flamegraph", folded, name=version)
        self.assertEqual(rec.rc, 0, rec.stderr)
        # 3.13 states its own layout (_Py_DebugOffsets): it must agree with the table.
        self.assertNotIn("_Py_DebugOffsets", rec.stderr)
        calls = read_calls(log)
        self.check_flamegraph(version, folded, calls)
        spans = [s for s in rec.spans() if s["layer"] == "python" and s["args"]["file"] == BUSY]
        threads = collections.defaultdict(list)
        for s in spans:
            threads[s["tid"]].append(s)
        self.assertEqual(len(threads), 2, "two threads run the functions")
        self.assertEqual(set(threads), {c["tid"] for c in calls})
        qual_run = "run" if version in ("3.8", "3.9", "3.10") else "Worker.run"  # co_qualname is 3.11+
        for tid, mine in threads.items():
            count = collections.Counter(s["name"] for s in mine)
            # On a mismatch, the thread's spans in time order: enough to tell a
            # split span (a gap in the samples) from a misnamed one.
            timeline = [(s["start_ns"] - mine[0]["start_ns"], s["dur_ns"], s["depth"], s["name"])
                        for s in sorted(mine, key=lambda s: (s["start_ns"], s["depth"]))]
            for name, n in CALLS.items():
                self.assertEqual(count[name], n, (version, tid, name, count, timeline))
            self.assertEqual(count[qual_run], 1, (version, count, timeline))
            for s in mine:
                short = s["name"].split(".")[-1] if s["name"] != "<module>" else s["name"]
                self.assertEqual(s["args"]["line"], self.module_line(version) if short == "<module>"
                                 else self.lines[short], s)
            self.check_times(version, tid, mine, calls)
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

    def check_times(self, version, tid, mine, calls):
        """Each span of TIMED against the call its thread logged: the n-th
        span of a function is its n-th call (a thread runs them one by one)."""
        for name in TIMED:
            logged = [c for c in calls if c["tid"] == tid and c["name"] == name]
            self.assertEqual(len(logged), CALLS[name], (version, tid, name))
            for s, c in zip([s for s in mine if s["name"] == name], logged):
                check_sampled(self, s, c, (version, s, c))

    def check_flamegraph(self, version, folded, calls):
        """inner_a;spin has one stack per thread, with a sample per ms of the
        CPU time that thread spent in inner_a (as it measured). Each stretch
        the thread ran gets ticks for its length, give or take one, and these
        errors mostly cancel: 20% and 3 samples leave room for them and for
        time a tick counts but the thread's CPU clock does not (runs here, quiet
        and under load, gave 0.96 to 1.11 samples per ms of CPU time)."""
        with open(folded) as f:
            lines = [l.rsplit(" ", 1) for l in f.read().splitlines()]
        leaf = "inner_a (py_busy.py:%d);spin (py_busy.py:%d)" % (self.lines["inner_a"], self.lines["spin"])
        per_stack = {stack: int(n) for stack, n in lines if stack.endswith(leaf)}
        self.assertEqual(len(per_stack), 2, lines)  # one stack per thread (main and worker)
        cpu = collections.Counter()
        for c in calls:
            if c["name"] == "inner_a":
                cpu[c["tid"]] += c["cpu"]
        # The main thread's tid is the pid; the worker's stack starts in threading's _bootstrap.
        main = calls[0]["pid"]
        worker = [tid for tid in cpu if tid != main]
        self.assertEqual(len(worker), 1, cpu)
        tids = {stack: worker[0] if "(threading.py:" in stack else main for stack in per_stack}
        self.assertEqual(sorted(tids.values()), sorted(cpu), per_stack)
        for stack, n in per_stack.items():
            expected = cpu[tids[stack]] * SAMPLE_HZ / 1e9
            self.assertLessEqual(abs(n - expected), 0.2 * expected + 3, (version, stack, n, expected))


def _make(version):
    def test(self):
        self.check(version)
    return test


for _v in PYTHONS:
    setattr(PythonFunctions, "test_python_" + _v.replace(".", "_").replace("-", "_"), _make(_v))


ENTRIES = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "py_entries.py")


class PythonEntries(unittest.TestCase):
    """Calls entered from C (a sort key, map()) are exact spans, back-to-back
    calls included, which a sampler alone merges; with --python-entries all
    on 3.8-3.10 every call is."""

    def record(self, version, *options):
        """The recording, its spans of ENTRIES by name, and the program's log of its calls."""
        E.require_root()
        tmp = E.make_tempdir(self)
        log = os.path.join(tmp, "calls")
        rec = E.record(tmp, [PYTHONS[version], ENTRIES, log], "--layers", "python", *options)
        self.assertEqual(rec.rc, 0, rec.stderr)
        spans = [s for s in rec.spans() if s["layer"] == "python" and s["args"]["file"] == ENTRIES]
        by_name = collections.defaultdict(list)
        for s in spans:
            by_name[s["name"]].append(s)
        for thread, events in E.by_thread(E.x_events(E.load_trace(rec.trace))).items():
            self.assertEqual(E.nesting_errors(events), [], (version, thread))
        return rec, by_name, read_calls(log)

    def check_exact(self, version, by_name, calls, names):
        """key's and mapped's calls are exact spans, checked against the
        program's stamps with no slack (both are CLOCK_MONOTONIC): call i
        starts after call i-1's last stamp (the first, after main's stamp
        before sorted/map) and by its own first stamp, and ends by its own
        last stamp and before call i+1's first (main's after sorted/map)."""
        for name, around in (("key", "sorted"), ("mapped", "map")):
            spans = by_name[name]
            self.assertEqual(len(spans), 3, (version, name, spans))
            logged = [i for i, c in enumerate(calls) if c["name"] == name]
            outer = [c for c in calls if c["name"] == around]
            self.assertEqual((len(logged), len(outer)), (3, 1), calls)
            after = [outer[0]["t0"]] + [calls[i]["t1"] for i in logged]
            before = [calls[i]["t0"] for i in logged[1:]] + [outer[0]["t1"]]
            for k, (s, i) in enumerate(zip(spans, logged)):
                what = (version, s, calls[i])
                self.assertTrue(s["args"].get("exact"), what)
                self.assert_between(s, after[k], before[k], what)
                self.assert_covers(s, calls[i], what)
                inner = [w for w in by_name["work"] if E.contains(E.span_as_event(s), E.span_as_event(w))]
                self.assertEqual(len(inner), 1, (version, s, by_name["work"]))
                self.check_work(version, inner[0], calls[i - 1], calls[i])
        for name in names:
            self.assertTrue(all(s["args"].get("exact") for s in by_name[name]), (version, name, by_name[name]))

    def check_work(self, version, span, work, caller):
        """work's span lies within its caller's stamps; exact (3.8-3.10 with
        'all'), it also covers work's own (logged just before the caller's)."""
        what = (version, span, work, caller)
        self.assertEqual(work["name"], "work", what)
        self.assert_between(span, caller["t0"], caller["t1"], what)
        if span["args"].get("exact"):
            self.assert_covers(span, work, what)

    def assert_between(self, span, lo, hi, what):
        self.assertLessEqual(lo, span["start_ns"], what)
        self.assertLessEqual(span["start_ns"] + span["dur_ns"], hi, what)

    def assert_covers(self, span, call, what):
        """Measured at the eval loop's entry and return: from before the call's first stamp to after its last."""
        self.assertLessEqual(span["start_ns"], call["t0"], what)
        self.assertLessEqual(call["t1"], span["start_ns"] + span["dur_ns"], what)

    def test_entries_from_c_are_exact_on_3_11_and_later(self):
        for version in ("debian-3.11", "3.12", "3.13"):
            rec, by_name, calls = self.record(version, "--python-entries", "auto")
            self.assertIn("entries from C exactly", rec.stderr)
            self.check_exact(version, by_name, calls, ["<module>"])
            self.assertFalse(any(s["args"].get("exact") for s in by_name["work"] + by_name["main"]),
                             "Python-to-Python calls do not enter the eval loop on " + version)

    def test_every_call_is_exact_with_all_on_3_8_to_3_10(self):
        for version in ("3.8", "3.9", "3.10"):
            rec, by_name, calls = self.record(version, "--python-entries", "all")
            self.check_exact(version, by_name, calls, ["<module>", "main", "work"])
            self.assertEqual(len(by_name["work"]), 6, by_name["work"])
            self.assertEqual(len(by_name["main"]), 1)

    def test_auto_leaves_3_8_to_3_10_sampled_and_off_is_the_default(self):
        rec, by_name, _ = self.record("3.9", "--python-entries", "auto")
        self.assertFalse([s for v in by_name.values() for s in v if s["args"].get("exact")])
        rec, by_name, _ = self.record("debian-3.11")
        self.assertFalse([s for v in by_name.values() for s in v if s["args"].get("exact")])


class PythonProcesses(unittest.TestCase):
    def test_forked_workers_are_followed(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        script = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "py_fork.py")
        log = os.path.join(tmp, "calls")
        rec = E.record(tmp, [PYTHONS["3.12"], script, log], "--layers", "python")
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
        # Times: each process logged its one call; its span is checked against it.
        calls = {(c["pid"], c["name"]): c for c in read_calls(log)}
        self.assertEqual(set(calls), {(s["pid"], s["name"]) for s in parent + children})
        for s in parent + children:
            check_sampled(self, s, calls[(s["pid"], s["name"])], (s, calls[(s["pid"], s["name"])]))

    def test_an_exec_drops_the_parents_interpreter(self):
        """Debian's 3.11 forks a child that execs pyenv's 3.12 (other
        addresses, another frame layout) and one that execs /bin/sh: each
        child's frames are its own program's, or none."""
        E.require_root()
        tmp = E.make_tempdir(self)
        script = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "py_exec.py")
        log = os.path.join(tmp, "calls")
        rec = E.record(tmp, [PYTHONS["debian-3.11"], script, "parent", log, PYTHONS["3.12"]], "--layers", "python")
        self.assertEqual(rec.rc, 0, rec.stderr)
        lines = read_calls(log)
        kids = [c for c in lines if c["name"] == "children"]
        self.assertEqual(len(kids), 1, lines)
        parent, python, shell = kids[0]["pid"], kids[0]["python"], kids[0]["shell"]
        calls = {(c["pid"], c["name"]): c for c in lines if c["name"] != "children"}
        self.assertEqual(set(calls), {(parent, "parent_spin"), (python, "exec_child_spin")})
        spans = [s for s in rec.spans() if s["layer"] == "python"]
        by_pid = collections.defaultdict(list)
        for s in spans:
            by_pid[s["pid"]].append(s)
        self.assertEqual(set(by_pid) - {parent, python, shell}, set(), spans)
        # Each Python process: its timed function once, inside the call.
        for pid, name in ((parent, "parent_spin"), (python, "exec_child_spin")):
            mine = [s for s in by_pid[pid] if s["name"] == name]
            self.assertEqual(len(mine), 1, by_pid[pid])
            self.assertEqual(mine[0]["args"]["file"], script)
            call = calls[(pid, name)]
            self.assertLessEqual(call["outer0"], mine[0]["start_ns"])
            self.assertLessEqual(mine[0]["start_ns"] + mine[0]["dur_ns"], call["outer1"])
        # The 3.12 child's frames are 3.12's: this script's child part and
        # that interpreter's own library, never the parent's functions.
        for s in by_pid[python]:
            self.assertNotIn(s["name"], ("parent_spin", "fork_exec"), s)
            self.assertFalse(s["args"]["file"].startswith("/usr/lib/python3"), s)
        # The shell has no Python frames: a span of its pid can only be the
        # parent's code it ran between the fork and the exec.
        for s in by_pid[shell]:
            self.assertEqual(s["args"]["file"], script, s)
            self.assertIn(s["name"], ("<module>", "main", "fork_exec"), s)
        procs = {p["pid"]: p for p in rec.query("SELECT pid, ppid, comm FROM processes")}
        self.assertEqual(procs[python]["ppid"], parent)
        self.assertEqual(procs[shell]["ppid"], parent)
        self.assertEqual(procs[shell]["comm"], "sh")

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


FRAMELESS = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "py_frameless.py")


def attached_calls(tmp, py, script, spec, name):
    """Runs `py script TESTLIB`, which prints "waiting", makes its calls once
    a line on stdin says so, prints "done" and lives until stdin closes;
    records it with -p from before its calls until after them, the python
    layer and `spec`. eacgm reads what is left of its rings before it exits,
    the program still alive: its frames read."""
    with subprocess.Popen([py, script, E.TESTLIB], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as prog:
        try:
            if prog.stdout.readline() != "waiting\n":
                raise AssertionError("%s did not start" % script)
            started = E.start_record(tmp, "-p", str(prog.pid), "--layers", "python", "--spec", spec, name=name)
            prog.stdin.write("go\n")
            prog.stdin.flush()
            if prog.stdout.readline() != "done\n":
                started.kill()
                raise AssertionError("%s did not finish its calls" % script)
            started.proc.send_signal(signal.SIGINT)
            return started.wait()
        finally:
            prog.stdin.close()  # and the program ends


class CallsFromThreadsWithoutFrames(unittest.TestCase):
    """A traced call from a thread with a thread state and no Python frames
    (a C-started worker, as torch's autograd and CUDA threads are) has no
    stack, and the calls around it keep theirs. Every version: eacgm crashed
    on such a stack on each of them (found recording ResNet-18 on a GPU)."""

    def test_every_version(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        spec = E.write_json(os.path.join(tmp, "spec.json"), dict(E.TESTLIB_SPEC, library=E.TESTLIB))
        with open(FRAMELESS) as f:
            line = {tag: i for i, text in enumerate(f, 1) for tag in ("FROM_PYTHON_1", "FROM_PYTHON_3")
                    if text.rstrip().endswith(tag)}
        for version, py in PYTHONS.items():
            with self.subTest(version):
                # Attached once the program waits, and stopped before it
                # ends: launched with `record --`, its first calls could
                # come before eacgm knew it ran Python, and its last before
                # eacgm read their frames, which its exit freed (both calls
                # lost their stacks once in a full make test).
                rec = attached_calls(tmp, py, FRAMELESS, spec, "frameless-" + version)
                self.assertEqual(rec.rc, 0, rec.stderr)
                spans = sorted(rec.spans("layer = 'testlib'"), key=lambda s: s["start_ns"])
                self.assertEqual([(s["name"], s["args"], s["py_stack"]) for s in spans], [
                    ("tl_noop", {"x": 1}, ["<module> (py_frameless.py:%d)" % line["FROM_PYTHON_1"]]),
                    ("tl_out", {"out": 42, "value": 42}, []),
                    ("tl_noop", {"x": 3}, ["<module> (py_frameless.py:%d)" % line["FROM_PYTHON_3"]]),
                ])
                self.assertEqual(len({s["tid"] for s in spans}), 2)


NESTED = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "py_nested.py")


class NestedCallsShareTheirStack(unittest.TestCase):
    """A traced call nested in another, made from the same Python frame,
    shares the outer call's stack record instead of walking it again (a
    torch operator calling another); one made from Python code that runs
    inside the outer call (a callback) walks its own. Each call shows the
    stack it was made under, exactly, on every version."""

    def test_every_version(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        spec = E.write_json(os.path.join(tmp, "spec.json"),
                            dict(E.TESTLIB_SPEC, library=E.TESTLIB,
                                 probes=E.TESTLIB_SPEC["probes"] + [{"function": "tl_call"}]))
        with open(NESTED) as f:
            line = {tag: i for i, text in enumerate(f, 1) for tag in ("OUTER", "CALL", "IN_CALLBACK")
                    if text.rstrip().endswith("# " + tag)}
        outer = ["<module> (py_nested.py:%d)" % line["OUTER"]]
        call = ["<module> (py_nested.py:%d)" % line["CALL"]]
        for version, py in PYTHONS.items():
            with self.subTest(version):
                rec = attached_calls(tmp, py, NESTED, spec, "nested-" + version)
                self.assertEqual(rec.rc, 0, rec.stderr)
                spans = sorted(rec.spans("layer = 'testlib'"), key=lambda s: s["start_ns"])
                self.assertEqual([(s["name"], s["depth"], s["py_stack"]) for s in spans], [
                    ("tl_outer", 0, outer),
                    ("tl_inner", 1, outer),
                    ("tl_inner", 1, outer),
                    ("tl_call", 0, call),
                    ("tl_noop", 1, ["callback (py_nested.py:%d)" % line["IN_CALLBACK"]] + call),
                    ("tl_inner", 1, call),
                ])

if __name__ == "__main__":
    unittest.main()
