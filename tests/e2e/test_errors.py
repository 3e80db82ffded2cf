# SPDX-License-Identifier: Apache-2.0
"""Bad input and interruptions: a non-zero exit, one line naming the problem,
and no output files left behind."""
import os
import shutil
import signal
import subprocess
import time
import unittest

import eacgm_e2e as E


class BadInput(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        E.require_root()
        self.tmp = E.make_tempdir(self)
        self.db = os.path.join(self.tmp, "r.db")

    def expect_error(self, args, rc, *words, inputs=(), run=E.eacgm):
        """Runs eacgm; checks the exit code, a single 'eacgm: ' line with all of
        `words`, and that the temp dir holds only `inputs` afterwards."""
        r = run(*args, cwd=self.tmp, timeout=60)
        self.assertEqual(r.returncode, rc, r.stderr)
        self.assertEqual(r.stdout, "")
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("eacgm: "), lines[0])
        for w in words:
            self.assertIn(w, lines[0])
        self.assertEqual(sorted(os.listdir(self.tmp)), sorted(inputs))
        return lines[0]

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_unknown_layer(self):
        self.expect_error(["record", "--layers", "cuda,bogus", "-o", self.db, "--", "true"], 2,
                          "unknown layer 'bogus'", "cuda,nccl,gloo,torch,python,gpu,host")

    def test_command_not_found(self):
        self.expect_error(["record", "-o", self.db, "--", "eacgm_no_such_command"], 127,
                          "command not found", "eacgm_no_such_command")

    def test_command_path_does_not_exist(self):
        missing = os.path.join(self.tmp, "missing", "prog")
        self.expect_error(["record", "-o", self.db, "--", missing], 127, "cannot run", missing)

    def test_pid_does_not_exist(self):
        with open("/proc/sys/kernel/pid_max") as f:
            pid = str(int(f.read()) + 1)
        self.expect_error(["record", "-o", self.db, "-p", pid], 1, "no process with PID " + pid)

    def test_pid_is_a_zombie(self):
        # A child of this test that has exited and is not reaped: /proc/PID is still there.
        child = subprocess.Popen(["true"])
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited; still a zombie
        try:
            self.expect_error(["record", "-o", self.db, "-p", str(child.pid)], 1,
                              "process %d has already exited: it is a zombie" % child.pid,
                              "its parent (PID %d) has not reaped" % os.getpid())
        finally:
            child.wait()

    def test_pid_and_command(self):
        self.expect_error(["record", "-o", self.db, "-p", str(os.getpid()), "--", "true"], 2, "-p", "not both")

    def test_neither_pid_nor_command(self):
        self.expect_error(["record", "-o", self.db], 2, "nothing to record", "-p PID", "COMMAND")

    def bad_spec(self):
        return self.write("bad.json", '{\n  "layer": "testlib",\n  "library": oops,\n  "probes": []\n}\n')

    def test_spec_syntax_error(self):
        spec = self.bad_spec()
        msg = self.expect_error(["record", "-o", self.db, "--spec", spec, "--", "true"], 2, inputs=["bad.json"])
        self.assertTrue(msg.startswith("eacgm: %s: JSON syntax error at line 3, column 14: " % spec), msg)

    def test_spec_syntax_error_detail_is_whole(self):
        # The detail after "column N: " must not be a fragment cut out of a quoted excerpt.
        spec = self.bad_spec()
        msg = self.expect_error(["record", "-o", self.db, "--spec", spec, "--", "true"], 2, inputs=["bad.json"])
        detail = msg.split("column 14: ", 1)[-1]
        self.assertEqual(detail.count("'") % 2, 0, "unbalanced quote in %r" % detail)

    def test_spec_symbol_missing(self):
        spec = E.write_json(os.path.join(self.tmp, "miss.json"),
                            {"layer": "testlib", "library": "libeacgm_testlib*.so",
                             "probes": [{"function": "tl_missing"}]})
        self.expect_error(["record", "-o", self.db, "--layers", "cuda", "--spec", spec, "--",
                           E.TESTLIB_CALLS, "noop", "1"], 2,
                          "tl_missing", "not found in " + os.path.realpath(E.TESTLIB), inputs=["miss.json"])

    def test_output_directory_missing(self):
        out = os.path.join(self.tmp, "nodir", "r.db")
        self.expect_error(["record", "-o", out, "--", "true"], 2, "cannot write " + out)

    def test_summary_of_missing_file(self):
        missing = os.path.join(self.tmp, "missing.db")
        self.expect_error(["summary", missing], 1, "cannot open recording " + missing)

    def test_summary_of_non_sqlite_file(self):
        path = self.write("notsql.db", "hello\n")
        self.expect_error(["summary", path], 1, path, "not an eacgm recording", "not a SQLite database",
                          inputs=["notsql.db"])
        with open(path) as f:
            self.assertEqual(f.read(), "hello\n")

    def test_export_of_non_sqlite_file(self):
        path = self.write("notsql.db", "hello\n")
        self.expect_error(["export", path, "--perfetto", os.path.join(self.tmp, "t.json")], 1, path,
                          "not an eacgm recording", inputs=["notsql.db"])

    def test_not_root(self):
        tool = shutil.which("setpriv")
        self.assertIsNotNone(tool, "setpriv (util-linux, essential on Debian) is missing")
        as_nobody = lambda *a, **kw: E.run([tool, "--reuid=65534", "--regid=65534", "--clear-groups", E.EACGM, *a],
                                           **kw)
        self.expect_error(["record", "-o", self.db, "--", "true"], 1, "root", "CAP_BPF", "CAP_PERFMON",
                          run=as_nobody)


class AbsurdValues(unittest.TestCase):
    """Rates and sizes past what makes sense are refused by name, with the
    range, before anything runs (a 4 GiB ring buffer once wrapped to 0 bytes,
    and 2 GiB of the kernel's locked memory was taken)."""

    CASES = [
        (["--sample-hz", "1000000"], "--sample-hz: Value 1000000 not in range 0 to 10000"),
        (["--sample-hz", "nan"], "--sample-hz: Value nan not in range 0 to 10000"),
        (["--gpu-hz", "0"], "--gpu-hz: Value 0 not in range 0.100000 to 1000.000000"),
        (["--host-interval-ms", "0"], "--host-interval-ms: Value 0 not in range 10 to 60000"),
        (["--ring-buffer-kb", "4194304"], "--ring-buffer-kb: Value 4194304 not in range 4 to 1048576"),
        (["--ring-buffer-kb", "2097152"], "--ring-buffer-kb: Value 2097152 not in range 4 to 1048576"),
        (["--detect-fpr", "2"], "--detect-fpr: Value 2 not in range 0.000000 to 0.500000"),
        (["--hang-after", "inf"], "--hang-after: Value inf not in range 0.000000 to 86400.000000"),
    ]

    def test_each_refused_by_name(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        for args, line in self.CASES:
            with self.subTest(args=args):
                r = E.eacgm("record", "-o", os.path.join(tmp, "r.db"), *args, "--", "true", cwd=tmp, timeout=60)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(r.stderr.splitlines()[0], line)
                self.assertEqual(os.listdir(tmp), [])


class Interrupt(unittest.TestCase):
    """SIGINT sent to eacgm alone (os.kill, as `timeout` or a scheduler would), while it records.
    Each case waits on eacgm's own lines (ready, interrupted) before signalling, and is
    given a --stop-timeout far from what it checks, so that no bound depends on load."""

    SLEEP = ["sleep", "30"]
    # A command that ignores SIGINT (the disposition survives exec).
    STUBBORN = ["sh", "-c", "trap '' INT; exec sleep 30"]
    LONG = 60  # s: a --stop-timeout no case may wait out
    HANG = 30  # s: an exit later than this is a hang (and well before LONG)

    @classmethod
    def interrupt(cls, command, twice, stop_timeout):
        out = E.make_tempdir(cls)  # eacgm's output dir: checked for leftovers
        logs = E.make_tempdir(cls)
        err_path = os.path.join(logs, "err")
        with open(err_path, "w+") as err:
            # Output to files, not pipes: a leftover `sleep` would hold a pipe open.
            p = subprocess.Popen([E.EACGM, "record", "-o", os.path.join(out, "r.db"), "--stop-timeout",
                                  str(stop_timeout), "--", *command],
                                 stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
            cls.addClassCleanup(E.kill_group, p.pid)
            E.wait_for_text(err_path, E.READY_LINE.pattern, p)
            sleeper = E.wait_child_exec(p.pid, "sleep")
            t = time.monotonic()  # before the signal: eacgm's wait starts later
            os.kill(p.pid, signal.SIGINT)
            if twice:
                E.wait_for_text(err_path, "^eacgm: interrupted: waiting", p)
                t = time.monotonic()
                os.kill(p.pid, signal.SIGINT)
            try:
                rc = p.wait(timeout=cls.LONG + 30)
            finally:
                elapsed = time.monotonic() - t
                E.kill_group(p.pid)
            err.seek(0)
            return dict(rc=rc, err=err.read(), elapsed=elapsed, out=out, files=sorted(os.listdir(out)),
                        sleeper=sleeper)

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.forwarded = cls.interrupt(cls.SLEEP, twice=False, stop_timeout=cls.LONG)
        cls.once = cls.interrupt(cls.STUBBORN, twice=False, stop_timeout=1)
        cls.twice = cls.interrupt(cls.STUBBORN, twice=True, stop_timeout=cls.LONG)

    def assert_complete_recording(self, r, command, exit_code):
        self.assertEqual(r["rc"], 130, r["err"])
        self.assertEqual(r["files"], ["r.db", "r.pftrace"])  # the trace in Perfetto's format by default
        db = os.path.join(r["out"], "r.db")
        self.assertIn("recording: " + db, r["err"])
        m = E.meta(db)
        self.assertEqual(m["command"], " ".join(command))
        self.assertIn("duration_s", m)
        procs = E.query(db, "SELECT pid, comm, exit_code FROM processes")
        self.assertEqual(procs, [{"pid": r["sleeper"], "comm": "sleep", "exit_code": exit_code}])
        s = E.eacgm("summary", db)
        self.assertEqual(s.returncode, 0, s.stderr)
        trace = E.load_pftrace(os.path.join(r["out"], "r.pftrace"))
        self.assertIn(r["sleeper"], [t.get("pid") for t in trace["tracks"].values()])

    def test_signal_is_passed_on_to_the_command(self):
        # sleep dies of the forwarded SIGINT (exit 130) and the recording ends
        # with it, not by waiting out the 60 s stop timeout.
        # (Whether eacgm said it was waiting depends on which it saw first: the
        # interrupt or sleep's exit; both are right.)
        self.assert_complete_recording(self.forwarded, self.SLEEP, 130)
        self.assertNotIn("did not exit within", self.forwarded["err"])
        self.assertLess(self.forwarded["elapsed"], self.HANG, "exit %.2f s after SIGINT" % self.forwarded["elapsed"])

    def test_once_keeps_a_complete_recording(self):
        # The command outlives the stop timeout: eacgm stops without it (exit code unknown: -1).
        self.assert_complete_recording(self.once, self.STUBBORN, -1)
        self.assertIn("eacgm: the command did not exit within 1 s of the interrupt: the recording stops "
                      "without it (it goes on running, untraced)", self.once["err"])

    def test_once_stops_after_the_stop_timeout(self):
        # eacgm gives the command --stop-timeout (1 s) to finish after SIGINT, then stops.
        e = self.once["elapsed"]
        self.assertTrue(1.0 <= e < self.HANG, "exit %.2f s after SIGINT" % e)

    def test_twice_discards_the_recording(self):
        r = self.twice
        self.assertEqual(r["rc"], 130, r["err"])
        self.assertIn("eacgm: interrupted: waiting up to 60 s (--stop-timeout)", r["err"])
        self.assertIn("interrupted twice", r["err"])
        self.assertNotIn("did not exit within", r["err"])
        self.assertEqual(r["files"], [])  # no r.db, r.db.partial*, trace json or its temp file

    def test_twice_exits_without_waiting_for_the_command(self):
        # The second SIGINT ends eacgm at once, long before the 60 s stop timeout.
        self.assertLess(self.twice["elapsed"], self.HANG, "exit %.2f s after the second SIGINT" % self.twice["elapsed"])


class InterruptAtTheReadyLine(unittest.TestCase):
    """A wrapper may stop eacgm the moment it says it is ready: the signal
    handlers are in place before the line is printed, so that SIGINT ends the
    recording cleanly (exit 0, the process attached to in it) instead of
    killing eacgm with the default action (it did, every time, with -p)."""

    def test_sigint_right_after_the_ready_line(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        with subprocess.Popen(["sleep", "300"]) as target:
            try:
                for i in range(3):
                    started = E.start_record(tmp, "-p", str(target.pid), "--layers", "cuda", name="r%d" % i)
                    started.proc.send_signal(signal.SIGINT)
                    rec = started.wait()
                    self.assertEqual(rec.rc, 0, rec.stderr)
                    self.assertEqual(E.query(rec.db, "SELECT pid, comm FROM processes"),
                                     [{"pid": target.pid, "comm": "sleep"}])
            finally:
                target.kill()


if __name__ == "__main__":
    unittest.main()
