# SPDX-License-Identifier: Apache-2.0
"""torch_train.py, run once a line arrives on stdin: the caller learns the
interpreter has imported torch ("imported" on stdout) and lets it train when
its tracer says it is ready. Usage: torch_gated.py LAYERS STEPS."""
import os
import runpy
import sys

import torch  # noqa: F401  (loaded before the gate: what the tracer must see first)

print("imported", flush=True)
sys.stdin.readline()
sys.argv = [os.path.join(os.path.dirname(__file__), "torch_train.py")] + sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
