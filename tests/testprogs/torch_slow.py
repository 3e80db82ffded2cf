# SPDX-License-Identifier: Apache-2.0
"""A small CPU training run in which one operator is slowed on known steps:
the ground truth of the detector's end-to-end test (tests/e2e/test_detect.py).

Usage: torch_slow.py STEPS SLOW_STEPS [FACTOR]
  STEPS       training steps
  SLOW_STEPS  comma-separated step numbers (0-based) on which layer 1's
              forward matmul (aten::mm) is slowed
  FACTOR      how much wider the slowed matmul's inner dimension is (default 4096)

Model: Linear(32, 32) - ReLU - SlowLinear(32, 32) - ReLU - Linear(32, 32), batch 8,
MSE loss, SGD. SlowLinear is an autograd Function whose forward calls
torch.mm on the same line every step; on a slowed step its operands are
zero-padded along the inner dimension (FACTOR x 32 wide), which gives the
same product (the padding is zeros) but takes FACTOR times the work. The
padding is written into preallocated buffers, so a slowed step makes the
same traced calls from the same call sites as a normal one, plus two
aten::copy_. Backward is the normal one (two small mm).

Prints, on stdout, for every step "step N T0 T1" and for every slowed
matmul "slow N T0 T1": CLOCK_MONOTONIC nanoseconds, eacgm's clock."""
import sys
import time

import torch

steps = int(sys.argv[1])
slow = {int(s) for s in sys.argv[2].split(",") if s}
factor = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
WIDTH, BATCH = 32, 8
torch.manual_seed(0)
torch.set_num_threads(1)
XB = torch.zeros(BATCH, WIDTH * factor)
WB = torch.zeros(WIDTH, WIDTH * factor)
slow_windows = []


class SlowLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, step):
        ctx.save_for_backward(x, w)
        a, m = x, w
        if step in slow:
            XB[:, :WIDTH].copy_(x)
            WB[:, :WIDTH].copy_(w)
            a, m = XB, WB
        t0 = time.monotonic_ns()
        out = torch.mm(a, m.t())
        t1 = time.monotonic_ns()
        if step in slow:
            slow_windows.append((step, t0, t1))
        return out + b

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return torch.mm(grad, w), torch.mm(grad.t(), x), grad.sum(0), None


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l0 = torch.nn.Linear(WIDTH, WIDTH)
        self.w1 = torch.nn.Parameter(torch.randn(WIDTH, WIDTH) / WIDTH ** 0.5)
        self.b1 = torch.nn.Parameter(torch.zeros(WIDTH))
        self.l2 = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x, step):
        h = torch.relu(self.l0(x))
        h = torch.relu(SlowLinear.apply(h, self.w1, self.b1, step))
        return self.l2(h)


model = Model()
opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=False)
x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
windows = []
for step in range(steps):
    t0 = time.monotonic_ns()
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x, step), y)
    loss.backward()
    opt.step()
    windows.append((step, t0, time.monotonic_ns()))
for w in windows:
    print("step %d %d %d" % w)
for w in slow_windows:
    print("slow %d %d %d" % w)
print("torch_slow: %d steps, %d slowed, loss %.4f" % (steps, len(slow_windows), loss.item()))
