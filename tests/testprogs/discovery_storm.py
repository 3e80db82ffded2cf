# SPDX-License-Identifier: Apache-2.0
"""Many short-lived Python processes started while one thread calls a traced
function at a steady rate: the ring-draining test's load.

  discovery_storm.py CALLS_PROGRAM PYTHON CHILDREN RATE STOP_FILE

Starts CALLS_PROGRAM (testlib_calls) calling tl_noop RATE times a second,
and once it calls, CHILDREN processes of PYTHON (fork and exec: each is a new
program for eacgm to discover, its maps, its ELF file and its Python
offsets), a few at a time, each living 0.3 s. Then it stops the
caller (STOP_FILE) and prints one JSON line: the calls it made, the
children's pids."""
import json
import os
import subprocess
import sys

AT_ONCE = int(os.environ.get("STORM_AT_ONCE", "8"))  # children alive at a time
CHILD = "import time\ndef storm_child():\n    time.sleep(0.3)\nstorm_child()\n"


def main():
    calls_program, python, children, rate, stop_file = sys.argv[1:6]
    env = dict(os.environ, RATE=rate, STOP_FILE=stop_file)
    caller = subprocess.Popen([calls_program, "noop", str(10**12)], env=env, stdout=subprocess.PIPE, text=True)
    if caller.stdout.readline() != "calling\n":
        sys.exit("discovery_storm: the caller did not start")
    pids = []
    left = int(children)
    while left:
        wave = [subprocess.Popen([python, "-c", CHILD]) for _ in range(min(AT_ONCE, left))]
        for p in wave:
            if p.wait() != 0:
                sys.exit("discovery_storm: a child failed")
        pids += [p.pid for p in wave]
        left -= len(wave)
    open(stop_file, "w").close()
    out = caller.communicate()[0].split()
    if caller.returncode != 0 or out[-4] != "calls":
        sys.exit("discovery_storm: the caller failed: %r" % out)
    print(json.dumps(dict(calls=int(out[-3]), children=pids)))


if __name__ == "__main__":
    main()
