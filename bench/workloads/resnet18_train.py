"""ResNet-18 trained on the CPU, as a realistic convolutional workload for
measuring what tracing costs: torchvision's resnet18(num_classes=10), randomly
initialised, fed one fixed batch of random images (seed 0), cross-entropy loss,
SGD(lr=0.01, momentum=0.9). Each step (zero_grad, forward, loss, backward,
optimizer step) is timed on its own; the warm-up steps are dropped and the
median of the rest is printed as `resnet18_train: N steps, median step X us`.

Usage: resnet18_train.py STEPS [--batch B (16)] [--size S (64)] [--warmup W (3)] [--profiler]

--profiler runs the timed loop inside torch.profiler (CPU activity, nothing
exported: the cost a user pays for leaving it on) and then prints
`profiler: K events`. Torch's default thread count is kept on purpose."""
import argparse
import statistics
import time

import torch
import torchvision


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("steps", type=int)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--profiler", action="store_true")
    return p.parse_args()


def run_steps(model, opt, x, y, steps):
    """Seconds per step; the clock covers the whole step and nothing else."""
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t)
    return times


def main():
    args = parse_args()
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 3, args.size, args.size)
    y = torch.randint(0, 10, (args.batch,))
    total = args.warmup + args.steps
    prof = None
    if args.profiler:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            times = run_steps(model, opt, x, y, total)
    else:
        times = run_steps(model, opt, x, y, total)
    median = statistics.median(times[args.warmup:])
    print("resnet18_train: %d steps, median step %.1f us" % (args.steps, 1e6 * median), flush=True)
    # Counted after the median line so that walking the events is never timed.
    if prof is not None:
        print("profiler: %d events" % len(prof.events()))


if __name__ == "__main__":
    main()
