# SPDX-License-Identifier: Apache-2.0
"""eacgm doctor on this machine: every required check passes, the span engine's
live self-test runs, and the libraries and Pythons it reports are the real ones."""
import unittest

import eacgm_e2e as E


class Doctor(unittest.TestCase):
    def test_doctor(self):
        E.require_root()
        r = E.eacgm("doctor")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        out = r.stdout
        self.assertIn("[ok  ] span engine self-test: uprobe + uretprobe on a function of eacgm: 3 calls, 3 spans", out)
        self.assertIn("[ok  ] BTF", out)
        self.assertRegex(out, r"\[ok  \] cuda libcudart\.so\*: \S*libcudart\.so\.13 \(15/15 functions\)")
        self.assertRegex(out, r"\[ok  \] nccl libnccl\.so\*: \S*libnccl\.so\.2 \(17/17 functions\)")
        # Debian 12's torch 1.13: the default patterns find 231 entry points (226 operators and
        # collectives, ProcessGroupGloo's gather and scatter, which only its own probes name, and
        # the 3 waits: c10d::Work, gloo's SendWork and RecvWork).
        self.assertRegex(out, r"\[ok  \] torch libtorch_cpu\.so\*: \S*libtorch_cpu\.so\.1\.13\.0 \(231 by pattern\)")
        self.assertIn("[ok  ] python 3.12: /root/.pyenv/versions/3.12.1/bin/python3.12: frames readable", out)
        self.assertIn("[--  ] python 3.7: /root/.pyenv/versions/3.7.16/bin/python3.7: no frame layout, not traced", out)
        self.assertTrue(out.rstrip().endswith("all required checks passed"), out)


if __name__ == "__main__":
    unittest.main()
