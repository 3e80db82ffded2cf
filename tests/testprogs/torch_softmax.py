"""A short CPU training run in which one short operator, softmax or
log_softmax, is many times slower on known steps: the cases `eacgm detect`
must judge from a function's first calls (tests/e2e/test_detect.py,
DetectSlowSoftmax and DetectSlowLogSoftmax: 10x and 57 us longer on the AMD
VMs, under the 100 us floor detect once had).

Usage: torch_softmax.py STEPS SLOW_STEPS [FACTOR [OP]]
  STEPS       training steps
  SLOW_STEPS  comma-separated step numbers (0-based) whose operator is slowed
  FACTOR      how many times more rows the slowed operator works on (default 100)
  OP          softmax (default) or log_softmax

Model: Linear(64, 64) - OP - Linear(64, 64), batch 16, MSE loss, SGD.
The fault is injected through the workload's own code, as a fault injector
hooks a model: on a slowed step OP is an autograd Function whose forward
runs it over a buffer of FACTOR x 16 rows holding the batch in its first 16
(the rows are independent: the batch's rows come out the same) and whose
backward is the one OP has (its _backward_data on the batch). A slowed step
makes the same traced calls as a normal one, plus one aten::copy_ into the
buffer. OP runs once over the buffer before training (its memory touched,
glibc giving the freed block back to the next call that size): the first
slowed call paid 2 to 10 times what the others did without it.

Prints, on stdout, for every step "step N T0 T1" and for every slowed
call "slow N T0 T1": CLOCK_MONOTONIC nanoseconds, eacgm's clock."""
import sys
import time

import torch

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
forward(BUFFER, dim=-1)  # one call before training, of the size the slowed ones have
windows = []


class SlowOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        BUFFER[:BATCH].copy_(h)
        t0 = time.monotonic_ns()
        y = forward(BUFFER, dim=-1)[:BATCH]
        windows.append((t0, time.monotonic_ns()))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return backward(grad, y, -1, y.dtype)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(WIDTH, WIDTH)
        self.b = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x, step):
        h = self.a(x)
        p = SlowOp.apply(h) if step in slow else forward(h, dim=-1)
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
