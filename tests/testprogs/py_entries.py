"""Python functions entered from C: a sort key callback, called three times
back to back (20 ms each), and the same through map() (30 ms each). A
sampler alone sees each trio as one call; the eval-loop entry probe sees
every call. Also run by test_python.py with --python-entries all on 3.8-3.10,
where every call, work() included, is an entry."""
import time


def work(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def key(x):
    work(0.020)
    return x


def mapped(x):
    work(0.030)
    return x


def main():
    sorted([3, 1, 2], key=key)
    list(map(mapped, [1, 2, 3]))


main()
# Calls that end as the interpreter finalises may be read after their code
# objects are freed (then they stay sampled only): end with a pause.
time.sleep(0.2)
