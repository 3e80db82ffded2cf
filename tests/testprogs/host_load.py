# SPDX-License-Identifier: Apache-2.0
"""Loads for the host layer's end-to-end tests (tests/e2e/test_host.py).

  host_load.py spin SECONDS [PID...]     burn one CPU for SECONDS of wall time
  host_load.py sink HOST PORT            accept one TCP connection, read it to
                                         the end; prints "ready" once listening
  host_load.py send HOST PORT SECONDS RATE
                                         connect, send for SECONDS at RATE
                                         bytes/s (paced: no queue overflows),
                                         close

spin and send end by printing, on stdout, one JSON line of what they measured
themselves, for the test to hold eacgm's numbers against:

  spin: {"t0_ns", "t1_ns": CLOCK_MONOTONIC around the spin,
         "self": [AT_T0, AT_T1], "others": {PID: [AT_T0, AT_T1]}}
        where AT_* is the kernel's figures for the process's main thread
        (the spinner has no other), read just after t0 and just after t1: {"on_cpu_ns", "run_delay_ns" (runnable, waiting
        for a CPU), "timeslices"} from /proc/PID/schedstat and
        "nonvoluntary_switches" from /proc/PID/status
  send: {"sent": bytes, "rtt": [[CLOCK_MONOTONIC ns, tcpi_rtt us], ...]}
        the kernel's smoothed RTT of the connection (getsockopt TCP_INFO),
        read after connecting, about every 100 ms, and at the end
"""
import json
import socket
import struct
import sys
import time

# struct tcp_info (linux/tcp.h): eight __u8 fields (two of them bitfield
# bytes), then __u32 tcpi_rto, ato, snd_mss, rcv_mss, unacked, sacked, lost,
# retrans, fackets, last_data_sent, last_ack_sent, last_data_recv,
# last_ack_recv, pmtu, rcv_ssthresh, then tcpi_rtt: 8 + 15 * 4 bytes in.
TCPI_RTT_OFFSET = 68
RTT_EVERY_NS = 100_000_000


def task_figures(pid):
    """The kernel's per-task scheduling figures of PID ("self" or a number)."""
    with open("/proc/%s/schedstat" % pid) as f:
        on_cpu, run_delay, slices = (int(x) for x in f.read().split())
    with open("/proc/%s/status" % pid) as f:
        nivcsw = next(int(l.split()[1]) for l in f if l.startswith("nonvoluntary_ctxt_switches:"))
    return {"on_cpu_ns": on_cpu, "run_delay_ns": run_delay, "timeslices": slices,
            "nonvoluntary_switches": nivcsw}


def spin(seconds, others):
    """Spins; the figures of itself and of `others` (e.g. a competitor for
    its CPU) at the spin's start and end."""
    pids = ["self"] + others
    t0 = time.monotonic_ns()
    at_t0 = [task_figures(p) for p in pids]
    end = t0 + int(seconds * 1e9)
    while time.monotonic_ns() < end:
        pass
    t1 = time.monotonic_ns()
    at_t1 = [task_figures(p) for p in pids]
    print(json.dumps({"t0_ns": t0, "t1_ns": t1, "self": [at_t0[0], at_t1[0]],
                      "others": {p: [a, b] for p, a, b in zip(others, at_t0[1:], at_t1[1:])}}), flush=True)


def sink(host, port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, port))
    ls.listen(1)
    print("ready", flush=True)
    conn, _ = ls.accept()
    total = 0
    while True:
        b = conn.recv(1 << 16)
        if not b:
            break
        total += len(b)
    conn.close()
    print("received %d" % total, flush=True)


def srtt_us(s):
    """The kernel's smoothed RTT of a TCP socket (tcpi_rtt: srtt_us >> 3)."""
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCPI_RTT_OFFSET + 4)
    return struct.unpack_from("=I", info, TCPI_RTT_OFFSET)[0]


def send(host, port, seconds, rate):
    s = socket.create_connection((host, port))
    rtt = [[time.monotonic_ns(), srtt_us(s)]]
    buf = b"x" * 8192
    total = 0
    start = time.monotonic()
    while time.monotonic() < start + seconds:
        total += s.send(buf)
        if time.monotonic_ns() >= rtt[-1][0] + RTT_EVERY_NS:
            rtt.append([time.monotonic_ns(), srtt_us(s)])
        ahead = start + total / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    # Wait until the sink has read everything (it closes then), so that
    # every segment and retransmit falls inside the recording.
    s.shutdown(socket.SHUT_WR)
    s.recv(1)
    rtt.append([time.monotonic_ns(), srtt_us(s)])
    s.close()
    print(json.dumps({"sent": total, "rtt": rtt}), flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "spin":
        spin(float(sys.argv[2]), [int(p) for p in sys.argv[3:]])
    elif cmd == "sink":
        sink(sys.argv[2], int(sys.argv[3]))
    elif cmd == "send":
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]))
    else:
        sys.exit("unknown command %r" % cmd)
