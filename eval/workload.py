# SPDX-License-Identifier: Apache-2.0
"""The evaluation's training job: a small GPT-style transformer or
torchvision's ResNet-18 trained on the CPU with Debian's PyTorch, alone or
data-parallel over gloo (DistributedDataParallel), with faults injected at
known steps through the job's own hooks, each measured where it happens.

Usage: workload.py OUT --model gpt|resnet --steps N [--fault KIND:STEPS]...
                   [--rank R --world W --store PATH] [--fault-rank R]

Faults (STEPS: comma-separated steps and ranges, 0-based, e.g. 40,52-55):
  op         an operator slowed, as a fault injector hooking the model would:
             GPT: the first attention block's softmax runs over a buffer
             --factor times the batch (an autograd Function whose backward is
             the usual one); ResNet-18: the classifier's linear layer runs on
             the batch repeated --factor times. The same traced calls are made,
             one of them slower.
  py         the data pipeline's Python function `encode` (called through
             map(), from C) spins for --py-ms more in pure Python.
  cpu        CPU contention: stress-ng, one CPU hog per CPU the job may run
             on (pinned to them), for the steps given.
  net        network delay and loss on this rank's link: an iptables rule
             sends its TCP packets to NFQUEUE --queue, where a user-space
             shim (tests/testprogs/host_netem.py, started by the caller in
             this network namespace) holds each one and drops some.
  straggle   this rank computes --straggle-ms more (pure Python) before the
             step's backward, so the other ranks wait in the all-reduce.
With --fault-rank R a fault applies on rank R only (default: every rank).

Each step's data is built by `encode` (map over the batch's texts) and the
step is timed (CLOCK_MONOTONIC, the clock of eacgm's spans). OUT gets one
JSON line per step {"step", "t0", "t1", "rank", "pid"} and per injected fault {"fault",
"step", "t0", "t1", "rank", "pid"}: t0..t1 is the injected work itself (the
slowed operator call, the spin) or the window the fault was in force (cpu,
net). The first --warmup steps are not faulted."""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist
from torch.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench", "workloads"))
import gpt_train  # noqa: E402  (the benchmark's GPT, shared)

KINDS = ("op", "py", "cpu", "net", "straggle")


def steps_of(spec):
    out = set()
    for part in spec.split(","):
        if "-" in part:
            a, b = part.split("-")
            out.update(range(int(a), int(b) + 1))
        elif part:
            out.add(int(part))
    return out


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--model", choices=("gpt", "resnet"), default="gpt")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5, help="first steps, never faulted")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--fault", action="append", default=[], metavar="KIND:STEPS")
    p.add_argument("--fault-rank", type=int, default=-1)
    p.add_argument("--factor", type=int, default=30, help="op: how many times the batch the slowed operator sees")
    p.add_argument("--py-ms", type=float, default=2.0)
    p.add_argument("--straggle-ms", type=float, default=1000.0)
    p.add_argument("--queue", type=int, default=7, help="net: the NFQUEUE number of the shim")
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--store")
    a = p.parse_args()
    a.faults = {}
    for f in a.fault:
        kind, _, spec = f.partition(":")
        if kind not in KINDS:
            p.error("--fault %s: unknown kind %r (one of %s)" % (f, kind, ", ".join(KINDS)))
        early = sorted(s for s in steps_of(spec) if s < a.warmup)
        if early:
            p.error("--fault %s: steps %s are warm-up steps (--warmup %d)" % (f, early, a.warmup))
        a.faults[kind] = steps_of(spec)
    if a.world > 1 and (a.rank < 0 or not a.store):
        p.error("--world > 1 needs --rank and --store")
    return a


class Log:
    def __init__(self, path, rank):
        self.f = open(path, "w")
        self.rank = max(rank, 0)

    def write(self, **kw):
        self.f.write(json.dumps(kw) + "\n")

    def fault(self, kind, step, t0, t1, parts=None):
        """parts: the injected work's pieces, each its own call (an operator
        slowed: the copies of its input made, then the operator on them)."""
        extra = {"parts": parts} if parts else {}
        self.write(fault=kind, step=step, t0=t0, t1=t1, rank=self.rank, pid=os.getpid(), **extra)


class SlowSoftmax(torch.autograd.Function):
    """softmax over `factor` copies of its input, the first kept; backward as usual."""
    factor, window = 30, None

    @staticmethod
    def forward(ctx, h, dim):
        r0 = time.monotonic_ns()
        big = h.repeat(SlowSoftmax.factor, *([1] * (h.dim() - 1)))
        t0 = time.monotonic_ns()
        y = torch.softmax(big, dim)
        SlowSoftmax.window = [(r0, t0), (t0, time.monotonic_ns())]
        y = y[:h.shape[0]]
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad):
        y, = ctx.saved_tensors
        return torch._softmax_backward_data(grad, y, ctx.dim, y.dtype), None


class SlowLinear(torch.autograd.Function):
    """linear on `factor` copies of the batch, the first kept; backward as usual."""
    factor, window = 30, None

    @staticmethod
    def forward(ctx, x, w, b):
        r0 = time.monotonic_ns()
        big = x.repeat(SlowLinear.factor, 1)
        t0 = time.monotonic_ns()
        y = F.linear(big, w, b)
        SlowLinear.window = [(r0, t0), (t0, time.monotonic_ns())]
        ctx.save_for_backward(x, w)
        return y[:x.shape[0]]

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad.mm(w), grad.t().mm(x), grad.sum(0)


class SoftmaxOf:
    """Stands in for torch.nn.functional in the hooked block: its softmax is
    slowed, everything else is F's."""

    def __getattr__(self, name):
        return getattr(F, name)

    @staticmethod
    def softmax(x, dim=-1):
        return SlowSoftmax.apply(x, dim)


def hook_op(model, name):
    """Forward hooks that slow one operator while `hook_op.on` is set."""
    hook_op.on = False
    if name == "gpt":
        block = model.blocks[0].attn

        def pre(_m, _inp):
            if hook_op.on:
                gpt_train.F = SoftmaxOf()

        def post(_m, _inp, _out):
            gpt_train.F = F
        block.register_forward_pre_hook(pre)
        block.register_forward_hook(post)
        return lambda: SlowSoftmax.window
    fc = model.fc
    plain = fc.forward
    fc.forward = lambda x: SlowLinear.apply(x, fc.weight, fc.bias) if hook_op.on else plain(x)
    return lambda: SlowLinear.window


TEXTS = ["the quick brown fox jumps over the lazy dog %d" % i for i in range(64)]
SPIN_NS = 0  # set for the step whose first encode() spins
SPIN = 0


def encode(text):
    """Tokens of one text (the data pipeline's per-sample Python)."""
    out = []
    for c in text:
        out.append(ord(c) % 512)
    global SPIN_NS
    if SPIN_NS:  # the step's first sample only
        t0, SPIN_NS = time.monotonic_ns(), 0
        n = 0
        while time.monotonic_ns() - t0 < SPIN:
            n += 1
        encode.window = (t0, time.monotonic_ns())
    return out


def spin(ms):
    t0 = time.monotonic_ns()
    n = 0
    while time.monotonic_ns() - t0 < ms * 1e6:
        n += 1
    return t0, time.monotonic_ns()


def make_model(a):
    if a.model == "gpt":
        return gpt_train.GPT(512, 128, 4, 4, 64), torch.optim.AdamW, gpt_train.lm_loss
    import torchvision
    return torchvision.models.resnet18(weights=None, num_classes=10), torch.optim.SGD, F.cross_entropy


def batch_of(a, step):
    """Inputs and targets of one step, through the Python data pipeline."""
    texts = [TEXTS[(step * a.batch + i) % len(TEXTS)] for i in range(a.batch)]
    toks = list(map(encode, texts))
    if a.model == "gpt":
        t = torch.tensor([(s * 2)[:65] for s in toks])
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()
    g = torch.Generator().manual_seed(step % 8)
    x = torch.randn(a.batch, 3, 64, 64, generator=g)
    return x, torch.tensor([s[0] % 10 for s in toks])


class Window:
    """A fault in force over a range of steps (cpu, net): begun at its first
    step, ended after its last, logged as one window per contiguous run."""

    def __init__(self, log, kind, start, stop):
        self.log, self.kind, self.start_fn, self.stop_fn = log, kind, start, stop
        self.open = None

    def step(self, step, on):
        if on and self.open is None:
            self.start_fn()
            self.open = (step, time.monotonic_ns())
        elif not on and self.open is not None:
            t1 = time.monotonic_ns()
            self.stop_fn()
            self.log.fault(self.kind, self.open[0], self.open[1], t1)
            self.open = None


def cpu_window(log):
    hog = []
    cpus = sorted(os.sched_getaffinity(0))

    def start():
        hog.append(subprocess.Popen(["stress-ng", "--cpu", str(len(cpus)), "--taskset", ",".join(map(str, cpus)),
                                     "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True))
        time.sleep(0.05)  # its workers forked: the window starts with them running

    def stop():
        p = hog.pop()
        os.killpg(p.pid, 15)
        p.wait()
    return Window(log, "cpu", start, stop)


def net_window(log, queue):
    rule = ["OUTPUT", "-o", "eth0", "-p", "tcp", "-j", "NFQUEUE", "--queue-num", str(queue)]
    return Window(log, "net", lambda: subprocess.run(["iptables", "-I", *rule], check=True),
                  lambda: subprocess.run(["iptables", "-D", *rule], check=True))


def main():
    global SPIN_NS, SPIN
    a = parse_args()
    SPIN = int(a.py_ms * 1e6)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    SlowSoftmax.factor = SlowLinear.factor = a.factor
    if a.world > 1:
        dist.init_process_group("gloo", init_method="file://" + a.store, rank=a.rank, world_size=a.world)
    model, optim, loss_fn = make_model(a)
    window_of = hook_op(model, a.model)
    if a.world > 1:
        # gloo cannot broadcast bool tensors: the GPT's causal masks (the same
        # on every rank) are left out of DDP's start-up sync.
        masks = [n for n, b in model.named_buffers() if b.dtype == torch.bool]
        torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, masks)
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = optim(model.parameters(), lr=0.01)
    log = Log(a.out, a.rank)
    mine = a.fault_rank < 0 or a.fault_rank == max(a.rank, 0)
    faults = {k: (v if mine else set()) for k, v in a.faults.items()}
    windows = {"cpu": cpu_window(log), "net": net_window(log, a.queue)}
    for step in range(a.steps):
        for kind, w in windows.items():
            w.step(step, step in faults.get(kind, ()))
        t0 = time.monotonic_ns()
        SPIN_NS = step in faults.get("py", ())
        x, y = batch_of(a, step)
        if step in faults.get("py", ()):
            log.fault("py", step, *encode.window)
        hook_op.on = step in faults.get("op", ())
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        if hook_op.on:
            parts = window_of()  # the copies made, then the operator on them
            log.fault("op", step, parts[0][0], parts[-1][1], parts)
        hook_op.on = False
        if step in faults.get("straggle", ()):
            log.fault("straggle", step, *spin(a.straggle_ms))
        loss.backward()
        opt.step()
        log.write(step=step, t0=t0, t1=time.monotonic_ns(), rank=log.rank, pid=os.getpid())
    for w in windows.values():
        w.step(a.steps, False)
    log.f.close()
    if a.world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
