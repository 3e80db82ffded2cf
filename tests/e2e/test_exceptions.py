# SPDX-License-Identifier: Apache-2.0
"""The traced program runs exactly as it would untraced when a C++ exception,
pthread_exit, pthread_cancel, longjmp or backtrace() passes through traced
calls (the exception guard, bpf/span.bpf.c): each program runs untraced and
under `eacgm record`, and its output (stdout, stderr) and exit status are
compared byte for byte; the spans of the calls it left are checked (count,
how each left). Programs: tests/testprogs/throw_calls (C++, probed through
a --spec of the test library), torch_throw.py (torch operators raising
RuntimeError and IndexError, caught in Python), gloo_peer_death.py (a rank
killed while its peer waits in an all_reduce)."""
import collections
import os
import signal
import time
import unittest

import eacgm_e2e as E

THROW_CALLS = os.path.join(E.TESTPROGS, "throw_calls")
TORCH_THROW = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "torch_throw.py")
GLOO_PEER_DEATH = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "gloo_peer_death.py")
PY = "/usr/bin/python3"

# By its path: attached before the command starts (the command is the
# shell that redirects the program's output, which maps the library only
# once it runs the program).
THROWLIB_SPEC = {
    "layer": "throwlib",
    "library": os.path.join(E.TESTPROGS, "libeacgm_throwlib.so"),
    "probes": [{"function": f} for f in (
        "th_ok", "th_thrower", "th_middle", "th_outer", "th_catcher", "th_cleanup", "th_rethrow", "th_rethrow_ptr",
        "th_recurse", "th_count", "th_exit_outer", "th_exit_inner", "th_wait", "th_escape", "th_jump",
        "th_backtrace", "th_backtrace_inner")],
}
# Every layer, each alone (the default is all of them).
LAYERS = ("cuda", "nccl", "gloo", "torch", "python", "gpu", "host")
THREW = "threw std::runtime_error"
FORCED = "unwound by pthread_exit or pthread_cancel"
LONGJMP = "left by longjmp"


def state(pid):
    """A process's state letter (/proc/PID/stat), "" once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def wrapped(base, command):
    """command with its stdout, stderr and exit status in BASE.out, .err and
    .rc (written whole, by a rename: once it is there, it is complete)."""
    return ["/bin/sh", "-c", '"$@" >"%s.out" 2>"%s.err"; echo $? >"%s.rc.tmp"; mv "%s.rc.tmp" "%s.rc"' %
            ((base,) * 5), "sh", *command]


def outputs(tmp, name, command, options=None):
    """Runs command (untraced when options is None, else under `eacgm record
    OPTIONS...`) with its stdout and stderr in files of its own; returns
    (stdout, stderr, exit status, the Recording or None)."""
    base = os.path.join(tmp, name)
    wrapped_command = wrapped(base, command)
    rec = None
    if options is None:
        E.run(wrapped_command, timeout=300)
    else:
        rec = E.record(tmp, wrapped_command, *options, name=name)
        assert rec.rc == 0, rec.stderr
    def read(ext):
        with open(base + ext) as f:
            return f.read()
    return read(".out"), read(".err"), int(read(".rc")), rec


class ThrowCalls(unittest.TestCase):
    """Each pattern of throw_calls, untraced and under the default layers
    with the test library's spec: the same output and status, and the spans
    of what it left. Three of each, so that counts are exact."""
    maxDiff = None
    N = 3

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.spec = E.write_json(os.path.join(cls.tmp, "throwlib.json"), THROWLIB_SPEC)

    def same(self, pattern, n=N):
        command = [THROW_CALLS, pattern, str(n)]
        untraced = outputs(self.tmp, pattern + "-untraced", command)[:3]
        out, err, rc, rec = outputs(self.tmp, pattern, command, ["--spec", self.spec])
        self.assertEqual((out, err, rc), untraced)
        return out, rc, rec

    def calls(self, rec):
        """(function, how it ended: its ret_name) -> count (a dict: assertEqual shows the difference)."""
        return dict(collections.Counter((s["name"], s["ret_name"]) for s in rec.spans("layer = 'throwlib'")))

    def test_a_throw_through_three_frames_caught_by_the_caller(self):
        out, rc, rec = self.same("throw")
        self.assertEqual(out, "".join("caught th_thrower %d\n" % i for i in range(self.N)))
        n = self.N
        self.assertEqual(self.calls(rec), {("th_outer", THREW): n, ("th_middle", THREW): n, ("th_thrower", THREW): n,
                                           ("th_count", ""): n, ("th_ok", ""): 2 * n})
        spans = rec.spans("layer = 'throwlib' AND ret_name != ''")
        for s in spans:
            self.assertEqual(s["ret"], 0)
            self.assertEqual(s["depth"], {"th_outer": 0, "th_middle": 1, "th_thrower": 2}[s["name"]])
        # The three frames of one throw end together, at the catch, nested.
        for i in range(n):
            one = spans[3 * i:3 * i + 3]
            self.assertEqual([s["name"] for s in one], ["th_outer", "th_middle", "th_thrower"])
            self.assertEqual(len({s["start_ns"] + s["dur_ns"] for s in one}), 1)
            self.assertLessEqual(one[0]["start_ns"], one[1]["start_ns"])
            self.assertLessEqual(one[1]["start_ns"], one[2]["start_ns"])
        m = E.meta(rec.db)
        self.assertEqual(m["guard"], "on")
        self.assertEqual(int(m["guard_requests"]), n)  # one stop a throw: its three frames handed back
        self.assertEqual(int(m["guard_restored"]), 3 * n)
        self.assertEqual(int(m["guard_failed"]) + int(m["guard_unasked"]), 0)
        self.assertEqual(int(m["calls_left"]), 3 * n)
        self.assertEqual(E.drops(rec.db), {r: 0 for r in E.DROP_REASONS})
        self.assertIn("exception guard: %d stops" % n, rec.stderr)

    def test_a_frame_that_catches_returns_with_its_exact_span(self):
        out, rc, rec = self.same("catch")
        n = self.N
        self.assertEqual(self.calls(rec), {("th_catcher", ""): n, ("th_outer", THREW): n, ("th_middle", THREW): n,
                                           ("th_thrower", THREW): n, ("th_ok", ""): n})
        catchers = rec.spans("name = 'th_catcher'")
        self.assertEqual([s["ret"] for s in catchers], [1 - i for i in range(n)])
        inner = rec.spans("name IN ('th_outer', 'th_ok')")
        for c in catchers:  # its callees, the one left and the one in its handler, inside it
            mine = [s for s in inner if c["start_ns"] <= s["start_ns"] <= c["start_ns"] + c["dur_ns"]]
            self.assertEqual(sorted(s["name"] for s in mine), ["th_ok", "th_outer"])
            for s in mine:
                self.assertLessEqual(s["start_ns"] + s["dur_ns"], c["start_ns"] + c["dur_ns"])
        m = E.meta(rec.db)
        self.assertEqual(int(m["guard_rearmed"]), n)  # th_catcher's own return, traced again
        self.assertEqual(E.drops(rec.db), {r: 0 for r in E.DROP_REASONS})

    def test_cleanups_rethrows_and_nested_frames(self):
        n = self.N
        for pattern, outer in (("cleanup", "th_cleanup"), ("rethrow", "th_rethrow"), ("rethrow_ptr", "th_rethrow_ptr")):
            with self.subTest(pattern):
                out, rc, rec = self.same(pattern)
                self.assertEqual(out, "".join("%s(%d) threw th_thrower %d\n" % (outer, i, i) for i in range(n)))
                want = {(outer, THREW): n, ("th_middle", THREW): n, ("th_thrower", THREW): n}
                if pattern == "cleanup":  # the destructor's call while the exception was in flight
                    want[("th_ok", "")] = n
                self.assertEqual(self.calls(rec), want)
                self.assertEqual(E.drops(rec.db), {r: 0 for r in E.DROP_REASONS})
        out, rc, rec = self.same("nested", 5)
        self.assertEqual(out, "th_recurse(0) threw th_thrower 0\n")
        self.assertEqual(self.calls(rec), {("th_recurse", THREW): 6, ("th_thrower", THREW): 1})
        self.assertEqual(sorted(s["depth"] for s in rec.spans("name = 'th_recurse'")), list(range(6)))

    def test_threads_that_throw_at_once(self):
        out, rc, rec = self.same("threads", 50)
        self.assertEqual(out, "threads caught 400\n")
        self.assertEqual(self.calls(rec), {("th_outer", THREW): 400, ("th_middle", THREW): 400,
                                           ("th_thrower", THREW): 400, ("th_count", ""): 400, ("th_ok", ""): 800})
        self.assertEqual(len({s["tid"] for s in rec.spans("name = 'th_outer'")}), 8)
        m = E.meta(rec.db)
        self.assertEqual(int(m["guard_failed"]) + int(m["guard_unasked"]), 0)
        self.assertEqual(E.drops(rec.db), {r: 0 for r in E.DROP_REASONS})

    def test_pthread_exit_and_pthread_cancel(self):
        n = self.N
        out, rc, rec = self.same("exit")
        self.assertEqual(out, "".join("cleanup th_exit_outer\nthread %d exited with %d\n" % (i, 40 + i)
                                      for i in range(n)))
        self.assertEqual(self.calls(rec), {("th_exit_outer", FORCED): n, ("th_exit_inner", FORCED): n})
        self.assertEqual(E.drops(rec.db), {r: 0 for r in E.DROP_REASONS})
        out, rc, rec = self.same("cancel")
        self.assertEqual(out, "".join("cleanup th_wait\nthread %d cancelled\n" % i for i in range(n)))
        self.assertEqual(self.calls(rec), {("th_wait", FORCED): n})
        self.assertEqual(E.drops(rec.db), {r: 0 for r in E.DROP_REASONS})

    def test_longjmp(self):
        n = self.N
        out, rc, rec = self.same("longjmp")
        self.assertEqual(out, "".join("th_escape(%d) returned %d\n" % (i, i + 1) for i in range(n)))
        self.assertEqual(self.calls(rec), {("th_escape", ""): n, ("th_jump", LONGJMP): n, ("th_ok", ""): n})
        for esc, jump in zip(rec.spans("name = 'th_escape'"), rec.spans("name = 'th_jump'")):
            self.assertTrue(E.contains(E.span_as_event(esc), E.span_as_event(jump), tol=0))
        self.assertEqual(E.drops(rec.db), {r: 0 for r in E.DROP_REASONS})

    def test_a_backtrace_sees_every_frame(self):
        n = self.N
        out, rc, rec = self.same("backtrace")
        self.assertEqual(out, "backtrace th_backtrace_inner th_backtrace __libc_start_main \n" * n)
        # The frames the walk passed that returned before the thread's next
        # traced call (th_backtrace_inner) return unseen: counted, not
        # misattributed; th_backtrace is traced again from th_ok's entry.
        self.assertEqual(self.calls(rec), {("th_backtrace", ""): n, ("th_ok", ""): n})
        frames = [s["ret"] for s in rec.spans("name = 'th_backtrace'")]  # backtrace()'s count, as untraced
        self.assertEqual(len(set(frames)), 1)
        self.assertGreater(frames[0], 3)
        self.assertEqual(E.drops(rec.db)["unpaired_entry"], n)

    def test_an_uncaught_exception_ends_the_program_as_untraced(self):
        out, rc, rec = self.same("uncaught")
        self.assertEqual(rc, 134)
        with open(os.path.join(self.tmp, "uncaught.err")) as f:
            err = f.read()
        # Then the shell's word on it ("Aborted").
        self.assertTrue(err.startswith("terminate called after throwing an instance of 'std::runtime_error'\n"
                                       "  what():  th_thrower 7\n"), err)


class AgentDeath(unittest.TestCase):
    """eacgm dies while a process it stopped waits for its answer: the
    watchdog answers and resumes it, and the program ends as untraced."""
    maxDiff = None

    def test_a_stop_eacgm_could_not_answer_is_answered_by_its_watchdog(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        spec = E.write_json(os.path.join(tmp, "throwlib.json"), THROWLIB_SPEC)
        gate = os.path.join(tmp, "go")
        command = [THROW_CALLS, "throw", "3"]
        open(gate, "w").close()
        untraced = outputs(tmp, "untraced", command)[:3]
        os.unlink(gate)
        base = os.path.join(tmp, "traced")
        p = E.start_record(tmp, "--spec", spec, "--", *wrapped(base, command), env={"WAIT_FILE": gate})
        # Never left stopped, whatever fails: its probes would hold every
        # process that throws through a traced call.
        self.addCleanup(lambda: p.proc.poll() is None and os.killpg(p.pid, signal.SIGKILL))
        # Released, the program waits for the gate; eacgm stopped, its
        # answering thread with it.
        program = E.wait_child_exec(E.wait_child_exec(p.pid, "sh"), "throw_calls")
        os.kill(p.pid, signal.SIGSTOP)
        open(gate, "w").close()
        while state(program) != "T":  # its first throw: stopped until someone answers
            time.sleep(0.01)
        os.kill(p.pid, signal.SIGKILL)
        p.proc.wait()
        while not os.path.exists(base + ".rc"):  # ctest's timeout ends it, if nobody answers
            time.sleep(0.01)
        with open(base + ".out") as f, open(base + ".err") as g, open(base + ".rc") as h:
            self.assertEqual((f.read(), g.read(), int(h.read())), untraced)


class TorchThrows(unittest.TestCase):
    """The issue's script: torch operators that raise RuntimeError and
    IndexError, caught in Python, 40 times between training steps."""
    maxDiff = None
    STEPS = 10

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.command = [PY, TORCH_THROW, str(cls.STEPS)]
        cls.untraced = outputs(cls.tmp, "untraced", cls.command)[:3]

    def test_untraced(self):
        out, err, rc = self.untraced
        self.assertEqual(rc, 0, err)
        self.assertIn("caught %d loss " % (4 * self.STEPS), out)

    def test_default_layers(self):
        # cat and index_select are not among the default operators: named,
        # so that every call the script makes to raise is traced.
        out, err, rc, rec = outputs(self.tmp, "default", self.command, ["--torch-ops", "cat,index_select"])
        self.assertEqual((out, err, rc), self.untraced)
        left = dict(collections.Counter((s["name"], s["ret_name"]) for s in rec.spans("ret_name LIKE 'threw%'")))
        n = self.STEPS
        # Linear's failure is addmm's inside it: both left.
        self.assertEqual(left, {("aten::mm", "threw c10::Error"): n, ("aten::cat", "threw c10::Error"): n,
                                ("aten::index_select", "threw c10::IndexError"): n,
                                ("aten::linear", "threw c10::Error"): n, ("aten::addmm", "threw c10::Error"): n})
        # And the calls that worked: one forward Linear (and its addmm) a step.
        ok = collections.Counter(s["name"] for s in rec.spans("layer = 'torch' AND ret_name = ''"))
        self.assertEqual((ok["aten::linear"], ok["aten::addmm"]), (n, n))
        m = E.meta(rec.db)
        self.assertEqual(int(m["guard_failed"]) + int(m["guard_unasked"]), 0)

    def test_each_layer_alone(self):
        for layer in LAYERS:
            with self.subTest(layer):
                out, err, rc, rec = outputs(self.tmp, layer, self.command, ["--layers", layer])
                self.assertEqual((out, err, rc), self.untraced)

    def test_python_entries(self):
        # The eval loop's entries are return probes too, above every raise.
        out, err, rc, rec = outputs(self.tmp, "entries", self.command,
                                    ["--layers", "python,torch", "--python-entries", "auto"])
        self.assertEqual((out, err, rc), self.untraced)


class GlooPeerDeath(unittest.TestCase):
    """Rank 1 killed while rank 0 waits in an all_reduce: rank 0 raises
    gloo's error as RuntimeError and exits 1, traced as untraced."""
    maxDiff = None

    def test_rank_0_fails_as_untraced(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        runs = []
        for name, options in (("untraced", None), ("traced", [])):
            d = os.path.join(tmp, name + ".d")  # the ranks' store and files
            os.mkdir(d)
            runs.append(outputs(tmp, name, [PY, GLOO_PEER_DEATH, d], options))
        (out_u, err_u, rc_u, _), (out_t, err_t, rc_t, rec) = runs
        self.assertEqual(rc_u, 0, err_u)
        self.assertEqual(out_u, "rank 0 exit 1\nrank 1 exit -9\nrank 0 said: RuntimeError: "
                                "[./gloo/transport/tcp/pair.cc:N] Read error [N.N.N.N]:N: Connection reset by peer\n")
        self.assertEqual((out_t, rc_t), (out_u, rc_u))
        left = dict(collections.Counter((s["name"], s["ret_name"]) for s in rec.spans("ret_name LIKE 'threw%'")))
        self.assertEqual(left, {("allreduce", "threw gloo::IoException"): 1,
                                ("c10d::Work::wait", "threw gloo::IoException"): 1})


if __name__ == "__main__":
    unittest.main()
