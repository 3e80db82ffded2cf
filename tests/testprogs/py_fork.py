"""A parent that forks workers (multiprocessing, fork start method) which run
known busy functions; for the Python layer's process-following test."""
import multiprocessing as mp
import time


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def child_work(n):
    spin(0.080)
    return n


def parent_work():
    spin(0.050)


if __name__ == "__main__":
    parent_work()
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=child_work, args=(i,)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print("py_fork: 2 workers done")
