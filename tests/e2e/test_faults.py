# SPDX-License-Identifier: Apache-2.0
"""Faults around a recording: a disk that fills, eacgm killed outright. What
was committed before the fault is kept, readable and marked incomplete, and
the traced job runs to its own end with its own result."""
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import time
import unittest

import eacgm_e2e as E

SPEC = {"layer": "testlib", "library": "libeacgm_testlib*.so",
        "probes": [{"function": "tl_noop", "args": [{"name": "x", "slot": 0, "type": "i64"}]}]}


def job_result(calls):
    """What testlib_calls noop prints: tl_noop(i) returns i."""
    return "done %d\n" % (calls * (calls - 1) // 2)


def committed(db):
    """Spans a reader sees in db now (0 where it has no spans table yet)."""
    try:
        con = E.connect(db)
        try:
            return con.execute("SELECT count(*) FROM spans").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def check_store(test, db, at_least):
    """db opens cleanly, passes integrity_check and holds the calls 0..n-1
    (whole batches, in order) with n >= at_least; returns (n, meta)."""
    con = E.connect(db, read_only=False)
    try:
        test.assertEqual(con.execute("PRAGMA integrity_check").fetchall(), [("ok",)], db)
        xs = [r[0] for r in con.execute("SELECT json_extract(args, '$.x') FROM spans ORDER BY id")]
        meta = dict(con.execute("SELECT key, value FROM meta"))
    finally:
        con.close()
    test.assertEqual(xs, list(range(len(xs))), "%s: not the calls 0..%d in order" % (db, len(xs) - 1))
    test.assertGreaterEqual(len(xs), at_least, "%s lost committed spans" % db)
    return len(xs), meta


class DiskFull(unittest.TestCase):
    """A 300 KiB tmpfs as the output's file system, a recording needing more."""

    CALLS = 5000

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        spec = E.write_json(os.path.join(cls.tmp, "spec.json"), SPEC)
        cls.disk = os.path.join(cls.tmp, "disk")
        os.mkdir(cls.disk)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", cls.disk], check=True)
        cls.addClassCleanup(subprocess.run, ["umount", "-l", cls.disk])
        # 2 ms between calls: the recording commits (once a second) before the disk fills.
        cls.rec = E.record(cls.disk, [E.TESTLIB_CALLS, "noop", str(cls.CALLS)], "--layers", "cuda", "--spec",
                           spec, env={"PACE_US": "2000"})
        cls.files = sorted(os.listdir(cls.disk))
        # Read where there is room: a reader of a WAL database makes its -shm file.
        cls.copy = os.path.join(cls.tmp, "copy")
        shutil.copytree(cls.disk, cls.copy)

    def test_says_why_and_fails(self):
        self.assertEqual(self.rec.rc, 1, self.rec.stderr)
        self.assertIn("eacgm: cannot write %s.partial: database or disk is full" % self.rec.db, self.rec.stderr)
        self.assertIn("eacgm: the recording so far is kept in %s" % self.rec.db, self.rec.stderr)

    def test_recording_so_far_is_kept_under_its_name(self):
        # No partial file and no trace: the recording, its WAL where the disk
        # had no room to fold it in.
        self.assertIn(self.files, (["r.db"], ["r.db", "r.db-wal"]))
        n, meta = check_store(self, os.path.join(self.copy, "r.db"), 1)
        self.assertLess(n, self.CALLS)
        self.assertTrue(meta["incomplete"].startswith("eacgm record stopped early: cannot write"), meta)

    def test_summary_says_incomplete(self):
        r = E.eacgm("summary", os.path.join(self.copy, "r.db"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"(?m)^incomplete recording: eacgm record stopped early: .*disk is full")

    def test_job_ran_to_its_end_unchanged(self):
        # eacgm left; the command went on untraced and printed its own result.
        self.assertEqual(self.rec.stdout, job_result(self.CALLS))


class KilledAgent(unittest.TestCase):
    """eacgm record killed with SIGKILL at 50 random moments, from start-up to
    the end: each time the store opens cleanly and holds every span a reader
    saw committed just before the kill."""

    KILLS = 50
    CALLS = 1500

    def setUp(self):
        E.require_root()
        self.tmp = E.make_tempdir(self)
        self.spec = E.write_json(os.path.join(self.tmp, "spec.json"), SPEC)

    def kill_once(self, rng, n):
        out = os.path.join(self.tmp, "k%d" % n)
        os.mkdir(out)
        db = os.path.join(out, "r.db")
        p = subprocess.Popen([E.EACGM, "record", "-o", db, "--layers", "cuda", "--spec", self.spec, "--",
                              E.TESTLIB_CALLS, "noop", str(self.CALLS)], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, env=dict(os.environ, PACE_US="1000"),
                             start_new_session=True)
        try:
            # Any moment of the run: what must hold does not depend on which.
            time.sleep(rng.uniform(0, 3.0))
            seen = committed(db + ".partial")
            os.kill(p.pid, signal.SIGKILL)
            p.wait(timeout=60)
            out_text = p.stdout.read().decode()  # EOF once the command, untraced now, is done
        finally:
            E.kill_group(p.pid)
            p.stdout.close()
        # Killed before it let the command go, eacgm never ran it (the gate
        # it waits at closes); otherwise the command ran to its own end.
        ran = out_text != ""
        if ran:
            self.assertEqual(out_text, job_result(self.CALLS))
        files = set(os.listdir(out))
        if "r.db" in files:  # killed after it finished: complete
            self.assertFalse({"r.db.partial", "r.db-wal"} & files, files)
            n, meta = check_store(self, db, seen)
            self.assertEqual(n, self.CALLS)
            self.assertNotIn("incomplete", meta)
            return "finished"
        if "r.db.partial" not in files or not E.query(db + ".partial", "SELECT name FROM sqlite_master"):
            # Killed before it created its store, or before the schema's one
            # transaction committed: nothing, or an empty database.
            self.assertEqual(seen, 0)
            self.assertFalse(ran)
            return "before the store"
        n, meta = check_store(self, db + ".partial", seen)
        self.assertIn("incomplete", meta)
        if not ran:
            self.assertEqual(n, 0)
            return "before the command"
        return "recording"

    def test_store_survives_sigkill(self):
        rng = random.Random(16)
        when = {}
        for n in range(self.KILLS):
            with self.subTest(kill=n):
                w = self.kill_once(rng, n)
                when[w] = when.get(w, 0) + 1
        # The moments drawn reached the recording itself, where it matters.
        print("kills: %s" % when)
        self.assertGreaterEqual(when.get("recording", 0), 10, when)


LIBC_SPEC = {"layer": "libc", "library": "libc.so.6", "probes": [{"function": "clock_nanosleep"}]}
CLOCK_NANOSLEEP = 230  # x86-64 syscall number, as /proc/PID/syscall shows it


def in_syscall(pid, nr, timeout=60):
    """Waits until pid is blocked in system call nr (/proc/PID/syscall): the
    traced program's own state, not a guess at how long it takes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/syscall" % pid) as f:
                if f.read().split()[0] == str(nr):
                    return
        except (OSError, IndexError):
            pass
        time.sleep(0.01)
    raise AssertionError("process %d never blocked in system call %d" % (pid, nr))


class KilledMidCall(unittest.TestCase):
    """The traced process is killed inside a traced call: the recording ends
    with it, its exit code is the command's, and the call that never returned
    is counted (drops exited_in_call), not silently gone."""

    @classmethod
    def setUpClass(cls):
        E.require_root()
        tmp = E.make_tempdir(cls)
        spec = E.write_json(os.path.join(tmp, "spec.json"), LIBC_SPEC)
        started = E.start_record(tmp, "--layers", "cuda", "--spec", spec, "--", "sleep", "600")
        sleeper = E.wait_child_exec(started.pid, "sleep")
        in_syscall(sleeper, CLOCK_NANOSLEEP)
        os.kill(sleeper, signal.SIGKILL)
        cls.rec = started.wait(timeout=120)
        cls.sleeper = sleeper

    def test_ends_with_the_commands_exit_code(self):
        self.assertEqual(self.rec.rc, 137, self.rec.stderr)
        self.assertEqual(self.rec.query("SELECT pid, exit_code FROM processes"),
                         [{"pid": self.sleeper, "exit_code": 137}])

    def test_the_call_in_flight_is_counted(self):
        self.assertEqual(self.rec.query("SELECT count(*) AS n FROM spans")[0]["n"], 0)
        self.assertEqual(E.drops(self.rec.db), {r: int(r == "exited_in_call") for r in E.DROP_REASONS})
        self.assertRegex(self.rec.stderr, r"(?m)^lost records: 1 \(calls in flight when their thread exited "
                                          r"\(killed, or ended mid-call\): 1\)$")
        self.assertEqual(E.query(self.rec.db, "PRAGMA integrity_check"), [{"integrity_check": "ok"}])


class ExecsAnotherProgram(unittest.TestCase):
    """A traced process that execs another program stays traced: the same
    pid, the new program's calls recorded under it, every call once."""

    def test_calls_before_and_after_the_exec(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        spec = E.write_json(os.path.join(tmp, "spec.json"), SPEC)
        # testlib_calls links the library: its probes are in place before it runs.
        rec = E.record(tmp, [E.TESTLIB_CALLS, "noop", "5"], "--layers", "cuda", "--spec", spec,
                       env={"EXEC_AFTER": E.TESTLIB_CALLS + " noop 7"})
        self.assertEqual(rec.rc, 0, rec.stderr)
        self.assertEqual(rec.stdout, "done 10\ndone 21\n")
        spans = rec.spans()
        self.assertEqual([s["args"]["x"] for s in spans], list(range(5)) + list(range(7)))
        self.assertEqual({s["pid"] for s in spans}, {rec.query("SELECT pid FROM processes")[0]["pid"]})
        self.assertEqual(E.drops(rec.db), {r: 0 for r in E.DROP_REASONS})


class ManyThreads(unittest.TestCase):
    """256 threads of one process calling a traced function at once: every
    call recorded, on its own thread, none lost."""

    THREADS, CALLS = 256, 200

    def test_every_thread_every_call(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        spec = E.write_json(os.path.join(tmp, "spec.json"), SPEC)
        rec = E.record(tmp, [E.TESTLIB_CALLS, "threads", str(self.CALLS)], "--layers", "cuda", "--spec", spec,
                       env={"THREADS": str(self.THREADS)})
        self.assertEqual(rec.rc, 0, rec.stderr)
        per = rec.query("SELECT tid, count(*) AS n, sum(json_extract(args, '$.x')) AS s FROM spans GROUP BY tid")
        self.assertEqual(len(per), self.THREADS)
        self.assertEqual({(r["n"], r["s"]) for r in per}, {(self.CALLS, self.CALLS * (self.CALLS - 1) // 2)})
        self.assertEqual(E.drops(rec.db), {r: 0 for r in E.DROP_REASONS})
        named = {r["tid"] for r in rec.query("SELECT tid FROM threads")}
        self.assertLessEqual({r["tid"] for r in per}, named)  # each thread in the threads table too


class LibraryReplacedWhileMapped(unittest.TestCase):
    """A traced library replaced on disk (a new file renamed over it, as a
    package upgrade does) while a process has it mapped: the mapped copy's
    calls are recorded, and a program that then maps the new file is
    attached to it and recorded too."""

    def test_old_mapping_and_new_file(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        spec = E.write_json(os.path.join(tmp, "spec.json"), SPEC)
        lib = os.path.join(tmp, "libeacgm_testlib.so")
        shutil.copy(E.TESTLIB, lib)
        gate1, gate2 = os.path.join(tmp, "g1"), os.path.join(tmp, "g2")
        env = {"DLOPEN": lib, "LOADED_WAIT_FILE": gate1,
               "EXEC_AFTER": "/usr/bin/env LOADED_WAIT_FILE=%s %s noop 7" % (gate2, E.TESTLIB_CALLS)}
        p = E.start_record(tmp, "--layers", "cuda", "--spec", spec, "--", E.TESTLIB_CALLS, "noop", "5", env=env)
        attached = r"^eacgm: attached 1 probe to %s \(loaded by pid (\d+)\)$" % re.escape(lib)
        m = p.wait_for_line(attached)
        pid = int(m.group(1))
        old = os.stat(lib).st_ino
        shutil.copy(E.TESTLIB, lib + ".new")
        os.rename(lib + ".new", lib)  # the mapped inode lives on; the name is a new file
        self.assertNotEqual(os.stat(lib).st_ino, old)
        open(gate1, "w").close()  # 5 calls through the old mapping, then the exec
        # The exec'd program maps the new file: eacgm attaches to it anew.
        # (wait_for_line searches from the last line read: past the first match.)
        p._stderr = p._stderr[m.end():]
        self.assertEqual(int(p.wait_for_line(attached).group(1)), pid)
        open(gate2, "w").close()
        r = p.wait()
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertEqual(r.stdout, "done 10\ndone 21\n")
        self.assertEqual([s["args"]["x"] for s in r.spans()], list(range(5)) + list(range(7)))
        self.assertEqual(E.drops(r.db), {k: 0 for k in E.DROP_REASONS})


class NamesThatAreNotUtf8(unittest.TestCase):
    """A program, its directory, its arguments and the library it loads named
    with bytes that are not UTF-8: traced all the same, and every output is
    UTF-8 (each bad byte one U+FFFD), readable by Python's sqlite3 and json."""

    def test_recorded_and_every_output_utf8(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        spec = E.write_json(os.path.join(tmp, "spec.json"), SPEC)
        d = os.path.join(tmp.encode(), b"d\xff\xfe")
        os.mkdir(d)
        prog, lib = os.path.join(d, b"tl\xff"), os.path.join(d, b"libeacgm_testlib.so")
        shutil.copy(E.TESTLIB_CALLS, prog)
        shutil.copy(E.TESTLIB, lib)
        gate = os.path.join(tmp, "go")
        env = dict(os.environ, DLOPEN=lib.decode(errors="surrogateescape"), LOADED_WAIT_FILE=gate)
        db = os.path.join(tmp, "r.db")
        p = subprocess.Popen([E.EACGM.encode(), b"record", b"-o", db.encode(), b"--perfetto",
                              os.path.join(tmp, "r.trace.json").encode(), b"--layers", b"cuda", b"--spec",
                              spec.encode(), b"--", prog, b"noop", b"3", b"\xfe\xfdarg"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
        started = E.Started(p, db, None)
        started.wait_for_line(r"^eacgm: attached 1 probe to .*libeacgm_testlib\.so \(loaded by pid \d+\)$")
        open(gate, "w").close()
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(out, b"done 3\n")
        r = "\ufffd"
        self.assertEqual(E.query(db, "SELECT comm, cmdline FROM processes"),
                         [{"comm": "tl" + r, "cmdline": "%s/d%s%s/tl%s noop 3 %s%sarg" % (tmp, r, r, r, r, r)}])
        self.assertEqual([s["args"]["x"] for s in E.load_spans(db)], [0, 1, 2])
        with open(os.path.join(tmp, "r.trace.json"), "rb") as f:
            json.loads(f.read().decode("utf-8"))  # strict: fails on a byte that is not UTF-8
        s = E.run([E.EACGM, "summary", db])
        self.assertEqual(s.returncode, 0, s.stderr)

    def test_python_file_names(self):
        # CPython keeps such a path with surrogate escapes; the python layer
        # reads the raw bytes behind them.
        E.require_root()
        tmp = E.make_tempdir(self)
        d = os.path.join(tmp.encode(), b"d\xff")
        os.mkdir(d)
        script = os.path.join(d, b"m\xfe.py")
        with open(script, "w") as f:
            f.write("import time\ndef busy_work():\n    t = time.monotonic()\n"
                    "    while time.monotonic() - t < 0.3:\n        pass\nbusy_work()\n")
        db = os.path.join(tmp, "r.db")
        r = subprocess.run([E.EACGM.encode(), b"record", b"-o", db.encode(), b"--perfetto",
                            os.path.join(tmp, "r.trace.json").encode(), b"--layers", b"python", b"--",
                            b"/usr/bin/python3", script], capture_output=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        spans = E.load_spans(db, "layer = 'python' AND name = 'busy_work'")
        self.assertEqual(len(spans), 1)
        self.assertEqual(spans[0]["args"]["file"], tmp + "/d\ufffd/m\ufffd.py")
        with open(os.path.join(tmp, "r.trace.json"), "rb") as f:
            json.loads(f.read().decode("utf-8"))


TRAIN = """
import torch
torch.manual_seed(0)
torch.set_num_threads(1)
m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128), torch.nn.Linear(128, 10))
opt = torch.optim.AdamW(m.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
for step in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(torch.softmax(m(x), -1).log(), y)
    loss.backward()
    opt.step()
    print(step, loss.item().hex())
print("params", sum(p.double().sum().item() for p in m.parameters()).hex())
"""


class JobUnchanged(unittest.TestCase):
    """A training job traced by every layer computes exactly what it computes
    untraced: its losses and parameters, bit for bit, and its exit code."""

    def test_same_result_traced_and_untraced(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        script = os.path.join(tmp, "train.py")
        with open(script, "w") as f:
            f.write(TRAIN)
        alone = E.run(["/usr/bin/python3", script], timeout=300)
        self.assertEqual(alone.returncode, 0, alone.stderr)
        rec = E.record(tmp, ["/usr/bin/python3", script])  # every layer (gpu says why it cannot)
        self.assertEqual(rec.rc, 0, rec.stderr)
        self.assertEqual(rec.stdout, alone.stdout)
        self.assertEqual(len(rec.stdout.splitlines()), 21)
        self.assertGreater(rec.query("SELECT count(*) AS n FROM spans WHERE layer = 'torch'")[0]["n"], 0)


def spawn_with_pid(pid, argv, env):
    """Starts argv as process `pid` (free now): the next pid the kernel gives
    is set through ns_last_pid. Another process forking in between takes it
    first; tried again then. Returns the Popen."""
    for _ in range(50):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
        if p.pid == pid:
            return p
        p.wait()
    raise AssertionError("could not start a process as pid %d" % pid)


class PidReused(unittest.TestCase):
    """A traced process exits and an untraced one is then given its pid: the
    newcomer is not traced (eacgm follows processes, not numbers)."""

    def test_the_newcomer_is_not_traced(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        spec = E.write_json(os.path.join(tmp, "spec.json"), SPEC)
        gate, loaded, pid_file = (os.path.join(tmp, n) for n in ("go", "loaded", "pid"))
        # The child loads the library and waits until eacgm attached to it:
        # then the newcomer, which uses the same file, runs under live probes.
        script = ("DLOPEN=%s LOADED_WAIT_FILE=%s %s noop 3 & echo $! > %s.tmp; mv %s.tmp %s; wait; "
                  "while [ ! -e %s ]; do sleep 0.01; done"
                  % (E.TESTLIB, loaded, E.TESTLIB_CALLS, pid_file, pid_file, pid_file, gate))
        p = E.start_record(tmp, "--layers", "cuda", "--spec", spec, "--", "sh", "-c", script)
        p.wait_for_line(r"^eacgm: attached \d+ probes? to %s " % re.escape(E.TESTLIB))
        open(loaded, "w").close()
        while not os.path.exists(pid_file):  # the traced child's pid, once sh wrote it
            time.sleep(0.01)
        with open(pid_file) as f:
            child = int(f.read())
        while os.path.exists("/proc/%d" % child):  # exited and reaped by sh
            time.sleep(0.01)
        newcomer = spawn_with_pid(child, [E.TESTLIB_CALLS, "noop", "4"], os.environ)
        self.assertEqual(newcomer.communicate(timeout=60)[0], "done 6\n")
        open(gate, "w").close()
        r = p.wait()
        self.assertEqual(r.rc, 0, r.stderr)
        spans = r.spans()
        self.assertEqual([(s["pid"], s["args"]["x"]) for s in spans], [(child, 0), (child, 1), (child, 2)])
        self.assertEqual([q["pid"] for q in r.query("SELECT pid FROM processes ORDER BY pid") if q["pid"] == child],
                         [child])


class ThousandsOfShortLivedProcesses(unittest.TestCase):
    """A shell starting 2,000 processes one after another, each making one
    traced call and exiting within a millisecond or two: every call recorded
    on its own process, every process ended, nothing lost."""

    N = 2000

    def test_every_process_and_call(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        spec = E.write_json(os.path.join(tmp, "spec.json"), SPEC)
        loaded = os.path.join(tmp, "loaded")
        # The first loads the library and waits for eacgm's probes on it;
        # the rest map the same file, probed from their first instruction.
        script = ("DLOPEN=%s LOADED_WAIT_FILE=%s %s noop 1 >/dev/null; i=1; while [ $i -lt %d ]; do "
                  "%s noop 1 >/dev/null; i=$((i+1)); done" % (E.TESTLIB, loaded, E.TESTLIB_CALLS, self.N,
                                                             E.TESTLIB_CALLS))
        p = E.start_record(tmp, "--layers", "cuda", "--spec", spec, "--", "sh", "-c", script)
        p.wait_for_line(r"^eacgm: attached \d+ probes? to %s " % re.escape(E.TESTLIB))
        open(loaded, "w").close()
        r = p.wait(timeout=600)
        self.assertEqual(r.rc, 0, r.stderr)
        per = r.query("SELECT pid, count(*) AS n FROM spans GROUP BY pid")
        self.assertEqual(len(per), self.N)
        self.assertEqual({q["n"] for q in per}, {1})
        ended = r.query("SELECT count(*) AS n FROM processes WHERE exit_code = 0 AND end_ns > 0")[0]["n"]
        self.assertEqual(ended, self.N + 1)  # and the shell
        self.assertEqual(E.drops(r.db), {k: 0 for k in E.DROP_REASONS})


if __name__ == "__main__":
    unittest.main()
