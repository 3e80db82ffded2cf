# SPDX-License-Identifier: Apache-2.0
"""The Debian package as an operator meets it: built by CPack from this build
(what `make deb` makes), lintian-clean, installed with apt-get, used (doctor,
a recording of a real torch program, the SQLite extension, the agent on its
default configuration), then purged, whatever happened meanwhile, and no file
of it left behind, /etc/eacgm and /var/lib/eacgm included.

The install, use and purge run in a throwaway root: a copy-on-write view of
this machine's own (an overlay over /, its writes on a tmpfs, in a mount and
network namespace of its own, chroot'ed into), so the test neither depends on
nor changes the host's state: an eacgm package installed here, or the
/var/lib/eacgm a `sudo eacgm serve` leaves, are put aside in the view only,
and the host's dpkg database and those paths are checked unchanged after.

ctest sets BUILD_DIR, CPACK and SOURCE_DIR (tests/CMakeLists.txt). It needs
root (apt-get, mounts)."""
import json
import os
import signal
import sqlite3
import subprocess
import tempfile
import time
import unittest
import urllib.request

BUILD_DIR = os.environ["BUILD_DIR"]
CPACK = os.environ.get("CPACK", "cpack")
SOURCE_DIR = os.environ["SOURCE_DIR"]
TRAIN = os.path.join(SOURCE_DIR, "tests", "testprogs", "torch_train.py")
LAYERS, STEPS = 2, 3  # torch_train.py: STEPS * (2 * LAYERS - 1) aten::mm calls, STEPS aten::mse_loss
EACGM = "/usr/bin/eacgm"  # the installed binary, never the build's
# Paths the package owns as directories; gone after a purge.
OWN_DIRS = ["/etc/eacgm", "/var/lib/eacgm", "/usr/share/eacgm", "/usr/lib/eacgm", "/usr/share/doc/eacgm"]
APT_ENV = dict(os.environ, DEBIAN_FRONTEND="noninteractive")


class Interrupted(Exception):
    """SIGTERM or SIGHUP (ctest's timeout, a closed terminal): unwinds to the purge."""


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=kw.pop("timeout", 300), **kw)


def package_status():
    r = run(["dpkg-query", "-W", "-f=${Status}", "eacgm"])
    return r.stdout.strip() if r.returncode == 0 else "not known to dpkg"


def build_version():
    cache = os.path.join(BUILD_DIR, "CPackConfig.cmake")
    with open(cache) as f:
        for line in f:
            if line.startswith('set(CPACK_PACKAGE_VERSION "'):
                return line.split('"')[1]
    raise AssertionError("no CPACK_PACKAGE_VERSION in " + cache)


# Set in the throwaway root (its tmpfs's path): the test's inner half runs there.
INSIDE = os.environ.get("EACGM_DEB_THROWAWAY_ROOT")

# Makes the throwaway root at $1 (an empty directory) and runs the rest of
# the arguments chroot'ed into it: a tmpfs for the overlay's writes, the
# overlay over / (one file system here; /proc, /sys and /dev bound in), an
# empty /run (no init system to ask: the maintainer scripts leave the host's
# services alone), the loopback up for the agent's listener.
THROWAWAY_ROOT = r"""
set -e
t=$1; shift
mount -t tmpfs eacgm-deb-root "$t"
mkdir "$t/upper" "$t/work" "$t/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$t/upper,workdir=$t/work" "$t/root"
for d in proc sys dev; do mount --rbind "/$d" "$t/root/$d"; done
mount -t tmpfs eacgm-deb-run "$t/root/run"
ip link set lo up
exec chroot "$t/root" "$@"
"""


def root_is_overlay():
    """Whether / is an overlay (the throwaway root), from this process's mount table."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == "/":
                return fields[fields.index("-") + 1] == "overlay"
    return False


def host_state():
    """What the test must leave as it found it."""
    return package_status(), {d: os.path.lexists(d) for d in OWN_DIRS}


class DebianPackage(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        if os.geteuid() != 0:
            raise unittest.SkipTest("installing a package needs root (apt-get)")
        self.version = build_version()
        arch = run(["dpkg", "--print-architecture"]).stdout.strip()
        if INSIDE:
            self.tmp = os.environ["EACGM_DEB_TMP"]
        else:
            self.tmp = tempfile.mkdtemp(prefix="eacgm-deb-")
            self.addCleanup(subprocess.run, ["rm", "-rf", self.tmp])
        self.deb = os.path.join(self.tmp, "eacgm_%s_%s.deb" % (self.version, arch))

    def test_build_install_use_purge(self):
        if INSIDE:
            return self.install_use_purge()
        before = host_state()
        self.build_and_lint()
        root = os.path.join(self.tmp, "root")
        os.mkdir(root)
        env = dict(os.environ, EACGM_DEB_THROWAWAY_ROOT=root, EACGM_DEB_TMP=self.tmp)
        r = run(["unshare", "--mount", "--net", "--propagation", "private", "sh", "-c", THROWAWAY_ROOT, "sh", root,
                 "/usr/bin/python3", os.path.abspath(__file__), "-v"], env=env, cwd="/", timeout=800)
        print(r.stderr, end="")
        self.assertEqual(r.returncode, 0, "in the throwaway root:\n" + r.stdout + r.stderr)
        self.assertRegex(r.stderr, r"\nOK\n")
        self.assertEqual(host_state(), before, "the host's dpkg status and eacgm paths changed")

    def put_aside_the_hosts_eacgm(self):
        """In the throwaway root only: a package installed on the host, or
        the paths an earlier agent left, would be purged below."""
        self.assertTrue(root_is_overlay(), "not in the throwaway root: refusing to put anything aside")
        if "installed" in package_status().replace("not-installed", ""):
            r = run(["dpkg", "--purge", "eacgm"], env=APT_ENV)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for d in OWN_DIRS:
            run(["rm", "-rf", d])

    def install_use_purge(self):
        self.put_aside_the_hosts_eacgm()
        old = {s: signal.signal(s, self._interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
        files = []
        try:
            r = run(["apt-get", "install", "-y", "--no-install-recommends", self.deb], env=APT_ENV)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            files = run(["dpkg-query", "-L", "eacgm"]).stdout.split()
            self.check_installed(files)
            self.check_doctor()
            self.check_record()
            self.check_agent()
        finally:
            purge = run(["apt-get", "purge", "-y", "eacgm"], env=APT_ENV)
            for s, h in old.items():
                signal.signal(s, h)
        self.assertEqual(purge.returncode, 0, purge.stdout + purge.stderr)
        self.assertEqual(package_status(), "not known to dpkg")
        left = [f for f in files if "eacgm" in f and os.path.lexists(f)]
        left += [d for d in OWN_DIRS if os.path.lexists(d) and d not in left]
        self.assertEqual(left, [], "left behind by the purge")

    def _interrupt(self, sig, frame):
        raise Interrupted(signal.Signals(sig).name)

    def build_and_lint(self):
        r = run([CPACK, "--config", os.path.join(BUILD_DIR, "CPackConfig.cmake"), "-B", self.tmp], timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(os.path.exists(self.deb), "cpack wrote no %s:\n%s" % (self.deb, r.stdout))
        # Errors and warnings alike; lintian's remark about running as root is
        # on stderr and no tag.
        r = run(["lintian", "--fail-on", "error,warning", self.deb])
        self.assertEqual(r.returncode, 0, "lintian:\n" + r.stdout + r.stderr)
        self.assertEqual(r.stdout.strip(), "", "lintian tags:\n" + r.stdout)

    def check_installed(self, files):
        for f in ["/usr/bin/eacgm", "/usr/lib/eacgm/eacgm_sql.so", "/etc/eacgm/eacgm.toml",
                  "/lib/systemd/system/eacgm.service", "/usr/share/eacgm/dashboards/eacgm.json",
                  "/usr/share/eacgm/prometheus/eacgm-alerts.yml", "/usr/share/man/man1/eacgm.1.gz",
                  "/usr/share/doc/eacgm/copyright"] + \
                ["/usr/share/eacgm/specs/%s.json" % s for s in ("cuda", "nccl", "gloo", "torch", "python")]:
            self.assertIn(f, files)
        r = run([EACGM, "--version"])
        self.assertEqual((r.returncode, r.stdout.strip()), (0, self.version), r.stderr)
        with open("/lib/systemd/system/eacgm.service") as f:
            self.assertIn("\nExecStart=/usr/bin/eacgm serve --config /etc/eacgm/eacgm.toml\n", f.read())
        r = run(["dpkg-query", "-W", "-f=${Conffiles}", "eacgm"])
        self.assertEqual(r.stdout.split()[0], "/etc/eacgm/eacgm.toml", r.stdout)

    def check_doctor(self):
        r = run([EACGM, "doctor"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # The installed specs, not the source tree's the build knows of.
        self.assertIn("[ok  ] built-in specs: /usr/share/eacgm/specs\n", r.stdout)

    def check_record(self):
        db = os.path.join(self.tmp, "train.db")
        r = run([EACGM, "record", "-o", db, "--layers", "torch", "--", "/usr/bin/python3", TRAIN,
                 str(LAYERS), str(STEPS)])
        self.assertEqual(r.returncode, 0, r.stderr)
        query = "SELECT name, count(*) AS n FROM spans WHERE name IN ('aten::mm', 'aten::mse_loss') GROUP BY name"
        want = [["aten::mm", STEPS * (2 * LAYERS - 1)], ["aten::mse_loss", STEPS]]
        r = run([EACGM, "sql", db, query + " ORDER BY name", "--format", "json"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([[row["name"], row["n"]] for row in map(json.loads, r.stdout.splitlines())], want)
        # The same rows through the installed SQLite extension (Python's sqlite3).
        con = sqlite3.connect(db)
        con.enable_load_extension(True)
        con.load_extension("/usr/lib/eacgm/eacgm_sql")
        self.assertEqual([list(row) for row in con.execute(query + " ORDER BY name")], want)
        con.close()

    def check_agent(self):
        """The agent on the packaged configuration (every key at its default):
        it serves, and writes its store in /var/lib/eacgm, which the purge
        must remove."""
        ready = os.path.join(self.tmp, "up.json")
        p = subprocess.Popen([EACGM, "serve", "--listen", "127.0.0.1:0", "--ready-file", ready],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while not os.path.exists(ready) and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)  # polls eacgm's ready file; orders nothing by time
            self.assertTrue(os.path.exists(ready), "serve wrote no ready file (rc %s)" % p.poll())
            with open(ready) as f:
                port = json.load(f)["port"]
            with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=30) as resp:
                self.assertEqual(resp.read().decode().strip(), "ok")
        finally:
            p.send_signal(signal.SIGTERM)
            out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertTrue(os.path.isfile("/var/lib/eacgm/eacgm.db"), err)


if __name__ == "__main__":
    unittest.main()
