# SPDX-License-Identifier: Apache-2.0
"""What the benchmark workloads share: their common arguments, the timed
training loop and the one line the benchmarks parse. A workload supplies its
model, optimizer, batch and loss; the clock covers whole steps (zero_grad,
forward, loss, backward, optimizer step) and nothing else."""
import argparse
import statistics
import time

STARTED = time.monotonic()  # before torch's import: about when the process began

import torch  # noqa: E402


def parser(doc, batch, size, size_help=None):
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("steps", type=int)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--size", type=int, default=size, help=size_help)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--warmup-s", type=float, default=0,
                   help="keep warming up until this many seconds after the start (steady state: "
                        "eacgm's overhead budget acts from 10 s)")
    p.add_argument("--profiler", action="store_true")
    p.add_argument("--step-log", help="append each step's end (time.monotonic_ns) and length (ns) to this "
                                      "file as it ends, one line each (bench/step_pairs.py)")
    p.add_argument("--device", default="cpu",
                   help="cpu, or cuda on a machine with a GPU: the model and batch live there and each "
                        "step's clock stops after torch.cuda.synchronize(), so it covers the kernels")
    return p


def run_steps(model, opt, x, y, loss_fn, steps, until=0, log=None):
    """Seconds per step, for `steps` steps and then until time.monotonic()
    reaches `until` (warm-up); each step's end and length written to `log`
    (a line-buffered file) when given."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    times = []
    while len(times) < steps or time.monotonic() < until:
        t = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        sync()
        times.append(time.perf_counter() - t)
        if log:
            log.write("%d %d\n" % (time.monotonic_ns(), int(times[-1] * 1e9)))
    return times


def train_and_report(name, args, model, opt, x, y, loss_fn):
    """Trains warm-up + steps, under torch.profiler with --profiler (CPU
    activity, nothing exported: the cost a user pays for leaving it on), and
    prints `NAME: N steps, median step X us` (then `profiler: K events`)."""
    model.train()
    if args.device != "cpu":
        # Moved before the optimizer's first step, so its state is made there too.
        model.to(args.device)
        x, y = x.to(args.device), y.to(args.device)
    prof = None

    log = open(args.step_log, "a", buffering=1) if args.step_log else None

    def train():
        warm = run_steps(model, opt, x, y, loss_fn, args.warmup, STARTED + args.warmup_s, log)
        # A tracer's own cost is read from here to the median line (train_cost.py).
        print("timing %d steps" % args.steps, flush=True)
        return run_steps(model, opt, x, y, loss_fn, args.steps, log=log), warm

    if args.profiler:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if args.device != "cpu":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            times, _ = train()
    else:
        times, _ = train()
    median = statistics.median(times)
    print("%s: %d steps, median step %.1f us" % (name, args.steps, 1e6 * median), flush=True)
    # Counted after the median line so that walking the events is never timed.
    if prof is not None:
        print("profiler: %d events" % len(prof.events()))
