# SPDX-License-Identifier: Apache-2.0
"""Attaching to a running process (-p) and to a library it loads late (dlopen)."""
import os
import shutil
import subprocess
import unittest

import eacgm_e2e as E

RACE_TARGET = os.path.join(E.TESTPROGS, "race_target")


class Attach(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        E.require_root()
        self.tmp = E.make_tempdir(self)
        self.spec = E.write_json(os.path.join(self.tmp, "spec.json"), E.TESTLIB_SPEC)

    def test_attach_to_running_process(self):
        go = os.path.join(self.tmp, "go")
        target = subprocess.Popen([E.TESTLIB_CALLS, "noop", "500"], stdout=subprocess.PIPE, text=True,
                                  env=dict(os.environ, WAIT_FILE=go))
        self.addCleanup(target.stdout.close)
        self.addCleanup(lambda: target.poll() is None and (target.kill(), target.wait()))
        self.assertEqual(target.stdout.readline(), "waiting %d\n" % target.pid)

        rec = E.start_record(self.tmp, "-p", str(target.pid), "--spec", self.spec)
        self.addCleanup(lambda: rec.proc.poll() is None and (rec.proc.kill(), rec.proc.wait()))
        ready = rec.ready()
        self.assertEqual((ready["pid"], ready["processes"], ready["output"]), (rec.pid, 1, rec.db))
        self.assertRegex(rec._stderr, r"eacgm: recording \(\d+ probes?, 1 process\)")
        open(go, "w").close()  # every probe is in place: the target may start its calls

        r = rec.wait(timeout=120)  # ends when the target exits
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(target.wait(timeout=10), 0)
        self.assertEqual(target.stdout.read(), "done %d\n" % sum(range(500)))
        spans = r.spans()
        self.assertEqual([(s["name"], s["args"], s["pid"]) for s in spans],
                         [("tl_noop", {"x": i}, target.pid) for i in range(500)])
        procs = r.query("SELECT pid, exit_code FROM processes")
        self.assertEqual(procs, [{"pid": target.pid, "exit_code": 0}])
        self.assertEqual(sorted(os.listdir(self.tmp)), ["go", "r.db", "r.ready", "r.trace.json", "spec.json"])

    def test_library_loaded_later(self):
        # A copy under another name: the probes must find it when it is loaded, not at start.
        copy = shutil.copy(E.TESTLIB, os.path.join(self.tmp, "libeacgm_testlib_copy.so"))
        loaded = os.path.join(self.tmp, "loaded")
        rec = E.start_record(self.tmp, "--spec", self.spec, "--", E.TESTLIB_CALLS, "noop", "300",
                             env={"DLOPEN": copy, "LOADED_WAIT_FILE": loaded})
        self.addCleanup(lambda: rec.proc.poll() is None and (rec.proc.kill(), rec.proc.wait()))
        m = rec.wait_for_line(r"^eacgm: attached (\d+) probes? to (.*) \(loaded by pid (\d+)\)$")
        self.assertEqual(m.group(2), os.path.realpath(copy))
        self.assertEqual(int(m.group(1)), len(E.TESTLIB_SPEC["probes"]))
        open(loaded, "w").close()  # eacgm has attached: the program may call
        r = rec.wait()
        self.assertEqual(r.rc, 0, r.stderr)
        spans = r.spans()
        self.assertEqual([(s["name"], s["args"], s["ret"], s["pid"]) for s in spans],
                         [("tl_noop", {"x": i}, i, int(m.group(3))) for i in range(300)])

    def test_command_children_that_outlive_it_are_recorded(self):
        # The command exits 3 at once; its child calls the library only once eacgm has said
        # it saw the command exit and records on: every call comes after, and all are recorded.
        log, go = os.path.join(self.tmp, "calls.log"), os.path.join(self.tmp, "go")
        started = E.start_record(self.tmp, "--spec", self.spec, "--layers", "host", "--",
                                 RACE_TARGET, "orphan", "100", log, go)
        self.addCleanup(lambda: started.proc.poll() is None and (started.proc.kill(), started.proc.wait()))
        started.wait_for_line(r"^eacgm: the command exited \(3\); recording its 1 process still running")
        open(go, "w").close()
        rec = started.wait()
        self.assertEqual(rec.rc, 3, rec.stderr)  # the command's exit code
        with open(log) as f:
            orphan = int(f.readline().split()[1])
        spans = rec.spans()
        self.assertEqual([(s["name"], s["args"], s["pid"]) for s in spans],
                         [("tl_noop", {"x": i}, orphan) for i in range(100)])
        procs = rec.query("SELECT pid, exit_code FROM processes ORDER BY start_ns")
        self.assertEqual([p["exit_code"] for p in procs], [3, 0])
        self.assertEqual(procs[1]["pid"], orphan)


if __name__ == "__main__":
    unittest.main()
