# SPDX-License-Identifier: Apache-2.0
"""`record -p` against a process that exits while eacgm starts: before, during and after the
attach, reaped at once by its parent or left a zombie, and a process tree that forks and execs
throughout. Whatever the moment, the recording must end within 2 s of the last exit and hold every
call made once eacgm said it was ready; a process already gone (or a zombie) when eacgm looks at it,
or gone before eacgm tracked it, is an error that names it. Every outcome is checked exactly, so the test cannot pass by luck: the
target logs each call with its own CLOCK_MONOTONIC time, which is eacgm's clock too."""
import collections
import os
import signal
import subprocess
import sys
import time
import unittest

import eacgm_e2e as E

RACE_TARGET = os.path.join(E.TESTPROGS, "race_target")
# ms between `record -p` starting and the target's exit: around and after eacgm's start-up.
DELAYS_MS = (0, 50, 200, 500, 800, 2000)
TREE_DELAYS_MS = (0, 200, 800, 2000)
RUNS = 3
END_WITHIN_NS = 2 * 10**9


def read_log(path):
    """The target's own account: {(pid, i): t_ns} of every call, and the time of its exit."""
    calls, exit_ns = {}, None
    with open(path) as f:
        for line in f:
            w = line.split()
            if w[0] == "call":
                calls[(int(w[1]), int(w[2]))] = int(w[3])
            elif w[0] == "exit":
                exit_ns = int(w[1])
    return calls, exit_ns


class AttachRace(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.outcomes = collections.Counter()

    @classmethod
    def tearDownClass(cls):
        # Where the exits fell this time (the checks hold for each kind of outcome).
        print("\nattach race outcomes: %s" % dict(sorted(cls.outcomes.items())), file=sys.stderr)

    def run_case(self, mode, delay_ms):
        tmp = E.make_tempdir(self)
        spec = E.write_json(os.path.join(tmp, "spec.json"), E.TESTLIB_SPEC)
        log = os.path.join(tmp, "calls.log")
        parent = subprocess.Popen([RACE_TARGET, mode, str(delay_ms), log], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            child = int(parent.stdout.readline().split()[1])
            db, ready_file = os.path.join(tmp, "r.db"), os.path.join(tmp, "r.ready")
            rec = subprocess.Popen([E.EACGM, "record", "-o", db, "--ready-file", ready_file, "--layers", "host",
                                    "--spec", spec, "-p", str(child)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            os.kill(child, signal.SIGUSR1)  # the child exits delay_ms from now
            try:
                _, err = rec.communicate(timeout=30 + delay_ms / 1000)
            except subprocess.TimeoutExpired:
                rec.kill()
                rec.communicate()
                raise AssertionError("%s %d ms: record -p never ended after its process exited" % (mode, delay_ms))
            ended_ns = time.monotonic_ns()
        finally:
            parent.stdin.close()  # the parent exits (and a zombie child with it)
            parent.wait(timeout=30)
            parent.stdout.close()
        calls, exit_ns = read_log(log)
        what = "%s %d ms, child %d" % (mode, delay_ms, child)
        self.assertIsNotNone(exit_ns, what)
        if rec.returncode == 1:
            self.check_gone_at_start(what, mode, child, err, tmp)
        else:
            self.assertEqual(rec.returncode, 0, (what, err))
            self.check_recording(what, mode, child, err, db, ready_file, calls, exit_ns)
        self.assertLess(ended_ns - exit_ns, END_WITHIN_NS,
                        "%s: record ended %.2f s after the last exit" % (what, (ended_ns - exit_ns) / 1e9))

    def check_gone_at_start(self, what, mode, child, err, tmp):
        """The process had exited before any of it was tracked (when eacgm first
        looked, or while it loaded its probes): an error naming it, and no files."""
        if "exited while eacgm was attaching, before any probe was in place" in err:
            self.outcomes[mode + ": gone during the attach"] += 1
            self.assertIn("process %d exited while eacgm was attaching" % child, err, what)
        elif mode == "zombie" or "it is a zombie" in err:
            # "reaped" too: its parent reaps it a moment after it exits, and
            # eacgm may look in that moment (a fresh clone at 8c985c9 did,
            # 50 ms in).
            self.outcomes[mode + ": gone at start" + ("" if mode == "zombie" else ", not reaped yet")] += 1
            self.assertIn("process %d has already exited: it is a zombie" % child, err, what)
        else:
            self.outcomes[mode + ": gone at start"] += 1
            self.assertIn("no process with PID %d" % child, err, what)
        self.assertEqual(sorted(os.listdir(tmp)), ["calls.log", "spec.json"], what)

    def check_recording(self, what, mode, child, err, db, ready_file, calls, exit_ns):
        ready = E.load_trace(ready_file)  # one JSON object
        ready_ns = ready["mono_ns"]
        self.assertRegex(err, E.READY_LINE, what)
        self.assertEqual(ready["processes"] == 0, "exited while eacgm was attaching" in err, (what, err))
        self.outcomes[mode + (": exited before ready" if exit_ns < ready_ns else ": exited after ready")] += 1
        stored = {(s["pid"], s["args"]["x"]): s["start_ns"] for s in E.load_spans(db) if s["name"] == "tl_noop"}
        # Only calls the target made, each entered after the target read its clock.
        self.assertEqual(sorted(set(stored) - set(calls)), [], what)
        early = [(k, stored[k], calls[k]) for k in stored if stored[k] < calls[k]]
        self.assertEqual(early, [], what)
        # Every call made after eacgm was ready is there.
        missed = sorted(k for k, t in calls.items() if t > ready_ns and k not in stored)
        self.assertEqual(missed[:10], [], "%s: %d calls after ready missing" % (what, len(missed)))
        # Once a process's calls are seen, all of its later ones are, up to its last before exit.
        for pid in {p for p, _ in stored}:
            mine = sorted(i for p, i in stored if p == pid)
            last = max(i for p, i in calls if p == pid)
            self.assertEqual(mine, list(range(mine[0], last + 1)), (what, pid))
        if mode != "tree":
            self.assertEqual({p for p, _ in stored} - {child}, set(), what)
        procs = {r["pid"]: r["exit_code"] for r in E.query(db, "SELECT pid, exit_code FROM processes")}
        self.assertIn(child, procs, what)
        # The exit code is known unless the process was reaped before it was tracked.
        if procs[child] != 0:
            self.assertEqual((mode != "zombie", procs[child]), (True, -1), what)
            self.assertLess(exit_ns, ready_ns, what)

    def test_exit_before_during_and_after_attach(self):
        for run in range(RUNS):
            for delay in DELAYS_MS:
                for mode in ("reaped", "zombie"):
                    self.run_case(mode, delay)

    def test_forks_and_execs_during_attach_are_followed(self):
        for run in range(RUNS):
            for delay in TREE_DELAYS_MS:
                self.run_case("tree", delay)


if __name__ == "__main__":
    unittest.main()
