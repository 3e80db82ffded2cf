"""A short CPU training run in which one operator, softmax, is about 30x
slower on known steps: the case `eacgm detect` must judge from a
function's first calls (tests/e2e/test_detect.py, DetectSlowSoftmax).

Usage: torch_softmax.py STEPS SLOW_STEPS [FACTOR]
  STEPS       training steps
  SLOW_STEPS  comma-separated step numbers (0-based) whose softmax is slowed
  FACTOR      how many times more rows the slowed softmax works on (default 100)

Model: Linear(64, 64) - softmax - Linear(64, 64), batch 16, MSE loss, SGD.
The fault is injected through the workload's own code, as a fault injector
hooks a model: on a slowed step the softmax is an autograd Function whose
forward runs torch.softmax over a buffer of FACTOR x 16 rows holding the
batch in its first 16 (the rows are independent: the batch's rows come out
the same) and whose backward is the one torch.softmax has
(torch._softmax_backward_data on the batch). A slowed step makes the same
traced calls as a normal one, plus one aten::copy_ into the buffer.

Prints, on stdout, for every step "step N T0 T1" and for every slowed
softmax "slow N T0 T1": CLOCK_MONOTONIC nanoseconds, eacgm's clock."""
import sys
import time

import torch

steps = int(sys.argv[1])
slow = {int(s) for s in sys.argv[2].split(",") if s}
factor = int(sys.argv[3]) if len(sys.argv) > 3 else 100
BATCH, WIDTH = 16, 64
torch.manual_seed(0)
torch.set_num_threads(1)
BUFFER = torch.zeros(BATCH * factor, WIDTH)
windows = []


class SlowSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        BUFFER[:BATCH].copy_(h)
        t0 = time.monotonic_ns()
        y = torch.softmax(BUFFER, dim=-1)[:BATCH]
        windows.append((t0, time.monotonic_ns()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return torch._softmax_backward_data(grad, y, -1, y.dtype)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(WIDTH, WIDTH)
        self.b = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x, step):
        h = self.a(x)
        p = SlowSoftmax.apply(h) if step in slow else torch.softmax(h, dim=-1)
        return self.b(p)


model = Model()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
for step in range(steps):
    t0 = time.monotonic_ns()
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x, step), y).backward()
    opt.step()
    print("step", step, t0, time.monotonic_ns())
    if step in slow:
        print("slow", step, *windows[-1])
