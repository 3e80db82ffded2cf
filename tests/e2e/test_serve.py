# SPDX-License-Identifier: Apache-2.0
"""eacgm serve, the node agent, scraped by a real Prometheus server (Debian's,
started here on loopback): exact call counts of programs started after the
agent, as Prometheus' HTTP API returns them; processes followed in and out
of the agent's table; configuration errors named by key and line."""
import collections
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import unittest
import urllib.parse
import urllib.request

import eacgm_e2e as E
import test_cuda

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"  # Debian's prometheus package has both
NCCL_CALLS = os.path.join(E.TESTPROGS, "nccl_calls")
NVML_STANDIN_DIR = os.environ.get("NVML_STANDIN_DIR", os.path.join(E._ROOT, "build", "tests", "nvml"))
DASHBOARD = os.path.join(E.SOURCE_DIR, "dashboards", "eacgm.json")
# Sleeps a millisecond and spins a millisecond, forever: scheduled, preempted, off CPU.
BUSY = """
import time
print("busy", flush=True)
while True:
    t = time.perf_counter()
    while time.perf_counter() - t < 0.001:
        pass
    time.sleep(0.001)
"""
TORCH_GATED = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "torch_gated.py")
SERVING = r"eacgm: serving http://[^ ]+/metrics"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def parse_metrics(text):
    """{(name, ((label, value), ...)): value} from the text format."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        assert m, "not a sample line: %r" % line
        labels = tuple(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


class Agent:
    """`eacgm serve --config CONFIG --listen 127.0.0.1:0`, returned once it says it serves."""

    def __init__(self, tmp, config, wrapper=(), env=None, args=()):
        self.cfg = os.path.join(tmp, "eacgm.toml")
        with open(self.cfg, "w") as f:
            f.write(config)
        self.ready_file = os.path.join(tmp, "serve.ready")
        self.err = os.path.join(tmp, "serve.err")
        with open(self.err, "w") as err:
            self.proc = subprocess.Popen([*wrapper, E.EACGM, "serve", "--config", self.cfg, "--listen", "127.0.0.1:0",
                                          "--ready-file", self.ready_file, *args], stdout=subprocess.DEVNULL,
                                         stderr=err,
                                         env=dict(os.environ, **(env or {})))
        E.wait_for_text(self.err, SERVING, self.proc)
        with open(self.ready_file) as f:
            self.port = json.load(f)["port"]

    def metrics(self):
        status, text = get("http://127.0.0.1:%d/metrics" % self.port)
        assert status == 200
        return parse_metrics(text)

    def value(self, name, **labels):
        return self.metrics().get((name, tuple(labels.items())), 0)

    def wait_until(self, what, check, timeout=60):
        """Polls the agent's own metrics (its signal) until check(metrics) holds."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            if check(m):
                return m
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("agent never reported %s (exit %s): %s" %
                                     (what, self.proc.poll(), self.stderr()[-2000:]))
            time.sleep(0.05)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=30)
        return rc, self.stderr()

    def stderr(self):
        with open(self.err) as f:
            return f.read()


class Prometheus:
    """Debian's Prometheus on loopback, scraping the agent every second."""

    def __init__(self, tmp, agent_port):
        self.port = free_port()
        cfg = os.path.join(tmp, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: eacgm\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % agent_port)
        self.log = open(os.path.join(tmp, "prometheus.log"), "w")
        self.proc = subprocess.Popen([PROMETHEUS, "--config.file=" + cfg, "--storage.tsdb.path=" +
                                      os.path.join(tmp, "tsdb"), "--web.listen-address=127.0.0.1:%d" % self.port],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:  # its own signal: /-/ready answers 200 once it serves queries
            try:
                if get(self.url("/-/ready"), timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("prometheus did not start: see " + self.log.name)
            time.sleep(0.05)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def query(self, expr):
        """The instant vector for expr: {(label, value) tuple without __name__: value}."""
        _, text = get(self.url("/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
        body = json.loads(text)
        assert body["status"] == "success", body
        return {tuple(sorted((k, v) for k, v in r["metric"].items() if k not in ("__name__", "instance", "job"))):
                float(r["value"][1]) for r in body["data"]["result"]}

    def scrapes(self):
        """Scrapes of the agent so far (prometheus' own count of its samples)."""
        r = self.query('count_over_time(up{job="eacgm"}[1h])')
        return int(next(iter(r.values()), 0))

    def wait_for(self, what, expr, want, timeout=60):
        """Waits until expr's single value equals want, then for one more scrape, and
        returns the vector of that later scrape."""
        deadline = time.monotonic() + timeout
        while True:
            v = self.query(expr)
            if list(v.values()) == [want]:
                break
            if time.monotonic() > deadline:
                raise AssertionError("prometheus never saw %s == %s: %s" % (what, want, v))
            time.sleep(0.1)
        seen = self.scrapes()
        while self.scrapes() <= seen:
            if time.monotonic() > deadline + 10:
                raise AssertionError("prometheus stopped scraping")
            time.sleep(0.1)
        return v

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


PER_RUN = sum((test_cuda.PARENT_CALLS + test_cuda.CHILD_CALLS).values())  # calls of one cuda_calls run


def cuda_copy(tmp, prefix):
    """cuda_calls copied under a name of this run (its comm, for the filters): (path, name)."""
    tag = "%s%d" % (prefix, os.getpid() % 100000)
    prog = os.path.join(tmp, tag)
    shutil.copy(E.CUDA_CALLS, prog)
    return prog, tag


def started_agent(test, tmp, config, **kw):
    """An Agent killed at the test's end if it is still running."""
    agent = Agent(tmp, config, **kw)
    test.addCleanup(lambda: agent.proc.poll() is None and agent.proc.kill())
    return agent


def by_function(vector):
    return {dict(k)["function"]: v for k, v in vector.items()}


class ServeWithPrometheus(unittest.TestCase):
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        # The agent traces what the filters let through: copies of the test
        # programs under names of this run, so nothing else on the machine counts.
        cls.tag = "ec%d" % (os.getpid() % 100000)
        cls.cuda = os.path.join(cls.tmp, cls.tag + "cu")
        shutil.copy(E.CUDA_CALLS, cls.cuda)
        cls.nccl = os.path.join(cls.tmp, cls.tag + "nc")
        shutil.copy(NCCL_CALLS, cls.nccl)
        cls.python = os.path.join(cls.tmp, cls.tag + "py")
        os.symlink("/usr/bin/python3", cls.python)
        # A Python job running before the agent starts (found at start), busy
        # enough to be scheduled, holding GPU memory on the scripted GPU.
        cls.busy = subprocess.Popen([cls.python, "-c", BUSY], stdout=subprocess.PIPE, text=True)
        cls.addClassCleanup(cls.busy.kill)
        assert cls.busy.stdout.readline().strip() == "busy"
        scenario = E.write_json(os.path.join(cls.tmp, "gpu.json"), {"devices": [{
            "name": "Stand-in GPU", "uuid": "GPU-e2e",
            "timeline": [{"at_ms": 0, "util_gpu": 55, "util_mem": 20, "mem_used": 3 << 30, "mem_total": 16 << 30,
                          "power_mw": 150000, "power_limit_mw": 300000}],
            "processes": [{"pid": cls.busy.pid, "timeline": [{"at_ms": 0, "mem_used": 1 << 30, "sm_util": 40}]}]}]})
        cls.store = os.path.join(cls.tmp, "agent.db")
        cls.agent = Agent(cls.tmp, 'store = "%s"\nhost_interval_ms = 200\n[filter]\ncomm = ["%s(cu|nc|py)"]\n' %
                          (cls.store, cls.tag),
                          env={"LD_LIBRARY_PATH": NVML_STANDIN_DIR, "EACGM_NVML_SCENARIO": scenario})
        cls.addClassCleanup(lambda: cls.agent.proc.poll() is None and cls.agent.proc.kill())
        cls.prom = Prometheus(cls.tmp, cls.agent.port)
        cls.addClassCleanup(cls.prom.stop)

    def test_1_cuda_calls_counted_exactly(self):
        # Started after the agent, twice; each run makes the parent's and its child's calls.
        for _ in range(2):
            r = E.run([self.cuda, "0"])
            self.assertEqual(r.returncode, 0, r.stderr)
        want = collections.Counter()
        for (name, *_rest), n in (test_cuda.PARENT_CALLS + test_cuda.CHILD_CALLS).items():
            want[name] += 2 * n
        self.prom.wait_for("every CUDA call", 'sum(eacgm_calls_total{layer="cuda"})', sum(want.values()))
        got = by_function(self.prom.query('eacgm_calls_total{layer="cuda"}'))
        self.assertEqual(got, dict(want))
        # Every call failed (no driver): all of them are errors; bytes as the calls moved them.
        errors = by_function(self.prom.query('eacgm_call_errors_total{layer="cuda"}'))
        self.assertEqual(errors, dict(want))
        nbytes = collections.Counter()
        for (name, _args, _ret, _rname, b), n in (test_cuda.PARENT_CALLS + test_cuda.CHILD_CALLS).items():
            nbytes[name] += 2 * n * b
        self.assertEqual(by_function(self.prom.query('eacgm_bytes_total{layer="cuda"}')),
                         {f: nbytes[f] for f in want})
        counts = by_function(self.prom.query('eacgm_call_duration_seconds_count{layer="cuda"}'))
        self.assertEqual(counts, dict(want))
        inf = by_function(self.prom.query('eacgm_call_duration_seconds_bucket{layer="cuda",le="+Inf"}'))
        self.assertEqual(inf, dict(want))
        # The agent's health (published every second): each probe's hits, the calls it delivered.
        self.prom.wait_for("every CUDA probe hit", 'sum(eacgm_agent_probe_hits_total{layer="cuda"})',
                           sum(want.values()))
        hits = self.prom.query('eacgm_agent_probe_hits_total{layer="cuda"}')
        self.assertEqual({dict(k)["probe"]: v for k, v in hits.items()}, dict(want))

    def test_1b_nccl_calls_counted_exactly(self):
        r = E.run([self.nccl])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.prom.wait_for("every ncclAllReduce", 'eacgm_calls_total{function="ncclAllReduce"}', 13)
        got = by_function(self.prom.query('eacgm_calls_total{layer="nccl"}'))
        self.assertEqual(got, {"ncclAllReduce": 13, "ncclBcast": 1, "ncclBroadcast": 2, "ncclSend": 2, "ncclRecv": 2,
                               "ncclReduce": 1, "ncclAllGather": 1, "ncclReduceScatter": 1, "ncclAlltoAll": 1,
                               "ncclGroupStart": 1, "ncclGroupEnd": 1, "ncclCommDestroy": 1, "ncclCommAbort": 1})

    def test_2_torch_ops_counted_exactly(self):
        layers, steps = 3, 5
        p = subprocess.Popen([self.python, TORCH_GATED, str(layers), str(steps)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        self.assertEqual(p.stdout.readline().strip(), "imported")
        # libtorch is attached to once it is loaded: the agent says so in its metrics.
        self.agent.wait_until("torch probes attached",
                              lambda m: m.get(("eacgm_agent_probes_attached", (("layer", "torch"),)), 0) > 0)
        # Described while it runs: its name and where it runs, as /proc says.
        with open("/proc/%d/cgroup" % p.pid) as f:
            cgroup = [l[3:].strip() for l in f if l.startswith("0::")][0]
        info = [k for k in self.agent.wait_until(
            "the process described", lambda m: any(n == "eacgm_process_info" and ("pid", str(p.pid)) in l
                                                   for n, l in m)) if k[0] == "eacgm_process_info"]
        self.assertIn(("eacgm_process_info", (("pid", str(p.pid)), ("comm", self.tag + "py"), ("cgroup", cgroup),
                                              ("container_id", ""), ("pod_uid", ""))), info)
        out, _ = p.communicate("go\n", timeout=300)
        self.assertEqual(p.returncode, 0)
        self.assertIn("torch_train: %d steps" % steps, out)
        want = {"aten::linear": layers * steps, "aten::addmm": layers * steps,
                "aten::mm": steps * layers + steps * (layers - 1), "aten::mse_loss": steps}
        self.prom.wait_for("the training's linear calls", 'eacgm_calls_total{function="aten::linear"}',
                           want["aten::linear"])
        got = by_function(self.prom.query('eacgm_calls_total{layer="torch"}'))
        self.assertEqual({f: got.get(f) for f in want}, want)

    def test_3_processes_leave_the_table(self):
        # Only the busy job, found at start, is left.
        m = self.agent.wait_until("one live process", lambda m: m.get(("eacgm_agent_processes_traced", ()), 0) == 1)
        self.assertEqual(m[("eacgm_agent_process_table", ())], 1)
        self.assertEqual([dict(l)["pid"] for n, l in m if n == "eacgm_process_info"], [str(self.busy.pid)])

    def test_4b_the_exposition_passes_promtool(self):
        # Every family the workloads above made (CUDA, NCCL, torch, the GPU,
        # the host, the agent's health), linted as Prometheus lints it.
        status, text = get("http://127.0.0.1:%d/metrics" % self.agent.port)
        self.assertEqual(status, 200)
        self.assertIn("eacgm_gpu_", text)
        self.assertIn("eacgm_host_", text)
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
        self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))

    def test_5_every_dashboard_expression_returns_data(self):
        with open(DASHBOARD) as f:
            board = json.load(f)
        exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
        self.assertGreaterEqual(len(exprs), 20)
        deadline = time.monotonic() + 90
        for expr in exprs:
            # Rates need two scrapes in their window, host values a closed interval:
            # each is asked until it answers (Prometheus' data, not a guess at when).
            while not self.prom.query(expr):
                self.assertLess(time.monotonic(), deadline, "no data for: " + expr)
                time.sleep(0.2)
        self.assertEqual(self.prom.query('eacgm_gpu_util_gpu_pct'), {(("key", "gpu0"),): 55})
        per_proc = self.prom.query(
            'eacgm_gpu_proc_mem_used_bytes * on (pid) group_left (comm) eacgm_process_info')
        self.assertEqual(list(per_proc.values()), [1 << 30])
        self.assertEqual(dict(next(iter(per_proc)))["comm"], self.tag + "py")

    def test_4_healthz(self):
        self.assertEqual(get("http://127.0.0.1:%d/healthz" % self.agent.port), (200, "ok\n"))

    def test_9_sigterm_flushes_and_exits_0(self):
        # Past the overhead budget's warm-up the agent timed a probed call of
        # its own, thousands of times: the agent never traces itself, so no
        # call of a process outside the filters was seen, not even its own.
        self.agent.wait_until("the probe timed", lambda m: ("eacgm_agent_probe_hit_trap_seconds", ()) in m)
        self.assertEqual(self.agent.value("eacgm_agent_spans_filtered_total"), 0)
        rc, err = self.agent.stop()
        self.assertEqual(rc, 0, err)
        self.assertTrue(err.rstrip().endswith("eacgm: stopped"), err[-1000:])
        # Its store holds what it counted: the same calls, one row each, and
        # the processes that made them with their exit codes.
        cuda = collections.Counter(r["name"] for r in E.query(self.store, "SELECT name FROM spans WHERE layer='cuda'"))
        want = collections.Counter()
        for (name, *_rest), n in (test_cuda.PARENT_CALLS + test_cuda.CHILD_CALLS).items():
            want[name] += 2 * n
        self.assertEqual(cuda, want)
        torch = collections.Counter(r["name"] for r in E.query(self.store, "SELECT name FROM spans WHERE layer='torch'"))
        self.assertEqual(torch["aten::linear"], 15)
        procs = E.query(self.store, "SELECT comm, exit_code FROM processes")
        self.assertEqual(dict(collections.Counter((p["comm"], p["exit_code"]) for p in procs)),
                         {(self.tag + "cu", 0): 4, (self.tag + "nc", 0): 1, (self.tag + "py", 0): 1,
                          (self.tag + "py", -1): 1})  # the busy job, still running at the end
        meta = {r["key"]: r["value"] for r in E.query(self.store, "SELECT key, value FROM meta")}
        self.assertIn("overhead_hit_trap_ns", meta)  # the budget did time its probe


class ServeFollowsShortLivedProcesses(unittest.TestCase):
    N = 1000

    def test_a_thousand_processes_come_and_go(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        prog, tag = cuda_copy(tmp, "ef")
        agent = started_agent(self, tmp, 'layers = ["cuda"]\ndetect = false\nstore = ""\n[filter]\ncomm = ["%s"]\n' % tag)
        for i in range(self.N):
            r = subprocess.run([prog, "0"], capture_output=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        self.agent_settles(agent, PER_RUN * self.N)
        # The last process can be out of the live set (its pidfd woke) yet
        # in the table a moment more, while its exit record is awaited for
        # its exit code: the table empties once that comes.
        agent.wait_until("an empty process table", lambda m: m.get(("eacgm_agent_process_table", ())) == 0)
        rc, err = agent.stop()
        self.assertEqual(rc, 0, err)
        self.assertIn("eacgm: stopped", err)

    def agent_settles(self, agent, calls):
        seen = {}

        def done(m):
            seen["calls"] = sum(v for (n, l), v in m.items() if n == "eacgm_calls_total")
            seen["live"] = m.get(("eacgm_agent_processes_traced", ()))
            seen["lost"] = {dict(l)["reason"]: v for (n, l), v in m.items() if n == "eacgm_records_lost_total" and v}
            return seen["calls"] == calls and seen["live"] == 0
        try:
            return agent.wait_until("%d calls and no live process" % calls, done, timeout=120)
        except AssertionError as e:
            raise AssertionError("%s\nlast seen: %s" % (e, seen)) from None


class ServeFiltersAndReloads(unittest.TestCase):
    """A process the filters exclude is not traced (its calls are counted as
    filtered); SIGHUP reads the filters again and the next process is."""

    def test_excluded_then_let_in_by_a_reload(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        prog, tag = cuda_copy(tmp, "eh")
        agent = started_agent(self, tmp, 'layers = ["cuda"]\nstore = ""\n[filter]\ncomm = ["%s-never"]\n' % tag)
        self.assertEqual(subprocess.run([prog, "0"], capture_output=True).returncode, 0)
        m = agent.wait_until("the excluded calls counted", lambda m: m.get(
            ("eacgm_agent_spans_filtered_total", ()), 0) >= PER_RUN)
        self.assertEqual(m[("eacgm_agent_spans_filtered_total", ())], PER_RUN)
        self.assertEqual([k for k in m if k[0] == "eacgm_calls_total"], [])
        with open(agent.cfg, "w") as f:
            f.write('layers = ["cuda"]\nstore = ""\n[filter]\ncomm = ["%s"]\n' % tag)
        agent.proc.send_signal(signal.SIGHUP)
        E.wait_for_text(agent.err, r"eacgm: reloaded .*: the filters apply", agent.proc)
        self.assertEqual(subprocess.run([prog, "0"], capture_output=True).returncode, 0)
        m = agent.wait_until("the calls let in", lambda m: sum(
            v for (n, l), v in m.items() if n == "eacgm_calls_total") == PER_RUN)
        self.assertEqual(m[("eacgm_agent_spans_filtered_total", ())], PER_RUN)
        # A configuration that does not parse is reported; the running one stays.
        with open(agent.cfg, "w") as f:
            f.write('[filter]\ncomm = 3\n')
        agent.proc.send_signal(signal.SIGHUP)
        E.wait_for_text(agent.err, r"eacgm: reload: .*filter\.comm must be an array of strings.*the running "
                                   r"configuration stays", agent.proc)
        rc, err = agent.stop()
        self.assertEqual(rc, 0, err)


class ServeUnderTheUnitsCapabilities(unittest.TestCase):
    """The agent with only the capabilities dist/systemd/eacgm.service.in leaves it
    (its CapabilityBoundingSet, applied with setpriv as systemd would) still
    traces: the unit's hardening does not take what tracing needs."""

    def test_traces_with_the_bounding_set_of_the_unit(self):
        E.require_root()
        with open(os.path.join(E.SOURCE_DIR, "dist", "systemd", "eacgm.service.in")) as f:
            caps = [l.split("=", 1)[1].split() for l in f if l.startswith("CapabilityBoundingSet=")][0]
        self.assertEqual(caps, ["CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH",
                                "CAP_SYS_RESOURCE", "CAP_KILL"])
        tmp = E.make_tempdir(self)
        prog, tag = cuda_copy(tmp, "eu")
        bounding = "-all," + ",".join("+" + c[4:].lower() for c in caps)
        agent = started_agent(self, tmp, 'layers = ["cuda"]\nstore = "%s/a.db"\n[filter]\ncomm = ["%s"]\n' % (tmp, tag),
                              wrapper=["setpriv", "--bounding-set", bounding, "--inh-caps", "-all", "--no-new-privs"])
        with open("/proc/%d/status" % agent.proc.pid) as f:
            bnd = int([l.split()[1] for l in f if l.startswith("CapBnd:")][0], 16)
        numbers = {"CAP_DAC_READ_SEARCH": 2, "CAP_KILL": 5, "CAP_SYS_PTRACE": 19, "CAP_SYS_RESOURCE": 24,
                   "CAP_PERFMON": 38, "CAP_BPF": 39}
        with open("/proc/self/status") as f:  # what this machine lends at most (a container may lend less)
            ours = int([l.split()[1] for l in f if l.startswith("CapBnd:")][0], 16)
        self.assertEqual(bnd, sum(1 << numbers[c] for c in caps) & ours)
        r = subprocess.run([prog, "0"], capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        agent.wait_until("%d calls" % PER_RUN, lambda m: sum(
            v for (n, l), v in m.items() if n == "eacgm_calls_total") == PER_RUN)
        rc, err = agent.stop()
        self.assertEqual(rc, 0, err)
        self.assertNotIn("warning", err)


class ServeConfigErrors(unittest.TestCase):
    def serve(self, text):
        tmp = E.make_tempdir(self)
        cfg = os.path.join(tmp, "c.toml")
        with open(cfg, "w") as f:
            f.write(text)
        return E.eacgm("serve", "--config", cfg, timeout=60)

    def test_unknown_key_named_with_its_line(self):
        r = self.serve('listen = "127.0.0.1:9464"\n\n[filter]\ncomms = ["python"]\n')
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, r"c\.toml:4: filter\.comms: unknown key; the keys here are filter\.cgroup, "
                                   r"filter\.comm, filter\.pid_namespace")

    def test_bad_values_named_with_their_line(self):
        for text, msg in [('sample_hz = "fast"\n', r"c\.toml:1: sample_hz must be a whole number"),
                          ('\ngpu_hz = 0\n', r"c\.toml:2: gpu_hz must be from 0\.01 to 1000"),
                          ('layers = ["cuda", "tpu"]\n', r"layers: unknown layer 'tpu'"),
                          ('listen = "9464"\n', r"listen: listen address '9464' is not HOST:PORT"),
                          ('[filter]\ncomm = ["("]\n', r"filter\.comm: '\(' is not a regular expression"),
                          ('detect = yes\n', r"c\.toml:1: not valid TOML")]:
            r = self.serve(text)
            self.assertEqual(r.returncode, 2, text)
            self.assertRegex(r.stderr, msg, text)

    def test_missing_config_named(self):
        r = E.eacgm("serve", "--config", "/nonexistent/eacgm.toml")
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot read the configuration /nonexistent/eacgm.toml: No such file or directory", r.stderr)


if __name__ == "__main__":
    unittest.main()
