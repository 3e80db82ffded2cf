# SPDX-License-Identifier: Apache-2.0
"""eacgm record --clickhouse: every span shipped to a real ClickHouse server
(Debian's clickhouse-server, started here on loopback with a configuration
written by the test), read back with ClickHouse's own SQL and compared with
what the traced program made and what the recording kept; the server
stopped mid-run and started again, or away throughout: the recording goes
on, nothing blocks, and the rows shipped plus those counted as dropped are
the calls the program made."""
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import time
import unittest
import urllib.parse
import urllib.request

import eacgm_e2e as E
import test_cuda
import test_serve as S

SERVER = "/usr/sbin/clickhouse-server"
GLOO_JOB = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "gloo_job.py")


def job_lateness_ms(job, index):
    """How late rank 1 came to all_reduce INDEX after rank 0, as gloo_job.py
    measured it: each rank's CLOCK_MONOTONIC read just before the call (the
    ranks share the clock: one kernel, whatever their namespaces)."""
    start = {r: next(t0 for op, i, t0, t1 in job[r]["collectives"] if op == "all_reduce" and i == index)
             for r in (0, 1)}
    return (start[1] - start[0]) / 1e6


def job_wait_ms(job, index):
    """How long the ranks' threads waited for a CPU between their clock
    reads around all_reduce INDEX, together (gloo_job.py's "waits"): the
    most that can lie between a rank's clock read and its call's probe
    beyond the call's own path there (tens of microseconds). A rank
    runnable but not running for 2 ms after its clock read enters gloo
    2 ms later than its clock says, and its lateness differs by as much."""
    return sum(w for r in (0, 1) for (op, i, _, _), w in zip(job[r]["collectives"], job[r]["waits"])
               if op == "all_reduce" and i == index) / 1e6
CONFIG = """<yandex>
  <logger><level>warning</level><log>{dir}/server.log</log><errorlog>{dir}/error.log</errorlog></logger>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{dir}/data/</path>
  <tmp_path>{dir}/tmp/</tmp_path>
  <users_config>{dir}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>5368709120</mark_cache_size>{remote}
</yandex>
"""
# remote_servers: a cluster whose shards are the servers at these native (tcp) ports.
SHARD = "<shard><replica><host>127.0.0.1</host><port>{tcp}</port></replica></shard>"
USERS = """<yandex>
  <profiles><default></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
"""


class ClickHouse:
    """A clickhouse-server of this test's own (its data under dir), on loopback;
    its (http, tcp) ports free ones unless given; clusters: {name: [the tcp
    ports of its shards]}, its remote_servers."""

    def __init__(self, dir, ports=None, clusters=None):
        self.dir = dir
        os.makedirs(dir, exist_ok=True)
        self.http, self.tcp = ports or (S.free_port(), S.free_port())
        remote = "".join("<%s>%s</%s>" % (name, "".join(SHARD.format(tcp=t) for t in shards), name)
                         for name, shards in (clusters or {}).items())
        self.config = os.path.join(dir, "config.xml")
        with open(self.config, "w") as f:
            f.write(CONFIG.format(dir=dir, http=self.http, tcp=self.tcp,
                                  remote="\n  <remote_servers>%s</remote_servers>" % remote if remote else ""))
        with open(os.path.join(dir, "users.xml"), "w") as f:
            f.write(USERS)
        self.proc = None
        self.start()

    def url(self, db=""):
        return "http://127.0.0.1:%d/%s" % (self.http, db)

    def start(self):
        self.proc = subprocess.Popen([SERVER, "--config-file=" + self.config], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:  # its own signal: /ping answers "Ok." once it serves
            try:
                with urllib.request.urlopen(self.url("ping"), timeout=2) as r:
                    if r.read() == b"Ok.\n":
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("clickhouse-server did not start (exit %s); see %s/error.log" %
                                     (self.proc.poll(), self.dir))
            time.sleep(0.05)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def query(self, sql):
        """The answer's rows, each a list of its tab-separated fields."""
        req = urllib.request.Request(self.url(), data=sql.encode(), method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            return [line.split("\t") for line in r.read().decode().splitlines()]


def require_clickhouse():
    if not os.access(SERVER, os.X_OK):
        raise unittest.SkipTest("no %s: run scripts/setup.sh (Debian's clickhouse-server)" % SERVER)


def popen(args, env=None, **kw):
    """subprocess.Popen with env added to this process's environment, text
    mode (as the test's nodes start their programs: test_clickhouse_cluster)."""
    return subprocess.Popen(args, env=dict(os.environ, **(env or {})), text=True, **kw)


def start_when_traced(test, agent, gate, args, env=None, start=popen):
    """Starts args (testlib_calls, which waits for WAIT_FILE before its first
    call), waits until the agent traces one process more, then creates the
    file: no call is made before the agent has it. start: how the program
    is started (popen's arguments)."""
    before = agent.value("eacgm_agent_processes_traced")
    p = start(args, env=dict(env or {}, WAIT_FILE=gate), stdout=subprocess.PIPE)
    test.addCleanup(p.stdout.close)
    test.addCleanup(p.kill)
    test.assertTrue(p.stdout.readline().startswith("waiting"))
    agent.wait_until("the program traced", lambda m: m.get(("eacgm_agent_processes_traced", ())) == before + 1)
    open(gate, "w").close()
    return p


def server_for(owner):
    """A ClickHouse of its own for a test (or a test class, from setUpClass),
    killed at its end: (its temporary directory, the server)."""
    E.require_root()
    require_clickhouse()
    tmp = E.make_tempdir(owner)
    ch = ClickHouse(os.path.join(tmp, "ch"))
    (owner.addClassCleanup if isinstance(owner, type) else owner.addCleanup)(ch.kill)
    return tmp, ch


class RecordShipsToClickHouse(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.ch = server_for(cls)

    def test_every_call_arrives_as_the_recording_has_it(self):
        db = "rec%d" % os.getpid()
        r = E.record(self.tmp, [E.CUDA_CALLS, "0"], "--layers", "cuda", "--no-detect",
                     "--clickhouse", self.ch.url(db), name="cuda")
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertRegex(r.stderr, r"\nclickhouse: %d spans and \d+ more rows \(aggregates \d+, processes \d+\) shipped to "
                                   r"%s \([\d.]+ (B|KiB) sent, [\d.]+ B a row\)\n" %
                         (E.CUDA_CALLS_SPANS, re.escape(self.ch.url(db))))
        want = collections.Counter()
        for (name, *_rest), n in (test_cuda.PARENT_CALLS + test_cuda.CHILD_CALLS).items():
            want[name] += n
        got = {name: int(n) for name, n in
               self.ch.query("SELECT name, uniqExact(agent, row) FROM %s.spans GROUP BY name" % db)}
        self.assertEqual(got, dict(want))
        # Row for row what the recording kept: its pid, thread, duration,
        # return value and bytes; its start on the wall clock, the recording's
        # CLOCK_MONOTONIC start moved by one offset for every row.
        rows = self.ch.query("SELECT DISTINCT pid, tid, layer, name, dur_ns, ret, bytes, start_ns, host, job, rank, "
                             "seq FROM %s.spans ORDER BY start_ns" % db)
        spans = E.query(r.db, "SELECT pid, tid, layer, name, dur_ns, ret, bytes, start_ns FROM spans "
                        "ORDER BY start_ns")
        self.assertEqual([tuple(int(x) if i not in (2, 3) else x for i, x in enumerate(row[:7])) for row in rows],
                         [(s["pid"], s["tid"], s["layer"], s["name"], s["dur_ns"], s["ret"], s["bytes"])
                          for s in spans])
        offsets = {int(row[7]) - s["start_ns"] for row, s in zip(rows, spans)}
        self.assertEqual(len(offsets), 1, offsets)
        self.assertLess(abs(offsets.pop() - (time.clock_gettime_ns(time.CLOCK_REALTIME) -
                                             time.clock_gettime_ns(time.CLOCK_MONOTONIC))), 50_000_000)
        meta = E.meta(r.db)
        self.assertEqual({tuple(row[8:]) for row in rows}, {(meta["hostname"], "", "-1", "-1")})
        self.assertEqual(E.drops(r.db, "clickhouse"), {})
        # The small rows: each function's calls in its aggregates, and each
        # process as the recording has it (the last row told of it: its exit).
        aggregates = self.ch.query("SELECT name, sum(calls) FROM (SELECT DISTINCT agent, row, name, calls FROM "
                                   "%s.aggregates) GROUP BY name" % db)
        self.assertEqual({name: float(n) for name, n in aggregates}, {k: float(v) for k, v in want.items()})
        processes = self.ch.query("SELECT pid, argMax(comm, row), argMax(exit_code, row) FROM %s.processes "
                                  "GROUP BY pid ORDER BY pid" % db)
        self.assertEqual([(int(p), c, int(x)) for p, c, x in processes],
                         [(p["pid"], p["comm"], p["exit_code"])
                          for p in E.query(r.db, "SELECT pid, comm, exit_code FROM processes ORDER BY pid")])
        self.assertEqual(self.ch.query("SELECT count() FROM %s.rounds" % db), [["0"]])  # no collective

    def test_a_server_stopped_mid_run_loses_nothing_unaccounted(self):
        db = "stop%d" % os.getpid()
        gate = os.path.join(self.tmp, "gate")
        spec = E.write_json(os.path.join(self.tmp, "testlib.json"), E.TESTLIB_SPEC)
        run = E.start_record(self.tmp, "--layers", "cuda", "--spec", spec, "--no-detect",
                             "--clickhouse", self.ch.url(db), "--", E.TESTLIB_CALLS, "noop", "3000",
                             name="stop", env={"GATE_AFTER": "1000", "GATE_FILE": gate})
        # The first 1,000 calls made and shipped (ClickHouse's count: its signal)...
        deadline = time.monotonic() + 60
        while self.count(db) != 1000:
            self.assertLess(time.monotonic(), deadline, "ClickHouse never held the first 1,000 calls")
            time.sleep(0.1)
        # ... then the server killed, the other 2,000 made, the server started again.
        self.ch.kill()
        open(gate, "w").close()
        self.ch.start()
        r = run.wait(timeout=120)
        self.assertEqual(r.rc, 0, r.stderr)
        dropped = E.drops(r.db, "clickhouse").get("not shipped", 0)
        self.assertEqual(self.count(db) + dropped, 3000, r.stderr)
        self.assertEqual(len(E.query(r.db, "SELECT 1 FROM spans WHERE name = 'tl_noop'")), 3000)

    def test_a_server_away_throughout(self):
        port = S.free_port()  # nothing listens there
        url = "http://127.0.0.1:%d/away" % port
        r = E.record(self.tmp, [E.CUDA_CALLS, "0"], "--layers", "cuda", "--no-detect", "--clickhouse", url,
                     name="away")
        self.assertEqual(r.rc, 0, r.stderr)
        self.assertIn("eacgm: warning: ClickHouse at %s did not answer" % url, r.stderr)
        self.assertRegex(r.stderr, r"clickhouse: 0 spans shipped to %s \(0 B sent\), \d+ dropped \(%d of them spans; "
                         r"ClickHouse at %s did not answer" % (re.escape(url), E.CUDA_CALLS_SPANS, re.escape(url)))
        self.assertEqual(E.drops(r.db, "clickhouse"), {"not shipped": E.CUDA_CALLS_SPANS})
        # The recording itself is whole.
        self.assertEqual(len(E.query(r.db, "SELECT 1 FROM spans")), E.CUDA_CALLS_SPANS)

    def count(self, db):
        try:
            return int(self.ch.query("SELECT uniqExact(agent, row) FROM %s.spans WHERE name = 'tl_noop'" % db)[0][0])
        except OSError:  # no table yet: the first batch has not gone
            return 0


class ServeShipsToClickHouse(unittest.TestCase):
    def test_a_program_started_after_the_agent(self):
        tmp, ch = server_for(self)
        prog, tag = S.cuda_copy(tmp, "eh")
        rank_prog = os.path.join(tmp, tag + "r")  # a rank of a torchrun job: its job and rank in its environment
        shutil.copy(E.TESTLIB_CALLS, rank_prog)
        spec = E.write_json(os.path.join(tmp, "testlib.json"), E.TESTLIB_SPEC)
        db = "serve%d" % os.getpid()
        agent = S.started_agent(self, tmp, 'layers = ["cuda"]\nspecs = ["%s"]\ndetect = false\nstore = ""\n'
                                '[clickhouse]\nurl = "%s"\nhost = "node-a"\njob = "job-%s"\nspans = "all"\n'
                                '[filter]\ncomm = ["%sr?"]\n' % (spec, ch.url(db), tag, tag))
        # The agent has it in its table (its environment read), then it calls.
        rank = start_when_traced(self, agent, os.path.join(tmp, "gate"), [rank_prog, "noop", "100"],
                                 env={"TORCHELASTIC_RUN_ID": "te-42", "RANK": "3"})
        self.assertEqual(rank.wait(timeout=60), 0)
        # A program whose environment names no job: the configuration's, no rank.
        r = E.run([prog, "0"])
        self.assertEqual(r.returncode, 0, r.stderr)
        agent.wait_until("every row sent",
                         lambda m: m.get(("eacgm_clickhouse_rows_sent_total", (("table", "spans"),))) == 100 + S.PER_RUN)
        self.assertEqual(agent.value("eacgm_clickhouse_rows_dropped_total"), 0)
        got = ch.query("SELECT host, job, rank, layer, uniqExact(agent, row) FROM %s.spans "
                       "GROUP BY host, job, rank, layer ORDER BY job" % db)
        self.assertEqual(got, [["node-a", "job-" + tag, "-1", "cuda", str(S.PER_RUN)],
                               ["node-a", "te-42", "3", "testlib", "100"]])
        rc, err = agent.stop()
        self.assertEqual(rc, 0, err)
        self.assertRegex(err, r"eacgm: clickhouse: %d spans(?: and \d+ more rows \([^)]*\))? shipped to %s \([\d.]+ (B|KiB) sent, [\d.]+ B a row\)\n" %
                         (100 + S.PER_RUN, re.escape(ch.url(db))))


class RecordShipsAnomalies(unittest.TestCase):
    """Live detection on a run with a slowed matmul (tests/testprogs/
    torch_slow.py): the anomalies the recording keeps reach ClickHouse row
    for row, each with its causes, its top cause named apart."""

    def test_each_anomaly_as_the_recording_has_it(self):
        tmp, ch = server_for(self)
        db = "anom%d" % os.getpid()
        prog = os.path.join(E.SOURCE_DIR, "tests", "testprogs", "torch_slow.py")
        r = E.record(tmp, ["/usr/bin/python3", prog, "400", ",".join(str(s) for s in range(50, 400, 25)), "16384"],
                     "--layers", "torch", "--sample-hz", "0", "--clickhouse", ch.url(db), name="anom")
        self.assertEqual(r.rc, 0, r.stderr)
        want = E.query(r.db, "SELECT ts_ns, dur_ns, pid, tid, layer, name, score, threshold, causes, detected_ns "
                             "FROM anomalies ORDER BY ts_ns, pid, tid")
        self.assertGreater(len(want), 0)  # the slowed matmuls: some are flagged live
        got = ch.query("SELECT DISTINCT start_ns, dur_ns, pid, tid, layer, name, score, threshold, cause, causes, "
                       "detected_ns FROM %s.anomalies ORDER BY start_ns, pid, tid" % db)
        offset = int(got[0][0]) - want[0]["ts_ns"]  # the run's one wall-clock offset
        self.assertEqual(
            [(int(g[0]) - offset, int(g[1]), int(g[2]), int(g[3]), g[4], g[5], float(g[6]), float(g[7]), g[8],
              json.loads(g[9]), int(g[10]) - offset) for g in got],
            [(w["ts_ns"], w["dur_ns"], w["pid"], w["tid"], w["layer"], w["name"], w["score"], w["threshold"],
              json.loads(w["causes"])[0]["kind"] if json.loads(w["causes"]) else "", json.loads(w["causes"]),
              w["detected_ns"]) for w in want])


class ServeShipsSpansAroundAHang(unittest.TestCase):
    """serve's default, spans = "around": a program's calls with nothing
    wrong near them reach ClickHouse as aggregates only (its spans held,
    then let go: the agent's count of them is its signal); a hang ships the
    spans of the seconds around it; collective rounds, processes and host
    metrics are shipped whatever the choice."""

    def test_only_the_seconds_around_a_hang(self):
        tmp, ch = server_for(self)
        db = "around%d" % os.getpid()
        spec = E.write_json(os.path.join(tmp, "testlib.json"), E.TESTLIB_SPEC)
        prog = os.path.join(tmp, "quiet%d" % (os.getpid() % 100000))
        shutil.copy(E.TESTLIB_CALLS, prog)
        agent = S.started_agent(self, tmp, 'layers = ["gloo", "host"]\nspecs = ["%s"]\ndetect = false\nstore = ""\n'
                                'hang_after_s = 1\n[clickhouse]\nurl = "%s"\nhost = "node-a"\n' % (spec, ch.url(db)))
        quiet = start_when_traced(self, agent, os.path.join(tmp, "start"), [prog, "noop", "200"])
        self.assertEqual(quiet.wait(timeout=60), 0)
        agent.wait_until("the quiet program's spans let go",
                         lambda m: m.get(("eacgm_clickhouse_spans_let_go_total", ())) == 200)
        gate = os.path.join(tmp, "gate")
        job = subprocess.Popen(["/usr/bin/python3", GLOO_JOB, os.path.join(tmp, "job.json"), "--steps", "1",
                                "--stall-rank", "1", "--gate", gate], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=dict(os.environ, EACGM_JOB="ga"), start_new_session=True)
        self.addCleanup(E.kill_group, job.pid)
        try:
            E.wait_for_text(agent.err, r"eacgm: warning: hang: gloo allreduce in flight", agent.proc, timeout=180)
        finally:
            open(gate, "w").close()
        out, err = job.communicate(timeout=120)
        self.assertEqual(job.returncode, 0, err)
        rc, err = agent.stop()
        self.assertEqual(rc, 0, err)
        q = lambda sql: ch.query(sql % {"db": db})
        self.assertEqual(q("SELECT count() FROM %(db)s.spans WHERE name = 'tl_noop'"), [["0"]])
        self.assertEqual(q("SELECT round(sum(calls)) FROM (SELECT DISTINCT agent, row, calls FROM %(db)s.aggregates "
                           "WHERE name = 'tl_noop')"), [["200"]])
        # The job's spans around the hang went: its all_reduce 2, which both
        # ranks finished once the gate opened, among them.
        self.assertEqual(q("SELECT DISTINCT rank FROM %(db)s.spans WHERE job = 'ga' AND name = 'allreduce' "
                           "AND seq = 2 ORDER BY rank"), [["0"], ["1"]])
        # Every round of both ranks, spans or not: the four all_reduce.
        rounds = q("SELECT DISTINCT rank, seq FROM %(db)s.rounds WHERE job = 'ga' AND name = 'allreduce' AND seq < 4 "
                   "ORDER BY rank, seq")
        self.assertEqual(rounds, [[str(r), str(k)] for r in (0, 1) for k in range(4)])
        self.assertEqual(ch.query("SELECT argMax(exit_code, row) FROM %s.processes WHERE comm = '%s' GROUP BY pid" %
                                  (db, os.path.basename(prog))), [["0"]])
        self.assertGreater(int(q("SELECT count() FROM %(db)s.metrics WHERE layer = 'host' AND host = 'node-a'")[0][0]),
                           0)
        self.assertRegex(err, r"eacgm: clickhouse: \d+ spans and \d+ more rows \(aggregates \d+, events \d+, "
                              r"metrics \d+, processes \d+, rounds \d+\) shipped to ")
        # The cluster's questions need no spans: with none left, stragglers
        # still names rank 1 at all_reduce 2, late by rank 1's start less
        # rank 0's as the spans table had them (the same calls, shipped apart).
        starts = dict(q("SELECT DISTINCT rank, start_ns FROM %(db)s.spans WHERE job = 'ga' AND name = 'allreduce' "
                        "AND seq = 2"))
        ch.query("TRUNCATE TABLE %s.spans" % db)
        r = E.eacgm("cluster", "stragglers", "--clickhouse", ch.url(db), "--job", "ga", "--limit", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        head, top = (line.split() for line in r.stdout.splitlines()[:2])
        top = dict(zip(head, top))
        self.assertEqual((top["name"], top["seq"], top["last_rank"]), ("allreduce", "2", "1"))
        self.assertAlmostEqual(float(top["late_ms"]), (int(starts["1"]) - int(starts["0"])) / 1e6, delta=0.001)


class ServeDropsOldDays(unittest.TestCase):
    def test_day_partitions_past_keep_days(self):
        # 18.16 has no TTL: the agent drops the day partitions older than
        # keep_days itself, at its start (and every hour).
        tmp, ch = server_for(self)
        db = "keep%d" % os.getpid()
        r = E.eacgm("record", "--layers", "cuda", "--no-detect", "--clickhouse", ch.url(db), "-o",
                    os.path.join(tmp, "r.db"), "--", "/bin/true")  # the tables, as an agent makes them
        self.assertEqual(r.returncode, 0, r.stderr)
        for table in ("spans", "events"):
            ch.query("INSERT INTO %s.%s (day, host) VALUES (today() - 10, 'a'), (today() - 8, 'b'), "
                     "(today() - 7, 'c'), (today() - 3, 'd')" % (db, table))
        agent = S.started_agent(self, tmp, 'layers = ["cuda"]\ndetect = false\nstore = ""\n'
                                '[clickhouse]\nurl = "%s"\nkeep_days = 7\n' % ch.url(db))
        agent.wait_until("the old days dropped",
                         lambda m: m.get(("eacgm_clickhouse_partitions_dropped_total", ())) == 4)
        for table in ("spans", "events"):
            self.assertEqual(ch.query("SELECT host, today() - day FROM %s.%s ORDER BY host" % (db, table)),
                             [["c", "7"], ["d", "3"]])
        rc, err = agent.stop()
        self.assertEqual(rc, 0, err)


class ClusterAnswersAcrossRanks(unittest.TestCase):
    """A 2-rank gloo job recorded with --clickhouse, rank 1 delayed before its
    all_reduce 2 (seq 2): `eacgm cluster` reads ClickHouse alone."""

    @classmethod
    def setUpClass(cls):
        cls.tmp, cls.ch = server_for(cls)
        cls.url = cls.ch.url("cl%d" % os.getpid())
        cls.out = os.path.join(cls.tmp, "job.json")
        cls.rec = E.record(cls.tmp, ["/usr/bin/python3", GLOO_JOB, cls.out, "--delay-rank", "1", "--delay-ms", "100"],
                           "--layers", "gloo", "--no-detect", "--clickhouse", cls.url, name="gloo",
                           env={"EACGM_JOB": "gj"})
        assert cls.rec.rc == 0, cls.rec.stderr
        with open(cls.out) as f:
            cls.job = {int(r): v for r, v in json.load(f).items()}

    def cluster(self, *args):
        return E.eacgm("cluster", *args, "--clickhouse", self.url)

    def table(self, r):
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        head = lines[0].split()
        return [dict(zip(head, line.split())) for line in lines[1:]]

    def test_stragglers_name_the_delayed_rank_and_its_delay(self):
        rows = self.table(self.cluster("stragglers", "--job", "gj", "--limit", "1"))
        self.assertEqual(len(rows), 1)
        top = rows[0]
        self.assertEqual({k: top[k] for k in ("job", "layer", "name", "seq", "ranks", "last_rank")},
                         {"job": "gj", "layer": "gloo", "name": "allreduce", "seq": "2", "ranks": "2",
                          "last_rank": "1"})
        # As the recording has it: rank 1's start less rank 0's, at seq 2 ...
        starts = {r["rank"]: r["start_ns"] for r in E.query(
            self.rec.db, "SELECT CAST(json_extract(args, '$.rank') AS INT) AS rank, start_ns FROM spans "
            "WHERE name = 'allreduce' AND json_extract(args, '$.seq') = 2")}
        self.assertAlmostEqual(float(top["late_ms"]), (starts[1] - starts[0]) / 1e6, delta=0.001)
        # ... and as the job measured it, within a millisecond and the time
        # the ranks waited for a CPU around the call (job_wait_ms: 1.1 to
        # 2.3 ms more, on a busy machine): each rank's clock read just before
        # its all_reduce 2. Not the sleep alone: rank 1 may also leave
        # all_reduce 1 later than rank 0 (3.4 ms once, on a busy machine),
        # and that is lateness too.
        self.assertAlmostEqual(float(top["late_ms"]), job_lateness_ms(self.job, 2),
                               delta=1.0 + job_wait_ms(self.job, 2))

    def test_summary_counts_every_call_of_both_ranks(self):
        rows = self.table(self.cluster("summary", "--job", "gj", "--limit", "100"))
        want = {r["name"]: r["n"] for r in E.query(self.rec.db, "SELECT name, count(*) AS n FROM spans "
                                                               "WHERE layer = 'gloo' GROUP BY name")}
        self.assertEqual({r["name"]: int(r["calls"]) for r in rows}, want)
        self.assertEqual({(r["hosts"], r["ranks"]) for r in rows if r["name"] == "allreduce"}, {("1", "2")})
        one = self.table(self.cluster("summary", "--job", "gj", "--rank", "1", "--limit", "100"))
        ar = [r for r in one if r["name"] == "allreduce"]
        self.assertEqual([(int(r["calls"]) * 2, r["ranks"]) for r in ar], [(want["allreduce"], "1")])
        self.assertEqual(self.table(self.cluster("summary", "--job", "another")), [])

    def test_show_sql_prints_what_ran(self):
        r = self.cluster("stragglers", "--job", "it's", "--since", "2h", "--show-sql")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("job = 'it\\'s'", r.stderr)
        self.assertIn("start_ns >= toUInt64(now() - 7200) * 1000000000", r.stderr)
        self.assertTrue(r.stderr.startswith("SELECT job, layer, name, seq"), r.stderr)

    def test_bad_since_is_named(self):
        r = self.cluster("summary", "--since", "yesterday")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--since yesterday: give a duration such as 30s, 15m, 2h or 7d", r.stderr)


class ClusterHangs(unittest.TestCase):
    """A 2-rank gloo job whose rank 1 is held out of all_reduce 2 until the
    test creates a file: while it lasts, `eacgm cluster hangs` (ClickHouse
    alone) names the collective, its seq, the rank inside and the rank
    missing; once it is over, nothing."""

    def test_named_while_it_lasts_and_gone_after(self):
        tmp, ch = server_for(self)
        url = ch.url("hang%d" % os.getpid())
        gate = os.path.join(tmp, "gate")
        started = E.start_record(tmp, "--layers", "gloo", "--no-detect", "--hang-after", "1", "--clickhouse", url,
                                 "--", "/usr/bin/python3", GLOO_JOB, os.path.join(tmp, "job.json"), "--steps", "1",
                                 "--stall-rank", "1", "--gate", gate, env={"EACGM_JOB": "gh"})
        try:
            started.wait_for_line(r"eacgm: warning: hang: gloo allreduce in flight .* seq 2, missing_ranks \[1\]",
                                  timeout=180)
            # Shipped within about a second of the line: ClickHouse's answer is the signal.
            deadline, rows = time.monotonic() + 30, []
            while not rows:
                self.assertLess(time.monotonic(), deadline, "cluster hangs never named the hang")
                r = E.eacgm("cluster", "hangs", "--clickhouse", url, "--job", "gh")
                self.assertEqual(r.returncode, 0, r.stderr)
                rows = r.stdout.splitlines()[1:]
                time.sleep(0.2)
            head = r.stdout.splitlines()[0].split()
            row = dict(zip(head, rows[0].split()))
            self.assertEqual(len(rows), 1, r.stdout)
            self.assertEqual({k: row[k] for k in ("job", "layer", "call", "seq", "nranks", "in_flight",
                                                  "missing_ranks")},
                             {"job": "gh", "layer": "gloo", "call": "allreduce", "seq": "2", "nranks": "2",
                              "in_flight": "[0]", "missing_ranks": "[1]"})
        finally:
            open(gate, "w").close()
        rec = started.wait(timeout=180)
        self.assertEqual(rec.rc, 0, rec.stderr)
        r = E.eacgm("cluster", "hangs", "--clickhouse", url, "--job", "gh")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["job  layer  call  seq  nranks  in_flight  hosts  for_s  missing_ranks"])


class SchemaAsDocumented(unittest.TestCase):
    def test_docs_show_what_cluster_schema_prints_and_it_runs(self):
        r = E.eacgm("cluster", "schema", "--clickhouse", "http://ch:8123/eacgm")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(E.SOURCE_DIR, "docs", "clickhouse.md")) as f:
            docs = f.read()
        block = re.search(r"## The schema\n.*?```sql\n(.*?)```", docs, re.S).group(1)
        self.assertEqual(" ".join(block.split()).replace("( ", "(").replace(" )", ")"), " ".join(r.stdout.split()))
        tmp, ch = server_for(self)
        db = "schema%d" % os.getpid()
        r = E.eacgm("cluster", "schema", "--clickhouse", ch.url(db), "--ttl-days", "0")
        for sql in r.stdout.split(";\n")[:-1]:
            ch.query(sql)
        self.assertEqual(ch.query("SELECT name FROM system.tables WHERE database = '%s' ORDER BY name" % db),
                         [["aggregates"], ["anomalies"], ["events"], ["metrics"], ["processes"], ["rounds"],
                          ["spans"]])


class BadAddresses(unittest.TestCase):
    def test_named_with_the_form(self):
        form = "' is not of the form http://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]"
        for url, why in (("ch:8123", form), ("https://ch:8443", "': https is not supported"),
                         ("http://ch:99999/x", "': the port must be a number from 1 to 65535"),
                         ("http://ch:8123/bad-name", form)):
            r = E.eacgm("record", "--clickhouse", url, "--", "/bin/true")
            self.assertEqual(r.returncode, 2, (url, r.stderr))
            self.assertIn("--clickhouse: ClickHouse address '%s%s" % (url, why), r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)

    def test_a_cluster_needs_an_address_and_a_name(self):
        r = E.eacgm("record", "--clickhouse-cluster", "two", "--", "/bin/true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--clickhouse-cluster needs --clickhouse URL", r.stderr)
        r = E.eacgm("record", "--clickhouse", "http://ch:8123", "--clickhouse-cluster", "two shards", "--",
                    "/bin/true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--clickhouse: ClickHouse cluster 'two shards' is not a name of letters, digits and "
                      "underscores, as remote_servers names it", r.stderr)


if __name__ == "__main__":
    unittest.main()
