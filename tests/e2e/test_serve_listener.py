# SPDX-License-Identifier: Apache-2.0
"""eacgm serve's HTTP listener: ready only when the probes are (a program
started the moment /healthz first says ok is counted exactly), and held by
no client (half-sent requests, huge headers): a scrape is still answered at
once, with the agent's threads and memory bounded."""
import collections
import http.client
import os
import re
import socket
import subprocess
import time
import unittest

import eacgm_e2e as E
import test_serve as S


def ask(port, path, timeout=5):
    """(status, body) of GET path; None when nothing listens yet."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    except ConnectionRefusedError:
        return None
    finally:
        conn.close()


def calls_counted(port):
    status, text = ask(port, "/metrics")
    assert status == 200, status
    return sum(v for (n, _l), v in S.parse_metrics(text).items() if n == "eacgm_calls_total")


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


class ReadyMeansReady(unittest.TestCase):
    def test_a_program_started_at_the_first_ok_is_counted_exactly(self):
        E.require_root()
        tmp = E.make_tempdir(self)
        prog, tag = S.cuda_copy(tmp, "er")
        cfg = os.path.join(tmp, "eacgm.toml")
        with open(cfg, "w") as f:
            f.write('layers = ["cuda"]\ndetect = false\nstore = ""\n[filter]\ncomm = ["%s"]\n' % tag)
        port = S.free_port()
        err_path = os.path.join(tmp, "serve.err")
        with open(err_path, "w") as err:
            agent = subprocess.Popen([E.EACGM, "serve", "--config", cfg, "--listen", "127.0.0.1:%d" % port],
                                     stdout=subprocess.DEVNULL, stderr=err)
        self.addCleanup(lambda: agent.poll() is None and agent.kill())
        # Both endpoints asked in turn, as fast as they answer: what they
        # say goes nothing -> 503 "starting" -> 200, and never back.
        order = {None: 0, 503: 1, 200: 2}
        said, last = collections.Counter(), 0
        deadline = time.monotonic() + 60
        while True:
            self.assertIsNone(agent.poll(), "the agent exited")
            self.assertLess(time.monotonic(), deadline, "never ready: %s" % dict(said))
            health, metrics = ask(port, "/healthz"), ask(port, "/metrics")
            for path, got in (("/healthz", health), ("/metrics", metrics)):
                status = got and got[0]
                self.assertIn(status, order, got)
                if status == 503:
                    self.assertEqual(got[1], "starting: the probes are not attached yet\n")
                said[(path, status)] += 1
            # /metrics asked after /healthz: it may be ready already, not the other way round.
            self.assertGreaterEqual(order[metrics and metrics[0]], order[health and health[0]], said)
            self.assertGreaterEqual(order[health and health[0]], last, said)
            last = order[health and health[0]]
            if health == (200, "ok\n"):
                break
        r = E.run([prog, "0"])  # the moment the agent first said ok
        self.assertEqual(r.returncode, 0, r.stderr)
        E.wait_for_text(err_path, S.SERVING, agent)  # the line comes with the ready state
        deadline = time.monotonic() + 60
        while calls_counted(port) != S.PER_RUN:
            self.assertLess(time.monotonic(), deadline, "counted %d of %d calls" % (calls_counted(port), S.PER_RUN))
            time.sleep(0.05)
        print("\n  before ok: %s" % dict(said))
        agent.terminate()
        self.assertEqual(agent.wait(timeout=30), 0)


class NoClientHoldsTheListener(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        E.require_root()
        cls.tmp = E.make_tempdir(cls)
        cls.agent = S.Agent(cls.tmp, 'layers = ["cuda"]\ndetect = false\nstore = ""\n')
        cls.addClassCleanup(lambda: cls.agent.proc.poll() is None and cls.agent.proc.kill())
        cls.pid = cls.agent.proc.pid
        # The threads are counted once the agent's start-up work is done: its
        # overhead budget times a probe hit once, after its warm-up, on a
        # thread of its own (and the probe's detach on more); the gauge it
        # sets says that work is over (the CI of 0c8db0f counted them).
        cls.agent.wait_until("the probe hit's trap timed",
                             lambda m: any(k[0] == "eacgm_agent_probe_hit_trap_seconds" for k in m))

    def threads(self):
        return len(os.listdir("/proc/%d/task" % self.pid))

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.agent.port), timeout=10)
        self.addCleanup(s.close)
        return s

    def timed_scrape(self):
        t = time.monotonic()
        status, text = ask(self.agent.port, "/metrics", timeout=10)
        return status, time.monotonic() - t

    def test_fifty_half_sent_requests(self):
        threads, rss = self.threads(), rss_kb(self.pid)
        held = [self.connect() for _ in range(50)]
        for s in held:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Never-Ends: ")
        status, took = self.timed_scrape()
        self.assertEqual(status, 200)
        self.assertLess(took, 1.0)
        # Each connection still open (nothing answered them: their requests never ended).
        for s in held:
            s.setblocking(False)
            with self.assertRaises(BlockingIOError):
                s.recv(1)
        # No thread added for them.
        self.assertLessEqual(self.threads(), threads)
        self.assertLess(rss_kb(self.pid) - rss, 8 * 1024)

    def test_huge_headers_are_refused_and_not_kept(self):
        rss = rss_kb(self.pid)
        s = self.connect()
        header = b"X-Big: " + b"a" * 4096 + b"\r\n"
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        try:
            for _ in range(256):  # a megabyte of headers, or until the agent stops reading
                s.sendall(header)
        except (BrokenPipeError, ConnectionResetError):
            pass
        reply = b""
        try:
            while chunk := s.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
        # Answered 431 (or cut off): never a 200 with the metrics read.
        self.assertNotIn(b" 200 ", reply.split(b"\r\n", 1)[0])
        if reply:
            self.assertRegex(reply.split(b"\r\n", 1)[0].decode(), r"^HTTP/1\.1 (431|413|400) ")
        status, took = self.timed_scrape()
        self.assertEqual(status, 200)
        self.assertLess(took, 1.0)
        self.assertLess(rss_kb(self.pid) - rss, 8 * 1024)

    def test_a_silent_connection_is_closed_when_idle(self):
        s = self.connect()
        t = time.monotonic()
        s.settimeout(60)
        self.assertEqual(s.recv(1), b"")  # the agent closed it: its idle limit, 10 s
        self.assertGreater(time.monotonic() - t, 5)


if __name__ == "__main__":
    unittest.main()
