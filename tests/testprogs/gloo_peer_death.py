# SPDX-License-Identifier: Apache-2.0
"""A 2-rank gloo job whose rank 1 dies (SIGKILL) while rank 0 waits in an
all_reduce: rank 0 gets gloo's error as Python's RuntimeError and exits 1,
as an elastic launcher expects to see it (tests/e2e/test_exceptions.py runs
it untraced and under eacgm and compares what it prints).

Each rank is a process of its own, started by this one (the launcher): both
meet through a FileStore, run 3 all_reduce and 2 steps of a small model under
DistributedDataParallel; then rank 1 says so in a file and waits (pause()).
The launcher stops rank 1 (SIGSTOP: not even gloo's thread reads any more)
and lets rank 0 go on: it enqueues one more all_reduce (async_op), says so,
and waits for it. Once rank 0's data waits unread in rank 1's socket, the
launcher kills rank 1. It prints each rank's exit status and
rank 0's last line of stderr with numbers (ports, lines, pids) as N.
Usage: gloo_peer_death.py DIR    (DIR: an empty directory for the store and the files)
       gloo_peer_death.py DIR --rank R"""
import os
import re
import signal
import subprocess
import sys
import time


def wait_for(path, proc):
    while not os.path.exists(path):
        if proc.poll() is not None:
            return False
        time.sleep(0.005)
    return True


def unread_bytes(pid):
    """Bytes waiting unread in the TCP sockets of pid (/proc/net/tcp's
    rx_queue). Once rank 0's all_reduce has sent rank 1 its part, rank 1's
    death resets the connection (RST: its data was never read), rather than
    closing it (FIN) when nothing was sent yet: the error rank 0 gets is
    always the same one."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    unread = 0
    for table in ("tcp", "tcp6"):
        with open("/proc/%d/net/%s" % (pid, table)) as f:
            for line in f.readlines()[1:]:
                w = line.split()
                if w[9] in inodes:
                    unread += int(w[4].split(":")[1], 16)
    return unread


def rank_main(d, rank):
    import torch
    import torch.distributed as dist
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + os.path.join(d, "store"), rank=rank, world_size=2)
    for _ in range(3):
        t = torch.ones(64)
        dist.all_reduce(t)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    if rank == 1:
        open(os.path.join(d, "r1-waiting"), "w").close()
        signal.pause()  # stopped, then killed, here
    while not os.path.exists(os.path.join(d, "go")):
        time.sleep(0.005)
    work = dist.all_reduce(torch.ones(64), async_op=True)
    open(os.path.join(d, "r0-waiting"), "w").close()
    work.wait()  # raises RuntimeError once rank 1 is gone
    print("rank 0: the all_reduce returned")


def main():
    d = sys.argv[1]
    if "--rank" in sys.argv:
        rank_main(d, int(sys.argv[sys.argv.index("--rank") + 1]))
        return
    ranks = [subprocess.Popen([sys.executable, __file__, d, "--rank", str(r)], stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    ok = wait_for(os.path.join(d, "r1-waiting"), ranks[1])
    # Stopped, rank 1 reads nothing more (not even gloo's own thread).
    os.kill(ranks[1].pid, signal.SIGSTOP)
    open(os.path.join(d, "go"), "w").close()
    ok = ok and wait_for(os.path.join(d, "r0-waiting"), ranks[0])
    while ok and ranks[0].poll() is None and not unread_bytes(ranks[1].pid):
        time.sleep(0.005)
    ranks[1].kill()
    err0 = ranks[0].communicate(timeout=120)[1]
    ranks[1].communicate()
    last = [line for line in err0.splitlines() if line.strip()][-1:] or [""]
    print("rank 0 exit", ranks[0].returncode)
    print("rank 1 exit", ranks[1].returncode)
    print("rank 0 said:", re.sub(r"\d+", "N", last[0]))


if __name__ == "__main__":
    main()
