"""Known Python functions for the Python layer's tests: busy loops of known
length, nested to a known depth, on two threads. Works on Python 3.8+.
Each call is followed by a different busy function (pause), so that a
sampler can tell consecutive calls apart. The threads take turns (main
waits in join) rather than fight for the GIL: an on-CPU sampler sees a
thread only while it holds the GIL, which would blur the known durations."""
import threading
import time


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def inner_a():
    spin(0.060)


def inner_b():
    spin(0.040)


def middle():
    inner_a()
    inner_b()


def pause():
    spin(0.025)


class Worker:
    def run(self, rounds):
        for _ in range(rounds):
            middle()
            pause()


def main():
    t = threading.Thread(target=Worker().run, args=(3,), name="worker")
    t.start()
    t.join()
    Worker().run(3)


main()
