# SPDX-License-Identifier: Apache-2.0
"""A stdlib workload whose functions a sampler must time right: four passes
(difflib, json, textwrap, re), each a few milliseconds of real library code,
called in turn PASSES times (default 25) so that every call is a run of its
own. The program measures each call itself: it writes to the file given as
argument one JSON object, per pass function the calls made and the thread CPU
time spent in them (time.thread_time_ns around each call: the sampler counts
CPU time, not wall time), and per inner function the calls it made.
Usage: py_stdlib.py OUT.json [PASSES]"""
import difflib
import json
import re
import sys
import textwrap
import time

PASSES = int(sys.argv[2]) if len(sys.argv) > 2 else 25
WORDS = ("gradient step tensor shard rank bucket allreduce optimizer kernel stream "
         "batch epoch loss scale warmup checkpoint").split()
TEXT = " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(3000))
TOKENS = [WORDS[(i * 7) % len(WORDS)] + str(i % 50) for i in range(2400)]
DOC = {"layers": [{"name": "l%d" % i, "shape": [i, i + 1], "w": [float(j) / 7 for j in range(40)]} for i in range(200)]}
PATTERN = re.compile(r"(\w+)\s+(?:step|rank)\s+(\w+)")


def difflib_pass():
    return difflib.SequenceMatcher(None, TOKENS, TOKENS[::-1]).ratio()


def json_pass():
    n = 0
    for _ in range(3):
        n += len(json.loads(json.dumps(DOC)))
    return n


def textwrap_pass():
    return len(textwrap.wrap(TEXT, width=60)) + len(textwrap.fill(TEXT, width=41))


def regex_pass():
    n = 0
    for _ in range(6):
        n += len(PATTERN.findall(TEXT))
    return n


def main():
    passes = (difflib_pass, json_pass, textwrap_pass, regex_pass)
    cpu = {f.__name__: 0 for f in passes}
    for _ in range(PASSES):
        for f in passes:
            c0 = time.thread_time_ns()
            f()
            cpu[f.__name__] += time.thread_time_ns() - c0
    with open(sys.argv[1], "w") as out:
        json.dump({"passes": PASSES, "cpu_ns": cpu}, out)


if __name__ == "__main__":
    main()
