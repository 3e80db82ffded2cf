"""A short CPU training run in which one short operator, log_softmax, is
6 to 15 times slower on known steps, yet under 100 us longer: the case a
fixed floor in microseconds hid (tests/e2e/test_detect.py,
DetectSlowLogSoftmax).

Usage: torch_log_softmax.py STEPS SLOW_STEPS [FACTOR]
  STEPS       training steps
  SLOW_STEPS  comma-separated step numbers (0-based) whose log_softmax is slowed
  FACTOR      how many times more rows the slowed log_softmax works on (default 24)

Model: Linear(64, 64) - log_softmax - Linear(64, 64), batch 16, MSE loss,
SGD. The fault is injected through the workload's own code, as a fault
injector hooks a model: on a slowed step the log_softmax is an autograd
Function whose forward runs torch's log_softmax over a buffer of FACTOR x
16 rows holding the batch in its first 16 (rows are independent: the
batch's rows come out the same) and whose backward is the one
log_softmax has (torch._log_softmax_backward_data on the batch).

Prints, on stdout, for every step "step N T0 T1" and for every slowed
log_softmax "slow N T0 T1": CLOCK_MONOTONIC nanoseconds, eacgm's clock."""
import sys
import time

import torch

steps = int(sys.argv[1])
slow = {int(s) for s in sys.argv[2].split(",") if s}
factor = int(sys.argv[3]) if len(sys.argv) > 3 else 24
BATCH, WIDTH = 16, 64
torch.manual_seed(0)
torch.set_num_threads(1)
BUFFER = torch.zeros(BATCH * factor, WIDTH)
# Memory for the buffer and for a slowed call's output, touched before
# training (glibc gives the freed block back to the next call that size):
# the first slowed call pays no page faults the others do not.
BUFFER.fill_(1)
torch.ones_like(BUFFER)
windows = []


class SlowLogSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        BUFFER[:BATCH].copy_(h)
        t0 = time.monotonic_ns()
        y = torch.log_softmax(BUFFER, dim=-1)[:BATCH]
        windows.append((t0, time.monotonic_ns()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return torch._log_softmax_backward_data(grad, y, -1, y.dtype)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(WIDTH, WIDTH)
        self.b = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x, step):
        h = self.a(x)
        return self.b(SlowLogSoftmax.apply(h) if step in slow else torch.log_softmax(h, dim=-1))


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
