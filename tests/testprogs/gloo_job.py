# SPDX-License-Identifier: Apache-2.0
"""A data-parallel job over gloo with known collectives, for the gloo e2e
test. WORLD ranks, forked from this process, meet through a FileStore. Each
rank runs, in this order:
  4 all_reduce of 1000 float32 (the tensor's values are checked),
  3 broadcast of 256 int64 from rank 0,
  STEPS steps of a small model under DistributedDataParallel,
and measures each explicit collective itself (CLOCK_MONOTONIC, the clock
eacgm's spans use) around the call. --delay-rank R sleeps on rank R before
its all_reduce number 2, measuring the sleep too. --stall-rank R --gate PATH
makes rank R wait before its all_reduce number 2 (or --stall-at I) until PATH
exists (a test creates it once eacgm has reported the hang), measuring the
wait too.
--rank R runs that one rank in this process (no fork): each rank of a job may
then run elsewhere (its own network namespace), all meeting through the same
FileStore path, which the first rank to start must not find stale (the caller
removes it).
Writes OUT as JSON: per rank, its pid, its collectives [op, index, start_ns,
end_ns], for each the time its thread waited for a CPU between those
clock reads ("waits", ns: schedstat's run delay, read around them), the
sleep it measured as "delay" and the wait at the gate as "stall"
(each [start_ns, end_ns], [0, 0] if none); with --rank, OUT.R with that
rank's part.
Usage: gloo_job.py OUT [--world N (2)] [--steps S (3)] [--delay-rank R --delay-ms MS]
                       [--stall-rank R --gate PATH [--stall-at I (2)]] [--rank R --store PATH]"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run_delay_ns():
    """The time this thread has waited for a CPU while runnable, so far
    (schedstat's second field)."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1])


def timed(log, op, i, fn, waits):
    w0 = run_delay_ns()
    t0 = time.monotonic_ns()
    fn()
    log.append([op, i, t0, time.monotonic_ns()])
    waits.append(run_delay_ns() - w0)


def rank_main(rank, a, store):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=a.world)
    log, waits, delay, stall = [], [], [0, 0], [0, 0]
    for i in range(4):
        t = torch.ones(1000, dtype=torch.float32) * (rank + 1)
        if rank == a.delay_rank and i == 2:
            delay[0] = time.monotonic_ns()
            time.sleep(a.delay_ms / 1000)
            delay[1] = time.monotonic_ns()
        if rank == a.stall_rank and i == a.stall_at:
            stall[0] = time.monotonic_ns()
            while not os.path.exists(a.gate):
                time.sleep(0.01)
            stall[1] = time.monotonic_ns()
        timed(log, "all_reduce", i, lambda: dist.all_reduce(t), waits)
        assert t[0].item() == a.world * (a.world + 1) / 2, t[0].item()
    for i in range(3):
        t = torch.arange(256, dtype=torch.int64) * (1 if rank == 0 else 0)
        timed(log, "broadcast", i, lambda: dist.broadcast(t, src=0), waits)
        assert t[255].item() == 255
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    for _ in range(a.steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()
    with open("%s.%d" % (a.out, rank), "w") as f:
        json.dump({"collectives": log, "waits": waits, "delay": delay, "stall": stall, "pid": os.getpid()}, f)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--delay-rank", type=int, default=-1)
    p.add_argument("--delay-ms", type=float, default=0)
    p.add_argument("--stall-rank", type=int, default=-1)
    p.add_argument("--gate")
    p.add_argument("--stall-at", type=int, default=2, choices=range(4))
    p.add_argument("--rank", type=int, default=-1)
    p.add_argument("--store")
    a = p.parse_args()
    if a.stall_rank >= 0 and not a.gate:
        p.error("--stall-rank needs --gate PATH")
    if a.rank >= 0:
        if not a.store:
            p.error("--rank needs --store PATH, shared by every rank")
        rank_main(a.rank, a, a.store)
        print("gloo_job: rank %d done" % a.rank)
        return
    store = a.out + ".store"
    if os.path.exists(store):
        os.unlink(store)
    ctx = mp.get_context("fork")
    ranks = [ctx.Process(target=rank_main, args=(r, a, store)) for r in range(a.world)]
    for r in ranks:
        r.start()
    for r in ranks:
        r.join()
    if any(r.exitcode != 0 for r in ranks):
        raise SystemExit("gloo_job: a rank failed: %s" % [r.exitcode for r in ranks])
    out = {}
    for r in range(a.world):
        with open("%s.%d" % (a.out, r)) as f:
            out[r] = json.load(f)
        os.unlink("%s.%d" % (a.out, r))
    with open(a.out, "w") as f:
        json.dump(out, f)
    print("gloo_job: %d ranks done" % a.world)


if __name__ == "__main__":
    main()
