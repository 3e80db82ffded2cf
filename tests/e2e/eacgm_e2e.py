# SPDX-License-Identifier: Apache-2.0
"""Shared helpers for the end-to-end tests: run the eacgm CLI, read what it wrote.

ctest sets EACGM (the binary), TESTPROGS (build/tests/testprogs) and SOURCE_DIR;
run by hand, the defaults point into ../../build.
"""
import json
import os
import re
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCE_DIR = os.environ.get("SOURCE_DIR", _ROOT)
EACGM = os.environ.get("EACGM", os.path.join(_ROOT, "build", "eacgm"))
TESTPROGS = os.environ.get("TESTPROGS", os.path.join(_ROOT, "build", "tests", "testprogs"))
TESTLIB_CALLS = os.path.join(TESTPROGS, "testlib_calls")
CUDA_CALLS = os.path.join(TESTPROGS, "cuda_calls")
CUDA_CALLS_SPANS = 26  # the calls cuda_calls makes: 20 in the parent, 6 in its child (test_cuda lists them)
TESTLIB = os.path.join(TESTPROGS, "libeacgm_testlib.so")

# Probes on the test library (tests/testprogs/testlib.c).
TESTLIB_SPEC = {
    "layer": "testlib",
    "library": "libeacgm_testlib*.so",
    "probes": [
        {"function": "tl_noop", "args": [{"name": "x", "slot": 0, "type": "i64"}]},
        {"function": "tl_outer"},
        {"function": "tl_inner"},
        {"function": "tl_recurse", "args": [{"name": "depth", "slot": 0, "type": "i64"}]},
        {"function": "tl_eight", "args": [{"name": "g", "slot": 6, "type": "i64"},
                                          {"name": "h", "slot": 7, "type": "i64"}]},
        {"function": "tl_out", "args": [{"name": "out", "slot": 0, "type": "u64", "deref": "exit"},
                                        {"name": "value", "slot": 1, "type": "u64"}],
         "returns": "i32"},
        {"function": "tl_escape"},
        {"function": "tl_jump_deep"},
        {"function": "tl_cet", "args": [{"name": "x", "slot": 0, "type": "i64"}]},
        {"function": "tl_cet_loop", "args": [{"name": "n", "slot": 0, "type": "i64"}]},
    ],
}

DROP_REASONS = ("ring_buffer_full", "depth_overflow", "unpaired_entry", "thread_table_full", "exited_in_call")
TOL_US = 0.001  # float rounding of ts/dur (microseconds with 3 decimals)


def require_root():
    if os.geteuid() != 0:
        raise unittest.SkipTest("e2e tests need root (eBPF)")


def make_tempdir(owner):
    """A temp dir removed by the test (or class) cleanup of `owner`; kept, and
    named on stderr, when EACGM_E2E_KEEP is set (to look at the recordings
    of a run that failed once)."""
    d = tempfile.mkdtemp(prefix="eacgm-e2e-")
    if os.environ.get("EACGM_E2E_KEEP"):
        print("eacgm_e2e: keeping %s" % d, file=sys.stderr)
        return d
    cleanup = owner.addClassCleanup if isinstance(owner, type) else owner.addCleanup
    cleanup(shutil.rmtree, d, True)
    return d


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def run(args, timeout=300, env=None, **kw):
    """Runs a command to completion; returns CompletedProcess with text output."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=full_env, **kw)


def eacgm(*args, **kw):
    return run([EACGM, *args], **kw)


class Recording:
    """One `eacgm record` run: eacgm's pid, exit code and output, and its files."""

    def __init__(self, pid, rc, stdout, stderr, db, trace):
        self.pid, self.rc, self.stdout, self.stderr = pid, rc, stdout, stderr
        self.db, self.trace = db, trace

    def spans(self, where="1", params=()):
        return load_spans(self.db, where, params)

    def query(self, sql, params=()):
        return query(self.db, sql, params)


def json_trace(options, db):
    """The options with `--perfetto NAME.trace.json` added where they name no
    trace: tests read the JSON trace (record's default is NAME.pftrace,
    which test_perfetto reads with a decoder of its own)."""
    options = list(options)
    ours = options[:options.index("--")] if "--" in options else options  # not the traced command's
    if "--perfetto" in ours:
        return options
    return ours + ["--perfetto", db[:-3] + ".trace.json"] + options[len(ours):]


def kill_session(proc):
    """Kills eacgm and, when it leads its own session (start_new_session), what it launched:
    no command left waiting for a file keeps the pipes open and the test hanging. Returns
    the rest of eacgm's stderr."""
    try:
        leads = os.getpgid(proc.pid) == proc.pid
    except ProcessLookupError:  # reaped already
        leads = False
    kill_group(proc.pid) if leads else proc.kill()
    try:
        return proc.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:  # a process of another session holds the pipes
        return "(eacgm's stderr still held open by a process it did not start)"


def record(tmp, command, *options, name="r", env=None, timeout=300):
    """`eacgm record -o tmp/name.db OPTIONS -- COMMAND`; command may be [] with -p in options.
    The trace is JSON (tmp/name.trace.json) unless options say --perfetto."""
    db = os.path.join(tmp, name + ".db")
    args = ["record", "-o", db, *json_trace(options, db)]
    if command:
        args += ["--", *command]
    p = subprocess.Popen([EACGM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **(env or {})), start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(p)
        raise
    trace = options[list(options).index("--perfetto") + 1] if "--perfetto" in options else db[:-3] + ".trace.json"
    return Recording(p.pid, p.returncode, out, err, db, trace)


# The spans table's module (eacgm_sql.so, built beside the binary): a
# recording keeps its spans in blocks, which `spans` reads through it.
SQL_MODULE = os.path.join(os.path.dirname(EACGM), "eacgm_sql.so")


def connect(db, read_only=True, timeout=5.0):
    """A connection to a recording with the spans module loaded, as a user's
    Python would have it (docs/store.md)."""
    con = sqlite3.connect("file:%s?mode=ro" % db if read_only else db, uri=read_only, timeout=timeout)
    con.enable_load_extension(True)
    con.load_extension(SQL_MODULE)
    con.enable_load_extension(False)
    return con


def query(db, sql, params=()):
    con = connect(db)
    try:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute(sql, params)]
    finally:
        con.close()


def load_spans(db, where="1", params=()):
    """Spans as dicts, args decoded from JSON, in (pid, tid, start_ns, id) order.
    A call's wait to run (args.runq_ns, kept only where the thread waited:
    a preemption inside any call adds it) is moved out of args to
    r["runq_ns"], so that args are the function's arguments."""
    rows = query(db, "SELECT * FROM spans WHERE %s ORDER BY pid, tid, start_ns, id" % where, params)
    for r in rows:
        r["args"] = json.loads(r["args"]) if r["args"] else {}
        r["runq_ns"] = r["args"].pop("runq_ns", 0)
        r["py_stack"] = json.loads(r["py_stack"]) if r.get("py_stack") else []
    return rows


def drops(db, layer="uprobe"):
    """Lost records by reason, of the span engine (layer "uprobe") or the python layer."""
    out = {}
    for r in query(db, "SELECT reason, count FROM drops WHERE layer = ?", (layer,)):
        out[r["reason"]] = out.get(r["reason"], 0) + r["count"]
    return out


def meta(db):
    return {r["key"]: r["value"] for r in query(db, "SELECT key, value FROM meta")}


def load_trace(path):
    with open(path) as f:
        return json.load(f)


def _pb_fields(buf):
    """A protobuf message's fields: [(number, value)], value an int (varint,
    fixed64) or bytes (length-delimited)."""
    out, i = [], 0

    def varint():
        nonlocal i
        v, shift = 0, 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v

    while i < len(buf):
        key = varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            out.append((num, varint()))
        elif wire == 1:
            out.append((num, int.from_bytes(buf[i:i + 8], "little")))
            i += 8
        elif wire == 2:
            n = varint()
            out.append((num, buf[i:i + n]))
            i += n
        else:
            raise ValueError("wire type %d" % wire)
    return out


def load_pftrace(path):
    """A native trace (record's default .pftrace; src/export/pftrace.h) read
    with a decoder of the tests' own: {"slices": [(pid, tid, layer, name,
    start_ns, end_ns)], "counters": [(name, ts_ns, value)], "instants":
    [name], "tracks": {uuid: descriptor fields}}. Times are rebuilt from each
    sequence's incremental clock; names from its interned data."""
    import struct
    with open(path, "rb") as f:
        data = f.read()
    tracks, seqs, out = {}, {}, {"slices": [], "counters": [], "instants": []}
    for num, packet in _pb_fields(data):
        assert num == 1
        p = _pb_fields(packet)
        get = lambda n, fs=p: next((v for k, v in fs if k == n), None)
        seq = seqs.setdefault(get(10), {"clock": 0, "names": {}, "cats": {}, "open": {}})
        if get(60) is not None:
            td = _pb_fields(get(60))
            t = {"name": (next((v for k, v in td if k == 2), b"") or b"").decode(), "parent": next((v for k, v in td if k == 5), 0)}
            pd = next((v for k, v in td if k == 3), None)
            if pd is not None:
                t["pid"] = next(v for k, v in _pb_fields(pd) if k == 1)
            th = next((v for k, v in td if k == 4), None)
            if th is not None:
                t["pid"], t["tid"] = [next(v for k, v in _pb_fields(th) if k == n) for n in (1, 2)]
            tracks[next(v for k, v in td if k == 1)] = t
            continue
        if get(6) is not None:
            for k, c in _pb_fields(get(6)):
                cf = dict(_pb_fields(c))
                if cf.get(1) == 64:
                    seq["clock"] = cf[2]
            continue
        for k, entry in _pb_fields(get(12) or b""):
            e = dict(_pb_fields(entry))
            {2: seq["names"], 1: seq["cats"]}.get(k, {})[e[1]] = e[2].decode()
        seq["clock"] += get(8)
        ev = _pb_fields(get(11))
        eget = lambda n: next((v for k, v in ev if k == n), None)
        typ, track = eget(9), eget(11)
        if typ == 1:
            seq["open"].setdefault(track, []).append((seq["names"][eget(10)], seq["clock"]))
        elif typ == 2:
            name, start = seq["open"][track].pop()
            layer = tracks[track]
            thread = tracks[layer["parent"]]
            out["slices"].append((thread["pid"], thread["tid"], layer["name"], name, start, seq["clock"]))
        elif typ == 3:
            out["instants"].append(seq["names"][eget(10)])
        elif typ == 4:  # an integral value as int64 (30), any other as a double (44)
            value = eget(30)
            value = struct.unpack("<q", value.to_bytes(8, "little"))[0] if value is not None else \
                struct.unpack("<d", eget(44).to_bytes(8, "little"))[0]
            out["counters"].append((tracks[track]["name"], seq["clock"], value))
    out["tracks"] = tracks
    return out


def x_events(trace):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


def by_thread(events):
    out = {}
    for e in events:
        out.setdefault((e["pid"], e["tid"]), []).append(e)
    return out


def nesting_errors(events, tol=TOL_US):
    """Events of one thread as a proper stack: each either ends before the next
    starts or fully contains it. Returns a list of violations (empty: fine)."""
    errs, stack = [], []
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        end = e["ts"] + e["dur"]
        while stack and stack[-1][0] <= e["ts"] + tol:
            stack.pop()
        if stack and end > stack[-1][0] + tol:
            errs.append("%s [%r, %r] overlaps the end of %s (ends %r)" %
                        (e["name"], e["ts"], end, stack[-1][1]["name"], stack[-1][0]))
        stack.append((end, e))
    return errs


def contains(outer, inner, tol=TOL_US):
    return (outer["ts"] - tol <= inner["ts"] and
            inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + tol)


def span_as_event(s):
    """A span row in trace-event units, for nesting checks on database rows."""
    return {"name": s["name"], "ts": s["start_ns"] / 1000.0, "dur": s["dur_ns"] / 1000.0}


# The line eacgm prints once every probe is attached (after writing --ready-file).
READY_LINE = re.compile(r"eacgm: recording \((\d+) probes?, (\d+) process(?:es)?\)")


class Started:
    """An `eacgm record` running: started by start_record, which returns once eacgm is ready."""

    def __init__(self, proc, db, ready_file):
        self.proc, self.pid, self.db, self.ready_file = proc, proc.pid, db, ready_file
        self._stderr = ""

    def wait_for_line(self, pattern, timeout=60.0):
        """Reads eacgm's stderr until a whole line (its newline written) matches
        `pattern` (a regex); returns the match. Fails if eacgm exits or stays
        silent for `timeout` s first."""
        fd, deadline = self.proc.stderr.fileno(), time.monotonic() + timeout
        seen = len(self._stderr)
        while True:
            whole = self._stderr[:self._stderr.rfind("\n") + 1]
            m = re.compile(pattern, re.M).search(whole, max(0, self._stderr.rfind("\n", 0, seen) + 1))
            if m:
                return m
            left = deadline - time.monotonic()
            readable = select.select([fd], [], [], left)[0] if left > 0 else []
            chunk = os.read(fd, 65536) if readable else b""
            if not chunk:  # eacgm exited, or the deadline passed
                err = self.kill()
                raise AssertionError("eacgm record never printed /%s/ (exit %s): %s" %
                                     (pattern, self.proc.returncode, (self._stderr + err)[-3000:]))
            self._stderr += chunk.decode(errors="replace")

    def kill(self):
        return kill_session(self.proc)

    def ready(self):
        """The ready file: eacgm's pid, probes, processes, mono_ns (CLOCK_MONOTONIC) and output."""
        with open(self.ready_file) as f:
            return json.load(f)

    def wait(self, timeout=300):
        """Waits for eacgm to exit; returns the Recording."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        trace = self.db[:-3] + ".trace.json"
        return Recording(self.pid, self.proc.returncode, out, self._stderr + err, self.db, trace)


def start_record(tmp, *options, name="r", env=None, timeout=60.0):
    """Starts `eacgm record -o tmp/name.db --ready-file tmp/name.ready OPTIONS` (-p PID, or
    -- COMMAND; the trace JSON, as record() has it) and returns a Started once eacgm has printed its ready line (every probe
    attached): a wait on eacgm's own signal, not a guess."""
    db = os.path.join(tmp, name + ".db")
    ready = os.path.join(tmp, name + ".ready")
    p = subprocess.Popen([EACGM, "record", "-o", db, "--ready-file", ready, *json_trace(options, db)],
                         stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=dict(os.environ, **(env or {})),
                         start_new_session=True)  # kill_session ends it, whatever is left
    started = Started(p, db, ready)
    started.wait_for_line(READY_LINE.pattern, timeout)
    return started


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def wait_child_exec(pid, name, timeout=15.0):
    """Waits until a child of pid runs `name` (eacgm releases its command only
    after its signal handlers are installed); returns the child's pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in children(pid):
            if comm(c) == name:
                return c
        time.sleep(0.02)
    raise AssertionError("no child of %d ran %s within %.0f s" % (pid, name, timeout))


def wait_for_text(path, pattern, proc, timeout=60.0):
    """Waits until the file at `path` (where eacgm's stderr goes) holds a whole
    line (its newline written) matching `pattern`; fails if `proc` exits or
    `timeout` s pass first. A line still being written is not yet said."""
    deadline, rx = time.monotonic() + timeout, re.compile(pattern, re.M)
    while True:
        with open(path, errors="replace") as f:
            text = f.read()
        if rx.search(text[:text.rfind("\n") + 1]):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError("eacgm never printed /%s/ (exit %s): %s" % (pattern, proc.poll(), text[-3000:]))
        time.sleep(0.02)


def kill_group(pgid):
    """Kills what is left of a process group this test started (start_new_session)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
