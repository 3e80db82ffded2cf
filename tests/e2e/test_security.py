# SPDX-License-Identifier: Apache-2.0
"""What eacgm keeps of root, who may read what it writes, and who may ask
its endpoints anything (SECURITY.md names these tests)."""
import json
import os
import shutil
import stat
import subprocess
import time
import unittest
import urllib.error
import urllib.request

import eacgm_e2e as E
import test_serve as S

# capabilities(7) numbers
CAP = {"CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_KILL": 5, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21,
       "CAP_SYS_RESOURCE": 24, "CAP_PERFMON": 38, "CAP_BPF": 39}
# CAP_KILL: the exception guard resumes the processes it stopped, whoever owns them.
TRACING = ["CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_SYS_RESOURCE", "CAP_KILL"]


def caps_of(pid, tid=None):
    path = "/proc/%d/task/%d/status" % (pid, tid) if tid else "/proc/%d/status" % pid
    with open(path) as f:
        return {l.split(":")[0]: int(l.split()[1], 16) for l in f if l.startswith("Cap")}


def mask(names):
    """The capabilities named, as far as this machine lends them (a container may lend fewer)."""
    return sum(1 << CAP[n] for n in names) & caps_of(os.getpid())["CapBnd"]


def threads(pid):
    return [int(t) for t in os.listdir("/proc/%d/task" % pid)]


def comm_of(pid, tid):
    with open("/proc/%d/task/%d/comm" % (pid, tid)) as f:
        return f.read().strip()


# The ring-draining thread (pipeline/ring_reader.h), which keeps the
# niceness eacgm started at while its other threads yield to the job.
RINGS = "eacgm-rings"


def nice_of(pid, tid):
    """A thread's niceness (proc(5): the 19th field of stat, after the comm's closing parenthesis)."""
    with open("/proc/%d/task/%d/stat" % (pid, tid)) as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


class RecordKeepsWhatTracingNeeds(unittest.TestCase):
    """eacgm record, while it records: every thread holds the tracing set and
    what record does for its user (outputs anywhere, signals passed on), the
    command it launched keeps every capability it was given, and what eacgm
    wrote is its owner's alone. And eacgm's threads run at niceness 10 (the
    default --nice), below the job, whose command keeps its own, but the one
    that reads the rings, which keeps the niceness eacgm started at."""

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        gate = os.path.join(cls.tmp, "go")
        cls.rec = E.start_record(cls.tmp, "--layers", "cuda,host,python", "--", "sh", "-c",
                                 'grep ^Cap /proc/$$/status; echo "Nice: $(nice)"; '
                                 'while [ ! -e %s ]; do sleep 0.01; done' % gate)
        cls.agent = {t: caps_of(cls.rec.pid, t) for t in threads(cls.rec.pid)}
        cls.agent_nice = {t: (comm_of(cls.rec.pid, t), nice_of(cls.rec.pid, t)) for t in cls.agent}
        open(gate, "w").close()
        cls.done = cls.rec.wait()
        out = cls.done.stdout.splitlines()
        cls.command = {l.split(":")[0]: int(l.split()[1], 16) for l in out if l.startswith("Cap")}
        cls.command_nice = [int(l.split()[1]) for l in out if l.startswith("Nice:")]

    def test_every_thread_keeps_only_what_it_needs(self):
        want = mask(TRACING + ["CAP_DAC_OVERRIDE"])
        self.assertGreater(len(self.agent), 1)  # the detector's thread at least
        for tid, c in self.agent.items():
            self.assertEqual((c["CapEff"], c["CapPrm"], c["CapBnd"]), (want, want, want), "thread %d" % tid)
            self.assertEqual((c["CapInh"], c["CapAmb"]), (0, 0), "thread %d" % tid)

    def test_the_command_keeps_its_own(self):
        ours = caps_of(os.getpid())
        self.assertEqual(self.done.rc, 0, self.done.stderr)
        self.assertEqual((self.command["CapEff"], self.command["CapBnd"]), (ours["CapEff"], ours["CapBnd"]))

    def test_eacgm_runs_below_the_command(self):
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        self.assertEqual([n for c, n in self.agent_nice.values() if c == RINGS], [ours], self.agent_nice)
        self.assertEqual({n for c, n in self.agent_nice.values() if c != RINGS}, {10}, self.agent_nice)
        self.assertEqual(self.command_nice, [ours])

    def test_the_recording_says_what_it_kept(self):
        kept = E.meta(self.done.db)["agent_capabilities"].split(",")
        self.assertEqual(sum(1 << CAP[n] for n in kept), mask(TRACING + ["CAP_DAC_OVERRIDE"]))

    def test_outputs_are_owner_only(self):
        for path in (self.done.db, self.done.trace, self.rec.ready_file):
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600, path)


class HostileOutputPaths(unittest.TestCase):
    """An output path that names something other than a regular file is an
    error before anything runs: a rename at the end would replace it."""

    def setUp(self):
        E.require_root()
        self.tmp = E.make_tempdir(self)

    def refused(self, path, what):
        r = E.eacgm("record", "-o", path, "--layers", "cuda", "--", "true", timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr, "eacgm: cannot write %s: it is %s, not a regular file; give the path of a file "
                                   "to create or replace\n" % (path, what))

    def test_fifo(self):
        fifo = os.path.join(self.tmp, "out.db")
        os.mkfifo(fifo)
        self.refused(fifo, "a FIFO")
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))

    def test_device(self):
        self.refused("/dev/null", "a character device")

    def test_symlink_into_proc(self):
        link = os.path.join(self.tmp, "out.db")
        os.symlink("/proc/self/mem", link)
        self.refused(link, "a symbolic link")

    def test_planted_link_at_the_temporary_name_is_not_followed(self):
        # Another user's link where the trace's temporary file goes: the
        # victim file is untouched and the trace is written all the same.
        victim = os.path.join(self.tmp, "victim")
        with open(victim, "w") as f:
            f.write("precious")
        db = os.path.join(self.tmp, "r.db")
        gate = os.path.join(self.tmp, "go")
        p = E.start_record(self.tmp, "--layers", "cuda", "--", "sh", "-c",
                           "while [ ! -e %s ]; do sleep 0.01; done" % gate)
        os.symlink(victim, os.path.join(self.tmp, "r.trace.json.tmp.%d" % p.pid))
        open(gate, "w").close()  # the command ends, and eacgm writes its trace
        r = p.wait()
        self.assertEqual(r.rc, 0, r.stderr)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")
        self.assertIn("traceEvents", E.load_trace(r.trace))
        self.assertTrue(os.path.exists(db))


class TraceRefusedSaysWhy(unittest.TestCase):
    """record -p of a process the kernel will not let eacgm inspect names the
    reason, not "run as root" to a root. On this VM pid 1 is such a process
    (root, holding CAP_SYS_PTRACE, is refused its maps by a security module);
    where root may read it the case cannot be made and says so."""

    def test_pid_1(self):
        E.require_root()
        try:
            with open("/proc/1/maps"):
                self.skipTest("root may inspect pid 1 here: nothing refuses eacgm")
        except PermissionError:
            pass
        tmp = E.make_tempdir(self)
        with open("/proc/1/status") as f:
            st = dict(l.split(":", 1) for l in f)
        comm, uid = st["Name"].strip(), st["Uid"].split()[0]
        r = E.eacgm("record", "-o", os.path.join(tmp, "r.db"), "--layers", "cuda", "-p", "1", timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr, "eacgm: cannot read /proc/1/maps (Permission denied): the kernel refused although "
                                   "eacgm holds CAP_SYS_PTRACE: process 1 (%s, uid %s) is protected by a security "
                                   "module (Landlock, SELinux, AppArmor, Yama's ptrace_scope 3) or a container "
                                   "boundary; trace it from where it may be inspected (the host, or inside its "
                                   "container)\n" % (comm, uid))
        self.assertEqual(os.listdir(tmp), [])


class ServeWithToken(unittest.TestCase):
    """token_file: every endpoint wants the bearer token; the agent keeps the
    tracing set only, its threads run at the niceness configured, and its
    store is owner-only."""

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.token = "s3cr3t-Token_for.eacgm~e2e"
        cls.token_file = os.path.join(cls.tmp, "token")
        fd = os.open(cls.token_file, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, (cls.token + "\n").encode())
        os.close(fd)
        cls.store = os.path.join(cls.tmp, "agent.db")
        cls.agent = S.Agent(cls.tmp, 'layers = ["cuda"]\nstore = "%s"\ntoken_file = "%s"\nnice = 13\n'
                                     '[filter]\ncomm = ["nothing"]\n'
                            % (cls.store, cls.token_file))
        cls.addClassCleanup(lambda: cls.agent.proc.poll() is None and cls.agent.proc.kill())

    def get(self, path, auth=None):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.agent.port, path))
        if auth is not None:
            req.add_header("Authorization", auth)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def test_every_endpoint_wants_the_token(self):
        for path in ("/metrics", "/healthz", "/nothing-here"):
            for auth in (None, "Bearer wrong", "Basic " + self.token, "Bearer " + self.token + "x", "Bearer"):
                status, body, headers = self.get(path, auth)
                self.assertEqual(status, 401, (path, auth))
                self.assertEqual(headers.get("WWW-Authenticate"), 'Bearer realm="eacgm"')
                self.assertNotIn("eacgm_", body)

    def test_the_token_opens_them(self):
        status, body, _ = self.get("/metrics", "Bearer " + self.token)
        self.assertEqual(status, 200)
        self.assertIn("eacgm_agent_cpu_seconds_total", body)
        self.assertEqual(self.get("/healthz", "bearer " + self.token)[:2], (200, "ok\n"))

    def test_agent_keeps_the_tracing_set_on_every_thread(self):
        want = mask(TRACING)
        for tid in threads(self.agent.proc.pid):
            c = caps_of(self.agent.proc.pid, tid)
            self.assertEqual((c["CapEff"], c["CapPrm"], c["CapBnd"], c["CapAmb"]), (want, want, want, 0), tid)

    def test_agent_runs_at_the_niceness_configured(self):
        pid = self.agent.proc.pid
        tids = threads(pid)
        self.assertGreater(len(tids), 1)  # the listener's thread at least
        others = [t for t in tids if comm_of(pid, t) != RINGS]
        self.assertEqual({t: nice_of(pid, t) for t in others}, {t: 13 for t in others})
        # The rings' thread takes back the niceness the agent started at
        # where it could raise RLIMIT_NICE (CAP_SYS_RESOURCE), else runs at 13.
        with open("/proc/%d/limits" % pid) as f:
            limit = int(next(l for l in f if l.startswith("Max nice priority")).split()[3])
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        rings = [nice_of(pid, t) for t in tids if comm_of(pid, t) == RINGS]
        self.assertEqual(rings, [ours if limit >= 20 - ours else 13])

    def test_store_is_owner_only(self):
        self.assertEqual(stat.S_IMODE(os.stat(self.store).st_mode), 0o600)


class TokenFileErrors(unittest.TestCase):
    def serve(self, token_file, text=None, mode=0o600):
        tmp = E.make_tempdir(self)
        path = os.path.join(tmp, token_file)
        if text is not None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, mode)
            os.write(fd, text.encode())
            os.close(fd)
            os.chmod(path, mode)
        cfg = os.path.join(tmp, "eacgm.toml")
        with open(cfg, "w") as f:
            f.write('token_file = "%s"\nstore = ""\n' % path)
        r = E.run([E.EACGM, "serve", "--config", cfg, "--listen", "127.0.0.1:0"], timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        return path, r.stderr

    def test_readable_by_others(self):
        path, err = self.serve("token", "abc\n", 0o644)
        self.assertEqual(err, "eacgm: token_file %s: group or others may read or write it (mode 0644); chmod 600 %s\n"
                         % (path, path))

    def test_missing(self):
        path, err = self.serve("absent")
        self.assertEqual(err, "eacgm: token_file %s: No such file or directory; write the token into it (chmod 600)\n"
                         % path)

    def test_empty(self):
        path, err = self.serve("token", "\n")
        self.assertEqual(err, "eacgm: token_file %s: it is empty; write the token into it\n" % path)

    def test_two_lines(self):
        path, err = self.serve("token", "abc\ndef\n")
        self.assertIn("the token holds a character other than letters, digits and -._~+/=", err)


if __name__ == "__main__":
    unittest.main()
