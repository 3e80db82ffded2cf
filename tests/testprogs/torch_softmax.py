# SPDX-License-Identifier: Apache-2.0
"""A short CPU training run in which one short operator, softmax or
log_softmax, is many times slower on known steps: the cases `eacgm detect`
must judge from a function's first calls (tests/e2e/test_detect.py,
DetectSlowSoftmax and DetectSlowLogSoftmax: 6 to 15x, and under the 100 us
floor detect once had, on the AMD VMs).

Usage: torch_softmax.py STEPS SLOW_STEPS [FACTOR [OP]]
  STEPS       training steps
  SLOW_STEPS  comma-separated step numbers (0-based) whose operator is slowed
  FACTOR      how many times more rows the slowed operator works on (default 100)
  OP          softmax (default) or log_softmax

Model: Linear(64, 64) - OP - Linear(64, 64), batch 16, MSE loss, SGD.
The fault is injected through the workload's own code, as a fault injector
hooks a model: OP is an autograd Function, on every step, whose forward
copies the batch into the first 16 rows of a buffer of FACTOR x 16 rows and
runs OP over the buffer's first 16 rows, or on a slowed step over all of
them (the rows are independent: the batch's rows come out the same), and
whose backward is the one OP has (its _backward_data on the batch). A
slowed step makes the same Python and traced calls as a normal one; only
the rows differ. OP runs twice over the whole buffer before training (the
function's warm-up calls for detect).

Prints, on stdout, for every step "step N T0 T1", for its call of OP
"slow N T0 T1" (a slowed step) or "op N T0 T1", for each of its two
Linear layers' forward "linear N T0 T1", and for the step's four parts,
one after the other, "forward", "loss", "backward" and "optim" N T0 T1
(zero_grad and the model's forward, the loss, its backward, the
optimizer's step): CLOCK_MONOTONIC nanoseconds, eacgm's clock (what the
program measured around the traced calls; every traced call of a step
lies in one of its parts)."""
import ctypes
import sys
import time

import torch

# The heap paged in once, before anything is traced that matters: glibc
# keeps what is freed (no trim, no mmap'd blocks) and 16 MiB are touched
# and freed. Without it the first slowed call took 24 first-touch page
# faults, 60 to 100 us on the AMD VMs, 2 to 3 times what the later ones
# took: a slowdown of the VM's paging, not of the operator.
LIBC = ctypes.CDLL("libc.so.6")
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
assert LIBC.mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 and LIBC.mallopt(M_MMAP_THRESHOLD, 1 << 30) == 1
heap = torch.ones(1 << 22)  # 16 MiB, every page written
del heap

steps = int(sys.argv[1])
slow = {int(s) for s in sys.argv[2].split(",") if s}
factor = int(sys.argv[3]) if len(sys.argv) > 3 else 100
op = sys.argv[4] if len(sys.argv) > 4 else "softmax"
forward, backward = {"softmax": (torch.softmax, torch._softmax_backward_data),
                     "log_softmax": (torch.log_softmax, torch._log_softmax_backward_data)}[op]
BATCH, WIDTH = 16, 64
torch.manual_seed(0)
torch.set_num_threads(1)
BUFFER = torch.zeros(BATCH * factor, WIDTH)
BUFFER.fill_(1)
for _ in range(2):  # before training, of the size the slowed ones have (detect's warm-up)
    forward(BUFFER, dim=-1)
windows, linears = [], []  # OP's calls, the Linear layers' (forward)


class Op(torch.autograd.Function):
    """OP, the same Python and traced calls on every step: the batch copied
    into the buffer's first rows, OP over the buffer's first `rows` rows.
    A slowed step differs only in how many rows that is (a step taking
    another Python path came 250 us late on this VM, and detect rightly
    took the slowed call that late for a stall)."""

    @staticmethod
    def forward(ctx, h, rows):
        BUFFER[:BATCH].copy_(h)
        t0 = time.monotonic_ns()
        y = forward(BUFFER[:rows], dim=-1)[:BATCH]
        windows.append((t0, time.monotonic_ns()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return backward(grad, y, -1, y.dtype), None


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(WIDTH, WIDTH)
        self.b = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x, step):
        t0 = time.monotonic_ns()
        h = self.a(x)
        linears.append((t0, time.monotonic_ns()))
        p = Op.apply(h, BATCH * factor if step in slow else BATCH)
        t0 = time.monotonic_ns()
        y = self.b(p)
        linears.append((t0, time.monotonic_ns()))
        return y


model = Model()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
for step in range(steps):
    t = [time.monotonic_ns()]
    opt.zero_grad()
    out = model(x, step)
    t.append(time.monotonic_ns())
    loss = torch.nn.functional.mse_loss(out, y)
    t.append(time.monotonic_ns())
    loss.backward()
    t.append(time.monotonic_ns())
    opt.step()
    t.append(time.monotonic_ns())
    print("step", step, t[0], t[-1])
    print("slow" if step in slow else "op", step, *windows[-1])
    for w in linears[-2:]:
        print("linear", step, *w)
    for name, t0, t1 in zip(("forward", "loss", "backward", "optim"), t, t[1:]):
        print(name, step, t0, t1)
